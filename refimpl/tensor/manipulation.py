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
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

from .math import check_variable

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
    check_variable(x, api)
    helper = LayerHelper(helper_name, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    xshape = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs=inputs or {"X": [x]}, outputs={"Out": [out], "XShape": [xshape]},
                     attrs=attrs)
    return out


def reshape(x: Variable, shape: Sequence[int], name: Optional[str] = None) -> Variable:
    check_variable(x, "reshape")
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
        raise InvalidArgument(f"reshape: shape must be a list of ints, got {shape!r}")
    return _with_xshape("reshape", "reshape2", "reshape2", x, {"shape": list(shape)}, name,
                        inputs={"X": x})


def transpose(x: Variable, perm: Sequence[int], name: Optional[str] = None) -> Variable:
    check_variable(x, "transpose")
    if sorted(perm) != list(range(len(x.shape))):
        raise InvalidArgument(f"transpose: perm {list(perm)} is not a permutation of {len(x.shape)} dims")
    return _with_xshape("transpose", "transpose", "transpose2", x, {"axis": list(perm)}, name)


def flatten(x: Variable, start_axis: int = 0, stop_axis: int = -1, name: Optional[str] = None) -> Variable:
    """``flatten_contiguous_range`` with both axes made non-negative (helper ``flatten``)."""
    check_variable(x, "flatten")
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
    check_variable(x, "squeeze")
    axes = [] if axis is None else _ints(axis, "squeeze", "axis")
    for a in axes:
        _check_axis("squeeze", "axis", a, _rank(x))
    return _with_xshape("squeeze", "squeeze", "squeeze2", x, {"axes": axes}, name)


def unsqueeze(x: Variable, axis: Any, name: Optional[str] = None) -> Variable:
    """``unsqueeze2``; each axis is checked against the rank grown by the axes before it, as Paddle's InferShape."""
    check_variable(x, "unsqueeze")
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
        check_variable(v, "concat")
    helper = LayerHelper("concat", name=name)
    out = helper.create_variable_for_type_inference(xs[0].dtype)
    helper.append_op(type="concat", inputs={"X": xs}, outputs={"Out": [out]}, attrs={"axis": axis})
    return out


def stack(x: Sequence[Variable], axis: int = 0, name: Optional[str] = None) -> Variable:
    if isinstance(x, Variable) or not isinstance(x, (list, tuple)) or not x:
        raise InvalidArgument(f"stack: argument 'x' must be a non-empty list of Variables, got {type(x).__name__}")
    xs = [check_variable(v, "stack") for v in x]
    shapes = {tuple(v.shape) for v in xs if v.shape is not None}
    if len(shapes) > 1:
        raise InvalidArgument(f"stack: every input must have the same shape, got {sorted(shapes)}")
    _check_axis("stack", "axis", axis, _rank(xs[0]) + 1)
    helper = LayerHelper("stack", name=name)
    out = helper.create_variable_for_type_inference(xs[0].dtype)
    helper.append_op(type="stack", inputs={"X": xs}, outputs={"Y": [out]}, attrs={"axis": axis})
    return out


def split(x: Variable, num_or_sections: Any, axis: int = 0, name: Optional[str] = None) -> List[Variable]:
    """``split`` into ``num`` equal parts or the given ``sections`` (one may be -1) along ``axis``.

    As 2.6.2's static branch: a negative axis is stored as ``axis + rank``; a known dim must be
    divisible by ``num`` (> 0), or match the sections (at most one -1, no more sections than the dim).
    """
    check_variable(x, "split")
    if isinstance(axis, Variable):
        raise Unimplemented(f"split: axis given as the Variable {axis.name!r} (AxisTensor) is not built")
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise InvalidArgument(f"split: argument 'axis' must be an int, got {axis!r}")
    rank = _rank(x)
    _check_axis("split", "axis", axis, rank)
    axis = axis + rank if axis < 0 else axis
    size = x.shape[axis]
    if isinstance(num_or_sections, int) and not isinstance(num_or_sections, bool):
        num, sections = num_or_sections, []
        if num <= 0:
            raise InvalidArgument(f"split: num_or_sections must be > 0, got {num} (x {x.name!r})")
        if size > 0 and size % num:
            raise InvalidArgument(f"split: dim {axis} of x {x.name!r} (shape {list(x.shape)}) is not divisible by "
                                  f"num_or_sections = {num}")
    elif isinstance(num_or_sections, (list, tuple)):
        num, sections = 0, _ints(list(num_or_sections), "split", "num_or_sections")
        _check_sections(x, axis, sections)
    else:
        raise InvalidArgument(f"split: num_or_sections must be an int, a list or a tuple, got {num_or_sections!r} "
                              f"(x {x.name!r})")
    helper = LayerHelper("split", name=name)
    outs = [helper.create_variable_for_type_inference(x.dtype) for _ in range(num or len(sections))]
    helper.append_op(type="split", inputs={"X": x}, outputs={"Out": outs},
                     attrs={"num": num, "sections": sections, "axis": axis})
    return outs


def _check_sections(x: Variable, axis: int, sections: List[int]) -> None:
    """Paddle's split checks of a sections list against dim ``axis`` of x (skipped for an unknown dim)."""
    size = x.shape[axis]
    where = f"dim {axis} of x {x.name!r} (shape {list(x.shape)})"
    if sections.count(-1) > 1:
        raise InvalidArgument(f"split: only one of num_or_sections {sections} may be -1 ({where})")
    if size < 0:
        return
    if len(sections) > size:
        raise InvalidArgument(f"split: {len(sections)} sections {sections} are more than {where}")
    known = sum(v for v in sections if v != -1)
    if -1 in sections and known >= size:
        raise InvalidArgument(f"split: sections {sections} other than the -1 must add up to less than {where}")
    if -1 not in sections and known != size:
        raise InvalidArgument(f"split: sections {sections} must add up to {where}")


def cast(x, dtype):  # no hints, as concat
    check_variable(x, "cast")
    helper = LayerHelper("cast")
    out = helper.create_variable_for_type_inference(convert_dtype(dtype))
    helper.append_op(type="cast", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"in_dtype": to_vartype(x.dtype), "out_dtype": to_vartype(dtype)})
    return out


def _expand(api: str, x: Variable, shape: Any, name: Optional[str]) -> Variable:
    check_variable(x, api)
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
    check_variable(x, "tile")
    repeat_times = _ints(repeat_times, "tile", "repeat_times")
    if any(r <= 0 for r in repeat_times):
        raise InvalidArgument(f"tile: every element of 'repeat_times' must be positive, got {repeat_times}")
    helper = LayerHelper("tile", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="tile", inputs={"X": [x]}, outputs={"Out": [out]}, attrs={"repeat_times": repeat_times})
    return out


def gather(x: Variable, index: Variable, axis: Optional[int] = None, name: Optional[str] = None) -> Variable:
    """``gather`` with attr ``axis`` (0 when None); index must be int32/int64 of rank 0 or 1."""
    check_variable(x, "gather")
    check_variable(index, "gather")
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
    check_variable(x, "gather_nd")
    check_variable(index, "gather_nd")
    if index.dtype not in ("int32", "int64"):
        raise InvalidArgument(f"gather_nd: argument 'index' ({index.name!r}) must be int32 or int64, "
                              f"got {index.dtype}")
    # (Index's last dim against X's rank: the op's infer-shape, refimpl/ops/index_ops.py)
    helper = LayerHelper("gather_nd", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="gather_nd", inputs={"X": [x], "Index": [index]}, outputs={"Out": [out]})
    return out


def slice(input: Variable, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int]) -> Variable:
    """``slice`` with ``infer_flags`` all 1 and no ``decrease_axis`` (``x[...]`` is in patch.py)."""
    check_variable(input, "slice")
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
