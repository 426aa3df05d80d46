"""CUDA kernels for refimpl.ops.activation_ops: activations, their grads, softmax.

Mirrors Paddle's GPU activation functors with the NumPy kernels' float32
arithmetic step for step (the same roundings in the same order); the
transcendental parts (exp, log, tanh, erf, pow) are computed in float64 and
rounded once (see ``fmath``). Softmax runs one thread per row: the max, the
clipped exponentials, then NumPy's pairwise sum along a contiguous axis.
"""
import math

import numpy as np

from refimpl.ops.registry import register_kernel

from . import ew
from .device import contiguous_strides, cuda, dev, empty, flat, launch, scalar_of
from .fmath import erf64, exp64, log64, pow64, sqrt64, tanh64

SOFTMAX_CLIP = -64.0
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715
_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)

U = ew.functor(1)
B = ew.functor(2)
T = ew.functor(3)


# ---- forward functors (x, a, b) ----------------------------------------------------------
@U
def f_relu(DT):
    return lambda x, a, b: x if x > a else a  # NaN and -0.0 give +0.0 (Paddle's CPU relu)


@U
def f_tanh(DT):
    return lambda x, a, b: DT(tanh64(x))


@U
def f_sigmoid(DT):
    return lambda x, a, b: a / (a + DT(exp64(-x)))


@U
def f_square(DT):
    return lambda x, a, b: x * x


@U
def f_exp(DT):
    return lambda x, a, b: DT(exp64(x))


@U
def f_log(DT):
    return lambda x, a, b: DT(log64(x))


@U
def f_sqrt(DT):
    return lambda x, a, b: DT(sqrt64(x))


@U
def f_ceil(DT):
    def ceil_(x, a, b):
        if not abs(x) < 4503599627370496.0:  # 2**52: x is already an integer (or inf / nan)
            return x
        return DT(math.copysign(math.ceil(x), x))  # keeps -0.0 for -1 < x <= 0, as np.ceil
    return ceil_


@U
def f_gelu(DT):
    def gelu(x, a, b):
        v = np.float64(x)
        if a:
            return DT(0.5 * v * (1.0 + tanh64(_SQRT_2_OVER_PI * (v + _GELU_C * v ** 3))))
        return DT(0.5 * v * (1.0 + erf64(v / _SQRT2)))
    return gelu


@U
def f_silu(DT):
    return lambda x, a, b: x * (a / (a + DT(exp64(-x))))


@U
def f_leaky_relu(DT):
    return lambda x, a, b: x if x > 0 else x * a


@U
def f_logsigmoid(DT):
    def logsigmoid(x, a, b):
        nx = -x
        t = nx if not (nx < a) else a  # max(-x, 0); a is 0
        s = DT(exp64(-t)) + DT(exp64(nx - t))
        return -t - DT(log64(s))
    return logsigmoid


@U
def f_reciprocal(DT):
    return lambda x, a, b: a / x


@U
def f_hard_sigmoid(DT):
    def hs(x, a, b):
        v = x * a + b
        if v != v:
            return v
        return DT(0) if v < 0 else (DT(1) if v > 1 else v)
    return hs


@U
def f_pow(DT):
    return lambda x, a, b: DT(pow64(x, a))


# ---- grad functors (saved, dout, a, b) ----------------------------------------------------
@B
def g_relu(DT):
    return lambda o, d, a, b: d if o > 0 else d * a  # Paddle's dout * (out > 0): NaN dout stays, -0 for d < 0


@B
def g_tanh(DT):
    return lambda o, d, a, b: d * (a - o * o)


@B
def g_sigmoid(DT):
    return lambda o, d, a, b: (d * o) * (a - o)


@B
def g_square(DT):
    return lambda x, d, a, b: (d * a) * x


@B
def g_exp(DT):
    return lambda o, d, a, b: d * o


@B
def g_log(DT):
    return lambda x, d, a, b: d / x


@B
def g_sqrt(DT):
    return lambda o, d, a, b: (a * d) / o


@B
def g_gelu(DT):
    def gelu_grad(x, d, a, b):
        v = np.float64(x)
        if a:
            t = tanh64(_SQRT_2_OVER_PI * (v + _GELU_C * v ** 3))
            dt = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_C * v * v) * (1.0 - t * t)
            g = 0.5 * (1.0 + t) + 0.5 * v * dt
        else:
            g = 0.5 * (1.0 + erf64(v / _SQRT2)) + v * exp64(-0.5 * v * v) / _SQRT_2PI
        return DT(np.float64(d) * g)
    return gelu_grad


@T
def g_silu(DT):
    def silu_grad(x, o, d, a, b):
        s = a / (a + DT(exp64(-x)))
        return (d * s) * (a + x * (a - s))
    return silu_grad


@B
def g_leaky_relu(DT):
    return lambda x, d, a, b: d if x > 0 else d * a


@B
def g_logsigmoid(DT):
    return lambda x, d, a, b: d * (a / (a + DT(exp64(x))))


@B
def g_reciprocal(DT):
    return lambda o, d, a, b: (-d * o) * o


@B
def g_hard_sigmoid(DT):
    return lambda o, d, a, b: d * a if (o > 0 and o < 1) else DT(0)


@B
def g_pow(DT):
    return lambda x, d, a, b: (d * a) * DT(pow64(x, b))


# ---- registration ------------------------------------------------------------------------------
def _unary(name, fwd, grad, a=0.0, b=0.0, ga=0.0, gb=0.0):
    register_kernel(name, "cuda", lambda X: ew.run1(fwd, X, a, b))
    register_kernel(name + "_grad", "cuda", lambda S, dOut: ew.run_n(grad, [S, dOut], ga, gb))


_unary("relu", f_relu, g_relu)
_unary("tanh", f_tanh, g_tanh, ga=1)
_unary("sigmoid", f_sigmoid, g_sigmoid, a=1, ga=1)
_unary("square", f_square, g_square, ga=2)
_unary("exp", f_exp, g_exp)
_unary("log", f_log, g_log)
_unary("sqrt", f_sqrt, g_sqrt, ga=0.5)
_unary("logsigmoid", f_logsigmoid, g_logsigmoid, ga=1)
_unary("reciprocal", f_reciprocal, g_reciprocal, a=1)
register_kernel("ceil", "cuda", lambda X: ew.run1(f_ceil, X, 0.0, 0.0))
register_kernel("silu", "cuda", lambda X: ew.run1(f_silu, X, 1))
register_kernel("silu_grad", "cuda", lambda X, Out, dOut: ew.run_n(g_silu, [X, Out, dOut], 1))
register_kernel("gelu", "cuda", lambda X, *, approximate: ew.run1(f_gelu, X, int(bool(approximate))))
register_kernel("gelu_grad", "cuda",
                lambda X, dOut, *, approximate: ew.run_n(g_gelu, [X, dOut], int(bool(approximate))))
register_kernel("leaky_relu", "cuda", lambda X, *, alpha: ew.run1(f_leaky_relu, X, alpha))
register_kernel("leaky_relu_grad", "cuda", lambda X, dOut, *, alpha: ew.run_n(g_leaky_relu, [X, dOut], alpha))
register_kernel("hard_sigmoid", "cuda",
                lambda X, *, slope, offset: ew.run1(f_hard_sigmoid, X, slope, offset))
register_kernel("hard_sigmoid_grad", "cuda",
                lambda Out, dOut, *, slope, offset: ew.run_n(g_hard_sigmoid, [Out, dOut], slope))


def _factor(FactorTensor, factor, dtype):
    return scalar_of(FactorTensor, dtype) if FactorTensor is not None else np.dtype(dtype).type(factor)


def pow_op(X, FactorTensor, *, factor):
    return ew.run1(f_pow, X, _factor(FactorTensor, factor, X.dtype))


def pow_grad(X, FactorTensor, dOut, *, factor):
    f = _factor(FactorTensor, factor, X.dtype)
    return ew.run_n(g_pow, [X, dOut], f, f - X.dtype.type(1))


register_kernel("pow", "cuda", pow_op)
register_kernel("pow_grad", "cuda", pow_grad)


@B
def ew_mul(DT):  # a named def: compile_check finds a functor by its maker's name
    return lambda x, y, a, b: x * y


# ---- softmax ----------------------------------------------------------------------------------------
@cuda.jit
def _softmax_rows(x, out, n, inner, clip, zero, scratch):
    """Rows are (outer, inner) pairs; a row's n elements are ``inner`` apart."""
    for r in range(cuda.grid(1), out.size // n, cuda.gridsize(1)):
        base = (r // inner) * n * inner + r % inner
        m = x[base]
        for j in range(1, n):
            v = x[base + j * inner]
            if v > m or v != v:
                m = v
        for j in range(n):
            s = x[base + j * inner] - m
            out[base + j * inner] = exp64(clip if s < clip else s)
        total = ew.row_sum(out, r, base, n, inner, zero, scratch)
        for j in range(n):
            out[base + j * inner] = out[base + j * inner] / total


@cuda.jit
def _softmax_grad_rows(o, d, prod, out, n, inner, zero, scratch):
    for r in range(cuda.grid(1), out.size // n, cuda.gridsize(1)):
        base = (r // inner) * n * inner + r % inner
        s = ew.row_sum(prod, r, base, n, inner, zero, scratch)
        for j in range(n):
            k = base + j * inner
            out[k] = o[k] * (d[k] - s)


def row_layout(shape, axis):
    """(rows, n, inner) of a softmax over ``axis`` of a C-contiguous ``shape``."""
    axis = axis % max(len(shape), 1)
    n = shape[axis] if shape else 1
    inner = contiguous_strides(shape)[axis] if shape else 1
    size = 1
    for d in shape:
        size *= d
    return (size // n if n else 0), n, inner


def softmax_values(X, axis):
    X = dev(X)
    out = empty(X.shape, X.dtype)
    rows, n, inner = row_layout(tuple(X.shape), axis)
    launch(_softmax_rows, rows, flat(X), flat(out), n, inner, X.dtype.type(SOFTMAX_CLIP), X.dtype.type(0),
           ew.scratch_for(rows, n, X.dtype))
    return out


def softmax_grad(Out, dOut, *, axis):
    Out, dOut = dev(Out), dev(dOut)
    prod = ew.run_n(ew_mul, [dOut, Out])
    out = empty(Out.shape, Out.dtype)
    rows, n, inner = row_layout(tuple(Out.shape), axis)
    launch(_softmax_grad_rows, rows, flat(Out), flat(dOut), flat(prod), flat(out), n, inner,
           Out.dtype.type(0), ew.scratch_for(rows, n, Out.dtype))
    return out


register_kernel("softmax", "cuda", lambda X, *, axis: softmax_values(X, axis))
register_kernel("softmax_grad", "cuda", softmax_grad)
