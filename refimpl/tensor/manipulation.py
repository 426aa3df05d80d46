"""Manipulation: reshape, transpose, concat, split, cast, flatten, squeeze, unsqueeze, stack, expand,
broadcast_to, tile, gather, gather_nd, slice in static mode.

Mirrors the legacy static branch of ``python/paddle/tensor/manipulation.py``
(Paddle 2.6.2, the recorded reference for these functions): one
``LayerHelper`` per call named as Paddle names it (``squeeze`` for
``squeeze2``, ``unsqueeze2``, ``expand`` for ``expand_v2`` and
``broadcast_to``, ``flatten`` for ``flatten_contiguous_range``), the same
slots and attrs. Shapes, axes and indices given as Variables (the
``*Tensor`` / ``*TensorList`` slots) are not built here; ``unstack``,
``flip``, ``roll`` and ``expand_as`` have no op in the registry.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from refimpl.core.dtypes import convert_dtype, to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

from .math import _var

__all__ = ['broadcast_to', 'cast', 'concat', 'expand', 'flatten', 'gather', 'gather_nd', 'reshape', 'slice',
           'split', 'squeeze', 'stack', 'tile', 'transpose', 'unsqueeze']


def _ints(value: Any, api: str, arg: str) -> List[int]:
    """An int or a list/tuple of ints as a list; anything else is InvalidArgument."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    raise InvalidArgument(f"{api}: argument '{arg}' must be an int or a list of ints, got {value!r}")


def _check_axis(api: str, arg: str, axis: int, rank: int) -> None:
    if not -rank <= axis < max(rank, 1):
        raise InvalidArgument(f"{api}: argument '{arg}' = {axis} is out of range for a tensor of rank {rank} "
                              f"(expected [{-rank}, {max(rank, 1)}))")


def _rank(x: Variable) -> int:
    return len(x.shape) if x.shape is not None else 0


def _with_xshape(api: str, helper_name: str, op_type: str, x: Variable, attrs: dict, name: Optional[str],
                 inputs: Optional[dict] = None) -> Variable:
    """An op with ``Out`` and ``XShape`` outputs (reshape2, squeeze2, unsqueeze2, flatten, transpose2)."""
    _var(x, api)
    helper = LayerHelper(helper_name, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    xshape = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs=inputs or {"X": [x]}, outputs={"Out": [out], "XShape": [xshape]},
                     attrs=attrs)
    return out


def reshape(x: Variable, shape: Sequence[int], name: Optional[str] = None) -> Variable:
    _var(x, "reshape")
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
        raise InvalidArgument(f"reshape: shape must be a list of ints, got {shape!r}")
    return _with_xshape("reshape", "reshape2", "reshape2", x, {"shape": list(shape)}, name,
                        inputs={"X": x})


def transpose(x: Variable, perm: Sequence[int], name: Optional[str] = None) -> Variable:
    _var(x, "transpose")
    if sorted(perm) != list(range(len(x.shape))):
        raise InvalidArgument(f"transpose: perm {list(perm)} is not a permutation of {len(x.shape)} dims")
    return _with_xshape("transpose", "transpose", "transpose2", x, {"axis": list(perm)}, name)


def flatten(x: Variable, start_axis: int = 0, stop_axis: int = -1, name: Optional[str] = None) -> Variable:
    """``flatten_contiguous_range`` with both axes made non-negative (helper ``flatten``)."""
    _var(x, "flatten")
    rank = _rank(x)
    for arg, axis in (("start_axis", start_axis), ("stop_axis", stop_axis)):
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise InvalidArgument(f"flatten: argument '{arg}' must be an int, got {axis!r}")
        _check_axis("flatten", arg, axis, rank)
    if rank > 0:
        start_axis, stop_axis = start_axis % rank, stop_axis % rank
        if start_axis > stop_axis:
            raise InvalidArgument(f"flatten: stop_axis {stop_axis} must not be below start_axis {start_axis}")
    return _with_xshape("flatten", "flatten", "flatten_contiguous_range", x,
                        {"start_axis": start_axis, "stop_axis": stop_axis}, name)


def squeeze(x: Variable, axis: Any = None, name: Optional[str] = None) -> Variable:
    """``squeeze2`` (helper ``squeeze``); axis None squeezes every dim of size 1."""
    _var(x, "squeeze")
    axes = [] if axis is None else _ints(axis, "squeeze", "axis")
    for a in axes:
        _check_axis("squeeze", "axis", a, _rank(x))
    return _with_xshape("squeeze", "squeeze", "squeeze2", x, {"axes": axes}, name)


def unsqueeze(x: Variable, axis: Any, name: Optional[str] = None) -> Variable:
    """``unsqueeze2``; each axis is checked against the rank grown by the axes before it, as Paddle's InferShape."""
    _var(x, "unsqueeze")
    axes = _ints(axis, "unsqueeze", "axis")
    rank = _rank(x)
    for a in axes:
        if not -(rank + 1) <= a <= rank:
            raise InvalidArgument(f"unsqueeze: argument 'axis' = {a} is out of range for a tensor of rank {rank} "
                                  f"(expected [{-(rank + 1)}, {rank}])")
        rank += 1
    return _with_xshape("unsqueeze", "unsqueeze2", "unsqueeze2", x, {"axes": axes}, name)


def concat(x, axis=0, name=None):  # no hints: typed callers apply operators to it that mypy cannot see
    xs = list(x)
    for v in xs:
        _var(v, "concat")
    helper = LayerHelper("concat", name=name)
    out = helper.create_variable_for_type_inference(xs[0].dtype)
    helper.append_op(type="concat", inputs={"X": xs}, outputs={"Out": [out]}, attrs={"axis": axis})
    return out


def stack(x: Sequence[Variable], axis: int = 0, name: Optional[str] = None) -> Variable:
    if isinstance(x, Variable) or not isinstance(x, (list, tuple)) or not x:
        raise InvalidArgument(f"stack: argument 'x' must be a non-empty list of Variables, got {type(x).__name__}")
    xs = [_var(v, "stack") for v in x]
    shapes = {tuple(v.shape) for v in xs if v.shape is not None}
    if len(shapes) > 1:
        raise InvalidArgument(f"stack: every input must have the same shape, got {sorted(shapes)}")
    _check_axis("stack", "axis", axis, _rank(xs[0]) + 1)
    helper = LayerHelper("stack", name=name)
    out = helper.create_variable_for_type_inference(xs[0].dtype)
    helper.append_op(type="stack", inputs={"X": xs}, outputs={"Y": [out]}, attrs={"axis": axis})
    return out


def split(x: Variable, num_or_sections: Any, axis: int = 0, name: Optional[str] = None) -> List[Variable]:
    _var(x, "split")
    helper = LayerHelper("split", name=name)
    if isinstance(num_or_sections, int):
        num, sections, n = num_or_sections, [], num_or_sections
    else:
        num, sections, n = 0, list(num_or_sections), len(num_or_sections)
    outs = [helper.create_variable_for_type_inference(x.dtype) for _ in range(n)]
    helper.append_op(type="split", inputs={"X": x}, outputs={"Out": outs},
                     attrs={"num": num, "sections": sections, "axis": axis})
    return outs


def cast(x, dtype):  # no hints, as concat
    _var(x, "cast")
    helper = LayerHelper("cast")
    out = helper.create_variable_for_type_inference(convert_dtype(dtype))
    helper.append_op(type="cast", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"in_dtype": to_vartype(x.dtype), "out_dtype": to_vartype(dtype)})
    return out


def _expand(api: str, x: Variable, shape: Any, name: Optional[str]) -> Variable:
    _var(x, api)
    shape = _ints(shape, api, "shape")
    rank = _rank(x)
    if len(shape) < rank:
        raise InvalidArgument(f"{api}: argument 'shape' {shape} has fewer dims than x {list(x.shape)}")
    for d, s in zip(x.shape[::-1], shape[::-1]):
        if s != -1 and d not in (1, -1, s):
            raise InvalidArgument(f"{api}: x of shape {list(x.shape)} cannot be expanded to shape {shape}")
    helper = LayerHelper("expand", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="expand_v2", inputs={"X": [x]}, outputs={"Out": [out]}, attrs={"shape": shape})
    return out


def expand(x: Variable, shape: Sequence[int], name: Optional[str] = None) -> Variable:
    return _expand("expand", x, shape, name)


def broadcast_to(x: Variable, shape: Sequence[int], name: Optional[str] = None) -> Variable:
    """The same ``expand_v2`` op as :func:`expand` (Paddle's helper is ``expand`` for both)."""
    return _expand("broadcast_to", x, shape, name)


def tile(x: Variable, repeat_times: Sequence[int], name: Optional[str] = None) -> Variable:
    _var(x, "tile")
    repeat_times = _ints(repeat_times, "tile", "repeat_times")
    if any(r <= 0 for r in repeat_times):
        raise InvalidArgument(f"tile: every element of 'repeat_times' must be positive, got {repeat_times}")
    helper = LayerHelper("tile", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="tile", inputs={"X": [x]}, outputs={"Out": [out]}, attrs={"repeat_times": repeat_times})
    return out


def gather(x: Variable, index: Variable, axis: Optional[int] = None, name: Optional[str] = None) -> Variable:
    """``gather`` with attr ``axis`` (0 when None); index must be int32/int64 of rank 0 or 1."""
    _var(x, "gather")
    _var(index, "gather")
    axis = 0 if axis is None else axis
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise InvalidArgument(f"gather: argument 'axis' must be an int, got {axis!r}")
    _check_axis("gather", "axis", axis, _rank(x))
    if index.dtype not in ("int32", "int64"):
        raise InvalidArgument(f"gather: argument 'index' ({index.name!r}) must be int32 or int64, got {index.dtype}")
    if _rank(index) > 1:
        raise InvalidArgument(f"gather: argument 'index' ({index.name!r}) must be 0-D or 1-D, "
                              f"got shape {list(index.shape)}")
    helper = LayerHelper("gather", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="gather", inputs={"X": x, "Index": index}, outputs={"Out": out}, attrs={"axis": axis})
    return out


def gather_nd(x: Variable, index: Variable, name: Optional[str] = None) -> Variable:
    _var(x, "gather_nd")
    _var(index, "gather_nd")
    if index.dtype not in ("int32", "int64"):
        raise InvalidArgument(f"gather_nd: argument 'index' ({index.name!r}) must be int32 or int64, "
                              f"got {index.dtype}")
    if index.shape and index.shape[-1] > _rank(x):
        raise InvalidArgument(f"gather_nd: the last dim of 'index' ({index.shape[-1]}) exceeds the rank of x "
                              f"({_rank(x)})")
    helper = LayerHelper("gather_nd", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="gather_nd", inputs={"X": [x], "Index": [index]}, outputs={"Out": [out]})
    return out


def slice(input: Variable, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int]) -> Variable:
    """``slice`` with ``infer_flags`` all 1 and no ``decrease_axis`` (``x[...]`` is in patch.py)."""
    _var(input, "slice")
    axes = _ints(axes, "slice", "axes")
    starts, ends = _ints(starts, "slice", "starts"), _ints(ends, "slice", "ends")
    if not len(axes) == len(starts) == len(ends):
        raise InvalidArgument(f"slice: axes {axes}, starts {starts} and ends {ends} must have the same length")
    for a in axes:
        _check_axis("slice", "axes", a, _rank(input))
    helper = LayerHelper("slice")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type="slice", inputs={"Input": input}, outputs={"Out": out},
                     attrs={"axes": axes, "starts": starts, "ends": ends, "infer_flags": [1] * len(axes),
                            "decrease_axis": []})
    return out
