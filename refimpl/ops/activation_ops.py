"""Activation ops: relu, tanh, sigmoid, gelu, softmax, square, exp, log, sqrt,
and silu, leaky_relu, logsigmoid, pow, reciprocal, hard_sigmoid.

Each mirrors the Paddle op of the same name and its ``*_grad`` op with
Paddle's grad slots: relu/tanh/sigmoid/exp/sqrt/softmax/reciprocal/
hard_sigmoid grads read ``Out`` and ``Out@GRAD``; gelu/square/log/leaky_relu/
logsigmoid grads read ``X`` and ``Out@GRAD``; silu_grad reads X, Out and
Out@GRAD; pow_grad reads X, FactorTensor and Out@GRAD. The in-place pairs
are Paddle's (``Out`` may reuse ``X``, ``X@GRAD`` may reuse ``Out@GRAD``);
gelu, logsigmoid and hard_sigmoid have no forward pair, gelu_grad and
softmax_grad none either.

Differences from Paddle: ``gelu`` (exact form) is computed in float64 with
the erf below and cast back, where Paddle uses float32 ``erf``; results agree
to float32 rounding, and for very negative inputs (where ``1 + erf`` cancels)
ours are the more accurate. For float16/float32 a cheaper erf gives the very
same results, proven element by element (see ``_fast_then_exact``). Like
Paddle, softmax clips ``x - max(x)`` at -64.
"""
import math

import numpy as np

from .common import grads_like, same_as
from .grad_maker import simple_grad
from .registry import register_op

SOFTMAX_CLIP = -64.0  # Paddle's softmax functor clips shifted logits here


# ---- erf ----------------------------------------------------------------
def _erf_series(x):
    """erf(x), x >= 0, from erf(x) = 2/sqrt(pi) e^(-x^2) sum 2^n x^(2n+1)/(2n+1)!!.

    Every term is positive, so there is no cancellation; it is slow (hundreds of
    terms for x near 6) and only used at import time, to build the interpolants.
    """
    x = np.asarray(x, dtype=np.float64)
    term, total, x2 = x.copy(), x.copy(), 2.0 * x * x
    for n in range(1, 400):
        term = term * x2 / (2 * n + 1)
        total += term
    return 2.0 / math.sqrt(math.pi) * np.exp(-x * x) * total


def _erf_over_x(x):
    return _erf_series(x) / x  # Chebyshev nodes never hit x == 0


# erf(x)/x on [0, 6) as degree-28 Chebyshev interpolants on five pieces (within 2e-14 of
# glibc's erf, relative, even near 0); erf(|x| >= 6) is 1 in float64.
_ERF_EDGES = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0)
_ERF_PIECES = [np.polynomial.Chebyshev.interpolate(_erf_over_x, 28, domain=[lo, hi])
               for lo, hi in zip(_ERF_EDGES[:-1], _ERF_EDGES[1:])]


def erf(x):
    """The error function, vectorised, in float64 (relative error < 2e-14)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.ones_like(a)
    piece = np.searchsorted(_ERF_EDGES, a, side="right") - 1
    for i, cheb in enumerate(_ERF_PIECES):
        m = piece == i
        if m.any():
            am = a[m]
            out[m] = am * cheb(am)
    out[np.isnan(a)] = np.nan
    return np.copysign(out, x)


# ---- registration helper ----------------------------------------------------
def _register_unary(name, fwd, grad_kernel, reads, attrs=None, inplace=True, grad_inplace=True):
    """Register ``name`` (X -> Out) and ``name_grad`` ([*reads, Out@GRAD] -> X@GRAD).

    ``reads`` is the forward slot the grad op reads ("X" or "Out"), or a tuple of both.
    """
    attrs = attrs or {}
    gname = name + "_grad"
    reads = (reads,) if isinstance(reads, str) else tuple(reads)
    ins = [*reads, "Out@GRAD"]
    register_op(gname, ins, ["X@GRAD"], attrs, infer_shape=grads_like(**{"X@GRAD": reads[0]}),
                inplace={"X@GRAD": "Out@GRAD"} if grad_inplace else None)(grad_kernel)
    register_op(name, ["X"], ["Out"], attrs, infer_shape=same_as("X", "Out"),
                grad=simple_grad(gname, ins, ["X@GRAD"]),
                inplace={"Out": "X"} if inplace else None)(fwd)


# ---- relu, tanh, sigmoid ------------------------------------------------------
def relu(X):
    # Paddle 3.3.1's CPU relu: NaN and -0.0 give +0.0 (np.maximum would keep NaN; fmax drops it)
    return np.fmax(X, X.dtype.type(0))


def relu_grad(Out, dOut):
    # Paddle's ``dout * (out > 0)``: a NaN dout stays NaN where out is 0, and a negative one gives -0.0
    return dOut * (Out > 0)


def tanh(X):
    return np.tanh(X)


def tanh_grad(Out, dOut):
    return dOut * (1 - Out * Out)


def sigmoid(X):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-X))


def sigmoid_grad(Out, dOut):
    return dOut * Out * (1 - Out)


_register_unary("relu", relu, relu_grad, "Out")
_register_unary("tanh", tanh, tanh_grad, "Out")
_register_unary("sigmoid", sigmoid, sigmoid_grad, "Out")


# ---- square, exp, log, sqrt ------------------------------------------------
def square(X):
    return X * X


def square_grad(X, dOut):
    return dOut * 2 * X


def exp(X):
    with np.errstate(over="ignore"):
        return np.exp(X)


def exp_grad(Out, dOut):
    return dOut * Out


def log(X):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(X)


def log_grad(X, dOut):
    with np.errstate(divide="ignore", invalid="ignore"):
        return dOut / X


def sqrt(X):
    with np.errstate(invalid="ignore"):
        return np.sqrt(X)


def sqrt_grad(Out, dOut):
    with np.errstate(divide="ignore", invalid="ignore"):
        return 0.5 * dOut / Out


_register_unary("square", square, square_grad, "X")
_register_unary("exp", exp, exp_grad, "Out")
_register_unary("log", log, log_grad, "X")
_register_unary("sqrt", sqrt, sqrt_grad, "Out")


@register_op("ceil", ["X"], ["Out"], {}, infer_shape=same_as("X", "Out"))
def ceil(X):
    """Paddle's ``ceil`` (forward only here: its gradient is zero everywhere it exists)."""
    return np.ceil(X)


# ---- gelu -------------------------------------------------------------------
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715

# The float16/float32 fast path. A cheap erf, ``_erf_fast``, is within _ERF_FAST_BOUND of ``erf``
# (measured: 2.1e-14). It gives each result v and a bound b on how far the float64 result with ``erf``
# may lie; where v - b and v + b round to the same float32, so does that result (rounding is
# monotonic). The others (the negative tail, where 1 + erf cancels, and values near a rounding
# midpoint: ~1% of N(0, 1) inputs) are computed again with ``erf``: the output is bit for bit the same.
_ERF_FAST_STEPS, _ERF_FAST_DEG, _ERF_FAST_BOUND = 8, 7, 1e-12
_ERF_FAST_MID = np.append((np.arange(6 * _ERF_FAST_STEPS) + 0.5) / _ERF_FAST_STEPS, 6.0)
_ROUNDING = 2.0 ** -52  # twice the largest relative rounding error of one float64 op


def _fit_erf_fast():
    """[power, step] coefficients of ``erf`` in powers of |x| - mid, fitted at 40 Chebyshev nodes of
    each step; the last step (|x| >= 6) is the constant 1."""
    coef = np.zeros((_ERF_FAST_DEG + 1, _ERF_FAST_MID.size))
    coef[0, -1] = 1.0
    t = 0.5 / _ERF_FAST_STEPS * np.cos(np.pi * (np.arange(40) + 0.5) / 40)
    for j, mid in enumerate(_ERF_FAST_MID[:-1]):
        coef[:, j] = np.polynomial.polynomial.polyfit(t, erf(mid + t), _ERF_FAST_DEG)
    return coef


_ERF_FAST_COEF = _fit_erf_fast()


def _erf_fast(z):
    """erf(z) from a degree-7 polynomial per step of 1/8 in |z| (the coefficients gathered per element;
    ``np.take`` gathers a 1-D table about twice as fast as fancy indexing)."""
    a = np.fmin(np.abs(z), 6.0)
    step = (a * _ERF_FAST_STEPS).astype(np.intp)
    t = a - np.take(_ERF_FAST_MID, step)
    p = np.take(_ERF_FAST_COEF[-1], step)
    for c in _ERF_FAST_COEF[-2::-1]:
        p *= t
        p += np.take(c, step)
    return np.copysign(p, z, out=p)


def _gelu_exact(X):
    x = X.astype(np.float64)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _gelu_grad_exact(X, dOut):
    x = X.astype(np.float64)
    return dOut * (0.5 * (1.0 + erf(x / math.sqrt(2.0))) + _gelu_density(x))


def _gelu_density(x):
    """x * exp(-x^2 / 2) / sqrt(2 pi), the x * pdf(x) term of gelu's derivative."""
    return x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _gelu_fast(X):
    """(v, b): gelu in float64 with ``_erf_fast``, and a bound on |v - _gelu_exact(X)|."""
    x = X.astype(np.float64)
    h = 0.5 * x
    v = _erf_fast(x / math.sqrt(2.0))
    v += 1.0
    v *= h
    bound = np.abs(h)
    bound *= 2 * (_ERF_FAST_BOUND + _ROUNDING)
    bound += 2 * _ROUNDING * np.abs(v)
    return v, bound


def _gelu_grad_fast(X, dOut):
    """(v, b): gelu_grad in float64 with ``_erf_fast``, and a bound on |v - _gelu_grad_exact(X, dOut)|."""
    x = X.astype(np.float64)
    v = _erf_fast(x / math.sqrt(2.0))
    v += 1.0
    v *= 0.5
    v += _gelu_density(x)
    bound = np.abs(v)
    bound *= 2 * _ROUNDING
    bound += _ERF_FAST_BOUND + _ROUNDING
    bound *= np.abs(dOut)
    v *= dOut
    bound += 2 * _ROUNDING * np.abs(v)
    return v, bound


_FAST_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))
_FAST_CHUNK = 1 << 16  # elements per call of a fast path: its float64 temporaries stay in cache


def _fast_then_exact(fast, exact, dtype, *arrays):
    """``exact(*arrays).astype(dtype)`` computed as ``fast`` over flat chunks of the same-shaped
    ``arrays``, then ``exact`` on the elements whose exact value might round differently."""
    flat = [a.reshape(-1) for a in arrays]
    out = np.empty(flat[0].size, dtype)
    bits = np.dtype(f"i{out.itemsize}")  # compared as bits: -0 and +0 differ
    redo = []
    with np.errstate(all="ignore"):  # inf and NaN are among the elements redone
        for lo in range(0, out.size, _FAST_CHUNK):
            v, bound = fast(*(f[lo:lo + _FAST_CHUNK] for f in flat))
            unsure = (v - bound).astype(dtype).view(bits) != (v + bound).astype(dtype).view(bits)
            unsure |= np.isnan(v)
            out[lo:lo + _FAST_CHUNK] = v
            redo.append(np.flatnonzero(unsure) + lo)
    redo = np.concatenate(redo) if redo else np.zeros(0, np.intp)
    if redo.size:
        out[redo] = exact(*(f[redo] for f in flat))
    return out.reshape(arrays[0].shape)


def gelu(X, *, approximate):
    if approximate:
        x = X.astype(np.float64)
        out = 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + _GELU_C * x ** 3)))
        return out.astype(X.dtype)
    if X.dtype in _FAST_DTYPES:
        return _fast_then_exact(_gelu_fast, _gelu_exact, X.dtype, X)
    return _gelu_exact(X).astype(X.dtype)


def gelu_grad(X, dOut, *, approximate):
    if approximate:
        x = X.astype(np.float64)
        t = np.tanh(_SQRT_2_OVER_PI * (x + _GELU_C * x ** 3))
        dt = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_C * x * x) * (1.0 - t * t)
        d = 0.5 * (1.0 + t) + 0.5 * x * dt
        return (dOut * d).astype(dOut.dtype)
    if dOut.dtype in _FAST_DTYPES and dOut.shape == X.shape:
        return _fast_then_exact(_gelu_grad_fast, _gelu_grad_exact, dOut.dtype, X, dOut)
    return _gelu_grad_exact(X, dOut).astype(dOut.dtype)


_register_unary("gelu", gelu, gelu_grad, "X", {"approximate": False},
                inplace=False, grad_inplace=False)


# ---- softmax ----------------------------------------------------------------
def softmax_values(X, axis):
    """Softmax along ``axis`` as Paddle computes it (shifted logits clipped at -64)."""
    shifted = X - X.max(axis=axis, keepdims=True)
    np.maximum(shifted, SOFTMAX_CLIP, out=shifted)
    e = np.exp(shifted, out=shifted)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def softmax(X, *, axis):
    return softmax_values(X, axis)


def softmax_grad(Out, dOut, *, axis):
    return Out * (dOut - (dOut * Out).sum(axis=axis, keepdims=True))


_register_unary("softmax", softmax, softmax_grad, "Out", {"axis": -1}, grad_inplace=False)


# ---- silu, leaky_relu, logsigmoid, reciprocal, hard_sigmoid ----------------------
def silu(X):
    return X * sigmoid(X)


def silu_grad(X, Out, dOut):
    sig = sigmoid(X)
    return dOut * sig * (1 + X * (1 - sig))


def leaky_relu(X, *, alpha):
    return np.where(X > 0, X, X * X.dtype.type(alpha))


def leaky_relu_grad(X, dOut, *, alpha):
    return np.where(X > 0, dOut, dOut * dOut.dtype.type(alpha))


def logsigmoid(X):
    """log(sigmoid(x)) = -(max(-x, 0) + log(exp(-max(-x, 0)) + exp(-x - max(-x, 0))))."""
    t = np.maximum(-X, 0)
    return -t - np.log(np.exp(-t) + np.exp(-X - t))


def logsigmoid_grad(X, dOut):
    return dOut * sigmoid(-X)


def reciprocal(X):
    with np.errstate(divide="ignore"):
        return 1 / X


def reciprocal_grad(Out, dOut):
    return -dOut * Out * Out


def hard_sigmoid(X, *, slope, offset):
    return np.clip(X * X.dtype.type(slope) + X.dtype.type(offset), 0, 1)


def hard_sigmoid_grad(Out, dOut, *, slope, offset):
    return np.where((Out > 0) & (Out < 1), dOut * dOut.dtype.type(slope), 0)


_register_unary("silu", silu, silu_grad, ("X", "Out"))
_register_unary("leaky_relu", leaky_relu, leaky_relu_grad, "X", {"alpha": float(np.float32(0.02))})
_register_unary("logsigmoid", logsigmoid, logsigmoid_grad, "X", inplace=False)
_register_unary("reciprocal", reciprocal, reciprocal_grad, "Out")
_register_unary("hard_sigmoid", hard_sigmoid, hard_sigmoid_grad, "Out",
                {"slope": float(np.float32(0.2)), "offset": 0.5}, inplace=False)


# ---- pow ------------------------------------------------------------------------
def _factor(FactorTensor, factor, dtype):
    if FactorTensor is not None:
        factor = np.asarray(FactorTensor).reshape(-1)[0]
    return dtype.type(factor)


@register_op("pow_grad", ["X", "FactorTensor?", "Out@GRAD"], ["X@GRAD"], {"factor": 1.0},
             infer_shape=grads_like(**{"X@GRAD": "X"}), inplace={"X@GRAD": "Out@GRAD"})
def pow_grad(X, FactorTensor, dOut, *, factor):
    f = _factor(FactorTensor, factor, X.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        return dOut * f * np.power(X, f - 1)


@register_op("pow", ["X", "FactorTensor?"], ["Out"], {"factor": 1.0},
             infer_shape=same_as("X", "Out"), inplace={"Out": "X"},
             grad=simple_grad("pow_grad", ["X", "FactorTensor", "Out@GRAD"], ["X@GRAD"]))
def pow_op(X, FactorTensor, *, factor):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.power(X, _factor(FactorTensor, factor, X.dtype))
