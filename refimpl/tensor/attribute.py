"""Attributes: shape, rank (``paddle/tensor/attribute.py``).

The legacy static-graph branch: ``shape`` appends a ``shape`` op (output ``shape_N.tmp_0``,
int32, stop_gradient); ``rank`` knows the rank at build time and, as Paddle does, emits it as a
0-D int32 constant through ``paddle.assign`` (an ``assign_value`` op, ``assign_N.tmp_0``).
"""
from typing import Any

import numpy as np

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

__all__ = ['rank', 'shape']


def _var(x: Any, api: str) -> Variable:
    if not isinstance(x, Variable):
        raise InvalidArgument(f"{api}: argument 'input' must be a static Variable, got {type(x).__name__}")
    return x


def shape(input: Variable) -> Variable:
    _var(input, "shape")
    helper = LayerHelper("shape")
    out = helper.create_variable_for_type_inference("int32")
    out.stop_gradient = True
    helper.append_op(type="shape", inputs={"Input": [input]}, outputs={"Out": [out]})
    return out


def rank(input: Variable) -> Variable:
    from .creation import assign
    return assign(np.array(len(_var(input, "rank").shape), np.int32))
