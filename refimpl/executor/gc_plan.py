"""The eager-deletion plan: which variables to free after which op.

Mirrors Paddle's ``GetEagerDeletionCleanVars`` / ``GetUnusedVars``
(``executor_gc_helper.cc``), exposed in Python as
``_get_eager_deletion_vars``. For every block, a variable can be deleted
when it is declared in that block (not a parent), is not persistable, is a
dense tensor and is not in ``skip_vars``. Its last use is the last op that
writes it or reads its buffer; an input in a no-need-buffer slot (the op
reads only its shape) is not a use, unless the same var also appears in
another input slot or any output of that op. The result, per block and per
op, is the sorted list of names freed right after that op.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Sequence, Set, TYPE_CHECKING

from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.ops.registry import get_op_def

if TYPE_CHECKING:
    from refimpl.framework.block import Block
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program

_DELETABLE_TYPES = ("DENSE_TENSOR", "SELECTED_ROWS", "DENSE_TENSOR_ARRAY")


def var_can_be_deleted(name: str, block: Block, skip_vars: Iterable[str]) -> bool:
    """Paddle's ``VarCanBeDeleted``: local, non-persistable dense tensors not skipped."""
    if name in skip_vars:
        return False
    v = block.vars.get(name)
    return v is not None and not v.persistable and v.type in _DELETABLE_TYPES


def no_need_buffer_inputs(op: Operator) -> Set[str]:
    """Names of ``op``'s inputs whose buffer the op does not read (Paddle's OpInOutInfo)."""
    slots = get_op_def(op.type).no_need_buffer
    if not slots:
        return set()
    names = {n for s in slots for n in op.inputs.get(s, ())}
    others = {n for s, ns in op.inputs.items() if s not in slots for n in ns}
    others.update(op.output_arg_names)
    return names - others


def unused_vars(block: Block, ops: Sequence[Operator], skip_vars: Iterable[str]) -> Dict[int, List[str]]:
    """{op index: [names last used by that op]} for one block."""
    skip = set(skip_vars)
    last_use = {}  # every name's last use; whether it may be deleted is asked once per name, after
    for i, op in enumerate(ops):
        nnb = no_need_buffer_inputs(op)
        for name in op.input_arg_names:
            if name not in nnb:
                last_use[name] = i
        for name in op.output_arg_names:
            last_use[name] = i
    result = {}
    for name, i in last_use.items():
        if var_can_be_deleted(name, block, skip):
            result.setdefault(i, []).append(name)
    return result


def _control_flow_skip_vars(op):
    return list(op.attr("skip_eager_deletion_vars")) if op.has_attr("skip_eager_deletion_vars") else []


def block_eager_deletion_vars(block: Block, skip_vars: Iterable[str] = ()) -> List[List[str]]:
    """Per op of one block: the sorted names freed right after that op runs.

    ``skip_vars`` applies to the global block only (a sub-block keeps what
    its control-flow ops list in ``skip_eager_deletion_vars``). One pass over
    the block: preparing one block need not plan the others.
    """
    skip = set(skip_vars) if block.idx == 0 else set()
    for op in block.ops:
        skip.update(_control_flow_skip_vars(op))
    unused = unused_vars(block, block.ops, skip)
    return [sorted(unused.get(i, [])) for i in range(len(block.ops))]


@paused_cyclic_gc
def eager_deletion_vars(program: Program, skip_vars: Iterable[str] = ()) -> List[List[List[str]]]:
    """Per block, per op: the sorted names freed right after that op runs."""
    return [block_eager_deletion_vars(block, skip_vars) for block in program.blocks]
