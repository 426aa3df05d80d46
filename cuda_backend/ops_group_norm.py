"""CUDA kernels for ``refimpl/ops/group_norm_ops.py``: group_norm, instance_norm and their grads.

Mirrors Paddle's GPU ``GroupNormKernel`` / ``InstanceNormKernel`` (``paddle/phi/kernels/gpu/
group_norm_kernel.cu``, ``instance_norm_kernel.cu``) in what they compute, but in the NumPy kernels'
order of roundings (Paddle's CPU loops), so both backends agree bit for bit: one thread per
(sample, group) or per row adds its sums one element after the other from zero (group_norm's sums
through 8 running lanes, as the NumPy kernel and Paddle's CPU kernel), one thread per element
does the elementwise steps, and group_norm's inverse std is computed in float64 and rounded once.
Paddle's GPU kernels use block reductions (Welford for instance_norm) instead. NHWC inputs are
transposed to NCHW and the results back (a copy, no arithmetic).
"""
import math

import numpy as np

from refimpl.ops.group_norm_ops import check_group_norm, check_instance_norm
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, empty, flat, launch
from .fmath import sqrt64
from .ops_manipulation import transpose

_LANES = 8


# ---- group_norm ------------------------------------------------------------------------------
@cuda.jit
def _gn_stats(x, mean, var, inv, cpg, hw, count, zero, eps):
    """Per (n, group) i: the sums of x and x*x as Paddle's CPU loop adds them, mean, var and the
    inverse std (in float64, rounded into ``inv``'s dtype)."""
    rest = hw % 8
    blocks = (hw - rest) // 8
    for i in range(cuda.grid(1), mean.size, cuda.gridsize(1)):
        s, q = zero, zero
        for c in range(cpg):
            base = (i * cpg + c) * hw
            for lane in range(8):
                ls, lq = zero, zero
                for k in range(blocks):
                    v = x[base + k * 8 + lane]
                    ls += v
                    lq += v * v
                s += ls
                q += lq
            for t in range(hw - rest, hw):
                v = x[base + t]
                s += v
                q += v * v
        m = s / count
        d = q / count - m * m
        if d < zero:
            d = zero
        mean[i] = m
        var[i] = d
        inv[i] = 1.0 / math.sqrt(np.float64(d) + eps)


@cuda.jit
def _gn_apply(x, mean, inv, scale, bias, y, c_total, cpg, hw, has_scale, has_bias):
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        c = (i // hw) % c_total
        g = (i // hw) // cpg  # n * groups + group
        v = (x[i] - mean[g]) * inv[g]
        if has_scale:
            v = v * scale[c]
        if has_bias:
            v = v + bias[c]
        y[i] = v


def _nchw(a, data_layout):
    a = dev(a)
    if data_layout == "NCHW" or len(a.shape) < 3:
        return a
    r = len(a.shape)
    return transpose(a, [0, r - 1] + list(range(1, r - 1)))


def _back(a, shape, data_layout):
    if data_layout == "NCHW" or len(shape) < 3:
        return a.reshape(tuple(shape))
    r = len(shape)
    return transpose(a, [0] + list(range(2, r)) + [1])


def _dims(shape, groups, data_layout):
    shape = tuple(shape)
    c = shape[1] if data_layout == "NCHW" else shape[-1]
    hw = int(np.prod(shape, dtype=np.int64)) // (shape[0] * c) if shape[0] * c else 0
    return shape[0], c, c // groups, hw


def _or_dummy(a, dt):
    return (flat(dev(a)), True) if a is not None else (empty((1,), dt), False)


def group_norm(X, Scale, Bias, *, epsilon, groups, data_layout):
    check_group_norm("group_norm", X.shape, groups, data_layout)
    x = _nchw(X, data_layout)
    dt = x.dtype
    n, c, cpg, hw = _dims(X.shape, groups, data_layout)
    mean, var, inv = empty((n, groups), dt), empty((n, groups), dt), empty((n, groups), dt)
    launch(_gn_stats, n * groups, flat(x), flat(mean), flat(var), flat(inv), cpg, hw, dt.type(cpg * hw),
           dt.type(0), np.float64(epsilon))
    y = empty(x.shape, dt)
    (s, has_s), (b, has_b) = _or_dummy(Scale, dt), _or_dummy(Bias, dt)
    launch(_gn_apply, y.size, flat(x), flat(mean), flat(inv), s, b, flat(y), c, cpg, hw, has_s, has_b)
    return _back(y, X.shape, data_layout), mean, var


@cuda.jit
def _gn_grad_sums(y, dy, scale, bias, dps, dpb, c_total, cpg, hw, has_scale, has_bias, zero):
    """Per (n, group): sum((y - bias) * dy) and, with a scale, sum(dy * scale), in memory order."""
    for i in range(cuda.grid(1), dps.size, cuda.gridsize(1)):
        a, b = zero, zero
        for k in range(cpg * hw):
            j = i * cpg * hw + k
            ch = (j // hw) % c_total
            v = y[j]
            if has_bias:
                v = v - bias[ch]
            a += v * dy[j]
            if has_scale:
                b += dy[j] * scale[ch]
        dps[i] = a
        dpb[i] = b


@cuda.jit(device=True)
def _xhat(y, scale, bias, j, ch, has_scale, has_bias):
    v = y[j]
    if has_bias:
        v = v - bias[ch]
    if has_scale and scale[ch] != 0:
        v = v / scale[ch]
    return v


@cuda.jit
def _gn_grad_dx(y, dy, scale, bias, inv, dps, dpb, dx, c_total, cpg, hw, m_inv, has_scale, has_bias):
    for j in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        ch = (j // hw) % c_total
        g = (j // hw) // cpg
        xh = _xhat(y, scale, bias, j, ch, has_scale, has_bias)
        d = dy[j]
        if has_scale:
            d = d * scale[ch]
        dx[j] = ((d - (m_inv * dps[g]) * xh) - m_inv * dpb[g]) * inv[g]


@cuda.jit
def _gn_grad_params(y, dy, scale, bias, dscale, dbias, n, c_total, hw, has_scale, has_bias, zero):
    """Per channel: sum(xhat * dy) and sum(dy), sample after sample, pixels in order, from zero."""
    for ch in range(cuda.grid(1), c_total, cuda.gridsize(1)):
        a, b = zero, zero
        for s in range(n):
            for k in range(hw):
                j = (s * c_total + ch) * hw + k
                a += _xhat(y, scale, bias, j, ch, has_scale, has_bias) * dy[j]
                b += dy[j]
        dscale[ch] = a
        dbias[ch] = b


@cuda.jit
def _inv_std64(var, inv, eps):
    for i in range(cuda.grid(1), inv.size, cuda.gridsize(1)):
        inv[i] = 1.0 / math.sqrt(np.float64(var[i]) + eps)


def group_norm_grad(X, Scale, Bias, Y, Mean, Variance, dY, *, epsilon, groups, data_layout, need):
    check_group_norm("group_norm_grad", Y.shape, groups, data_layout)
    y, dy = _nchw(Y, data_layout), _nchw(dY, data_layout)
    dt = y.dtype
    n, c, cpg, hw = _dims(Y.shape, groups, data_layout)
    var = flat(dev(Variance))
    inv = empty(var.shape, dt)
    launch(_inv_std64, inv.size, var, inv, np.float64(epsilon))
    (s, has_s), (b, has_b) = _or_dummy(Scale, dt), _or_dummy(Bias, dt)
    dps, dpb = empty((n * groups,), dt), empty((n * groups,), dt)
    launch(_gn_grad_sums, n * groups, flat(y), flat(dy), s, b, dps, dpb, c, cpg, hw, has_s, has_b, dt.type(0))
    dx = dscale = dbias = None
    if need[0]:
        dxv = empty(y.shape, dt)
        launch(_gn_grad_dx, dxv.size, flat(y), flat(dy), s, b, inv, dps, dpb, flat(dxv), c, cpg, hw,
               dt.type(1.0 / (cpg * hw)), has_s, has_b)
        dx = _back(dxv, Y.shape, data_layout)
    if (need[1] and Scale is not None) or (need[2] and Bias is not None):
        ds, db = empty((c,), dt), empty((c,), dt)
        launch(_gn_grad_params, c, flat(y), flat(dy), s, b, ds, db, n, c, hw, has_s, has_b, dt.type(0))
        dscale = ds.reshape(tuple(Scale.shape)) if need[1] and Scale is not None else None
        dbias = db.reshape(tuple(Bias.shape)) if need[2] and Bias is not None else None
    return dx, dscale, dbias


# ---- instance_norm ---------------------------------------------------------------------------
@cuda.jit
def _in_stats(x, mean, inv, hw, count, zero, eps, one):
    for r in range(cuda.grid(1), mean.size, cuda.gridsize(1)):
        s = zero
        for k in range(hw):
            s += x[r * hw + k]
        m = s / count
        q = zero
        for k in range(hw):
            d = x[r * hw + k] - m
            q += d * d
        mean[r] = m
        inv[r] = sqrt64(q / count + eps)  # the float64 root rounded once: the correctly rounded root
        inv[r] = one / inv[r]


@cuda.jit
def _in_apply(x, mean, inv, scale, bias, y, c_total, hw, has_scale, has_bias, one, zero):
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        r = i // hw
        ch = r % c_total
        s = scale[ch] if has_scale else one
        b = bias[ch] if has_bias else zero
        y[i] = (x[i] - mean[r]) * inv[r] * s + b


def instance_norm(X, Scale, Bias, *, epsilon):
    x = dev(X)
    check_instance_norm("instance_norm", x.shape)
    dt = x.dtype
    n, c = x.shape[0], x.shape[1]
    hw = x.size // (n * c) if n * c else 0
    mean, inv = empty((n * c,), dt), empty((n * c,), dt)
    launch(_in_stats, n * c, flat(x), mean, inv, hw, dt.type(hw), dt.type(0), dt.type(epsilon), dt.type(1))
    (s, has_s), (b, has_b) = _or_dummy(Scale, dt), _or_dummy(Bias, dt)
    y = empty(x.shape, dt)
    launch(_in_apply, y.size, flat(x), mean, inv, s, b, flat(y), c, hw, has_s, has_b, dt.type(1), dt.type(0))
    return y, mean, inv


@cuda.jit
def _in_grad_rows(x, mean, inv, dy, dy_sum, dyx_sum, hw, zero):
    """Per row: sum(dy) and sum(dy * xhat) (and the same for the parameter grads), from zero in order."""
    for r in range(cuda.grid(1), dy_sum.size, cuda.gridsize(1)):
        a, b = zero, zero
        for k in range(hw):
            j = r * hw + k
            a += dy[j]
            b += dy[j] * ((x[j] - mean[r]) * inv[r])
        dy_sum[r] = a
        dyx_sum[r] = b


@cuda.jit
def _in_grad_dx(x, mean, inv, dy, scale, dy_sum, dyx_sum, dx, c_total, hw, count, has_scale, one):
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        r = i // hw
        s = scale[r % c_total] if has_scale else one
        xh = (x[i] - mean[r]) * inv[r]
        dx[i] = s * inv[r] * (dy[i] - dy_sum[r] / count - xh * (dyx_sum[r] / count))


@cuda.jit
def _in_grad_params(dy_sum, dyx_sum, dscale, dbias, n, c_total, zero):
    for ch in range(cuda.grid(1), c_total, cuda.gridsize(1)):
        a, b = zero, zero
        for s in range(n):
            a += dyx_sum[s * c_total + ch]
            b += dy_sum[s * c_total + ch]
        dscale[ch] = a
        dbias[ch] = b


def instance_norm_grad(X, Scale, Bias, SavedMean, SavedVariance, dY, *, epsilon, need):
    x, dy = dev(X), dev(dY)
    check_instance_norm("instance_norm_grad", x.shape)
    dt = x.dtype
    n, c = x.shape[0], x.shape[1]
    hw = x.size // (n * c) if n * c else 0
    mean, inv = flat(dev(SavedMean)), flat(dev(SavedVariance))
    dy_sum, dyx_sum = empty((n * c,), dt), empty((n * c,), dt)
    launch(_in_grad_rows, n * c, flat(x), mean, inv, flat(dy), dy_sum, dyx_sum, hw, dt.type(0))
    dx = dscale = dbias = None
    if need[1] and need[2] and Scale is not None and Bias is not None:
        dscale, dbias = empty((c,), dt), empty((c,), dt)
        launch(_in_grad_params, c, dy_sum, dyx_sum, dscale, dbias, n, c, dt.type(0))
    if need[0]:
        s, has_s = _or_dummy(Scale, dt)
        dx = empty(x.shape, dt)
        launch(_in_grad_dx, dx.size, flat(x), mean, inv, flat(dy), s, dy_sum, dyx_sum, flat(dx), c, hw,
               dt.type(hw), has_s, dt.type(1))
    return dx, dscale, dbias


register_kernel("group_norm", "cuda", group_norm)
register_kernel("group_norm_grad", "cuda", group_norm_grad)
register_kernel("instance_norm", "cuda", instance_norm)
register_kernel("instance_norm_grad", "cuda", instance_norm_grad)
