"""Activation ops: relu, tanh, sigmoid, gelu, softmax, square, exp, log, sqrt.

Each mirrors the Paddle op of the same name and its ``*_grad`` op with
Paddle's grad slots: relu/tanh/sigmoid/exp/sqrt/softmax grads read ``Out``
and ``Out@GRAD``; gelu/square/log grads read ``X`` and ``Out@GRAD``. The
in-place pairs are Paddle's (``Out`` may reuse ``X``; ``X@GRAD`` may reuse
``Out@GRAD``), except gelu, gelu_grad and softmax_grad, which have none.

Differences from Paddle: ``gelu`` (exact form) is computed in float64 with
the erf below and cast back, where Paddle uses float32 ``erf``; results agree
to float32 rounding, and for very negative inputs (where ``1 + erf`` cancels)
ours are the more accurate. Like Paddle, softmax clips ``x - max(x)`` at -64.
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


# erf(x)/x on [0, 6) as degree-28 Chebyshev interpolants on five pieces
# (relative error ~1e-15 even near 0); erf(|x| >= 6) is 1 in float64.
_ERF_EDGES = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0)
_ERF_PIECES = [np.polynomial.Chebyshev.interpolate(_erf_over_x, 28, domain=[lo, hi])
               for lo, hi in zip(_ERF_EDGES[:-1], _ERF_EDGES[1:])]


def erf(x):
    """The error function, vectorised, in float64 (relative error ~1e-15)."""
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
    """Register ``name`` (X -> Out) and ``name_grad`` ([reads, Out@GRAD] -> X@GRAD)."""
    attrs = attrs or {}
    gname = name + "_grad"
    ins = [reads, "Out@GRAD"]
    register_op(gname, ins, ["X@GRAD"], attrs, infer_shape=grads_like(**{"X@GRAD": reads}),
                inplace={"X@GRAD": "Out@GRAD"} if grad_inplace else None)(grad_kernel)
    register_op(name, ["X"], ["Out"], attrs, infer_shape=same_as("X", "Out"),
                grad=simple_grad(gname, ins, ["X@GRAD"]),
                inplace={"Out": "X"} if inplace else None)(fwd)


# ---- relu, tanh, sigmoid ------------------------------------------------------
def relu(X):
    return np.maximum(X, 0)


def relu_grad(Out, dOut):
    return np.where(Out > 0, dOut, 0)


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


# ---- gelu -------------------------------------------------------------------
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


def gelu(X, *, approximate):
    x = X.astype(np.float64)
    if approximate:
        out = 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + _GELU_C * x ** 3)))
    else:
        out = 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    return out.astype(X.dtype)


def gelu_grad(X, dOut, *, approximate):
    x = X.astype(np.float64)
    if approximate:
        t = np.tanh(_SQRT_2_OVER_PI * (x + _GELU_C * x ** 3))
        dt = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_C * x * x) * (1.0 - t * t)
        d = 0.5 * (1.0 + t) + 0.5 * x * dt
    else:
        d = 0.5 * (1.0 + erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return (dOut * d).astype(dOut.dtype)


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
