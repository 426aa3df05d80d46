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
import copy
from collections import OrderedDict

from refimpl import flags
from refimpl.core.errors import InvalidArgument, NotFound, OutOfRange, PreconditionNotMet, Unimplemented
from refimpl.executor.gc_plan import no_need_buffer_inputs
from refimpl.framework.block import Block
from refimpl.framework.op_role import (OP_ROLE_ATTR, OpRole, is_backward, is_forward, is_lr_sched,
                                       is_optimize)
from refimpl.framework.operator import Operator
from refimpl.framework.program import Program
from refimpl.ops.registry import get_op_def


class _PaddleMessage:
    """Mixin: str() is the message alone, as Paddle's AssertionError prints it."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class PassAssertionError(_PaddleMessage, InvalidArgument, AssertionError):
    """One of Paddle's ``assert``s on the arguments failed."""


def pass_assert(condition, message):
    if not condition:
        raise PassAssertionError(message)


class SkipGCVarsError(_PaddleMessage, PreconditionNotMet, AssertionError):
    """A backward-like job would have to keep vars alive for a later job.

    Paddle raises a plain ``AssertionError``; ``skip_gc_vars`` holds the
    vars (sorted), ``job_type`` and ``micro_batch_id`` the refused job.
    """

    def __init__(self, job_type, skip_gc_vars, micro_batch_id=None):
        self.job_type = job_type
        self.micro_batch_id = micro_batch_id
        self.skip_gc_vars = sorted(skip_gc_vars)
        shown = "{" + ", ".join(map(repr, self.skip_gc_vars)) + "}"
        super().__init__(f"When enabling pipeline parallelism strategy, the skip_gc_vars for {job_type} "
                         f"subprogram must be empty, but it is {shown}.")

    @property
    def skip_gc_vars_of_backward(self):
        return list(self.skip_gc_vars)


# ---------------------------------------------------------------- op arguments
def _input_args(op):
    return [n for slot in sorted(op.inputs) for n in op.inputs[slot]]


def _output_args(op):
    return [n for slot in sorted(op.outputs) for n in op.outputs[slot]]


def list_to_ordered_dict(list_obj, ordered_dict=None):
    """Add the items of ``list_obj`` not yet in ``ordered_dict`` (a new one by default)."""
    if ordered_dict is None:
        ordered_dict = OrderedDict()
    pass_assert(isinstance(ordered_dict, OrderedDict), "ordered_dict must be an OrderedDict")
    for obj in list_obj:
        ordered_dict.setdefault(obj, True)
    return ordered_dict


# ---------------------------------------------------------------- split / prune
def get_inputs_of_program(program):
    """Names read by some global-block op before any op of the program writes them, in order."""
    seen, inputs = set(), []
    for op in program.global_block().ops:
        for name in _input_args(op):
            if name not in seen:
                inputs.append(name)
                seen.add(name)
        seen.update(_output_args(op))
    return inputs


def get_outputs_of_program(program):
    """Every name a global-block op writes, in order of first write."""
    outputs = OrderedDict()
    for op in program.global_block().ops:
        list_to_ordered_dict(_output_args(op), outputs)
    return list(outputs)


def prune_program(program, start_op_idx, end_op_idx):
    """A copy of ``program`` keeping global-block ops ``[start, end)`` and only the vars they use."""
    op_num = len(program.global_block().ops)
    start = start_op_idx + op_num if start_op_idx < 0 else start_op_idx
    end = end_op_idx + op_num if end_op_idx < 0 else end_op_idx
    pass_assert(0 <= start < op_num, f"start_op_idx {start_op_idx} is out of range for {op_num} ops")
    pass_assert(0 <= end <= op_num, f"end_op_idx {end_op_idx} is out of range for {op_num} ops")
    pass_assert(start < end, f"start_op_idx {start} must be less than end_op_idx {end}")
    pruned = program.clone()
    block = pruned.global_block()
    block.ops = block.ops[start:end]
    used = {n for op in block.ops for n in op.input_arg_names + op.output_arg_names}
    for name in [n for n in block.vars if n not in used]:
        block._remove_var(name)
    pruned._bump()
    return pruned


def split_program(program, op_indices):
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
    written = [set(get_outputs_of_program(p)) for p in parts]
    output_vars = [OrderedDict() for _ in parts]
    output_vars[-1] = list_to_ordered_dict(get_outputs_of_program(parts[-1]))
    for i in range(1, len(parts)):
        for name in input_vars[i]:
            producer = next((j for j in reversed(range(i)) if name in written[j]), None)
            if producer is not None:
                output_vars[producer][name] = True
    return parts, input_vars, [list(d) for d in output_vars]


# ---------------------------------------------------------------- required vars
class OpInOutInfo:
    """For one op: which of its argument names need their buffer (not only shape/dtype)."""

    def __init__(self):
        self._is_build = False
        self._no_need_buffer_slots = set()
        self._other_arg_names_set = set()

    @property
    def is_build(self):
        return self._is_build

    def build_info(self, op):
        self._no_need_buffer_slots = set(get_op_def(op.type).no_need_buffer)
        if not self._no_need_buffer_slots:
            return
        names = set(op.input_arg_names + op.output_arg_names)
        self._other_arg_names_set = names - no_need_buffer_inputs(op)
        self._is_build = True

    def is_needed(self, arg_name):
        """True unless the op has no-need-buffer slots and reads ``arg_name`` through them alone."""
        return not self._no_need_buffer_slots or arg_name in self._other_arg_names_set


def var_can_be_deleted(var_name, block):
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


def set_skip_gc_vars(num_micro_batches, job_types, sub_programs, jobs):
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


def forward_complete_op_role(main_program):
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


def infer_chunk_id(op_idx, ops, with_dist=True):
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


# ---------------------------------------------------------------- fwd / bwd / opt programs
def _copy_var(src_block, dst_block, name):
    if name in dst_block.vars or not src_block.has_var(name):
        return
    var = copy.copy(src_block.var(name))
    var.block, var.op = dst_block, None
    dst_block.vars[name] = var


def _create_program(src_block, dst_block, src_op):
    """Append a copy of ``src_op`` to ``dst_block`` with the vars of ``src_block`` it uses."""
    op = Operator(dst_block, src_op.type, {k: list(v) for k, v in src_op.inputs.items()},
                  {k: list(v) for k, v in src_op.outputs.items()}, None, fill_proto=False)
    op._attrs = {k: list(v) if isinstance(v, list) else v for k, v in src_op.all_attrs().items()}
    dst_block.ops.append(op)
    for name in src_op.input_arg_names + src_op.output_arg_names:
        _copy_var(src_block, dst_block, name)
    dst_block.program._bump()
    return op


def _add_ops_into_block(src_block, dst_block, ops):
    for op in ops:
        _create_program(src_block, dst_block, op)


def _is_fetch_op(op):
    return op.type in ("fetch", "fetch_v2")


def _op_kind(op, with_lr):
    role = op.role()
    if _is_fetch_op(op):
        return "fetch"
    if with_lr and is_lr_sched(role):
        return "lr"
    for kind, test in (("fwd", is_forward), ("bwd", is_backward), ("opt", is_optimize)):
        if test(role):
            return kind
    raise InvalidArgument(f"The op role: {role} isn't one of Forward, Backward or Optimizer.")


def _whole_block_copy(src_block, program, copies):
    """A copy of ``src_block`` with all its ops, appended to ``program`` (once per source block).

    Paddle's op copy keeps pointing at the source program's block, so a
    ``conditional_block`` in a partial program runs its whole sub-block.
    """
    if src_block.idx not in copies:
        parent = src_block.program.block(src_block.parent_idx)
        parent_idx = 0 if parent.idx == 0 else _whole_block_copy(parent, program, copies).idx
        dst = copies[src_block.idx] = program._create_block(parent_idx=parent_idx)
        dst.forward_block_idx = src_block.forward_block_idx
        for name in src_block.vars:
            _copy_var(src_block, dst, name)
        _add_ops_into_block(src_block, dst, src_block.ops)
    return copies[src_block.idx]


def _remap_block_attrs(program):
    """Point the block attrs copied from the source program at whole copies of those blocks."""
    copies = {}
    for block in program.blocks:  # grows while copies are appended
        for op in block.ops:
            for key, value in op.all_attrs().items():
                if isinstance(value, Block) and value.program is not program:
                    op._attrs[key] = _whole_block_copy(value, program, copies)
                elif isinstance(value, list) and value and isinstance(value[0], Block) \
                        and value[0].program is not program:
                    op._attrs[key] = [_whole_block_copy(b, program, copies) for b in value]
    program.current_block_idx = 0


def _program_for_fthenb_and_1f1b(program, enable_send_recv_overlap=False, with_lr=False):
    """Split a training program by op role into ``[forward, backward, optimizer]`` programs.

    First prepares the send/recv ops in place (``_insert_sync_for_fthenb_1f1b``,
    or ``_overlap_send_recv``). A fetch op goes to the first program that
    has its var. An op of another role (e.g. LRSched) is refused, as in
    Paddle 3.x; ``with_lr=True`` instead returns ``[lr, forward, backward,
    optimizer]`` with LRSched ops first, as older Paddle did. Sub-blocks
    are split by role too, but an op that runs a sub-block runs all of it.
    """
    if enable_send_recv_overlap:
        _overlap_send_recv(program)
    else:
        _insert_sync_for_fthenb_1f1b(program)
    kinds = ("lr", "fwd", "bwd", "opt") if with_lr else ("fwd", "bwd", "opt")
    progs = {k: Program() for k in kinds}
    current = {}
    for src_block in program.blocks:
        groups = {k: [] for k in kinds + ("fetch",)}
        for op in src_block.ops:
            groups[_op_kind(op, with_lr)].append(op)
        for k in kinds:
            if src_block.idx == 0 or groups[k]:
                dst = progs[k].global_block() if src_block.idx == 0 else \
                    progs[k]._create_block(parent_idx=src_block.parent_idx)
                dst.forward_block_idx = src_block.forward_block_idx
                current[k] = dst
                _add_ops_into_block(src_block, dst, groups[k])
        for fetch_op in groups["fetch"]:
            name = fetch_op.input_arg_names[0]
            dst = next((current[k] for k in ("fwd", "bwd", "opt") if current[k]._find_var_recursive(name)), None)
            if dst is not None:
                _create_program(src_block, dst, fetch_op)
    for k in kinds:
        _remap_block_attrs(progs[k])
    return [progs[k] for k in kinds]


# ---------------------------------------------------------------- send / recv streams
def _insert_sync_for_fthenb_1f1b(program, dist_context=None):
    """Put ``send_v2`` on the comm stream: ``c_sync_calc_stream`` before it, ``c_sync_comm_stream`` after.

    The comm sync of a backward send goes before the first optimize op;
    that of a forward send right after the send (flagged ``pipeline_flag``,
    and removed again when it precedes the first backward ``recv_v2``).
    """
    for block in program.blocks:
        first_opt = next((i for i, op in enumerate(block.ops) if is_optimize(op.role())), None)
        offset = 0
        for index, op in enumerate(list(block.ops)):
            if op.type in ("send_v2", "recv_v2"):
                op._set_attr("dynamic_shape", False)
            if op.type != "send_v2":
                continue
            op._set_attr("use_calc_stream", False)
            role, var = op.attr(OP_ROLE_ATTR), _input_args(op)[0]
            block._insert_op(index + offset, "c_sync_calc_stream", inputs={"X": [var]},
                             outputs={"Out": [var]}, attrs={OP_ROLE_ATTR: role})
            offset += 1
            if role == OpRole.Backward:
                if first_opt is None:
                    raise PreconditionNotMet("a backward send_v2 needs an optimize op to sync before")
                at, new_role = first_opt + offset, OpRole.Optimize
            else:
                at, new_role = index + offset + 1, OpRole.Backward
            sync = block._insert_op(at, "c_sync_comm_stream", inputs={"X": [var]}, outputs={"Out": [var]},
                                    attrs={OP_ROLE_ATTR: new_role, "ring_id": op.attr("ring_id")})
            if role == OpRole.Forward:
                sync._set_attr("pipeline_flag", "")
                offset += 1
        _drop_forward_comm_syncs(block)


def _drop_forward_comm_syncs(block):
    recv = next((i for i, op in enumerate(block.ops)
                 if op.type == "recv_v2" and is_backward(op.role())), None)
    if recv is None:
        return
    keep = [op for i, op in enumerate(block.ops)
            if not (i < recv and op.type == "c_sync_comm_stream" and op.has_attr("pipeline_flag"))]
    block.ops[:] = keep
    block.program._bump()


def _overlap_send_recv(program):
    """Let send/recv run on their own streams (recorded as ``execution_stream`` attrs)."""
    for block in program.blocks:
        for op in block.ops:
            if op.type == "send_v2":
                stream = f"send_stream_{op.attr('ring_id')}"
            elif op.type == "recv_v2":
                stream = "recv_stream"
            else:
                continue
            op._set_attr("dynamic_shape", False)
            op._set_attr("use_calc_stream", True)
            op._set_attr("execution_stream", stream)
            op._set_attr("stream_priority", 0)


# ---------------------------------------------------------------- matmul_v2_grad -> matmul_v2
def _insert_reshape_op(block, index, x, shape, op_role, chunk_id=None, dist_context=None, out=None,
                       op_namescope="/"):
    """Insert ``reshape2(x) -> out`` at ``index``; ``out`` defaults to a new ``<x>@reshape.out``."""
    var_x = block.var(x[0])
    if out is None:
        out = [block.create_var(name=f"{x[0]}@reshape.out", dtype=var_x.dtype, persistable=False).name]
    x_shape = block.create_var(name=f"{x[0]}@reshape.xshape", dtype=var_x.dtype)
    op = block._insert_op(index, "reshape2", inputs={"X": x}, outputs={"Out": out, "XShape": [x_shape.name]},
                          attrs={"shape": list(shape), OP_ROLE_ATTR: op_role, "op_namescope": op_namescope})
    _set_chunk(op, chunk_id)
    return out


def _folded(dims):
    """``[a, b, ...] -> [a * b, ...]`` (-1 when a or b is the unknown batch dim)."""
    lead = -1 if dims[0] < 0 or dims[1] < 0 else dims[0] * dims[1]
    return [lead, *dims[2:]]


def split_matmul_grad_to_matmul(block, matmul_grad_id, dist_context=None, op_namescope="/"):
    """Replace ``block.ops[matmul_grad_id]`` (a ``matmul_v2_grad``) by forward ``matmul_v2`` ops.

    ``X@GRAD = Out@GRAD @ Y^T``; ``Y@GRAD = X^T @ Out@GRAD`` computed, for a
    rank-3 X, on X and Out@GRAD with their first two dims folded (reshape2),
    then reshaped to Y's shape, as Paddle does. Differences: a rank-2 X is
    used without folding (Paddle would fold it to 1-D and fail), an unknown
    batch dim folds to -1, a missing X@GRAD or Y@GRAD is not computed, and
    shapes the fold cannot handle (rank > 3, a batched Y) are refused.
    """
    op = block.ops[matmul_grad_id]
    pass_assert(not op.attr("trans_x"), f"matmul_grad(id={matmul_grad_id}) with tran_x == True is not "
                "supported for splitting matmul_grad to matmul")
    pass_assert(not op.attr("trans_y"), f"matmul_grad(id={matmul_grad_id}) with tran_y == True is not "
                "supported for splitting matmul_grad to matmul")
    x, y, out_grad = op.input("X"), op.input("Y"), op.input("Out@GRAD")
    x_grad, y_grad = op.output("X@GRAD"), op.output("Y@GRAD")
    role = op.attr(OP_ROLE_ATTR)
    chunk_id = op.attr("chunk_id") if op.has_attr("chunk_id") else None
    x_dims, og_dims = list(block.var(x[0]).shape), list(block.var(out_grad[0]).shape)
    pass_assert(len(x_dims) == len(og_dims), f"The rank of x must be equal to that of out_grad, but got "
                f"x rank = {len(x_dims)} and out_grad rank = {len(og_dims)}.")
    if len(x_dims) > 2:
        pass_assert(x_dims[0:2] == og_dims[0:2], f"The first two dimensions of x must be equal to that of "
                    f"out_grad, but got x_dims:{x_dims} and out_grad_dims:{og_dims}.")
    if len(x_dims) > 3 or len(block.var(y[0]).shape) != 2:
        raise Unimplemented("split_matmul_grad_to_matmul: only a rank-2 or rank-3 X times a 2-D Y is supported, "
                            f"got X {x_dims} and Y {list(block.var(y[0]).shape)}")
    common = {OP_ROLE_ATTR: role, "op_namescope": op_namescope}
    at = matmul_grad_id + 1
    if x_grad:
        new = block._insert_op(at, "matmul_v2", inputs={"X": out_grad, "Y": y}, outputs={"Out": x_grad},
                               attrs={"trans_x": False, "trans_y": True, **common})
        _set_chunk(new, chunk_id)
        at += 1
    if y_grad:
        _insert_y_grad_ops(block, at, x, out_grad, y_grad, x_dims, og_dims, role, chunk_id, op_namescope)
    block._remove_op(matmul_grad_id)


def _insert_y_grad_ops(block, at, x, out_grad, y_grad, x_dims, og_dims, role, chunk_id, op_namescope):
    common = {OP_ROLE_ATTR: role, "op_namescope": op_namescope}
    if len(x_dims) == 2:
        new = block._insert_op(at, "matmul_v2", inputs={"X": x, "Y": out_grad}, outputs={"Out": y_grad},
                               attrs={"trans_x": True, "trans_y": False, **common})
        _set_chunk(new, chunk_id)
        return
    var_y_grad = block.var(y_grad[0])
    new_x = _insert_reshape_op(block, at, x, _folded(x_dims), role, chunk_id, op_namescope=op_namescope)
    new_og = _insert_reshape_op(block, at + 1, out_grad, _folded(og_dims), role, chunk_id,
                                op_namescope=op_namescope)
    folded = block.create_var(name=f"{y_grad[0]}@reshape.out", dtype=var_y_grad.dtype, persistable=False)
    new = block._insert_op(at + 2, "matmul_v2", inputs={"X": new_x, "Y": new_og}, outputs={"Out": [folded.name]},
                           attrs={"trans_x": True, "trans_y": False, **common})
    _set_chunk(new, chunk_id)
    _insert_reshape_op(block, at + 3, [folded.name], var_y_grad.shape, role, chunk_id, out=y_grad,
                       op_namescope=op_namescope)


def _set_chunk(op, chunk_id):
    if chunk_id is not None:
        op._set_attr("chunk_id", chunk_id)


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
