"""CUDA kernels for layer_norm, dropout, softmax_with_cross_entropy (and grads).

Mirrors Paddle's GPU ``LayerNormKernel``, ``DropoutKernel`` and
``CrossEntropyWithSoftmaxKernel``. layer_norm and its grad are built from
the shared elementwise kernels and a row-sum kernel, in the NumPy kernel's
order of roundings — which is Paddle's CPU kernel's (8-lane AVX sums for
float32 rows of 8 or more, sums in order otherwise); Paddle's GPU kernel
fuses them into one kernel with Welford sums.
dropout draws its keep mask on the host from the same generator as the CPU
kernel and copies it over, so both backends drop the same elements.
Cross-entropy runs one thread per row. Difference: a hard label out of
range gives a NaN loss instead of an error (checking would need a device to
host read).
"""
import numpy as np

from refimpl.core.random import dropout_keep
from refimpl.ops.nn_ops import dropout_seed
from refimpl.ops.registry import register_kernel

from . import ew
from .device import cuda, dev, empty, flat, launch, scalar_of, to_device
from .fmath import log64, sqrt64
from .ops_activation import row_layout, softmax_values
from .ops_creation import full
from .ops_math import f_add, f_div, f_mul, f_sub

TOLERABLE = 1e20


@ew.functor(1)
def f_std(DT):
    return lambda v, a, b: DT(sqrt64(v + b))


@ew.functor(2)
def f_mul_u8(DT):
    return lambda x, m, a, b: x * DT(m)


@ew.functor(2)
def f_keep_u8(DT):
    """dropout's output: x / a where the mask keeps it (a = 1 - p, or 1 when not upscaling), else +0."""
    return lambda x, m, a, b: x / a if m else DT(0)


@ew.functor(1)
def f_times(DT):
    return lambda x, a, b: x * a


@ew.functor(1)
def f_over(DT):
    return lambda x, a, b: x / a


def _rows(a, begin):
    a = dev(a)
    left = 1
    for d in a.shape[:begin]:
        left *= d
    return a.reshape((left, a.size // left if left else 0))


@cuda.jit
def _row_sums_kernel(x, out, n, lanes, zero):
    """out[r] = the sum of row r of a (rows, n) array: in order, or as Paddle's 8-lane AVX loop."""
    for r in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        base = r * n
        if not lanes:
            acc = zero
            for j in range(n):
                acc += x[base + j]
            out[r] = acc
            continue
        acc = cuda.local.array(8, np.float32)  # lanes are used for float32 rows only
        for k in range(8):
            acc[k] = zero
        rest = n % 8
        for j in range(0, n - rest, 8):
            for k in range(8):
                acc[k] += x[base + j + k]
        if rest:  # the last 8 elements, with the ones already added masked to 0
            for k in range(8):
                acc[k] += x[base + n - 8 + k] if k >= 8 - rest else zero
        out[r] = (acc[4] + acc[0] + (acc[5] + acc[1])) + (acc[6] + acc[2] + (acc[7] + acc[3]))


def _row_sums(x2, lanes=False):
    rows, n = x2.shape
    out = empty((rows,), x2.dtype)
    launch(_row_sums_kernel, rows, flat(x2), out, n, bool(lanes), x2.dtype.type(0))
    return out


def _row_means(x2, avx=True):
    """Row means as Paddle's CPU layer_norm: with ``avx``, float32 rows of 8 or more take the AVX
    kernel (8-lane sums times 1/n); others sum in order and divide by n (the NumPy kernel's order)."""
    dt, n = x2.dtype, x2.shape[1]
    if avx and dt == np.float32 and n >= 8:
        return ew.run1(f_times, _row_sums(x2, lanes=True), np.float32(1) / np.float32(n))
    return ew.run1(f_over, _row_sums(x2), dt.type(n))


def _col(v):
    return v.reshape((v.shape[0], 1))


# ---- layer_norm -----------------------------------------------------------------------------
def layer_norm(X, Scale, Bias, *, epsilon, begin_norm_axis):
    x = _rows(X, begin_norm_axis)
    dt = x.dtype
    mean = _row_means(x)
    d = ew.run_n(f_sub, [x, _col(mean)])
    var = _row_means(ew.run_n(f_mul, [d, d]))
    y = ew.run_n(f_div, [d, _col(ew.run1(f_std, var, 0, dt.type(epsilon)))])
    if Scale is not None:
        y = ew.run_n(f_mul, [y, dev(Scale).reshape((1, x.shape[1]))])
    if Bias is not None:
        y = ew.run_n(f_add, [y, dev(Bias).reshape((1, x.shape[1]))])
    lead = tuple(X.shape[:begin_norm_axis])
    return y.reshape(tuple(X.shape)), mean.reshape(lead), var.reshape(lead)


def layer_norm_grad(X, Scale, Bias, Mean, Variance, dY, *, epsilon, begin_norm_axis, need):
    x, dy = _rows(X, begin_norm_axis), _rows(dY, begin_norm_axis)
    dt = x.dtype
    rows, n = x.shape
    std = _col(ew.run1(f_std, dev(Variance).reshape((rows,)), 0, dt.type(epsilon)))
    xhat = ew.run_n(f_div, [ew.run_n(f_sub, [x, dev(Mean).reshape((rows, 1))]), std])
    dx = dscale = dbias = None
    if need[1] and Scale is not None:  # column sums, row after row
        dscale = ew.sum_axes(ew.run_n(f_mul, [dy, xhat]), (0,)).reshape(tuple(Scale.shape))
    if need[2] and Bias is not None:
        dbias = ew.sum_axes(dy, (0,)).reshape(tuple(Bias.shape))
    if need[0]:
        # as the NumPy kernel (Paddle's CPU kernel): Scale enters dx only when Scale@GRAD is computed
        use_scale = Scale is not None and need[1]
        g = ew.run_n(f_mul, [dy, dev(Scale).reshape((1, n))]) if use_scale else dy
        t = ew.run_n(f_sub, [g, _col(_row_means(g, avx=False))])
        m2 = _row_means(ew.run_n(f_mul, [g, xhat]), avx=False)
        t = ew.run_n(f_sub, [t, ew.run_n(f_mul, [xhat, _col(m2)])])
        dx = ew.run_n(f_div, [t, std]).reshape(tuple(X.shape))
    return dx, dscale, dbias


register_kernel("layer_norm", "cuda", layer_norm)
register_kernel("layer_norm_grad", "cuda", layer_norm_grad)


# ---- dropout ---------------------------------------------------------------------------------
def _keep_scale(p, dtype):
    return dtype.type(1) - dtype.type(p)


def dropout(X, Seed, *, dropout_prob, is_test, dropout_implementation, fix_seed, seed):
    upscale = dropout_implementation == "upscale_in_train"
    X = dev(X)
    if is_test:
        out = ew.run1(f_times, X, 1 if upscale else _keep_scale(dropout_prob, X.dtype))
        return out, empty((0,), np.uint8)
    seed = dropout_seed(None if Seed is None else scalar_of(Seed), fix_seed, seed)
    if np.float32(dropout_prob) == 1:  # as Paddle's kernel: all dropped, nothing drawn
        return full(X.shape, 0, X.dtype), to_device(np.zeros(tuple(X.shape), np.uint8))
    keep = dropout_keep(tuple(X.shape), dropout_prob, seed)  # the CPU kernel's draws, on the host
    mask = to_device(keep.astype(np.uint8))
    out = ew.run_n(f_keep_u8, [X, mask], _keep_scale(dropout_prob, X.dtype) if upscale else 1)
    return out, mask


def dropout_grad(Mask, dOut, *, dropout_prob, is_test, dropout_implementation):
    upscale = dropout_implementation == "upscale_in_train"
    dOut = dev(dOut)
    keep_p = _keep_scale(dropout_prob, dOut.dtype)
    if is_test:
        return ew.run1(f_times, dOut, 1 if upscale else keep_p)
    dx = ew.run_n(f_mul_u8, [dOut, Mask])
    if upscale:
        dx = ew.run1(f_over, dx, keep_p) if keep_p > 0 else full(dOut.shape, 0, dOut.dtype)
    return dx


register_kernel("dropout", "cuda", dropout)
register_kernel("dropout_grad", "cuda", dropout_grad)


# ---- softmax_with_cross_entropy ---------------------------------------------------------------
@cuda.jit
def _ce_hard(prob, lab, loss, n, inner, ignore, big):
    for r in range(cuda.grid(1), loss.size, cuda.gridsize(1)):
        c = lab[r]
        if c == ignore:
            loss[r] = 0
        elif c < 0 or c >= n:
            loss[r] = np.nan
        else:
            v = -log64(prob[(r // inner) * n * inner + r % inner + c * inner])
            loss[r] = big if v > big else (-big if v < -big else v)


@cuda.jit
def _ce_hard_grad(sm, lab, dloss, out, n, inner, ignore, use_softmax, zero):
    for r in range(cuda.grid(1), dloss.size, cuda.gridsize(1)):
        base = (r // inner) * n * inner + r % inner
        c = lab[r]
        s = zero if c == ignore else dloss[r]
        for j in range(n):
            out[base + j * inner] = sm[base + j * inner] * s if use_softmax else zero
        if c != ignore and 0 <= c < n:
            k = base + c * inner
            out[k] = out[k] - s if use_softmax else -s / sm[k]


@ew.functor(2)
def f_neg_log_times(DT):
    def nlt(lab, p, a, b):
        v = -DT(log64(p))
        v = a if v > a else (-a if v < -a else v)
        return lab * v
    return nlt


@ew.functor(3)
def f_soft_grad(DT):
    return lambda s, lab, d, a, b: (s - lab) * d if a else (-lab / s) * d


def softmax_with_cross_entropy(Logits, Label, *, soft_label, use_softmax, ignore_index, axis):
    Logits = dev(Logits)
    axis = axis % len(Logits.shape)
    prob = softmax_values(Logits, axis) if use_softmax else ew.run1(f_times, Logits, 1)
    loss_shape = tuple(1 if i == axis else d for i, d in enumerate(Logits.shape))
    rows, n, inner = row_layout(tuple(Logits.shape), axis)
    if soft_label:
        t = ew.run_n(f_neg_log_times, [dev(Label), prob], TOLERABLE)
        return prob, ew.sum_axes(t, (axis,), keep_shape=loss_shape)
    lab = _labels(Label, rows)
    loss = empty(loss_shape, Logits.dtype)
    launch(_ce_hard, rows, flat(prob), lab, flat(loss), n, inner, ignore_index,
           Logits.dtype.type(TOLERABLE))
    return prob, loss


def _labels(Label, rows):
    lab = dev(Label)
    if lab.dtype != np.int64:
        from .ops_manipulation import cast_to
        lab = cast_to(lab, np.int64)
    return lab.reshape((rows,))


def softmax_with_cross_entropy_grad(Label, Softmax, dLoss, *, soft_label, use_softmax, ignore_index, axis):
    Softmax = dev(Softmax)
    axis = axis % len(Softmax.shape)
    if soft_label:
        return ew.run_n(f_soft_grad, [Softmax, Label, dLoss], int(bool(use_softmax)), shape=tuple(Softmax.shape))
    rows, n, inner = row_layout(tuple(Softmax.shape), axis)
    out = empty(Softmax.shape, Softmax.dtype)
    launch(_ce_hard_grad, rows, flat(Softmax), _labels(Label, rows), flat(dev(dLoss)), flat(out), n, inner,
           ignore_index, bool(use_softmax), Softmax.dtype.type(0))
    return out


register_kernel("softmax_with_cross_entropy", "cuda", softmax_with_cross_entropy)
register_kernel("softmax_with_cross_entropy_grad", "cuda", softmax_with_cross_entropy_grad)
