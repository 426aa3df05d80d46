"""Shape and copy ops: reshape2, transpose2, concat, split, cast, assign.

Each mirrors the Paddle op of the same name, with its grad op as Paddle
builds it: ``reshape2_grad`` and ``transpose2_grad`` read only ``XShape``
(for the input's shape) and ``Out@GRAD``; ``concat_grad`` reads ``X`` (no
need buffer: only the shapes) and ``Out@GRAD`` and writes ``@EMPTY@`` for an
input that needs no gradient; split's grad is a ``concat`` carrying split's
attrs; cast's grad is a cast back; assign's grad is an assign.

Differences from Paddle: ``XShape`` (whose var shape is ``[0] + x.shape``)
is a zero-size array of that shape rather than a tensor with no memory, and
``reshape2``'s ``Out`` is a NumPy view of ``X`` (Paddle shares the buffer
too). ``transpose2`` and ``split`` return fresh contiguous arrays, as Paddle
does. The required attrs ``transpose2.axis`` and ``cast.in_dtype`` /
``cast.out_dtype`` have no default in Paddle; here they default to ``[]``
and float32.
"""
import functools
import operator

import numpy as np

from refimpl.core.bfloat16 import BFLOAT16, cast_to_bfloat16
from refimpl.core.dtypes import VARTYPE_TO_NAME, to_numpy_dtype
from refimpl.core.errors import InvalidArgument

from .common import first
from .grad_maker import simple_grad
from .registry import EMPTY_VAR_NAME, register_op

_prod = functools.partial(functools.reduce, operator.mul)


def _int_list(tensors):
    return [int(np.asarray(t).reshape(-1)[0]) for t in tensors]


# ---- reshape2 -----------------------------------------------------------------
def resolve_shape(in_shape, shape):
    """Paddle's reshape rule: 0 copies the input dim at that index, one -1 is inferred."""
    out = [in_shape[i] if s == 0 else int(s) for i, s in enumerate(shape)]
    if out.count(-1) > 1:
        raise InvalidArgument(f"reshape: only one dim may be -1, got shape {list(shape)}")
    total = _prod(in_shape, 1)
    if -1 in out:
        known = _prod((d for d in out if d != -1), 1)
        if known == 0 or total % known:
            raise InvalidArgument(f"reshape: cannot reshape {list(in_shape)} into {list(shape)}")
        out[out.index(-1)] = total // known
    if _prod(out, 1) != total:
        raise InvalidArgument(f"reshape: cannot reshape {list(in_shape)} into {list(shape)}")
    return tuple(out)


def _reshape_infer(ins, attrs):
    xs, dt = first(ins, "X")
    xs = tuple(xs)
    shape = list(attrs["shape"])
    if ins.get("Shape") and not ins.get("ShapeTensor"):
        shape = [-1] * first(ins, "Shape")[0][0]
        out = tuple(shape)
    elif ins.get("ShapeTensor") and not shape:
        out = (-1,) * len(ins["ShapeTensor"])
    elif -1 in xs or ins.get("ShapeTensor"):
        out = tuple(xs[i] if s == 0 else s for i, s in enumerate(shape))
    else:
        out = resolve_shape(xs, shape)
    return {"Out": (out, dt), "XShape": ((0,) + xs, dt)}


def xshape_of(X):
    """The XShape value: a zero-size array whose shape is [0] + X.shape."""
    return np.empty((0,) + tuple(X.shape), dtype=X.dtype)


@register_op("reshape2", ["X", "Shape?", "ShapeTensor*?"], ["Out", "XShape"],
             {"shape": [], "use_quantizer": False, "mkldnn_data_type": "float32"},
             infer_shape=_reshape_infer, inplace={"Out": "X"},
             grad=simple_grad("reshape2_grad", ["XShape", "Out@GRAD"], ["X@GRAD"]))
def reshape2(X, Shape, ShapeTensor, *, shape, need):
    if ShapeTensor:
        shape = _int_list(ShapeTensor)
    elif Shape is not None:
        shape = [int(s) for s in np.asarray(Shape).reshape(-1)]
    out = X.reshape(resolve_shape(X.shape, shape))
    return out, (xshape_of(X) if need[1] else None)


def from_xshape(ins, attrs):
    """infer_shape of an XShape grad: ``X@GRAD`` is shaped ``XShape[1:]``, typed like ``Out@GRAD``."""
    xshape, dt = first(ins, "XShape")
    return {"X@GRAD": (tuple(xshape[1:]), first(ins, "Out@GRAD")[1])}


def xshape_grad(XShape, dOut):
    """The kernel of an XShape grad: ``Out@GRAD`` viewed in the input's shape."""
    return dOut.reshape(XShape.shape[1:])


@register_op("reshape2_grad", ["XShape", "Out@GRAD"], ["X@GRAD"],
             {"shape": [], "use_quantizer": False, "mkldnn_data_type": "float32"},
             infer_shape=from_xshape, inplace={"X@GRAD": "Out@GRAD"})
def reshape2_grad(XShape, dOut):
    return xshape_grad(XShape, dOut)


# ---- transpose2 --------------------------------------------------------------
def _transpose_infer(ins, attrs):
    xs, dt = first(ins, "X")
    return {"Out": (tuple(xs[a] for a in attrs["axis"]), dt), "XShape": ((0,) + tuple(xs), dt)}


@register_op("transpose2", ["X"], ["Out", "XShape"], {"axis": []}, infer_shape=_transpose_infer,
             grad=simple_grad("transpose2_grad", ["XShape", "Out@GRAD"], ["X@GRAD"]))
def transpose2(X, *, axis, need):
    if sorted(a % max(X.ndim, 1) for a in axis) != list(range(X.ndim)):
        raise InvalidArgument(f"transpose2: axis {list(axis)} is not a permutation of {X.ndim} dims")
    out = np.ascontiguousarray(np.transpose(X, axis))
    return out, (xshape_of(X) if need[1] else None)


@register_op("transpose2_grad", ["XShape", "Out@GRAD"], ["X@GRAD"], {"axis": []},
             infer_shape=from_xshape)
def transpose2_grad(XShape, dOut, *, axis):
    return np.ascontiguousarray(np.transpose(dOut, np.argsort(axis)))


# ---- concat ----------------------------------------------------------------------
def _concat_infer(ins, attrs):
    shapes = [tuple(s) for s, _ in ins["X"]]
    rank = len(shapes[0])
    axis = attrs["axis"] % rank if rank else 0
    if ins.get("AxisTensor"):
        return {"Out": ((-1,) * rank, ins["X"][0][1])}
    out = []
    for i in range(rank):
        dims = [s[i] for s in shapes]
        if i == axis:
            out.append(-1 if -1 in dims else sum(dims))
        else:
            out.append(next((d for d in dims if d != -1), -1))
    return {"Out": (tuple(out), ins["X"][0][1])}


def _axis_of(AxisTensor, axis, ndim):
    if AxisTensor is not None:
        axis = int(np.asarray(AxisTensor).reshape(-1)[0])
    return axis % ndim


def _concat_grad_maker(g):
    names = [n + "@GRAD" for n in g.input("X")]
    if all(n in g.no_grad_set for n in names):
        return []
    outs = [EMPTY_VAR_NAME if n in g.no_grad_set else n for n in names]
    return [g.op("concat_grad", {"X": g.input("X"), "Out@GRAD": g.output_grad("Out"),
                                 "AxisTensor": g.input("AxisTensor")}, {"X@GRAD": outs})]


@register_op("concat", ["X*", "AxisTensor?"], ["Out"], {"axis": 0}, infer_shape=_concat_infer,
             grad=_concat_grad_maker)
def concat(X, AxisTensor, *, axis):
    return np.concatenate(X, axis=_axis_of(AxisTensor, axis, X[0].ndim))


@register_op("concat_grad", ["X*", "Out@GRAD", "AxisTensor?"], ["X@GRAD*"], {"axis": 0},
             infer_shape=lambda ins, attrs: {"X@GRAD": list(ins["X"])}, no_need_buffer=["X"])
def concat_grad(X, dOut, AxisTensor, *, axis):
    """X holds arrays or shape-only metas (no need buffer); only their shapes are read."""
    axis = _axis_of(AxisTensor, axis, dOut.ndim)
    bounds = np.cumsum([x.shape[axis] for x in X])[:-1]
    return [np.ascontiguousarray(p) for p in np.split(dOut, bounds, axis=axis)]


# ---- split -----------------------------------------------------------------------
def _sections(dim, sections, num):
    """Sizes of the pieces: ``num`` equal ones, or ``sections`` with one -1 inferred."""
    if num > 0:
        if dim != -1 and dim % num:
            raise InvalidArgument(f"split: dim {dim} is not divisible by num {num}")
        return [-1 if dim == -1 else dim // num] * num
    sizes = [int(s) for s in sections]
    if sizes.count(-1) > 1:
        raise InvalidArgument(f"split: only one section may be -1, got {sizes}")
    if -1 in sizes and dim != -1:
        sizes[sizes.index(-1)] = dim - sum(s for s in sizes if s != -1)
    if dim != -1 and sum(sizes) != dim:
        raise InvalidArgument(f"split: sections {list(sections)} do not add up to dim {dim}")
    return sizes


def _split_infer(ins, attrs):
    xs, dt = first(ins, "X")
    n = attrs["num"] or len(attrs["sections"])
    if ins.get("AxisTensor"):
        return {"Out": [((-1,) * len(xs), dt)] * n}
    axis = attrs["axis"] % len(xs)
    if ins.get("SectionsTensorList") or xs[axis] == -1:
        sizes = [-1] * n
    else:
        sizes = _sections(xs[axis], attrs["sections"], attrs["num"])
    return {"Out": [(tuple(xs[:axis]) + (s,) + tuple(xs[axis + 1:]), dt) for s in sizes]}


def _split_grad_maker(g):
    if not g.input_grad("X"):
        return []
    return [g.op("concat", {"X": g.output_grad("Out"), "AxisTensor": g.input("AxisTensor")},
                 {"Out": g.input_grad("X")})]


@register_op("split", ["X", "AxisTensor?", "SectionsTensorList*?"], ["Out*"],
             {"sections": [], "num": 0, "axis": 0}, infer_shape=_split_infer, grad=_split_grad_maker)
def split(X, AxisTensor, SectionsTensorList, *, sections, num, axis):
    axis = _axis_of(AxisTensor, axis, X.ndim)
    if SectionsTensorList:
        sections, num = _int_list(SectionsTensorList), 0
    sizes = _sections(X.shape[axis], sections, num)
    return [np.ascontiguousarray(p) for p in np.split(X, np.cumsum(sizes)[:-1], axis=axis)]


# ---- cast and assign ----------------------------------------------------------------
def _cast_grad_maker(g):
    a = g.attrs()
    return [g.op("cast", {"X": g.output_grad("Out")}, {"Out": g.input_grad("X")},
                 g.attrs(in_dtype=a["out_dtype"], out_dtype=a["in_dtype"]))]


@register_op("cast", ["X"], ["Out"], {"in_dtype": 5, "out_dtype": 5},
             infer_shape=lambda ins, attrs: {"Out": (tuple(first(ins, "X")[0]),
                                                     VARTYPE_TO_NAME[attrs["out_dtype"]])},
             grad=_cast_grad_maker)
def cast(X, *, out_dtype):
    """To bfloat16: round to nearest even, NaN as Paddle writes it (``core/bfloat16.py``)."""
    dt = to_numpy_dtype(out_dtype)
    return cast_to_bfloat16(X) if dt == BFLOAT16 else np.asarray(X).astype(dt)


def _assign_grad_maker(g):
    return [g.op("assign", {"X": g.output_grad("Out")}, {"Out": g.input_grad("X")})]


@register_op("assign", ["X?"], ["Out"], {},
             infer_shape=lambda ins, attrs: {"Out": first(ins, "X")} if ins.get("X") else {},
             grad=_assign_grad_maker, inplace={"Out": "X"})
def assign(X):
    if X is None:
        raise InvalidArgument("assign: input X is empty")
    return np.array(X, copy=True)

