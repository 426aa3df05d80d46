"""CUDA kernels for refimpl.ops.math_ops and logic_ops (except mul / matmul_v2).

Mirrors Paddle's GPU elementwise, scale, sum and reduce kernels, with the
NumPy kernels' semantics: Paddle's elementwise ``axis`` (Y aligned at X's
dim ``axis``, then NumPy broadcasting), float32 math in float32, grads that
undo broadcasting by summing in NumPy's order (``ew.reduce_to``), and grads
that hand back ``Out@GRAD`` itself when no reduction is needed (as the CPU
kernels do, so the memory accounting matches).
"""
import math

import numpy as np

from refimpl.core.errors import InvalidArgument
from refimpl.ops.common import align_y
from refimpl.ops.registry import register_kernel

from . import ew
from .device import cuda, dev, empty, flat, launch_config, scalar_of, to_device


# ---- functors ---------------------------------------------------------------------
@ew.functor(2)
def f_add(DT):
    return lambda x, y, a, b: x + y


@ew.functor(2)
def f_sub(DT):
    return lambda x, y, a, b: x - y


@ew.functor(2)
def f_mul(DT):
    return lambda x, y, a, b: x * y


@ew.functor(2)
def f_div(DT):
    if not np.issubdtype(DT, np.integer):
        return lambda x, y, a, b: x / y

    def int_div(x, y, a, b):  # C++'s integer division: truncate toward zero
        q = x // y
        if q * y != x and (x < 0) != (y < 0):
            q += 1
        return q
    return int_div


@ew.functor(2)
def f_mod(DT):
    return lambda x, y, a, b: x % y  # NumPy's sign rule (numba's numpy error model: no raise on 0)


@ew.functor(2)
def f_max(DT):
    def mx(x, y, a, b):
        if x != x:
            return x
        return x if x > y else y  # NumPy's (and Paddle's) choice on ties: y (max(-0.0, 0.0) is 0.0)
    return mx


@ew.functor(2)
def f_min(DT):
    def mn(x, y, a, b):
        if x != x:
            return x
        return x if x < y else y
    return mn


@ew.functor(2)
def f_pow(DT):
    return lambda x, y, a, b: DT(np.float64(x) ** np.float64(y))


@ew.functor(2)
def f_equal(DT):
    return lambda x, y, a, b: x == y


@ew.functor(2)
def f_less(DT):
    return lambda x, y, a, b: x < y


@ew.functor(2)
def f_not_equal(DT):
    return lambda x, y, a, b: x != y


@ew.functor(2)
def f_less_equal(DT):
    return lambda x, y, a, b: x <= y


@ew.functor(2)
def f_greater(DT):
    return lambda x, y, a, b: x > y


@ew.functor(2)
def f_greater_equal(DT):
    return lambda x, y, a, b: x >= y


@ew.functor(2)
def f_and(DT):
    return lambda x, y, a, b: x != 0 and y != 0


@ew.functor(2)
def f_or(DT):
    return lambda x, y, a, b: x != 0 or y != 0


@ew.functor(2)
def f_xor(DT):
    return lambda x, y, a, b: (x != 0) != (y != 0)


@ew.functor(1)
def f_neg(DT):
    return lambda x, a, b: -x


@ew.functor(1)
def f_not(DT):
    return lambda x, a, b: not x


@ew.functor(1)
def f_scale_after(DT):
    return lambda x, a, b: x * a + b


@ew.functor(1)
def f_scale_only(DT):
    return lambda x, a, b: x * a


@ew.functor(1)
def f_scale_before(DT):
    return lambda x, a, b: (x + b) * a


@ew.functor(1)
def f_log(DT):
    def lg(x, a, b):
        v = np.float64(x)
        if v > 0:
            return DT(math.log(v))
        return DT(-math.inf) if v == 0 else DT(math.nan)
    return lg


@ew.functor(3)
def f_div_dy(DT):
    return lambda d, o, y, a, b: (-d * o) / y


# ---- elementwise ops -------------------------------------------------------------------
def _y(X, Y, axis):
    if axis != -1 and len(Y.shape) < len(X.shape):
        return dev(Y).reshape(align_y(tuple(Y.shape), len(X.shape), axis))
    return Y


def _register_ew(name, fn):
    def kernel(X, Y, *, axis):
        try:
            return ew.run_n(fn, [X, _y(X, Y, axis)])
        except ValueError:
            raise InvalidArgument(f"{name}: shapes {list(X.shape)} and {list(Y.shape)} "
                                  f"do not broadcast (axis={axis})") from None
    kernel.__name__ = name
    register_kernel(name, "cuda", kernel)


for _name, _fn in (("elementwise_add", f_add), ("elementwise_sub", f_sub), ("elementwise_mul", f_mul),
                   ("elementwise_div", f_div), ("elementwise_mod", f_mod), ("elementwise_max", f_max),
                   ("elementwise_min", f_min), ("elementwise_pow", f_pow)):
    _register_ew(_name, _fn)


def _yshape(X, Y, axis):
    if axis != -1 and len(Y.shape) < len(X.shape):
        return align_y(tuple(Y.shape), len(X.shape), axis)
    return tuple(Y.shape)


def _back(g, shape, Y):
    """``reduce_to(g, shape)`` viewed with Y's shape."""
    r = ew.reduce_to(g, shape)
    return r.reshape(tuple(Y.shape)) if tuple(r.shape) != tuple(Y.shape) else r


def add_grad(X, Y, dOut, *, axis, need):
    dOut = dev(dOut)
    dx = ew.reduce_to(dOut, X.shape) if need[0] else None
    dy = _back(dOut, _yshape(X, Y, axis), Y) if need[1] else None
    return dx, dy


def sub_grad(X, Y, dOut, *, axis, need):
    dOut = dev(dOut)
    dx = ew.reduce_to(dOut, X.shape) if need[0] else None
    dy = None
    if need[1]:
        dy = ew.run1(f_neg, ew.reduce_to(dOut, _yshape(X, Y, axis)))
        dy = dy.reshape(tuple(Y.shape))
    return dx, dy


def mul_grad(X, Y, dOut, *, axis, need):
    y = _y(X, Y, axis)
    dx = ew.reduce_to(ew.run_n(f_mul, [dOut, y]), X.shape) if need[0] else None
    dy = _back(ew.run_n(f_mul, [dOut, X]), tuple(y.shape), Y) if need[1] else None
    return dx, dy


def div_grad(X, Y, Out, dOut, *, axis, need):
    y = _y(X, Y, axis)
    dx = ew.reduce_to(ew.run_n(f_div, [dOut, y]), X.shape) if need[0] else None
    dy = _back(ew.run_n(f_div_dy, [dOut, Out, y]), tuple(y.shape), Y) if need[1] else None
    return dx, dy


def pow_grad(X, Y, dOut, *, axis, need):
    y = dev(_y(X, Y, axis))
    dx = dy = None
    if need[0]:
        ym1 = ew.run1(f_scale_after, y, 1, -1)  # y - 1 (exact: y * 1 - 1)
        dx = ew.reduce_to(ew.run_n(f_mul, [ew.run_n(f_mul, [dOut, y]), ew.run_n(f_pow, [X, ym1])]), X.shape)
    if need[1]:
        t = ew.run_n(f_mul, [dOut, ew.run_n(f_pow, [X, y])])
        dy = _back(ew.run_n(f_mul, [t, ew.run1(f_log, X)]), tuple(y.shape), Y)
    return dx, dy


for _name, _fn in (("elementwise_add_grad", add_grad), ("elementwise_sub_grad", sub_grad),
                   ("elementwise_mul_grad", mul_grad), ("elementwise_div_grad", div_grad),
                   ("elementwise_pow_grad", pow_grad)):
    register_kernel(_name, "cuda", _fn)


# ---- comparisons, logical ops, is_empty, increment --------------------------------------------------
def _bool_op(name, fn, X, Y, axis=None):
    """``fn`` of X and Y broadcast (Y aligned at ``axis`` for a comparison) into bool; the NumPy
    kernel's error when they do not broadcast."""
    y = Y if axis is None else _y(X, Y, axis)
    try:
        return ew.run_n(fn, [X, y], out_dtype=np.bool_)
    except ValueError:
        where = "" if axis is None else f" (axis={axis})"
        raise InvalidArgument(f"{name}: the shapes of X {list(X.shape)} and Y {list(y.shape)} do not broadcast"
                              f"{where}") from None


def _register_bool_op(name, fn, has_axis):
    if has_axis:
        def kernel(X, Y, *, axis):
            return _bool_op(name, fn, X, Y, axis)
    else:
        def kernel(X, Y):
            return _bool_op(name, fn, X, Y)
    kernel.__name__ = name
    register_kernel(name, "cuda", kernel)


for _name, _fn in (("equal", f_equal), ("less_than", f_less), ("not_equal", f_not_equal),
                   ("less_equal", f_less_equal), ("greater_than", f_greater), ("greater_equal", f_greater_equal)):
    _register_bool_op(_name, _fn, has_axis=True)
for _name, _fn in (("logical_and", f_and), ("logical_or", f_or), ("logical_xor", f_xor)):
    _register_bool_op(_name, _fn, has_axis=False)


def is_empty(X):
    return to_device(np.array(X.size == 0))  # the size is known on the host


register_kernel("is_empty", "cuda", is_empty)


def logical_not(X):
    return ew.run1(f_not, X, out_dtype=np.bool_)


def increment(X, *, step):
    if X.size != 1:
        raise InvalidArgument(f"increment: X must have exactly one element, got shape {list(X.shape)}")
    return ew.run1(f_scale_after, X, 1, step)


register_kernel("logical_not", "cuda", logical_not)
register_kernel("increment", "cuda", increment)


# ---- scale and sum -------------------------------------------------------------------------
def scale(X, ScaleTensor, BiasTensor, *, scale, bias, bias_after_scale):
    if ScaleTensor is not None:
        scale = scalar_of(ScaleTensor)
    if BiasTensor is not None:
        bias = scalar_of(BiasTensor)
    s, b = X.dtype.type(scale), X.dtype.type(bias)
    if bias_after_scale:
        return ew.run1(f_scale_only if b == 0 else f_scale_after, X, s, b)
    return ew.run1(f_scale_before, X, s, b)


def sum_op(X):
    if len(X) == 1:
        return ew.run1(f_scale_only, X[0], 1)  # a copy (x * 1 is exact)
    out = ew.run_n(f_add, [X[0], X[1]])
    for x in X[2:]:
        out = ew.run_n(f_add, [out, x])
    return out


register_kernel("scale", "cuda", scale)
register_kernel("sum", "cuda", sum_op)


# ---- reductions ----------------------------------------------------------------------------
def _axes(ndim, dim, reduce_all):
    if reduce_all or not dim or len(dim) == ndim:
        return tuple(range(ndim))
    return tuple(d % ndim for d in dim)


def _reduced_shape(shape, axes, keep_dim):
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep_dim or i not in axes)


def reduce_sum(X, *, dim, keep_dim, reduce_all):
    axes = _axes(len(X.shape), dim, reduce_all)
    return ew.sum_axes(X, axes, keep_shape=_reduced_shape(tuple(X.shape), axes, keep_dim))


@cuda.jit
def _mean_all_f32(x, n, out):
    """The NumPy kernel's float32 mean of all values (Eigen's order): 8 lanes in order, folded in halves."""
    lanes = cuda.shared.array(8, np.float32)
    j = cuda.threadIdx.x
    vec = (n // 8) * 8
    if j < vec:
        acc = x[j]
        for i in range(j + 8, vec, 8):
            acc += x[i]
        lanes[j] = acc
    else:
        lanes[j] = np.float32(0)
    cuda.syncthreads()
    if j == 0:
        tail = np.float32(0)
        for i in range(vec, n):
            tail += x[i]
        a, b = lanes[0] + lanes[4], lanes[1] + lanes[5]
        c, d = lanes[2] + lanes[6], lanes[3] + lanes[7]
        out[0] = (tail + ((a + c) + (b + d))) / np.float32(n)


def reduce_mean(X, *, dim, keep_dim, reduce_all):
    axes = _axes(len(X.shape), dim, reduce_all)
    X = dev(X)
    if X.dtype == np.float32 and len(axes) == len(X.shape) and X.size > 0:
        out = empty((1,), np.float32)
        launch_config(_mean_all_f32, 1, 8, flat(X), X.size, out)
        return out.reshape(_reduced_shape(tuple(X.shape), axes, keep_dim))
    total = reduce_sum(X, dim=dim, keep_dim=keep_dim, reduce_all=reduce_all)
    n = 1
    for a in axes:
        n *= X.shape[a]
    return ew.run_n(f_div, [total, const(n, total.dtype)], shape=tuple(total.shape))


def const(v, dtype):
    """A one-element device array holding ``v`` (0-d, broadcasts against anything)."""
    return to_device(np.asarray(v, dtype=dtype).reshape(()))


def reduce_sum_grad(X, dOut, *, dim, keep_dim, reduce_all):
    return _broadcast(_reduce_grad_value(X, dOut, dim, reduce_all, False), tuple(X.shape))


def reduce_mean_grad(X, dOut, *, dim, keep_dim, reduce_all):
    return _broadcast(_reduce_grad_value(X, dOut, dim, reduce_all, True), tuple(X.shape))


def _reduce_grad_value(X, dOut, dim, reduce_all, mean):
    shape = tuple(X.shape)
    axes = _axes(len(shape), dim, reduce_all)
    g = dev(dOut).reshape(tuple(1 if i in axes else d for i, d in enumerate(shape)))
    if mean:
        n = 1
        for a in axes:
            n *= shape[a]
        g = ew.run1(f_scale_only, g, g.dtype.type(1.0 / n if n else 0.0))  # n == 0: X is empty
    return g


def _broadcast(g, shape):
    """A contiguous copy of ``g`` broadcast to ``shape``."""
    return ew.run_n(f_first, [g, const(0, g.dtype)], shape=shape)


@ew.functor(2)
def f_first(DT):
    return lambda x, y, a, b: x


for _name, _fn in (("reduce_sum", reduce_sum), ("reduce_mean", reduce_mean),
                   ("reduce_sum_grad", reduce_sum_grad), ("reduce_mean_grad", reduce_mean_grad)):
    register_kernel(_name, "cuda", _fn)

