"""Normalisation and regularisation ops: layer_norm and dropout (+ grads).

``layer_norm`` mirrors Paddle's op: X, Scale?, Bias? -> Y, Mean, Variance,
normalising over the dims from ``begin_norm_axis`` on; Mean and Variance
are shaped like X's leading dims (``x.shape[:begin_norm_axis]``, as Paddle
3.3.1 gives them; ``[N]`` for a 2-D X). ``layer_norm_grad`` reads X, Scale,
Bias (no need buffer: only its shape), Mean, Variance and Y@GRAD. Both round
every step in the order of Paddle's CPU kernels (sums included), which decides
the gradient of short rows: see ``_ln_mean_var`` and ``layer_norm_grad``.

``dropout`` mirrors Paddle's op: X, Seed? -> Out, Mask (uint8, 1 = kept);
an element is dropped when a uniform draw is below ``dropout_prob``.
``downgrade_in_infer`` leaves kept values as they are in training and scales
by ``1 - p`` at test time; ``upscale_in_train`` divides kept values by
``1 - p`` in training and is the identity at test time. With ``is_test``
no mask is drawn: Mask is an empty uint8 array (Paddle leaves it without
memory) and ``dropout_grad`` does not read it.
The grad op reads Mask and Out@GRAD.

The mask is Paddle's CPU mask: one ``std::uniform_real_distribution<float>(0, 1)``
draw per element in row-major order from the global engine (``refimpl.core.random``),
or from a fresh engine seeded with a non-zero ``Seed`` input; ``dropout_prob``
1 drops everything without drawing.

Differences from Paddle: Paddle's extra attrs ``seed`` and ``fix_seed`` are
not proto attrs and are not declared here.
"""
import functools
import operator

import numpy as np

from refimpl.core.random import dropout_keep

from .common import f32, first, grads_like
from .grad_maker import simple_grad
from .registry import register_op

_prod = functools.partial(functools.reduce, operator.mul)


# ---- layer_norm -------------------------------------------------------------
_LN_ATTRS = {"epsilon": f32(1e-5), "begin_norm_axis": 1}


def _ln_infer(ins, attrs):
    shape, dt = first(ins, "X")
    lead = tuple(shape[:attrs["begin_norm_axis"]])
    return {"Y": (tuple(shape), dt), "Mean": (lead, dt), "Variance": (lead, dt)}


def _rows(a, begin_norm_axis):
    """``a`` as a 2-D [left, right] matrix (a view)."""
    return a.reshape(_prod(a.shape[:begin_norm_axis], 1), -1)


def _row_sums_in_order(a):
    """Row sums of a 2-D array added one element after the other, in a's dtype. NumPy reduces an outer
    axis of a C-contiguous array in order, one rounded add per row, so these are the column sums of
    a C-contiguous copy of a's transpose (``np.ascontiguousarray`` copies the whole array here: the
    price of the in-order sums); float16 (whose reduce adds in float32) takes cumsum, which rounds
    every step."""
    if a.dtype in (np.float32, np.float64):
        return np.add.reduce(np.ascontiguousarray(a.T), axis=0)
    return np.cumsum(a, axis=1, dtype=a.dtype)[:, -1] if a.shape[1] else np.zeros(a.shape[0], a.dtype)


def _row_sums_8_lanes(a):
    """Row sums as Paddle's AVX float32 kernel adds them (rows of 8 or more): 8 running lane sums over
    blocks of 8; a ragged tail is the row's last 8 elements with the ones already added masked to 0;
    then lanes i and i+4 are added, and the 4 results as (l0+l1)+(l2+l3)."""
    right = a.shape[1]
    rest = right % 8
    lanes = np.zeros((a.shape[0], 8), a.dtype)
    for j in range(0, right - rest, 8):
        lanes += a[:, j:j + 8]
    if rest:
        tail = np.zeros_like(lanes)
        tail[:, 8 - rest:] = a[:, right - rest:]
        lanes += tail
    four = lanes[:, 4:] + lanes[:, :4]
    return (four[:, 0] + four[:, 1]) + (four[:, 2] + four[:, 3])


def _ln_mean_var(x):
    """Mean and (biased) variance per row, rounded as Paddle's CPU layer_norm kernel rounds them:
    float32 rows of 8 or more take the AVX kernel (sums times 1/right), others a plain loop (sums / right)."""
    right = x.shape[1]
    if x.dtype == np.float32 and right >= 8:
        inv = np.float32(1) / np.float32(right)
        mean = _row_sums_8_lanes(x) * inv
        d = x - mean[:, None]
        return mean, d, _row_sums_8_lanes(d * d) * inv
    n = x.dtype.type(right)
    mean = _row_sums_in_order(x) / n
    d = x - mean[:, None]
    return mean, d, _row_sums_in_order(d * d) / n


@register_op("layer_norm", ["X", "Scale?", "Bias?"], ["Y", "Mean", "Variance"], _LN_ATTRS,
             infer_shape=_ln_infer,
             grad=simple_grad("layer_norm_grad", ["X", "Scale", "Bias", "Mean", "Variance", "Y@GRAD"],
                              ["X@GRAD", "Scale@GRAD", "Bias@GRAD"]))
def layer_norm(X, Scale, Bias, *, epsilon, begin_norm_axis):
    """y = (x - mean) / sqrt(var + eps) * scale + bias, each step rounded in X's dtype as Paddle does."""
    mean, y, var = _ln_mean_var(_rows(X, begin_norm_axis))
    y /= np.sqrt(var + X.dtype.type(epsilon))[:, None]
    if Scale is not None:
        y *= Scale.reshape(-1)
    if Bias is not None:
        y += Bias.reshape(-1)
    lead = X.shape[:begin_norm_axis]
    return y.reshape(X.shape), mean.reshape(lead), var.reshape(lead)


def _ln_grad_infer(ins, attrs):
    return grads_like(**{"X@GRAD": "X", "Scale@GRAD": "Scale", "Bias@GRAD": "Bias"})(ins, attrs)


@register_op("layer_norm_grad", ["X", "Scale?", "Bias?", "Mean", "Variance", "Y@GRAD"],
             ["X@GRAD", "Scale@GRAD", "Bias@GRAD"], _LN_ATTRS, infer_shape=_ln_grad_infer,
             no_need_buffer=["Bias"])
def layer_norm_grad(X, Scale, Bias, Mean, Variance, dY, *, epsilon, begin_norm_axis, need):
    """Bias may be a shape-only meta (no need buffer): only Bias.shape is read.

    In the order of Paddle's CPU kernel, each step rounded in X's dtype (with rows of 2 the true
    gradient is a tiny difference of O(1) terms, so the order decides the result):
    xhat = (x - mean) / sqrt(var + eps); dbias, dscale = column sums (row after row) of dy, xhat * dy;
    g = dy * scale; dx = ((g - rowmean(g)) - xhat * rowmean(g * xhat)) / sqrt(var + eps),
    rowmean = sum in order / right. Like Paddle's CPU kernel, dx leaves Scale out (g = dy) when
    Scale@GRAD is not computed (a Scale that does not need a gradient).
    """
    x, dy = _rows(X, begin_norm_axis), _rows(dY, begin_norm_axis)
    std = np.sqrt(Variance.reshape(-1) + X.dtype.type(epsilon))[:, None]
    xhat = (x - Mean.reshape(-1)[:, None]) / std
    dx = dscale = dbias = None
    if need[1] and Scale is not None:
        dscale = _row_sums_in_order((dy * xhat).T).reshape(Scale.shape)
    if need[2] and Bias is not None:
        dbias = _row_sums_in_order(dy.T).reshape(Bias.shape)
    if need[0]:
        n = X.dtype.type(x.shape[1])
        g = dy * Scale.reshape(-1) if Scale is not None and need[1] else dy
        dx = g - (_row_sums_in_order(g) / n)[:, None]
        dx -= xhat * (_row_sums_in_order(g * xhat) / n)[:, None]
        dx /= std
        dx = dx.reshape(X.shape)
    return dx, dscale, dbias


# ---- dropout ------------------------------------------------------------------
_DROPOUT_ATTRS = {"dropout_prob": 0.5, "is_test": False,
                  "dropout_implementation": "downgrade_in_infer"}


def _keep_scale(p, dtype):
    """1 - p computed in the data type, as Paddle's kernels do."""
    return dtype.type(1) - dtype.type(p)


def dropout_seed(Seed, fix_seed: bool, seed: int) -> int:
    """The seed Paddle's dropout kernel uses: the Seed input, else ``seed`` if ``fix_seed``, else 0
    (0: draw from the global generator)."""
    if Seed is not None:
        return int(np.asarray(Seed).reshape(-1)[0])
    return int(seed) if fix_seed else 0


def _dropout_infer(ins, attrs):
    shape, dt = first(ins, "X")
    return {"Out": (tuple(shape), dt), "Mask": (tuple(shape), "uint8")}


@register_op("dropout", ["X", "Seed?"], ["Out", "Mask"], _DROPOUT_ATTRS, infer_shape=_dropout_infer,
             grad=simple_grad("dropout_grad", ["Mask", "Out@GRAD"], ["X@GRAD"]),
             extra_attrs={"fix_seed": False, "seed": 0})
def dropout(X, Seed, *, dropout_prob, is_test, dropout_implementation, fix_seed, seed):
    upscale = dropout_implementation == "upscale_in_train"
    if is_test:
        # no mask is drawn in test mode; an empty one keeps the var "written" as in Paddle
        return (X.copy() if upscale else X * _keep_scale(dropout_prob, X.dtype)), np.empty((0,), np.uint8)
    seed = dropout_seed(Seed, fix_seed, seed)
    if np.float32(dropout_prob) == 1:  # as Paddle's kernel: all dropped, nothing drawn
        return np.zeros_like(X), np.zeros(X.shape, np.uint8)
    keep = dropout_keep(X.shape, dropout_prob, seed)
    kept = X / _keep_scale(dropout_prob, X.dtype) if upscale else X
    return np.where(keep, kept, X.dtype.type(0)), keep.astype(np.uint8)


@register_op("dropout_grad", ["Mask", "Out@GRAD"], ["X@GRAD"], _DROPOUT_ATTRS,
             infer_shape=grads_like(**{"X@GRAD": "Out@GRAD"}))
def dropout_grad(Mask, dOut, *, dropout_prob, is_test, dropout_implementation):
    upscale = dropout_implementation == "upscale_in_train"
    keep_p = _keep_scale(dropout_prob, dOut.dtype)
    if is_test:
        return dOut.copy() if upscale else dOut * keep_p
    dx = dOut * Mask
    if upscale:
        dx = dx / keep_p if keep_p > 0 else np.zeros_like(dOut)
    return dx
