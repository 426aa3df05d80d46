"""Indexing ops: range, tril_triu, where, slice, gather, gather_nd (+ grads); shape ops: shape_ops.py.

Each mirrors the Paddle op of the same name (CPU kernels in
``paddle/phi/kernels/cpu/``: ``arange_kernel.cc``, ``tril_triu_kernel.cc``,
``where_kernel.cc`` / ``where_grad_kernel.cc``, ``slice_kernel.cc`` with
``funcs/slice_utils.h``, ``gather_kernel.cc`` / ``gather_grad_kernel.cc`` with
``funcs/gather.h`` / ``scatter.h``, ``gather_nd_kernel.cc`` /
``gather_nd_grad_kernel.cc``), with the slots and attrs of the legacy ops
(``op_compat.yaml``). Semantics:

* ``range`` reads one-element Start / End / Step tensors (Out has Start's
  dtype) and fills ``start, start + step, ...`` by repeated addition, as
  Paddle's CPU kernel does (``np.cumsum`` adds in the same order); the size
  is ``ceil(|end - start| / |step|)``. Step 0 is an InvalidArgument.
* ``where`` wants Condition, X and Y of one shape (Paddle's Python layer
  broadcasts them with ``fill_any_like`` / ``cast`` / ``elementwise_add``
  before the op); its grad reads only Condition and Out@GRAD.
* ``slice`` clamps starts / ends into ``[0, dim]`` after adding ``dim`` to
  negative ones, raises when an end lies before its start, and drops the
  ``decrease_axis`` dims (to a 0-D tensor when all go); StartsTensor /
  EndsTensor (or their lists) override the attrs at run time.
* ``gather`` takes indices along ``axis`` (the Axis tensor overrides it);
  every index must lie in ``[0, dim)``. Its grad scatter-adds Out@GRAD into
  zeros in index order (``np.add.at``), as Paddle's ``ScatterAssignAdd``.
* ``gather_nd`` reads X at the rows named by the last dim of Index
  (negative entries count from the end, anything outside ``[-dim, dim)`` is
  an InvalidArgument); its grad scatter-adds in index order likewise.
"""
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import first
from .grad_maker import simple_grad
from .registry import register_op
from .shape_ops import Dims, int_values, norm_axes  # (importing it registers squeeze2, unsqueeze2, stack, expand_v2)


def _scalar(t):
    return np.asarray(t).reshape(-1)[0]


# ---- range -------------------------------------------------------------------------------
def range_size(start: Any, end: Any, step: Any, op: str = "range") -> int:
    """Paddle's ``GetSize``: the number of elements of ``range(start, end, step)``."""
    if step == 0:
        raise InvalidArgument(f"{op}: Step must not be 0, got {step}")
    if (start < end and step < 0) or (start > end and step > 0):
        raise InvalidArgument(f"{op}: Step {step} points away from End {end} (Start {start})")
    if isinstance(step, (np.integer, int)):
        return int((abs(end - start) + abs(step) - 1) // abs(step))
    return int(np.ceil(abs((end - start) / step)))


@register_op("range", ["Start", "End", "Step"], ["Out"], {},
             infer_shape=lambda ins, attrs: {"Out": ((-1,), first(ins, "Start")[1])})
def range_op(Start, End, Step):
    dt = np.asarray(Start).dtype
    start, end, step = (dt.type(_scalar(t)) for t in (Start, End, Step))
    n = range_size(start, end, step)
    steps = np.full(n, step, dtype=dt)
    if n:
        steps[0] = start
    return np.cumsum(steps, dtype=dt)


# ---- tril_triu -----------------------------------------------------------------------------
def _tril_infer(ins, attrs):
    xs, dt = first(ins, "X")
    if len(xs) < 2:
        raise InvalidArgument(f"tril_triu: X must have at least 2 dims, got shape {list(xs)}")
    return {"Out": (tuple(xs), dt)}


def tril_mask(X: np.ndarray, diagonal: int, lower: bool) -> np.ndarray:
    """np.tril / np.triu of the last two dims (zeros of X's dtype elsewhere)."""
    if X.ndim < 2:
        raise InvalidArgument(f"tril_triu: X must have at least 2 dims, got shape {list(X.shape)}")
    return np.tril(X, diagonal) if lower else np.triu(X, diagonal)


@register_op("tril_triu", ["X"], ["Out"], {"diagonal": 0, "lower": False}, infer_shape=_tril_infer,
             grad=simple_grad("tril_triu_grad", ["Out@GRAD"], ["X@GRAD"]))
def tril_triu(X, *, diagonal, lower):
    return tril_mask(X, diagonal, lower)


@register_op("tril_triu_grad", ["Out@GRAD"], ["X@GRAD"], {"diagonal": 0, "lower": False},
             infer_shape=lambda ins, attrs: {"X@GRAD": first(ins, "Out@GRAD")})
def tril_triu_grad(dOut, *, diagonal, lower):
    return tril_mask(dOut, diagonal, lower)


# ---- where ------------------------------------------------------------------------------------
def check_where_shapes(cshape: Dims, xshape: Dims, yshape: Dims, unknown_ok: bool = False) -> None:
    """Paddle's WhereInferMeta: Condition, X and Y have one shape (-1 matches anything at build time)."""
    for name, s in (("X", xshape), ("Y", yshape)):
        same = len(s) == len(cshape) and all(
            a == b or (unknown_ok and -1 in (a, b)) for a, b in zip(s, cshape))
        if not same:
            raise InvalidArgument(f"where: the shape of {name} {list(s)} differs from the shape of "
                                  f"Condition {list(cshape)}")


def _where_infer(ins, attrs):
    (cs, _), (xs, dt), (ys, _) = first(ins, "Condition"), first(ins, "X"), first(ins, "Y")
    check_where_shapes(tuple(cs), tuple(xs), tuple(ys), unknown_ok=True)
    return {"Out": (tuple(xs), dt)}


@register_op("where", ["Condition", "X", "Y"], ["Out"], {}, infer_shape=_where_infer,
             grad=simple_grad("where_grad", ["Condition", "X", "Y", "Out@GRAD"], ["X@GRAD", "Y@GRAD"]))
def where(Condition, X, Y):
    check_where_shapes(Condition.shape, X.shape, Y.shape)
    return np.where(Condition, X, Y)


def _where_grad_infer(ins, attrs):
    return {g: first(ins, s) for g, s in (("X@GRAD", "X"), ("Y@GRAD", "Y")) if ins.get(s)}


@register_op("where_grad", ["Condition", "X", "Y", "Out@GRAD"], ["X@GRAD", "Y@GRAD"], {},
             infer_shape=_where_grad_infer, no_need_buffer=["X", "Y"])
def where_grad(Condition, X, Y, dOut, *, need):
    zero = dOut.dtype.type(0)
    dx = np.where(Condition, dOut, zero) if need[0] else None
    dy = np.where(Condition, zero, dOut) if need[1] else None
    return dx, dy


# ---- slice --------------------------------------------------------------------------------------
_SLICE_ATTRS = {"axes": [], "starts": [], "ends": [], "infer_flags": [], "decrease_axis": []}
_SLICE_TENSORS = ["StartsTensor?", "EndsTensor?", "StartsTensorList*?", "EndsTensorList*?"]


def slice_bounds(shape: Dims, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                 op: str = "slice") -> List[Tuple[int, Optional[int], Optional[int]]]:
    """[(axis, start, end)] clamped as Paddle's ``CheckAndUpdateSliceAttrs`` (-1 dims left open)."""
    if not len(axes) == len(starts) == len(ends):
        raise InvalidArgument(f"{op}: axes {list(axes)}, starts {list(starts)} and ends {list(ends)} "
                              f"differ in length")
    out = []
    for a, s, e in zip(norm_axes(axes, len(shape), op), starts, ends):
        dim = shape[a]
        if dim == -1:
            out.append((a, None, None))
            continue
        s = min(max(s + dim if s < 0 else s, 0), dim)
        e = min(max(e + dim if e < 0 else e, 0), dim)
        if e < s:
            raise InvalidArgument(f"{op}: end {e} lies before start {s} on axis {a} (dim {dim})")
        out.append((a, s, e))
    return out


def decreased(shape: Dims, decrease_axis: Sequence[int]) -> Tuple[int, ...]:
    return tuple(d for i, d in enumerate(shape) if i not in set(decrease_axis))


def _slice_infer(ins, attrs):
    xs, dt = first(ins, "Input")
    shape = list(xs)
    runtime = any(ins.get(s.rstrip("*?")) for s in _SLICE_TENSORS)
    for a, s, e in slice_bounds(xs, attrs["axes"], attrs["starts"] or [0] * len(attrs["axes"]),
                                attrs["ends"] or [0] * len(attrs["axes"])):
        shape[a] = -1 if runtime or s is None else e - s
    dec = norm_axes(attrs["decrease_axis"], len(xs), "slice", "decrease_axis")
    return {"Out": (decreased(shape, dec), dt)}


def slice_values(shape, axes, starts, ends, StartsTensor, EndsTensor, StartsTensorList, EndsTensorList):
    """The run-time (axis, start, end) list: tensors override the attrs."""
    if StartsTensor is not None or StartsTensorList:
        starts = int_values(StartsTensor, StartsTensorList)
    if EndsTensor is not None or EndsTensorList:
        ends = int_values(EndsTensor, EndsTensorList)
    return slice_bounds(tuple(shape), axes, starts, ends)


def _index(ndim, bounds):
    idx = [slice(None)] * ndim
    for a, s, e in bounds:
        idx[a] = slice(s, e)
    return tuple(idx)


def decrease_shape(shape: Dims, decrease_axis: Sequence[int]) -> Tuple[int, ...]:
    """The sliced shape without the decrease_axis dims, each of which must be 1."""
    dec = norm_axes(decrease_axis, len(shape), "slice", "decrease_axis")
    for a in dec:
        if shape[a] != 1:
            raise InvalidArgument(f"slice: decrease_axis {a} has size {shape[a]} after slicing, not 1")
    return decreased(shape, dec)


@register_op("slice", ["Input"] + _SLICE_TENSORS, ["Out"], dict(_SLICE_ATTRS), infer_shape=_slice_infer,
             grad=simple_grad("slice_grad", ["Input"] + [s.rstrip("*?") for s in _SLICE_TENSORS]
                              + ["Out@GRAD"], ["Input@GRAD"]))
def slice_op(Input, StartsTensor, EndsTensor, StartsTensorList, EndsTensorList, *, axes, starts, ends,
             decrease_axis):
    bounds = slice_values(Input.shape, axes, starts, ends, StartsTensor, EndsTensor, StartsTensorList,
                          EndsTensorList)
    out = np.array(Input[_index(Input.ndim, bounds)])  # a copy, as Paddle's kernel writes a new tensor
    return out.reshape(decrease_shape(out.shape, decrease_axis))


@register_op("slice_grad", ["Input"] + _SLICE_TENSORS + ["Out@GRAD"], ["Input@GRAD"], dict(_SLICE_ATTRS),
             infer_shape=lambda ins, attrs: {"Input@GRAD": first(ins, "Input")}, no_need_buffer=["Input"])
def slice_grad(Input, StartsTensor, EndsTensor, StartsTensorList, EndsTensorList, dOut, *, axes, starts,
               ends, decrease_axis):
    """Input is a shape-only meta (no need buffer): zeros of its shape with Out@GRAD in the slice."""
    bounds = slice_values(Input.shape, axes, starts, ends, StartsTensor, EndsTensor, StartsTensorList,
                          EndsTensorList)
    dx = np.zeros(Input.shape, dtype=dOut.dtype)
    part = dx[_index(len(Input.shape), bounds)]
    part[...] = dOut.reshape(part.shape)
    return dx


# ---- gather -------------------------------------------------------------------------------------
def _gather_axis(Axis, axis, rank):
    if Axis is not None:
        axis = int(_scalar(Axis))
    return norm_axes([axis], rank, "gather", "axis")[0]


def _gather_infer(ins, attrs):
    (xs, dt), (ids, _) = first(ins, "X"), first(ins, "Index")
    if len(ids) > 1:
        raise InvalidArgument(f"gather: Index must be 1-D or 0-D, got shape {list(ids)}")
    if ins.get("Axis"):
        return {"Out": ((-1,) * (len(xs) - 1 + len(ids)), dt)}
    a = norm_axes([attrs["axis"]], len(xs), "gather", "axis")[0]
    return {"Out": (tuple(xs[:a]) + tuple(ids) + tuple(xs[a + 1:]), dt)}


def checked_index(Index: Any, dim: int, op: str = "gather") -> np.ndarray:
    """Index as an int64 array; every entry in [0, dim), else an InvalidArgument naming the first bad one."""
    idx = np.asarray(Index)
    if idx.ndim > 1:
        raise InvalidArgument(f"{op}: Index must be 1-D or 0-D, got shape {list(idx.shape)}")
    bad = np.flatnonzero((idx < 0) | (idx >= dim))
    if bad.size:
        raise InvalidArgument(f"{op}: Index value {int(idx.reshape(-1)[bad[0]])} at position {int(bad[0])} "
                              f"is out of range [0, {dim})")
    return idx.astype(np.int64, copy=False)


@register_op("gather", ["X", "Index", "Axis?"], ["Out"], {"axis": 0}, infer_shape=_gather_infer,
             grad=simple_grad("gather_grad", ["X", "Index", "Out@GRAD", "Axis"], ["X@GRAD"]))
def gather(X, Index, Axis, *, axis):
    a = _gather_axis(Axis, axis, X.ndim)
    return np.take(X, checked_index(Index, X.shape[a]), axis=a)


@register_op("gather_grad", ["X", "Index", "Out@GRAD", "Axis?"], ["X@GRAD"], {"axis": 0},
             infer_shape=lambda ins, attrs: {"X@GRAD": first(ins, "X")}, no_need_buffer=["X"])
def gather_grad(X, Index, dOut, Axis, *, axis):
    a = _gather_axis(Axis, axis, len(X.shape))
    idx = checked_index(Index, X.shape[a])
    dx = np.zeros(X.shape, dtype=dOut.dtype)
    g = dOut if idx.ndim else np.expand_dims(dOut, a)
    np.add.at(np.moveaxis(dx, a, 0), idx.reshape(-1), np.moveaxis(g, a, 0))
    return dx


# ---- gather_nd ------------------------------------------------------------------------------------
def _gather_nd_infer(ins, attrs):
    (xs, dt), (ids, _) = first(ins, "X"), first(ins, "Index")
    if not ids:
        raise InvalidArgument("gather_nd: Index must have at least 1 dim, got a 0-D tensor")
    if ids[-1] == -1:
        return {}  # the rank of Out is not known before run time
    if ids[-1] > len(xs):
        raise InvalidArgument(f"gather_nd: Index's last dim {ids[-1]} exceeds the rank {len(xs)} of X")
    return {"Out": (tuple(ids[:-1]) + tuple(xs[ids[-1]:]), dt)}


def nd_rows(Index: Any, shape: Dims) -> np.ndarray:
    """Index [..., k] as flat row numbers into X viewed as (prod(shape[:k]), rest); negatives wrap.

    Every index must lie in [-dim, dim) of its dim, else an InvalidArgument names the first bad one.
    """
    idx = np.asarray(Index).astype(np.int64)
    if idx.ndim == 0:
        raise InvalidArgument("gather_nd: Index must have at least 1 dim, got a 0-D tensor")
    k = idx.shape[-1]
    if k > len(shape):
        raise InvalidArgument(f"gather_nd: Index's last dim {k} exceeds the rank {len(shape)} of X")
    dims = np.array(shape[:k], np.int64)
    bad = np.flatnonzero(((idx < -dims) | (idx >= dims)).reshape(-1))
    if bad.size:
        raise InvalidArgument(f"gather_nd: Index value {int(idx.reshape(-1)[bad[0]])} (flat position "
                              f"{int(bad[0])}) is out of range for X's dims {list(shape[:k])}")
    idx = np.where(idx < 0, idx + dims, idx)
    if k == 0:
        return np.zeros(idx.shape[:-1], np.int64)
    return np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), tuple(int(d) for d in shape[:k]))


def _rows_view(shape: Dims, k: int) -> Tuple[int, ...]:
    rest = tuple(shape[k:])
    return (int(np.prod(shape[:k], dtype=np.int64)),) + rest


@register_op("gather_nd", ["X", "Index"], ["Out"], {}, infer_shape=_gather_nd_infer,
             grad=simple_grad("gather_nd_grad", ["X", "Index", "Out@GRAD"], ["X@GRAD"]))
def gather_nd(X, Index):
    rows = nd_rows(Index, X.shape)
    k = np.asarray(Index).shape[-1]
    return X.reshape(_rows_view(X.shape, k))[rows]


@register_op("gather_nd_grad", ["X", "Index", "Out@GRAD"], ["X@GRAD"], {},
             infer_shape=lambda ins, attrs: {"X@GRAD": first(ins, "X")}, no_need_buffer=["X"])
def gather_nd_grad(X, Index, dOut):
    """Out@GRAD scatter-added into zeros in index order (np.add.at), as Paddle's ScatterNdAdd."""
    rows = nd_rows(Index, X.shape)
    k = np.asarray(Index).shape[-1]
    dx = np.zeros(_rows_view(X.shape, k), dtype=dOut.dtype)
    np.add.at(dx, rows.reshape(-1), dOut.reshape((rows.size,) + dx.shape[1:]))
    return dx.reshape(X.shape)
