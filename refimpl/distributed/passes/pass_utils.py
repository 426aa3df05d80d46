"""Program utilities for pipeline passes: split, prune, required vars, skip-GC vars.

Mirrors ``paddle.distributed.passes.pass_utils`` (legacy ProgramDesc half):
cutting a program into consecutive parts and naming what flows between them
(``split_program``), the vars a partial program needs alive
(``_get_required_vars_of_program``), which vars every pipeline job must keep
for a later job of its micro-batch (``set_skip_gc_vars``), filling missing
op roles, splitting a training program into forward / backward / optimizer
programs, stream syncs around ``send_v2``, chunk ids, and rewriting one
``matmul_v2_grad`` into plain ``matmul_v2`` ops. The memory estimator lives
in ``memory_estimator.py`` and is re-exported here.

Differences from Paddle, all deliberate:

* An op's input/output names are listed slot by slot in sorted slot order,
  as Paddle's ``OpDesc`` (a ``std::map``) lists them, whatever order the
  refimpl op was built in.
* Paddle's ``assert``s raise errors that are both ``AssertionError`` and a
  :class:`~refimpl.core.errors.EnforceNotMet`; the skip-GC refusal carries
  the offending vars as ``.skip_gc_vars``.
* ``set_skip_gc_vars`` computes required vars the legacy way for both IRs
  (refimpl programs are ProgramDescs); ``FLAGS_enable_pir_api`` only picks
  which job types must keep nothing (legacy: ``backward``, ``backward_w``;
  PIR: ``send_backward``, ``backward_w``), as in Paddle.
* There is no ``dist_context``: chunk ids and streams are plain op attrs.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Optional, Sequence, TYPE_CHECKING, Tuple

from refimpl import flags
from refimpl.core.errors import InvalidArgument, NotFound, OutOfRange, PreconditionNotMet
from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.executor.gc_plan import no_need_buffer_inputs
from refimpl.framework.op_role import OP_ROLE_ATTR
from refimpl.framework.program import Program
from refimpl.framework.serialize import FORMAT, block_to_dict
from refimpl.ops.registry import get_op_def

if TYPE_CHECKING:
    from refimpl.executor.plan import Job
    from refimpl.framework.block import Block
    from refimpl.framework.operator import Operator


class _PaddleMessage:
    """Mixin: str() is the message alone, as Paddle's AssertionError prints it."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class PassAssertionError(_PaddleMessage, InvalidArgument, AssertionError):
    """One of Paddle's ``assert`` statements on the arguments failed."""


def pass_assert(condition: Any, message: str) -> None:
    if not condition:
        raise PassAssertionError(message)


class SkipGCVarsError(_PaddleMessage, PreconditionNotMet, AssertionError):
    """A backward-like job would have to keep vars alive for a later job.

    Paddle raises a plain ``AssertionError``; ``skip_gc_vars`` holds the
    vars (sorted), ``job_type`` and ``micro_batch_id`` the refused job.
    """

    def __init__(self, job_type: str, skip_gc_vars: Iterable[str],
                 micro_batch_id: Optional[int] = None) -> None:
        self.job_type = job_type
        self.micro_batch_id = micro_batch_id
        self.skip_gc_vars = sorted(skip_gc_vars)
        shown = "{" + ", ".join(map(repr, self.skip_gc_vars)) + "}"
        super().__init__(f"When enabling pipeline parallelism strategy, the skip_gc_vars for {job_type} "
                         f"subprogram must be empty, but it is {shown}.")

    @property
    def skip_gc_vars_of_backward(self) -> List[str]:
        return list(self.skip_gc_vars)


# ---------------------------------------------------------------- op arguments
def _input_args(op):
    return [n for slot in sorted(op.inputs) for n in op.inputs[slot]]


def _output_args(op):
    return [n for slot in sorted(op.outputs) for n in op.outputs[slot]]


def list_to_ordered_dict(list_obj: Iterable[Any], ordered_dict: Optional[OrderedDict] = None) -> OrderedDict:
    """Add the items of ``list_obj`` not yet in ``ordered_dict`` (a new one by default)."""
    if ordered_dict is None:
        ordered_dict = OrderedDict()
    pass_assert(isinstance(ordered_dict, OrderedDict), "ordered_dict must be an OrderedDict")
    for obj in list_obj:
        ordered_dict.setdefault(obj, True)
    return ordered_dict


# ---------------------------------------------------------------- split / prune
def get_inputs_of_program(program: Program) -> List[str]:
    """Names read by some global-block op before any op of the program writes them, in order."""
    seen, inputs = set(), []
    for op in program.global_block().ops:
        for name in _input_args(op):
            if name not in seen:
                inputs.append(name)
                seen.add(name)
        seen.update(_output_args(op))
    return inputs


def get_outputs_of_program(program: Program) -> List[str]:
    """Every name a global-block op writes, in order of first write."""
    outputs = OrderedDict()
    for op in program.global_block().ops:
        list_to_ordered_dict(_output_args(op), outputs)
    return list(outputs)


def prune_program(program: Program, start_op_idx: int, end_op_idx: int) -> Program:
    """A copy of ``program`` keeping global-block ops ``[start, end)`` and only the vars they use."""
    op_num = len(program.global_block().ops)
    start = start_op_idx + op_num if start_op_idx < 0 else start_op_idx
    end = end_op_idx + op_num if end_op_idx < 0 else end_op_idx
    pass_assert(0 <= start < op_num, f"start_op_idx {start_op_idx} is out of range for {op_num} ops")
    pass_assert(0 <= end <= op_num, f"end_op_idx {end_op_idx} is out of range for {op_num} ops")
    pass_assert(start < end, f"start_op_idx {start} must be less than end_op_idx {end}")
    # copy only what is kept (the cost is the part's size, not the program's); sub-blocks whole
    src = program.global_block()
    ops = src.ops[start:end]
    used = {n for op in ops for n in op.input_arg_names + op.output_arg_names}
    blocks = [block_to_dict(src, ops, [n for n in src.vars if n in used])]
    blocks += [block_to_dict(b) for b in program.blocks[1:]]
    pruned = Program.from_dict({"format": FORMAT, "blocks": blocks}, validate=False)  # written here
    pruned.random_seed = program.random_seed
    return pruned


@paused_cyclic_gc
def split_program(program: Program,
                  op_indices: Sequence[int]) -> Tuple[List[Program], List[List[str]], List[List[str]]]:
    """Cut the global block before each index of ``op_indices``.

    Returns ``(programs, input_vars, output_vars)``: the parts, the names each
    part reads before writing them, and the names each part writes that a
    later part reads (the last part: everything it writes).
    """
    pass_assert(len(op_indices) > 0, "op_indices cannot be empty")
    op_num = len(program.global_block().ops)
    pass_assert(op_num > 0, "program cannot be empty")
    cuts = [i + op_num if i < 0 else i for i in op_indices]
    if cuts[0] != 0:
        cuts.insert(0, 0)
    if cuts[-1] != op_num:
        cuts.append(op_num)
    for a, b in zip(cuts, cuts[1:]):
        pass_assert(a < b, "op_indices must be strictly sorted")
    parts = [prune_program(program, a, b) for a, b in zip(cuts, cuts[1:])]
    input_vars = [get_inputs_of_program(p) for p in parts]
    output_vars = [OrderedDict() for _ in parts]
    output_vars[-1] = list_to_ordered_dict(get_outputs_of_program(parts[-1]))
    last_writer = {}  # name -> the latest part before this one that writes it
    for i, part in enumerate(parts):
        for name in input_vars[i]:
            producer = last_writer.get(name)
            if producer is not None:
                output_vars[producer][name] = True
        last_writer.update(dict.fromkeys(get_outputs_of_program(part), i))
    return parts, input_vars, [list(d) for d in output_vars]


# ---------------------------------------------------------------- required vars
class OpInOutInfo:
    """For one op: which of its argument names need their buffer (not only shape/dtype)."""

    def __init__(self):
        self._is_build = False
        self._no_need_buffer_slots = set()
        self._other_arg_names_set = set()

    @property
    def is_build(self) -> bool:
        return self._is_build

    def build_info(self, op: Operator) -> None:
        self._no_need_buffer_slots = set(get_op_def(op.type).no_need_buffer)
        if not self._no_need_buffer_slots:
            return
        names = set(op.input_arg_names + op.output_arg_names)
        self._other_arg_names_set = names - no_need_buffer_inputs(op)
        self._is_build = True

    def is_needed(self, arg_name: str) -> bool:
        """True unless the op has no-need-buffer slots and reads ``arg_name`` through them alone."""
        return not self._no_need_buffer_slots or arg_name in self._other_arg_names_set


def var_can_be_deleted(var_name: str, block: Block) -> bool:
    """The pass_utils test: the var exists (here or in a parent block) and is not persistable.

    Unlike the executor's ``gc_plan.var_can_be_deleted`` it looks up parent
    blocks and does not look at the var type or at skip vars.
    """
    var = block._find_var_recursive(var_name)
    return var is not None and not var.persistable


_NOT_COUNTED_OPS = ("c_sync_comm_stream", "conditional_block", "data", "nop", "while")


def _get_required_vars_of_program(program):
    """Names, over all blocks, that are non-persistable and whose buffer some op needs."""
    required = set()
    for block in program.blocks:
        for op in block.ops:
            if op.type in _NOT_COUNTED_OPS:
                continue
            info = OpInOutInfo()
            info.build_info(op)
            for name in op.input_arg_names + op.output_arg_names:
                if var_can_be_deleted(name, block) and info.is_needed(name):
                    required.add(name)
    return required


# ---------------------------------------------------------------- skip-GC vars
def _refused_job_types():
    if flags.flag("FLAGS_enable_pir_api"):
        return ("send_backward", "backward_w")
    return ("backward", "backward_w")


@paused_cyclic_gc
def set_skip_gc_vars(num_micro_batches: int, job_types: Sequence[str], sub_programs: Sequence[Program],
                     jobs: Sequence[Job]) -> Dict[str, Program]:
    """Give every job the vars it must not free because a later job of its micro-batch needs them.

    Walks the jobs backwards; a job keeps the vars it uses that a later job
    of the same micro-batch also requires. Returns ``{job type: program}``.
    Raises :class:`SkipGCVarsError` when a refused job type (see the module
    docstring) would have to keep anything.
    """
    pass_assert(num_micro_batches >= 1, "num_micro_batches needs to be >= 1")
    type_to_program = dict(zip(job_types, sub_programs))
    required = {t: _get_required_vars_of_program(p) for t, p in type_to_program.items()}
    refused = _refused_job_types()
    needed_later = [set() for _ in range(num_micro_batches)]
    for job in reversed(list(jobs)):
        job_type, mb = job.type(), job.micro_batch_id()
        if job_type not in required:
            raise NotFound(f"job type {job_type!r} has no sub-program (types: {list(required)})")
        if not 0 <= mb < num_micro_batches:
            raise OutOfRange(f"job {job_type!r} has micro_batch_id {mb}, but there are "
                             f"{num_micro_batches} micro-batches")
        skip = required[job_type] & needed_later[mb]
        if job_type in refused and skip:
            raise SkipGCVarsError(job_type, skip, mb)
        job.set_skip_gc_vars(sorted(skip))
        needed_later[mb] |= required[job_type]
    return type_to_program


# ---------------------------------------------------------------- op roles
def _role_or_unset(op):
    return op.attr(OP_ROLE_ATTR) if op.has_attr(OP_ROLE_ATTR) else -1


def forward_complete_op_role(main_program: Program) -> None:
    """Give ops without a role (no ``op_role`` attr, or -1) the role of the ops around them.

    As in Paddle, a run of role-less ops must sit between two ops of one
    same role; a run at the start or the end of the block is refused.
    """
    ops = main_program.global_block().ops
    i = 0
    while i < len(ops):
        if _role_or_unset(ops[i]) != -1:
            i += 1
            continue
        j = i
        while j < len(ops) and _role_or_unset(ops[j]) == -1:
            j += 1
        pass_assert(j < len(ops), "first_left_op_role can't be -1.")
        left, right = (_role_or_unset(ops[i - 1]) if i > 0 else None), _role_or_unset(ops[j])
        pass_assert(left == right, f"The left and right operators of (idx[{i}]) have different op_role.")
        for op in ops[i:j]:
            op._set_attr(OP_ROLE_ATTR, right)
        i = j + 1


def infer_chunk_id(op_idx: int, ops: Sequence[Operator], with_dist: bool = True) -> int:
    """The VPP chunk of ``ops[op_idx]`` guessed from its neighbours (-1 when unknown).

    ``with_dist`` reads ``op.dist_attr.chunk_id`` (refimpl ops have no
    dist_attr, so -1), otherwise the op's ``chunk_id`` attr.
    """
    def chunk_of(i):
        if not 0 <= i < len(ops):
            return -1
        if with_dist:
            dist_attr = getattr(ops[i], "dist_attr", None)
            return -1 if dist_attr is None else dist_attr.chunk_id
        return ops[i].attr("chunk_id") if ops[i].has_attr("chunk_id") else -1

    prev_id, next_id = chunk_of(op_idx - 1), chunk_of(op_idx + 1)
    if prev_id == next_id:
        return prev_id
    if next_id == chunk_of(op_idx + 2):
        return next_id
    return -1


# the forward/backward/optimizer split, stream syncs and the matmul split live in pipeline_programs
from .pipeline_programs import (_insert_sync_for_fthenb_1f1b, _program_for_fthenb_and_1f1b,  # noqa: E402,F401
                                split_matmul_grad_to_matmul)


def __getattr__(name):
    # the estimator imports this module, so it is re-exported lazily
    if name == "PipelineMemoryEstimator":
        from .memory_estimator import PipelineMemoryEstimator
        return PipelineMemoryEstimator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "get_inputs_of_program", "get_outputs_of_program", "prune_program", "split_program",
    "OpInOutInfo", "var_can_be_deleted", "set_skip_gc_vars", "forward_complete_op_role",
    "infer_chunk_id", "split_matmul_grad_to_matmul", "PipelineMemoryEstimator",
    "SkipGCVarsError", "PassAssertionError", "list_to_ordered_dict",
]
