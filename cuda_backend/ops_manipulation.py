"""CUDA kernels for refimpl.ops.manipulation_ops: reshape2, transpose2, concat, split, cast, assign.

Mirrors Paddle's GPU shape and copy kernels with the NumPy kernels' memory
behaviour: ``reshape2``'s Out is a view of X (same device buffer), XShape is
a zero-size device array shaped ``[0] + X.shape``; transpose, concat and
split write fresh contiguous arrays through one strided-copy kernel
(``out[i] = x[base + offset(i)]``, offsets from MAXD-padded shapes and
strides). Shape / axis / sections given as tensors are read back to the
host, as Paddle does for them.
"""
import numpy as np

from refimpl.core.dtypes import to_numpy_dtype
from refimpl.core.errors import InvalidArgument
from refimpl.ops.manipulation_ops import _sections, resolve_shape
from refimpl.ops.registry import register_kernel

from . import ew, ops_amp
from .device import contiguous_strides, cuda, dev, device_dtype, empty, flat, launch, padded, to_host


@cuda.jit
def _gather(x, out, base, shape, st):
    """out[i] = x[base + offset of i in ``shape`` read with strides ``st``]."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = x[base + ew.offset(i, shape, st)]


@cuda.jit
def scatter_block(src, out, base, shape, st):
    """out[base + offset of i] = src[i] (writes a block of ``out``)."""
    for i in range(cuda.grid(1), src.size, cuda.gridsize(1)):
        out[base + ew.offset(i, shape, st)] = src[i]


def strided_copy(x, shape, strides, base=0):
    """A contiguous array of ``shape`` read from device array ``x`` at ``base`` with element ``strides``."""
    out = empty(shape, x.dtype)
    launch(_gather, out.size, flat(x), flat(out), base, padded(shape), padded(strides, 0))
    return out


def xshape_of(X):
    return empty((0,) + tuple(X.shape), X.dtype)


def _int_list(tensors):
    return [int(to_host(t).reshape(-1)[0]) for t in tensors]


# ---- reshape2 ---------------------------------------------------------------------------
def reshape2(X, Shape, ShapeTensor, *, shape, need):
    if ShapeTensor:
        shape = _int_list(ShapeTensor)
    elif Shape is not None:
        shape = [int(s) for s in to_host(Shape).reshape(-1)]
    X = dev(X)
    out = X.reshape(resolve_shape(tuple(X.shape), shape))
    return out, (xshape_of(X) if need[1] else None)


def from_xshape(XShape, dOut, *_tensors):
    """X@GRAD of an op that outputs an XShape (reshape2, squeeze2, unsqueeze2, flatten_contiguous_range):
    Out@GRAD viewed in X's shape, XShape's dims after the first (any further inputs are not read)."""
    return dev(dOut).reshape(tuple(XShape.shape[1:]))


register_kernel("reshape2", "cuda", reshape2)
register_kernel("reshape2_grad", "cuda", from_xshape)


# ---- transpose2 -----------------------------------------------------------------------------
def transpose(x, axis):
    x = dev(x)
    nd = len(x.shape)
    if sorted(a % max(nd, 1) for a in axis) != list(range(nd)):
        raise InvalidArgument(f"transpose2: axis {list(axis)} is not a permutation of {nd} dims")
    st = contiguous_strides(tuple(x.shape))
    axis = [a % max(nd, 1) for a in axis]
    return strided_copy(x, tuple(x.shape[a] for a in axis), tuple(st[a] for a in axis))


def transpose2(X, *, axis, need):
    return transpose(X, axis), (xshape_of(X) if need[1] else None)


def transpose2_grad(XShape, dOut, *, axis):
    return transpose(dOut, list(np.argsort(axis)))


register_kernel("transpose2", "cuda", transpose2)
register_kernel("transpose2_grad", "cuda", transpose2_grad)


# ---- concat / split ---------------------------------------------------------------------------
def _axis_of(AxisTensor, axis, ndim):
    if AxisTensor is not None:
        axis = int(to_host(AxisTensor).reshape(-1)[0])
    return axis % ndim


def concat_arrays(xs, axis):
    xs = [dev(x) for x in xs]
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out = empty(tuple(shape), xs[0].dtype)
    st = contiguous_strides(tuple(shape))
    pos = 0
    for x in xs:
        launch(scatter_block, x.size, flat(x), flat(out), pos * st[axis], padded(tuple(x.shape)), padded(st, 0))
        pos += x.shape[axis]
    return out


def split_array(x, sizes, axis):
    x = dev(x)
    st = contiguous_strides(tuple(x.shape))
    outs, pos = [], 0
    for s in sizes:
        shape = tuple(x.shape[:axis]) + (s,) + tuple(x.shape[axis + 1:])
        outs.append(strided_copy(x, shape, st, pos * st[axis]))
        pos += s
    return outs


def concat(X, AxisTensor, *, axis):
    return concat_arrays(X, _axis_of(AxisTensor, axis, len(X[0].shape)))


def concat_grad(X, dOut, AxisTensor, *, axis):
    axis = _axis_of(AxisTensor, axis, len(dOut.shape))
    return split_array(dOut, [x.shape[axis] for x in X], axis)


def split(X, AxisTensor, SectionsTensorList, *, sections, num, axis):
    axis = _axis_of(AxisTensor, axis, len(X.shape))
    if SectionsTensorList:
        sections, num = _int_list(SectionsTensorList), 0
    return split_array(X, _sections(X.shape[axis], sections, num), axis)


register_kernel("concat", "cuda", concat)
register_kernel("concat_grad", "cuda", concat_grad)
register_kernel("split", "cuda", split)


# ---- cast / assign ---------------------------------------------------------------------------------
@ew.functor(1)
def f_copy(DT):
    return lambda x, a, b: x


def cast_to(x, dtype):
    x = dev(x)
    return ew.run1(f_copy, x, out_dtype=np.dtype(dtype))


def cast(X, *, out_dtype):
    dt = to_numpy_dtype(out_dtype)
    if dt in ops_amp.LOW_PRECISION or device_dtype(X) in ops_amp.LOW_PRECISION_ON_DEVICE:
        return ops_amp.cast(X, dt)  # float16 / bfloat16 (bfloat16 is uint16 on the device)
    return cast_to(X, dt)


def assign(X):
    if X is None:
        raise InvalidArgument("assign: input X is empty")
    return cast_to(X, X.dtype)


register_kernel("cast", "cuda", cast)
register_kernel("assign", "cuda", assign)
