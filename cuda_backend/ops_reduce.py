"""CUDA kernels for the ops of ``refimpl/ops/reduce_ops.py``.

Mirrors Paddle's GPU kernels of the same names (``paddle/phi/kernels/gpu/``: ``clip_kernel.cu``,
``clip_by_norm_kernel.cu``, ``squared_l2_norm_kernel.cu``, ``reduce_max_kernel.cu``,
``reduce_prod_kernel.cu``, ``reduce_any_kernel.cu``, ``arg_min_max_kernel.cu``, ``cum_kernel.cu``,
``top_k_kernel.cu``; log_softmax, one_hot_v2 and the sigmoid cross entropy are in
``ops_reduce_loss.py``) with the NumPy kernels' arithmetic: the sums of squares are NumPy's
pairwise sums (``ew.sum_axes``), cumsum adds in order along the axis, max / min / arg_max /
reduce_any scan each output's elements in order (one thread per output, where Paddle's GPU
kernels reduce over a block of threads: the same result, as max, min and any are exact).
"""
import numpy as np

from refimpl.core.errors import InvalidArgument
from refimpl.ops.reduce_ops import ARG_DTYPES, _arg_max_shape, check_axis, reduce_axes, reduced_shape, top_k_k
from refimpl.ops.registry import register_kernel

from . import ew
from .device import contiguous_strides, cuda, dev, empty, flat, launch, padded, scalar_of, to_host
from .fmath import sqrt64
from .ops_activation import f_square, row_layout

U, B, T = ew.functor(1), ew.functor(2), ew.functor(3)


# ---- squared_l2_norm, clip_by_norm ------------------------------------------------------------
@B
def g_squared_l2(DT):
    return lambda x, d, a, b: (x * d) * a


@B
def f_clip_by_norm(DT):
    def scale(x, s, a, b):
        norm = DT(sqrt64(s))
        keep = DT(1) if norm <= a else DT(0)
        eps = (DT(1) if norm <= DT(1e-30) else DT(0)) * DT(1e-6)
        return x * (keep + (DT(1) - keep) * a / (norm + eps))
    return scale


def _sum_of_squares(X):
    """sum(x * x) as a (1,) device array: NumPy's pairwise sum of the flattened squares."""
    return ew.sum_axes(flat(ew.run1(f_square, dev(X))), (0,), keep_shape=(1,))


def squared_l2_norm(X):
    return _sum_of_squares(X)


def squared_l2_norm_grad(X, dOut):
    if dOut.size != 1:
        raise InvalidArgument(f"squared_l2_norm_grad: Out@GRAD must hold one element, got shape {list(dOut.shape)}")
    return ew.run_n(g_squared_l2, [X, dev(dOut).reshape((1,) * len(X.shape))], 2, shape=tuple(X.shape))


def clip_by_norm(X, *, max_norm):
    X = dev(X)
    total = _sum_of_squares(X).reshape((1,) * len(X.shape))
    return ew.run_n(f_clip_by_norm, [X, total], max_norm, shape=tuple(X.shape))


# ---- clip, abs, sign ------------------------------------------------------------------------------
@U
def f_clip(DT):
    return lambda x, a, b: a if x < a else (b if x > b else x)


@B
def g_clip(DT):
    return lambda x, d, a, b: d if (x >= a and x <= b) else DT(0)


@U
def f_abs(DT):
    return lambda x, a, b: abs(x)


@B
def g_abs(DT):
    return lambda x, d, a, b: DT(0) if x == 0 else d * (x / abs(x))


@U
def f_sign(DT):
    def sign(x, a, b):
        if x > 0:
            return DT(1)
        if x < 0:
            return DT(-1)
        return x if x != x else DT(0)
    return sign


def _bounds(Min, Max, min, max, dtype, op):
    t = np.dtype(dtype).type
    lo = scalar_of(Min, dtype) if Min is not None else t(min)
    hi = scalar_of(Max, dtype) if Max is not None else t(max)
    if lo > hi:
        raise InvalidArgument(f"{op}: max should be greater than or equal to min, got min={lo}, max={hi}")
    return lo, hi


def clip(X, Min, Max, *, min, max):
    return ew.run1(f_clip, X, *_bounds(Min, Max, min, max, X.dtype, "clip"))


def clip_grad(X, dOut, Min, Max, *, min, max):
    return ew.run_n(g_clip, [X, dOut], *_bounds(Min, Max, min, max, X.dtype, "clip_grad"))


for _name, _fn in (("squared_l2_norm", squared_l2_norm), ("squared_l2_norm_grad", squared_l2_norm_grad),
                   ("clip_by_norm", clip_by_norm), ("clip", clip), ("clip_grad", clip_grad),
                   ("abs", lambda X: ew.run1(f_abs, X)), ("abs_grad", lambda X, dOut: ew.run_n(g_abs, [X, dOut])),
                   ("sign", lambda X: ew.run1(f_sign, X))):
    register_kernel(_name, "cuda", _fn)


# ---- reduce_max, reduce_min -----------------------------------------------------------------------
@cuda.jit
def _minmax(g, out, oshape, ostr, rshape, rstr, count, is_max):
    """out[o] = max (min) over the reduced dims, scanned in row-major order; a NaN wins."""
    for o in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        base = ew.offset(o, oshape, ostr)
        m = g[base]
        for k in range(1, count):
            v = g[base + ew.offset(k, rshape, rstr)]
            if m == m and (v != v or (v > m if is_max else v < m)):
                m = v
        out[o] = m


@T
def g_minmax(DT):
    return lambda x, o, d, a, b: d * (DT(1) if x == o else DT(0))


def _layout(shape, axes):
    st = contiguous_strides(shape)
    oshape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    rshape = tuple(d if i in axes else 1 for i, d in enumerate(shape))
    ostr = tuple(0 if i in axes else s for i, s in enumerate(st))
    rstr = tuple(s if i in axes else 0 for i, s in enumerate(st))
    return padded(oshape), padded(ostr, 0), padded(rshape), padded(rstr, 0)


def _register_minmax(name, is_max):
    def kernel(X, *, dim, keep_dim, reduce_all):
        X = dev(X)
        shape = tuple(X.shape)
        axes = reduce_axes(name, len(shape), dim, reduce_all)
        if any(shape[a] == 0 for a in axes):
            raise InvalidArgument(f"{name}: cannot reduce over an empty dim of X (shape {list(shape)}, dim {dim})")
        out = empty(reduced_shape(shape, axes, keep_dim), X.dtype)
        count = 1
        for a in axes:
            count *= shape[a]
        launch(_minmax, out.size, flat(X), flat(out), *_layout(shape, axes), count, is_max)
        return out

    def grad(X, Out, dOut, *, dim, keep_dim, reduce_all):
        shape = tuple(X.shape)
        kept = reduced_shape(shape, reduce_axes(name, len(shape), dim, reduce_all), True)
        return ew.run_n(g_minmax, [X, dev(Out).reshape(kept), dev(dOut).reshape(kept)], shape=shape)
    register_kernel(name, "cuda", kernel)
    register_kernel(name + "_grad", "cuda", grad)


_register_minmax("reduce_max", True)
_register_minmax("reduce_min", False)


# ---- reduce_any ----------------------------------------------------------------------------------
@cuda.jit
def _any(g, out, oshape, ostr, rshape, rstr, count):
    """out[o] = whether some element over the reduced dims is nonzero."""
    for o in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        base = ew.offset(o, oshape, ostr)
        hit = False
        for k in range(count):
            if g[base + ew.offset(k, rshape, rstr)] != 0:
                hit = True
                break
        out[o] = hit


def reduce_any(X, AxisTensor, AxisTensorList, *, dim, keep_dim, reduce_all):
    if AxisTensor is not None or AxisTensorList:
        raise InvalidArgument("reduce_any: dims given as tensors (AxisTensor / AxisTensorList) are not supported; "
                              "use the dim attr")
    X = dev(X)
    shape = tuple(X.shape)
    axes = reduce_axes("reduce_any", len(shape), dim, reduce_all)
    out = empty(reduced_shape(shape, axes, keep_dim), np.bool_)
    count = 1
    for a in axes:
        count *= shape[a]
    launch(_any, out.size, flat(X), flat(out), *_layout(shape, axes), count)
    return out


register_kernel("reduce_any", "cuda", reduce_any)


@cuda.jit
def _prod(g, out, oshape, ostr, rshape, rstr, count, one):
    """out[o] = the product over the reduced dims, multiplied in row-major order."""
    for o in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        base = ew.offset(o, oshape, ostr)
        acc = one
        for k in range(count):
            v = g[base + ew.offset(k, rshape, rstr)]
            acc = v if k == 0 else acc * v
        out[o] = acc


@T
def g_prod(DT):
    return lambda x, o, d, a, b: (d * o) / x


def reduce_prod(X, *, dim, keep_dim, reduce_all):
    X = dev(X)
    shape = tuple(X.shape)
    axes = reduce_axes("reduce_prod", len(shape), dim, reduce_all)
    out = empty(reduced_shape(shape, axes, keep_dim), X.dtype)
    count = int(np.prod([shape[a] for a in axes])) if axes else 1
    launch(_prod, out.size, flat(X), flat(out), *_layout(shape, axes), count, X.dtype.type(1))
    return out


def reduce_prod_grad(X, Out, dOut, *, dim, keep_dim, reduce_all):
    shape = tuple(X.shape)
    kept = reduced_shape(shape, reduce_axes("reduce_prod_grad", len(shape), dim, reduce_all), True)
    return ew.run_n(g_prod, [X, dev(Out).reshape(kept), dev(dOut).reshape(kept)], shape=shape)


register_kernel("reduce_prod", "cuda", reduce_prod)
register_kernel("reduce_prod_grad", "cuda", reduce_prod_grad)


# ---- rows along one axis: arg_max, cumsum, log_softmax -------------------------------------------------
@cuda.jit
def _arg_max(x, out, n, inner):
    for r in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        base = (r // inner) * n * inner + r % inner
        best, m = 0, x[base]
        if m == m:
            for j in range(1, n):
                v = x[base + j * inner]
                if v != v:
                    best = j
                    break
                if v > m:
                    best, m = j, v
        out[r] = best


def arg_max(X, *, axis, keepdims, flatten, dtype):
    X = dev(X)
    attrs = {"axis": axis, "keepdims": keepdims, "flatten": flatten, "dtype": dtype}
    out_shape = _arg_max_shape("arg_max", tuple(X.shape), attrs)
    shape = (X.size,) if flatten else tuple(X.shape)
    ax = 0 if flatten else check_axis("arg_max", "axis", axis, len(shape))
    rows, n, inner = row_layout(shape, ax)
    if n == 0:
        raise InvalidArgument(f"arg_max: X has no element along axis {axis} (shape {list(X.shape)})")
    out = empty(out_shape, ARG_DTYPES[dtype])
    launch(_arg_max, rows, flat(X), flat(out), n, inner)
    return out


@cuda.jit
def _cumsum(x, out, rows, n, inner, exclusive, reverse, zero):
    """Each row added in order (from its end when ``reverse``), as NumPy's add.accumulate."""
    for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
        base = (r // inner) * n * inner + r % inner
        acc = zero
        for jj in range(n):
            k = base + ((n - 1 - jj) if reverse else jj) * inner
            nxt = x[k] if jj == 0 else acc + x[k]
            out[k] = (zero if jj == 0 else acc) if exclusive else nxt
            acc = nxt


def _cumsum_values(X, axis, flatten, exclusive, reverse, out_shape):
    X = dev(X)
    shape = (X.size,) if flatten else tuple(X.shape)
    ax = 0 if flatten else check_axis("cumsum", "axis", axis, len(shape))
    rows, n, inner = row_layout(shape, ax)
    out = empty(out_shape, X.dtype)
    launch(_cumsum, rows, flat(X), flat(out), rows, n, inner, bool(exclusive), bool(reverse), X.dtype.type(0))
    return out


def cumsum(X, *, axis, flatten, exclusive, reverse):
    return _cumsum_values(X, axis, flatten, exclusive, reverse, (X.size,) if flatten else tuple(X.shape))


def cumsum_grad(X, dOut, *, axis, flatten, exclusive, reverse):
    return _cumsum_values(dOut, axis, flatten, exclusive, not reverse, tuple(X.shape))


register_kernel("arg_max", "cuda", arg_max)
register_kernel("cumsum", "cuda", cumsum)
register_kernel("cumsum_grad", "cuda", cumsum_grad)


# ---- top_k_v2 -----------------------------------------------------------------------------------------
@cuda.jit
def _top_k(x, out, idx, rows, n, inner, k, largest):
    """Per row: k rounds, each taking the best element not taken yet (the lower index among equals)."""
    for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
        base = (r // inner) * n * inner + r % inner
        obase = (r // inner) * k * inner + r % inner
        for t in range(k):
            best, m = -1, x[base]
            for j in range(n):
                taken = False
                for u in range(t):
                    if idx[obase + u * inner] == j:
                        taken = True
                if taken:
                    continue
                v = x[base + j * inner]
                if best < 0:
                    best, m = j, v
                elif (v > m) if largest else (v < m):
                    best, m = j, v
            idx[obase + t * inner] = best
            out[obase + t * inner] = x[base + best * inner]


@cuda.jit
def _top_k_grad(d, idx, dx, rows, n, inner, k):
    for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
        base = (r // inner) * n * inner + r % inner
        obase = (r // inner) * k * inner + r % inner
        for j in range(n):
            dx[base + j * inner] = 0
        for t in range(k):
            dx[base + idx[obase + t * inner] * inner] = d[obase + t * inner]


def top_k_v2(X, K, *, k, axis, largest, sorted):
    X = dev(X)
    k, ax = top_k_k(X, to_host(K) if K is not None else None, k, axis)
    shape = tuple(X.shape)
    rows, n, inner = row_layout(shape, ax)
    out_shape = tuple(k if i == ax else d for i, d in enumerate(shape))
    out, idx = empty(out_shape, X.dtype), empty(out_shape, np.int64)
    launch(_top_k, rows, flat(X), flat(out), flat(idx), rows, n, inner, k, bool(largest))
    return out, idx


def top_k_v2_grad(X, Indices, dOut, *, axis):
    shape = tuple(X.shape)
    ax = check_axis("top_k_v2_grad", "axis", axis, len(shape))
    rows, n, inner = row_layout(shape, ax)
    dx = empty(shape, dOut.dtype)
    k = Indices.shape[ax] if shape else 1
    launch(_top_k_grad, rows, flat(dev(dOut)), flat(dev(Indices)), flat(dx), rows, n, inner, k)
    return dx


register_kernel("top_k_v2", "cuda", top_k_v2)
register_kernel("top_k_v2_grad", "cuda", top_k_v2_grad)
