"""``static.nn.cond`` (true branch only): build a ``conditional_block`` op.

Mirrors Paddle's ``ConditionalBlock``: the body is built into a new
sub-block; the op's ``Input`` lists the outer vars the body reads before
writing, ``Out`` the outer vars it writes, and ``Scope`` a STEP_SCOPES var.
Only ``false_fn=None`` and bodies without return values are supported.
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
    if false_fn is not None:
        raise Unimplemented("static.nn.cond: false_fn is not supported yet")
    program = default_main_program()
    with _sub_block(program) as sub:
        out = true_fn() if true_fn is not None else None
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
    return None
