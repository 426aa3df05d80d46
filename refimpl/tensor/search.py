"""Search: where, argmax, topk (``python/paddle/tensor/search.py``) in static mode.

Mirrors Paddle 2.6.2's legacy static branch. ``where`` broadcasts the way
Paddle's Python does before the ``where`` op when the three shapes differ:
``zeros_like`` of x, y and the condition (``fill_any_like``), two ``cast``,
five ``paddle.add`` and a ``cast`` back to bool. Not here: ``where(cond)``
alone (``nonzero``), ``argmin`` and ``masked_select`` (no op in the registry).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from refimpl.core.dtypes import convert_dtype, to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

from .math import check_variable, add

__all__ = ['argmax', 'topk', 'where']

_WHERE_DTYPES = ('bfloat16', 'float16', 'float32', 'float64', 'int32', 'int64')


def _broadcast_shape(api: str, shapes: dict) -> None:
    """InvalidArgument unless the shapes broadcast (a -1 dim matches anything)."""
    rank = max(len(s) for s in shapes.values())
    for i in range(1, rank + 1):
        dims = {d[-i] for d in shapes.values() if len(d) >= i and d[-i] not in (1, -1)}
        if len(dims) > 1:
            named = ", ".join(f"{k} {list(s)}" for k, s in shapes.items())
            raise InvalidArgument(f"{api}: the shapes of {named} do not broadcast (dim {-i}: {sorted(dims)})")


def where(condition: Variable, x: Any = None, y: Any = None, name: Optional[str] = None) -> Variable:
    """``where``; a number x or y becomes ``paddle.full([1], v)`` of NumPy's dtype for it (float64 for a float).

    x and y of two dtypes (``where(c, 1.0, float32_x)``) are InvalidArgument at build time: Paddle 2.6.2
    builds that program and fails when it runs, and never yields float64 silently.
    """
    from .creation import full, zeros_like
    from .manipulation import cast
    if x is None and y is None:
        raise InvalidArgument("where: where(condition) alone (nonzero) is not supported here")
    if x is None or y is None:
        raise InvalidArgument("where: either both or neither of x and y should be given")
    if np.isscalar(x):
        x = full([1], x, np.array([x]).dtype.name)
    if np.isscalar(y):
        y = full([1], y, np.array([y]).dtype.name)
    for arg, v in (("condition", condition), ("x", x), ("y", y)):
        check_variable(v, "where")
    if condition.dtype != "bool":
        raise InvalidArgument(f"where: argument 'condition' ({condition.name!r}) must be bool, got {condition.dtype}")
    for arg, v in (("x", x), ("y", y)):
        if v.dtype not in _WHERE_DTYPES:
            raise InvalidArgument(f"where: argument '{arg}' ({v.name!r}) has dtype {v.dtype}; "
                                  f"expected one of {list(_WHERE_DTYPES)}")
    if x.dtype != y.dtype:  # 2.6.2 builds the program, then its elementwise_add fails at run time
        raise InvalidArgument(f"where: x ({x.name!r}, {x.dtype}) and y ({y.name!r}, {y.dtype}) must have one dtype "
                              f"(a Python float becomes a float64 constant, an int an int64 one, as in Paddle "
                              f"2.6.2); pass a tensor of the other's dtype instead")
    shapes = {"condition": condition.shape, "x": x.shape, "y": y.shape}
    _broadcast_shape("where", shapes)
    if x.shape == y.shape == condition.shape:
        cond_b, x_b, y_b = condition, x, y
    else:
        zx, zy, zc = zeros_like(x), zeros_like(y), zeros_like(condition)
        zc = cast(zc, x.dtype)
        cond_as_x = cast(condition, x.dtype)
        zeros = add(add(zx, zy), zc)
        x_b, y_b = add(x, zeros), add(y, zeros)
        cond_b = cast(add(cond_as_x, zeros), "bool")
    helper = LayerHelper("where", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="where", inputs={"Condition": cond_b, "X": x_b, "Y": y_b}, outputs={"Out": [out]})
    return out


def argmax(x: Variable, axis: Optional[int] = None, keepdim: bool = False, dtype: Any = "int64",
           name: Optional[str] = None) -> Variable:
    """``arg_max``; axis None flattens (``flatten=True``, ``axis=0``); the output is stop_gradient."""
    check_variable(x, "argmax")
    if axis is not None and (not isinstance(axis, int) or isinstance(axis, bool)):
        raise InvalidArgument(f"argmax: argument 'axis' must be an int or None, got {axis!r}")
    if dtype is None:
        raise InvalidArgument("argmax: argument 'dtype' must not be None")
    out_dtype = convert_dtype(dtype)
    if out_dtype not in ("int32", "int64"):
        raise InvalidArgument(f"argmax: argument 'dtype' must be int32 or int64, got {out_dtype}")
    rank = len(x.shape) if x.shape is not None else 0
    if axis is not None and not -rank <= axis < max(rank, 1):
        raise InvalidArgument(f"argmax: argument 'axis' = {axis} is out of range for a tensor of rank {rank}")
    helper = LayerHelper("argmax", name=name)
    out = helper.create_variable_for_type_inference(out_dtype)
    helper.append_op(type="arg_max", inputs={"X": x}, outputs={"Out": [out]},
                     attrs={"keepdims": keepdim, "axis": 0 if axis is None else axis, "flatten": axis is None,
                            "dtype": to_vartype(out_dtype)})
    out.stop_gradient = True
    return out


def topk(x: Variable, k: int, axis: Optional[int] = None, largest: bool = True, sorted: bool = True,
         name: Optional[str] = None) -> Tuple[Variable, Variable]:
    """``top_k_v2``: (values, int64 indices); indices are stop_gradient. A Variable k is not built here."""
    check_variable(x, "topk")
    if isinstance(k, Variable) or not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InvalidArgument(f"topk: argument 'k' must be a positive int, got {k!r}")
    rank = len(x.shape) if x.shape is not None else 0
    if axis is not None and not -rank <= axis < max(rank, 1):
        raise InvalidArgument(f"topk: argument 'axis' = {axis} is out of range for a tensor of rank {rank}")
    dim = x.shape[axis if axis is not None else -1] if rank else 1
    if dim >= 0 and k > dim:
        raise InvalidArgument(f"topk: argument 'k' = {k} is larger than the dim it selects from ({dim})")
    attrs = {"k": k, "largest": largest, "sorted": sorted}
    if axis is not None:
        attrs["axis"] = axis
    helper = LayerHelper("top_k_v2", name=name)
    values = helper.create_variable_for_type_inference(x.dtype)
    indices = helper.create_variable_for_type_inference("int64")
    helper.append_op(type="top_k_v2", inputs={"X": [x]}, outputs={"Out": [values], "Indices": [indices]},
                     attrs=attrs)
    indices.stop_gradient = True
    return values, indices
