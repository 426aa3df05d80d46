"""``static.nn.cond`` for branches without return values: ``conditional_block`` ops.

Mirrors Paddle's ``ConditionalBlock``: the body is built into a new
sub-block; the op's ``Input`` lists the outer vars the body reads before
writing, ``Out`` the outer vars it writes, and ``Scope`` a STEP_SCOPES var.
A ``false_fn`` becomes a second such op on ``logical_not(pred)``, appended
after the first, as Paddle's ``cond`` does. Branches that return values
(Paddle merges them with ``select_input``) are not supported.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional, TYPE_CHECKING

from refimpl.core.errors import Unimplemented
from refimpl.framework.program import default_main_program

if TYPE_CHECKING:
    from refimpl.framework.variable import Variable


def _inputs_outputs(block):
    reads, writes = [], []
    for op in block.ops:
        for n in op.input_arg_names:
            if n not in writes and n not in reads:
                reads.append(n)
        for n in op.output_arg_names:
            if n not in writes:
                writes.append(n)
    return reads, writes


@contextlib.contextmanager
def _sub_block(program):
    block = program._create_block()
    try:
        yield block
    finally:
        program._rollback()


def cond(pred: Variable, true_fn: Optional[Callable[[], Any]] = None,
         false_fn: Optional[Callable[[], Any]] = None, name: Optional[str] = None) -> None:
    program = default_main_program()
    if true_fn is not None or false_fn is None:
        _conditional_block(program, pred, true_fn)
    if false_fn is not None:
        from refimpl.tensor.logic import logical_not
        _conditional_block(program, logical_not(pred), false_fn)
    return None


def _conditional_block(program: Any, pred: Variable, body: Optional[Callable[[], Any]]) -> None:
    with _sub_block(program) as sub:
        out = body() if body is not None else None
        if out is not None:
            raise Unimplemented("static.nn.cond: branches that return values are not supported yet")
    parent = program.block(sub.parent_idx)
    reads, writes = _inputs_outputs(sub)
    ins = [parent._var_recursive(n) for n in reads if parent._find_var_recursive(n) is not None]
    outs = [parent._find_var_recursive(n) for n in writes if parent._find_var_recursive(n) is not None]
    scope_var = parent.create_var(type="STEP_SCOPES")
    parent.append_op(type="conditional_block", inputs={"Cond": [pred], "Input": ins},
                     outputs={"Out": outs, "Scope": [scope_var]},
                     attrs={"sub_block": sub, "is_scalar_condition": True})
