"""``auto_parallel_gradient_merge_pass``: update the parameters once every ``k_steps`` runs.

Mirrors Paddle's ``GradientMergePass`` in
``paddle/distributed/passes/auto_parallel_gradient_merge.py``, in its
legacy-IR (ProgramDesc) form (Paddle 3.3.1 keeps only the PIR form, which
builds the same buffers and adds). Applied to a (main, startup) pair after
``minimize`` (and after a data-parallel rewrite, if any), it:

1. takes the optimizer ops (``op_role`` has the Optimize bit) out of the main block;
2. when ``gradient_sync_after_accumulate``, takes out the data-parallel sync of
   each gradient too -- an in-place ``c_allreduce_sum`` (or ``c_allreduce_avg``,
   ``c_reduce_sum``, ``all_reduce`` / ``reduce`` with SUM or AVG) on it and the
   in-place ``scale`` (by 1/nranks) that follows a sum -- so that it runs once per
   update, on the merge buffer, instead of once per step;
3. for each (param, grad): a persistable ``{param}@GRAD@MERGE`` buffer, zero-filled
   in the startup program, and ``merge = merge + grad`` (``elementwise_add``, in
   place, X = the buffer) right after the op that last writes the gradient, with
   that op's ``op_role``;
4. a step counter on cpu, role Backward: ``gradient_merge_step`` += 1, then
   %= ``gradient_merge_k``; ``gradient_merge_cond`` = (step == ``gradient_merge_zero``);
5. a ``conditional_block`` on that cond (role Optimize) whose sub-block scales every
   buffer by 1/k when ``avg``, runs the moved sync ops and optimizer ops on the
   buffers (gradient names renamed to the buffers, ``op_role_var`` dropped, role
   Optimize) and zeroes the buffers.

Attrs: ``k_steps`` (int >= 1), ``avg`` (bool, default True),
``gradient_sync_after_accumulate`` (bool, default False), ``params_grads``
((param, grad) pairs, Variables or names), ``grad_to_global_grad`` (optional
dict, updated with grad name -> buffer name, as in Paddle). The same mapping
is left in the pass context as ``"grad_to_merge_grad"``.

Differences from Paddle:

* bad attrs raise :class:`InvalidArgument` naming the attr, where Paddle's
  ``_check_self`` skips the pass silently when ``k_steps < 1``;
* ``params_grads`` may be left unset: it is then read from the ``op_role_var``
  of the optimizer ops (an error naming ``params_grads`` if there are none);
  a pair whose grad is None is skipped;
* sync ops are recognised by what they do (an in-place reduce of a gradient),
  not by the auto-parallel ``op_namescope`` marker; a fused (coalesced)
  allreduce reduces a fused buffer, not a gradient, and stays where it is;
* the buffers are zeroed with ``fill_constant`` (refimpl has no ``set_value``);
* there is no ``dist_context`` (no dist attrs) and no master-grad cast removal.

The every-run form the pipeline uses (k micro-batches per run) is
``gradient_accumulation.accumulate_gradients``; the optimizer-wrapper form is
``incubate.optimizer.GradientMergeOptimizer``.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, TYPE_CHECKING, Tuple

from refimpl.core.errors import InvalidArgument, NotFound, PreconditionNotMet
from refimpl.core.dtypes import to_vartype
from refimpl.distributed.communication.communicator import ReduceOp
from refimpl.framework.op_role import OP_NAMESCOPE_ATTR, OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole
from refimpl.framework.program import device_guard, program_guard
from refimpl.static.control_flow import cond
from refimpl.static.input import create_global_var

from .gradient_accumulation import create_merge_buffer, params_grads_of
from .pass_base import PassBase, PassType, register_pass

if TYPE_CHECKING:
    from refimpl.framework.block import Block
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Variable

PASS_NAME = "auto_parallel_gradient_merge_pass"
GRADIENT_MERGE_NAMESCOPE = "/auto_parallel/gradient_merge"
SYNC_OPS = ("c_allreduce_sum", "c_allreduce_avg", "c_reduce_sum", "all_reduce", "reduce")


def _error(msg):
    return InvalidArgument(f"{PASS_NAME}: {msg}")


# ---- attrs ------------------------------------------------------------------------------
def check_attrs(k_steps: int, avg: bool, gradient_sync_after_accumulate: bool) -> None:
    """Raise InvalidArgument, naming the attr, unless the attrs are usable."""
    if isinstance(k_steps, bool) or not isinstance(k_steps, int) or k_steps < 1:
        raise _error(f"attr 'k_steps' must be an int >= 1, got {k_steps!r}")
    for name, value in (("avg", avg), ("gradient_sync_after_accumulate", gradient_sync_after_accumulate)):
        if not isinstance(value, bool):
            raise _error(f"attr {name!r} must be a bool, got {value!r}")


def _name_of(x):
    return x if isinstance(x, str) or x is None else getattr(x, "name", x)


def resolve_params_grads(block: Block, params_grads: Optional[Sequence[Any]]) -> List[Tuple[str, str]]:
    """[(param name, grad name)] from the attr, or from the optimizer ops when it is None."""
    if params_grads is None:
        pairs = params_grads_of(block.program)
        if not pairs:
            raise _error("attr 'params_grads' is required: the main program has no optimizer op with "
                         "op_role_var to read it from")
        return pairs
    if not isinstance(params_grads, (list, tuple)):
        raise _error(f"attr 'params_grads' must be a list of (param, grad) pairs, got "
                     f"{type(params_grads).__name__}")
    pairs = []
    for i, pair in enumerate(params_grads):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise _error(f"attr 'params_grads'[{i}] must be a (param, grad) pair, got {pair!r}")
        p, g = (_name_of(x) for x in pair)
        if g is None:
            continue
        for what, n in (("parameter", p), ("gradient", g)):
            if not isinstance(n, str) or not block.has_var(n):
                raise NotFound(f"{PASS_NAME}: attr 'params_grads'[{i}]: {what} {n!r} is not a variable "
                               f"of the main program's global block")
        if g in (q for _, q in pairs):
            raise _error(f"attr 'params_grads'[{i}]: gradient {g!r} is listed twice")
        pairs.append((p, g))
    if not pairs:
        raise _error("attr 'params_grads' holds no gradient")
    return pairs


# ---- program surgery --------------------------------------------------------------------
def _take_ops(block, indices):
    """Remove the ops at ``indices`` from ``block``; return them in the order given."""
    ops = [block.ops[i] for i in indices]
    for i in sorted(indices, reverse=True):
        block._remove_op(i)
    return ops


def take_optimizer_ops(block: Block) -> List[Operator]:
    idx = [i for i, op in enumerate(block.ops) if op.role() & OpRole.Optimize]
    if not idx:
        raise PreconditionNotMet(f"{PASS_NAME}: the main program has no optimizer ops (op_role Optimize); "
                                 f"apply the pass after minimize()")
    return _take_ops(block, idx)


def is_sync_op(op: Operator, grads: Iterable[str]) -> bool:
    """An in-place data-parallel reduce (sum or avg) of one of ``grads``."""
    if op.type not in SYNC_OPS:
        return False
    if op.type in ("all_reduce", "reduce") and op.attr("reduce_type") not in (ReduceOp.SUM, ReduceOp.AVG):
        return False
    ins, outs = op.input_arg_names, op.output_arg_names
    return len(ins) == 1 and ins == outs and ins[0] in grads and "@RENAME" not in ins[0]


def _is_sum(op):
    return op.type in ("c_allreduce_sum", "c_reduce_sum") or (
        op.type in ("all_reduce", "reduce") and op.attr("reduce_type") == ReduceOp.SUM)


def _following_scale(block, start, name):
    """Index of the in-place ``scale`` of ``name`` after op ``start``, if nothing else touches it first."""
    for j in range(start + 1, len(block.ops)):
        op = block.ops[j]
        if op.type == "scale" and op.input("X") == [name] and op.output("Out") == [name]:
            return j
        if name in op.input_arg_names or name in op.output_arg_names:
            return None
    return None


def take_sync_ops(block: Block, grads: Iterable[str]) -> List[Operator]:
    """Take out every gradient's sync op (and the scale after a sum); they keep their order."""
    idx = []
    for i, op in enumerate(block.ops):
        if i in idx or not is_sync_op(op, grads):
            continue
        idx.append(i)
        if _is_sum(op):
            j = _following_scale(block, i, op.input_arg_names[0])
            if j is not None:
                idx.append(j)
    return _take_ops(block, idx)


def _last_writer(block, name, i):
    for j in range(len(block.ops) - 1, -1, -1):
        if name in block.ops[j].output_arg_names:
            return j
    raise NotFound(f"{PASS_NAME}: attr 'params_grads'[{i}]: no op of the main program (outside the "
                   f"optimizer) writes the gradient {name!r}")


def append_merge_adds(block: Block, startup_block: Block,
                      pairs: Sequence[Tuple[str, str]]) -> Dict[str, Variable]:
    """Buffers and ``merge = merge + grad`` ops; return {grad name: buffer Variable}."""
    merged = {}
    for i, (p, g) in enumerate(pairs):
        at = _last_writer(block, g, i)
        merge = create_merge_buffer(block, startup_block, p)
        block._insert_op(at + 1, type="elementwise_add", inputs={"X": [merge], "Y": [g]},
                         outputs={"Out": [merge]},
                         attrs={"axis": -1, OP_ROLE_ATTR: block.ops[at].role(),
                                OP_NAMESCOPE_ATTR: GRADIENT_MERGE_NAMESCOPE})
        merged[g] = merge
    return merged


def append_cond_var(block: Block, k_steps: int) -> Variable:
    """The step counter ops; return ``gradient_merge_cond`` (true every k-th run)."""
    def counter(name, value, dtype="int32"):
        return create_global_var([1], value, dtype, persistable=True, force_cpu=True, name=name)
    k, zero, step = counter("gradient_merge_k", k_steps), counter("gradient_merge_zero", 0), \
        counter("gradient_merge_step", 0)
    cond_var = counter("gradient_merge_cond", False, "bool")
    with device_guard("cpu"), block.program._role_guard(OpRole.Backward):
        block.append_op(type="increment", inputs={"X": [step]}, outputs={"Out": [step]}, attrs={"step": 1.0})
        block.append_op(type="elementwise_mod", inputs={"X": [step], "Y": [k]}, outputs={"Out": [step]},
                        attrs={"axis": -1})
        block.append_op(type="equal", inputs={"X": [step], "Y": [zero]}, outputs={"Out": [cond_var]})
    return cond_var


def _copy_op(block, op, renames):
    """Append a copy of ``op`` to ``block`` with names renamed, role Optimize, no op_role_var."""
    ins = {slot: [renames.get(n, n) for n in names] for slot, names in op.inputs.items()}
    outs = {slot: [renames.get(n, n) for n in names] for slot, names in op.outputs.items()}
    attrs = op.all_attrs()
    attrs.pop(OP_ROLE_VAR_ATTR, None)
    attrs[OP_ROLE_ATTR] = OpRole.Optimize
    return block._append_desc_op(op.type, ins, outs, attrs)


def append_update_block(program: Program, cond_var: Variable, merged: Dict[str, Variable],
                        moved_ops: Sequence[Operator], k_steps: int, avg: bool) -> None:
    """The ``conditional_block``: [scale 1/k], sync ops, optimizer ops, zero the buffers."""
    renames = {g: m.name for g, m in merged.items()}

    def true_apply():
        sub = program.current_block()
        if avg:
            for m in merged.values():
                sub.append_op(type="scale", inputs={"X": [m]}, outputs={"Out": [m]},
                              attrs={"scale": 1.0 / k_steps, "bias": 0.0, "bias_after_scale": False,
                                     OP_ROLE_ATTR: OpRole.Optimize})
        for op in moved_ops:
            _copy_op(sub, op, renames)
        for m in merged.values():
            sub.append_op(type="fill_constant", inputs={}, outputs={"Out": [m]},
                          attrs={"shape": list(m.shape), "dtype": to_vartype(m.dtype), "value": 0.0,
                                 OP_ROLE_ATTR: OpRole.Optimize})

    cond(cond_var, true_apply)
    program.global_block().ops[-1]._set_attr(OP_ROLE_ATTR, OpRole.Optimize)


def parse_program(main: Program, startup: Program, params_grads: Optional[Sequence[Any]], k_steps: int,
                  avg: bool, gradient_sync_after_accumulate: bool) -> Dict[str, str]:
    """Rewrite ``main``/``startup`` in place; return {grad name: buffer name}."""
    block = main.global_block()
    if block.has_var("gradient_merge_step"):
        raise PreconditionNotMet(f"{PASS_NAME}: the main program already has a gradient_merge_step "
                                 f"(gradient merge applied twice?)")
    pairs = resolve_params_grads(block, params_grads)
    with program_guard(main, startup):
        opt_ops = take_optimizer_ops(block)
        sync_ops = take_sync_ops(block, {g for _, g in pairs}) if gradient_sync_after_accumulate else []
        merged = append_merge_adds(block, startup.global_block(), pairs)
        cond_var = append_cond_var(block, k_steps)
        append_update_block(main, cond_var, merged, sync_ops + opt_ops, k_steps, avg)
    return {g: m.name for g, m in merged.items()}


@register_pass(PASS_NAME)
class GradientMergePass(PassBase):
    """See the module docstring."""

    def __init__(self):
        super().__init__()
        self.set_attr("k_steps", -1)
        self.set_attr("avg", True)
        self.set_attr("gradient_sync_after_accumulate", False)

    def _check_self(self):
        check_attrs(self.get_attr("k_steps"), self.get_attr("avg"),
                    self.get_attr("gradient_sync_after_accumulate"))
        return True

    def _check_conflict(self, other_pass):
        return True

    def _type(self):
        return PassType.COMM_OPT

    def _apply_single_impl(self, main_program, startup_program, context):
        grad_to_merge = parse_program(main_program, startup_program, self.get_attr("params_grads"),
                                      self.get_attr("k_steps"), self.get_attr("avg"),
                                      self.get_attr("gradient_sync_after_accumulate"))
        mapping = self.get_attr("grad_to_global_grad")
        if mapping is not None:
            mapping.update(grad_to_merge)
        context.set_attr("grad_to_merge_grad", grad_to_merge)
