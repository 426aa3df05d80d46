"""CUDA kernels for ``refimpl/ops/index_ops.py`` and ``shape_ops.py`` (tile, gather_nd, shape included).

Mirrors Paddle's GPU kernels of the same names (``paddle/phi/kernels/gpu/``
``arange_kernel.cu``, ``tril_triu_kernel.cu``, ``where_kernel.cu``,
``gather_kernel.cu``; ``slice``, ``stack`` and ``expand`` through strided
copies), with the NumPy kernels' numbers and checks. Differences from
Paddle: ``range`` fills its output in one thread by repeated addition (the
CPU kernel's order; Paddle's GPU kernel computes ``start + i * step``);
``gather_grad`` (and ``gather_nd_grad``, through the same kernel with one
outer row) gives each element of X@GRAD to one thread that adds the
matching rows of Out@GRAD in index order (``np.add.at``'s order) instead of
Paddle's atomic adds; the Start / End / Step, Starts / Ends, Axes, Shape and
Index tensors are read back to the host for the size computations and the
bounds check. ``squeeze2`` / ``unsqueeze2`` outputs are views of X, as on
the CPU. ``shape`` copies Input's dims from the host (Paddle's GPU kernel
writes them to host memory).
"""
import numpy as np

from refimpl.core.errors import InvalidArgument
from refimpl.ops import index_ops as cpu
from refimpl.ops import shape_ops as cpu_shape
from refimpl.ops.registry import register_kernel

from . import ew
from .device import (bcast_strides, contiguous_strides, cuda, dev, empty, flat, launch, launch_config, padded,
                     scalar_of, to_device, to_host)
from .ops_creation import copy_array, full, host_or_none
from .ops_manipulation import concat_arrays, from_xshape, scatter_block, split_array, strided_copy, xshape_of


def _hosts(ts):
    return [to_host(t) for t in ts or []]


# ---- range --------------------------------------------------------------------------------------
@cuda.jit
def _range(out, start, step):
    """One thread adds ``step`` over and over, as the CPU kernel (and np.cumsum) does."""
    if cuda.grid(1) == 0:
        v = start
        for i in range(out.size):
            out[i] = v
            v += step


def range_op(Start, End, Step):
    dt = np.dtype(Start.dtype)
    start, end, step = (scalar_of(t, dt) for t in (Start, End, Step))
    out = empty((cpu.range_size(start, end, step),), dt)
    if out.size:
        launch_config(_range, 1, 1, out, start, step)  # one thread: the additions are sequential
    return out


register_kernel("range", "cuda", range_op)


# ---- tril_triu -------------------------------------------------------------------------------------
@cuda.jit
def _tril(x, out, h, w, diagonal, lower):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        d = i % w - (i // w) % h  # column - row
        if (lower and d <= diagonal) or (not lower and d >= diagonal):
            out[i] = x[i]
        else:
            out[i] = 0


def tril_mask(x, diagonal, lower):
    x = dev(x)
    if len(x.shape) < 2:
        cpu.tril_mask(np.empty(x.shape), diagonal, lower)  # raises the CPU kernel's error
    out = empty(x.shape, x.dtype)
    launch(_tril, out.size, flat(x), flat(out), tuple(x.shape)[-2], tuple(x.shape)[-1], diagonal, bool(lower))
    return out


def tril_triu(X, *, diagonal, lower):
    return tril_mask(X, diagonal, lower)


def tril_triu_grad(dOut, *, diagonal, lower):
    return tril_mask(dOut, diagonal, lower)


register_kernel("tril_triu", "cuda", tril_triu)
register_kernel("tril_triu_grad", "cuda", tril_triu_grad)


# ---- where -----------------------------------------------------------------------------------------
@ew.functor(3)
def f_where(DT):
    return lambda x, y, c, a, b: x if c else y


@ew.functor(2)
def f_keep_if(DT):
    return lambda g, c, a, b: g if c else a


@ew.functor(2)
def f_keep_unless(DT):
    return lambda g, c, a, b: a if c else g


def where(Condition, X, Y):
    cpu.check_where_shapes(tuple(Condition.shape), tuple(X.shape), tuple(Y.shape))
    return ew.run_n(f_where, [X, Y, Condition])


def where_grad(Condition, X, Y, dOut, *, need):
    dx = ew.run_n(f_keep_if, [dOut, Condition]) if need[0] else None
    dy = ew.run_n(f_keep_unless, [dOut, Condition]) if need[1] else None
    return dx, dy


register_kernel("where", "cuda", where)
register_kernel("where_grad", "cuda", where_grad)


# ---- slice ----------------------------------------------------------------------------------------
def _slice_block(shape, axes, starts, ends, tensors):
    """(block shape, flat offset of its first element) of the slice of a C-contiguous ``shape``."""
    bounds = cpu.slice_values(shape, axes, starts, ends, host_or_none(tensors[0]), host_or_none(tensors[1]),
                              _hosts(tensors[2]), _hosts(tensors[3]))
    st = contiguous_strides(shape)
    block, base = list(shape), 0
    for a, s, e in bounds:
        block[a], base = e - s, base + s * st[a]
    return tuple(block), base, st


def slice_op(Input, StartsTensor, EndsTensor, StartsTensorList, EndsTensorList, *, axes, starts, ends,
             decrease_axis):
    x = dev(Input)
    block, base, st = _slice_block(tuple(x.shape), axes, starts, ends,
                                   (StartsTensor, EndsTensor, StartsTensorList, EndsTensorList))
    out_shape = cpu.decrease_shape(block, decrease_axis)
    return strided_copy(x, block, st, base).reshape(out_shape)


def slice_grad(Input, StartsTensor, EndsTensor, StartsTensorList, EndsTensorList, dOut, *, axes, starts,
               ends, decrease_axis):
    g = dev(dOut)
    shape = tuple(Input.shape)
    block, base, st = _slice_block(shape, axes, starts, ends,
                                   (StartsTensor, EndsTensor, StartsTensorList, EndsTensorList))
    dx = full(shape, 0, g.dtype)
    launch(scatter_block, g.size, flat(g), flat(dx), base, padded(block), padded(st, 0))
    return dx


register_kernel("slice", "cuda", slice_op)
register_kernel("slice_grad", "cuda", slice_grad)


# ---- gather ------------------------------------------------------------------------------------------
@cuda.jit
def _gather_rows(x, idx, out, dim, n, inner):
    """out viewed (outer, n, inner) = x viewed (outer, dim, inner) at rows idx."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        k = i % inner
        o = i // (inner * n)
        out[i] = x[(o * dim + idx[(i // inner) % n]) * inner + k]


@cuda.jit
def _gather_rows_grad(g, idx, dx, dim, n, inner, zero):
    """dx viewed (outer, dim, inner): the rows of g whose index is this row, added in index order."""
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        k = i % inner
        t = (i // inner) % dim
        o = i // (inner * dim)
        acc = zero
        for j in range(n):
            if idx[j] == t:
                acc += g[(o * n + j) * inner + k]
        dx[i] = acc


def _gather_geometry(shape, Index, Axis, axis):
    a = cpu._gather_axis(host_or_none(Axis), axis, len(shape))
    idx = cpu.checked_index(to_host(Index), shape[a])
    inner = 1
    for d in shape[a + 1:]:
        inner *= d
    return a, idx, inner


def gather(X, Index, Axis, *, axis):
    x = dev(X)
    shape = tuple(x.shape)
    a, idx, inner = _gather_geometry(shape, Index, Axis, axis)
    out = empty(shape[:a] + idx.shape + shape[a + 1:], x.dtype)
    launch(_gather_rows, out.size, flat(x), flat(dev(idx)), flat(out), shape[a], idx.size, inner)
    return out


def gather_grad(X, Index, dOut, Axis, *, axis):
    g = dev(dOut)
    shape = tuple(X.shape)
    a, idx, inner = _gather_geometry(shape, Index, Axis, axis)
    dx = empty(shape, g.dtype)
    launch(_gather_rows_grad, dx.size, flat(g), flat(dev(idx)), flat(dx), shape[a], idx.size, inner,
           g.dtype.type(0))
    return dx


register_kernel("gather", "cuda", gather)
register_kernel("gather_grad", "cuda", gather_grad)


# ---- squeeze2 / unsqueeze2 ------------------------------------------------------------------------
def squeeze2(X, *, axes, need):
    x = dev(X)
    return x.reshape(cpu_shape.squeeze_shape(tuple(x.shape), axes)), (xshape_of(x) if need[1] else None)


def unsqueeze2(X, AxesTensor, AxesTensorList, *, axes, need):
    x = dev(X)
    if AxesTensor is not None or AxesTensorList:
        axes = cpu_shape.int_values(host_or_none(AxesTensor), _hosts(AxesTensorList))
    return x.reshape(cpu_shape.unsqueeze_shape(tuple(x.shape), axes)), (xshape_of(x) if need[1] else None)


register_kernel("squeeze2", "cuda", squeeze2)
register_kernel("unsqueeze2", "cuda", unsqueeze2)
register_kernel("squeeze2_grad", "cuda", from_xshape)
register_kernel("unsqueeze2_grad", "cuda", from_xshape)


# ---- stack ---------------------------------------------------------------------------------------------
def stack(X, *, axis):
    xs = [dev(x) for x in X]
    shape = tuple(xs[0].shape)
    if any(tuple(x.shape) != shape for x in xs):
        raise InvalidArgument(f"stack: input shapes {[list(x.shape) for x in xs]} differ")
    a = cpu_shape.stack_axis(axis, len(shape))
    return concat_arrays([x.reshape(shape[:a] + (1,) + shape[a:]) for x in xs], a)


def stack_grad(X, dY, *, axis):
    g = dev(dY)
    gshape = tuple(g.shape)
    a = cpu_shape.stack_axis(axis, len(gshape) - 1)
    return [p.reshape(gshape[:a] + gshape[a + 1:]) for p in split_array(g, [1] * gshape[a], a)]


register_kernel("stack", "cuda", stack)
register_kernel("stack_grad", "cuda", stack_grad)


# ---- expand_v2 --------------------------------------------------------------------------------------------
def expand_v2(X, Shape, expand_shapes_tensor, *, shape):
    x = dev(X)
    if Shape is not None or expand_shapes_tensor:
        shape = cpu_shape.int_values(host_or_none(Shape), _hosts(expand_shapes_tensor))
    out_shape = cpu_shape.expand_shape(tuple(x.shape), shape)
    return strided_copy(x, out_shape, bcast_strides(tuple(x.shape), out_shape))


def expand_v2_grad(X, dOut, Shape, expand_shapes_tensor, *, shape):
    return ew.reduce_to(dev(dOut), tuple(X.shape))


register_kernel("expand_v2", "cuda", expand_v2)
register_kernel("expand_v2_grad", "cuda", expand_v2_grad)


# ---- gather_nd ------------------------------------------------------------------------------------------
def _nd_geometry(shape, Index):
    """(rows, dim, rest, out shape): X viewed (dim, rest) is gathered at ``rows`` (outer == 1)."""
    idx = to_host(Index)
    rows = cpu.nd_rows(idx, shape)
    dim = rest = 1
    for d in shape[:idx.shape[-1]]:
        dim *= d
    for d in shape[idx.shape[-1]:]:
        rest *= d
    return rows, dim, rest, tuple(idx.shape[:-1]) + tuple(shape[idx.shape[-1]:])


def gather_nd(X, Index):
    x = dev(X)
    rows, dim, rest, out_shape = _nd_geometry(tuple(x.shape), Index)
    out = empty(out_shape, x.dtype)
    launch(_gather_rows, out.size, flat(x), flat(dev(rows)), flat(out), dim, rows.size, rest)
    return out


def gather_nd_grad(X, Index, dOut):
    g = dev(dOut)
    rows, dim, rest, _ = _nd_geometry(tuple(X.shape), Index)
    dx = empty(tuple(X.shape), g.dtype)
    launch(_gather_rows_grad, dx.size, flat(g), flat(dev(rows)), flat(dx), dim, rows.size, rest, g.dtype.type(0))
    return dx


register_kernel("gather_nd", "cuda", gather_nd)
register_kernel("gather_nd_grad", "cuda", gather_nd_grad)


# ---- tile ---------------------------------------------------------------------------------------------------
@cuda.jit
def _tile(x, out, xsh, osh):
    """out[i] = x at (i's index in osh) modulo xsh, per dim (6 padded dims)."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        rem, off, mult = i, 0, 1
        for d in range(5, -1, -1):
            off += ((rem % osh[d]) % xsh[d]) * mult
            rem //= osh[d]
            mult *= xsh[d]
        out[i] = x[off]


@cuda.jit
def _tiles_first(g, t, xsh, rsh, m):
    """t[tile, e] = g at tile index ``tile`` (row-major over rsh), element ``e`` of X (over xsh)."""
    for i in range(cuda.grid(1), t.size, cuda.gridsize(1)):
        tile_, e = i // m, i % m
        off, mult = 0, 1
        for d in range(5, -1, -1):
            off += ((tile_ % rsh[d]) * xsh[d] + e % xsh[d]) * mult
            tile_ //= rsh[d]
            e //= xsh[d]
            mult *= rsh[d] * xsh[d]
        t[i] = g[off]


def _reps(RepeatTimes, repeat_times_tensor, repeat_times):
    if RepeatTimes is not None or repeat_times_tensor:
        return cpu_shape.int_values(host_or_none(RepeatTimes), _hosts(repeat_times_tensor))
    return repeat_times


def tile(X, RepeatTimes, repeat_times_tensor, *, repeat_times):
    x = dev(X)
    xs, r = cpu_shape.tile_dims(tuple(x.shape), _reps(RepeatTimes, repeat_times_tensor, repeat_times))
    out = empty(tuple(a * b for a, b in zip(xs, r)), x.dtype)
    launch(_tile, out.size, flat(x), flat(out), padded(xs), padded(out.shape))
    return out


def tile_grad(X, dOut, RepeatTimes, repeat_times_tensor, *, repeat_times):
    g = dev(dOut)
    xs, r = cpu_shape.tile_dims(tuple(X.shape), _reps(RepeatTimes, repeat_times_tensor, repeat_times))
    m, n = int(np.prod(xs)), int(np.prod(r))
    t = empty((n, m), g.dtype)
    launch(_tiles_first, t.size, flat(g), flat(t), padded(xs), padded(r), m)
    summed = ew.sum_axes(t.reshape(n) if m == 1 else t, (0,))  # NumPy's order, as the CPU kernel
    return summed.reshape(tuple(X.shape))


register_kernel("tile", "cuda", tile)
register_kernel("tile_grad", "cuda", tile_grad)


# ---- shape ------------------------------------------------------------------------------------------------
def shape(Input):
    """Input is a shape-only meta (no need buffer): its dims go to the device as int32."""
    return to_device(cpu_shape.shape(Input))


register_kernel("shape", "cuda", shape)


def size(Input):
    """Input is a shape-only meta: its element count goes to the device as a 0-D int64."""
    return to_device(cpu_shape.size(Input))


def share_data(X):
    return X  # the same device buffer, as Paddle's ShareDataKernel


def memcpy(X, *, dst_place_type):
    """A device copy, except to pinned host memory (``dst_place_type`` 2, recompute's checkpoint
    offload): a host NumPy copy, which the next kernel that reads it copies back to the device."""
    cpu_shape.check_place_type("memcpy", dst_place_type)
    if dst_place_type == 2:
        return to_host(X)
    return copy_array(dev(X))


register_kernel("size", "cuda", size)
register_kernel("share_data", "cuda", share_data)
register_kernel("memcpy", "cuda", memcpy)
