"""Comparison and logical functions: greater_than, logical_and ... (``paddle/tensor/logic.py``).

The legacy static-graph branch of Paddle's functions: each makes a LayerHelper named after the
op (``greater_than_0``, ``logical_and_0``) and appends the op of the same name, whose output
``<op>_N.tmp_0`` is bool. As in Paddle, the comparisons' outputs stop gradients, the logical
ops want X and Y of one dtype, and ``equal`` also takes a Python number for ``y`` (a 0-D
``paddle.full`` of x's dtype). ``out=`` writes into a given Variable, as Paddle's does.
"""
from typing import Any, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

__all__ = ['equal', 'greater_equal', 'greater_than', 'is_empty', 'less_equal', 'less_than', 'logical_and',
           'logical_not', 'logical_or', 'logical_xor', 'not_equal']


def _var(x: Any, api: str, arg: str) -> Variable:
    if not isinstance(x, Variable):
        raise InvalidArgument(f"{api}: argument '{arg}' must be a static Variable, got {type(x).__name__}")
    return x


def _compare(op_type: str, x: Any, y: Any, name: Optional[str]) -> Variable:
    _var(x, op_type, "x")
    _var(y, op_type, "y")
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference("bool")
    out.stop_gradient = True
    helper.append_op(type=op_type, inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]})
    return out


def equal(x: Variable, y: Any, name: Optional[str] = None) -> Variable:
    if isinstance(y, (bool, int, float)):
        from .creation import full
        y = full([], y, dtype=_var(x, "equal", "x").dtype)
    return _compare("equal", x, y, name)


def not_equal(x: Variable, y: Variable, name: Optional[str] = None) -> Variable:
    return _compare("not_equal", x, y, name)


def less_than(x: Variable, y: Variable, name: Optional[str] = None) -> Variable:
    return _compare("less_than", x, y, name)


def less_equal(x: Variable, y: Variable, name: Optional[str] = None) -> Variable:
    return _compare("less_equal", x, y, name)


def greater_than(x: Variable, y: Variable, name: Optional[str] = None) -> Variable:
    return _compare("greater_than", x, y, name)


def greater_equal(x: Variable, y: Variable, name: Optional[str] = None) -> Variable:
    return _compare("greater_equal", x, y, name)


def _logical(op_type: str, x: Any, y: Any, out: Optional[Variable], name: Optional[str]) -> Variable:
    _var(x, op_type, "x")
    inputs = {"X": [x]}
    if y is not None:
        _var(y, op_type, "y")
        if y.dtype != x.dtype:
            raise InvalidArgument(f"{op_type}: the dtypes of x and y must be the same, got {x.dtype} and {y.dtype}")
        inputs["Y"] = [y]
    helper = LayerHelper(op_type, name=name)
    if out is None:
        out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs=inputs, outputs={"Out": [out]})
    return out


def logical_and(x: Variable, y: Variable, out: Optional[Variable] = None, name: Optional[str] = None) -> Variable:
    return _logical("logical_and", x, _var(y, "logical_and", "y"), out, name)


def logical_or(x: Variable, y: Variable, out: Optional[Variable] = None, name: Optional[str] = None) -> Variable:
    return _logical("logical_or", x, _var(y, "logical_or", "y"), out, name)


def logical_xor(x: Variable, y: Variable, out: Optional[Variable] = None, name: Optional[str] = None) -> Variable:
    return _logical("logical_xor", x, _var(y, "logical_xor", "y"), out, name)


def logical_not(x: Variable, out: Optional[Variable] = None, name: Optional[str] = None) -> Variable:
    return _logical("logical_not", x, None, out, name)


def is_empty(x: Variable, name: Optional[str] = None) -> Variable:
    _var(x, "is_empty", "x")
    helper = LayerHelper("is_empty", name=name)
    out = helper.create_variable_for_type_inference("bool")
    out.stop_gradient = True
    helper.append_op(type="is_empty", inputs={"X": [x]}, outputs={"Out": [out]})
    return out
