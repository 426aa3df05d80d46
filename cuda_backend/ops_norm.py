"""CUDA kernels for the ops of ``refimpl/ops/norm_ops.py``: batch_norm and batch_norm_grad.

Mirrors Paddle's GPU ``BatchNormKernel`` / ``BatchNormGradKernel``
(``paddle/phi/kernels/gpu/batch_norm_kernel.cu``, ``batch_norm_grad_kernel.cu``) in what they
compute, but in the NumPy kernel's order of roundings (Paddle's CPU kernel's, see norm_ops.py),
so both backends agree bit for bit: per-channel sums are ``ew.sum_axes`` (NumPy's pairwise sum
over the HW elements of each (n, c), then the rows in order), every other step one elementwise
kernel per NumPy expression (``.copy()`` a device-to-device copy). Paddle's GPU kernels instead use
cuDNN or Welford block reductions.
"""

from refimpl.core.errors import InvalidArgument
from refimpl.ops.norm_ops import PARAM_SLOTS, affine_defaults, check_run, is_test_mode, uses_global_stats
from refimpl.ops.registry import register_kernel

from . import ew
from .device import copy, dev, empty, scalar_of
from .fmath import sqrt64
from .ops_creation import full
from .ops_math import f_mul, f_sub
from .ops_nn import f_over


@ew.functor(1)
def f_inv_sqrt_train(DT):
    """sqrt(1 / (v + eps)): Paddle's CPU kernel's saved inverse std."""
    return lambda v, a, b: DT(sqrt64(DT(1) / (v + a)))


@ew.functor(1)
def f_inv_sqrt_global(DT):
    """1 / sqrt(v + eps): the inverse std of the running variance."""
    return lambda v, a, b: DT(1) / DT(sqrt64(v + a))


@ew.functor(2)
def f_blend(DT):
    """running * momentum + batch * (1 - momentum)."""
    return lambda r, s, a, b: r * a + s * b


@ew.functor(3)
def f_affine(DT):
    return lambda x, s, t, a, b: x * s + t


@ew.functor(3)
def f_mul3(DT):
    return lambda x, y, z, a, b: x * y * z


@ew.functor(2)
def f_dx_lead(DT):
    """dy * N * HW - dy_sum."""
    return lambda d, s, a, b: d * a * b - s


def _views(x, data_layout):
    if data_layout == "NCHW" and len(x.shape) > 2:
        n, c = x.shape[0], x.shape[1]
        return x.reshape((n, c, x.size // (n * c))), (1, c, 1)
    c = tuple(x.shape)[-1]
    return x.reshape((x.size // c, c)), (1, c)


def channel_sums(v):
    if len(v.shape) == 3:
        v = ew.sum_axes(v, (2,))
    return ew.sum_axes(v, (0,))


def batch_norm(X, Scale, Bias, Mean, Variance, MomentumTensor, *, momentum, epsilon, data_layout,
               is_test, use_global_stats, trainable_statistics):
    X, Scale, Bias, Mean, Variance = (dev(a) for a in (X, Scale, Bias, Mean, Variance))
    check_run("batch_norm", X, zip(PARAM_SLOTS, (Scale, Bias, Mean, Variance)), data_layout)
    Scale, Bias = affine_defaults(X, Scale, Bias, Mean, data_layout, full)
    dt = X.dtype
    T = dt.type
    xv, cshape = _views(X, data_layout)
    count = X.size // xv.shape[1]
    reserve = empty((0,), dt)
    if uses_global_stats(is_test, use_global_stats, trainable_statistics):
        mean, inv_std = copy(Mean), ew.run1(f_inv_sqrt_global, Variance, T(epsilon))
        mean_out, var_out = copy(Mean), copy(Variance)
    elif count == 1:
        return (copy(X), copy(Mean), copy(Variance), full(Mean.shape, 0, dt), full(Mean.shape, 0, dt),
                reserve)
    else:
        mean = ew.run1(f_over, channel_sums(xv), T(count))
        d = ew.run_n(f_sub, [xv, mean.reshape(cshape)])
        var = ew.run1(f_over, channel_sums(ew.run_n(f_mul, [d, d])), T(count))
        m = float(scalar_of(MomentumTensor)) if MomentumTensor is not None else momentum
        mean_out = ew.run_n(f_blend, [Mean, mean], T(m), T(1.0 - m))
        var_out = ew.run_n(f_blend, [Variance, var], T(m), T(1.0 - m))
        inv_std = ew.run1(f_inv_sqrt_train, var, T(epsilon))
    new_scale = ew.run_n(f_mul, [inv_std, Scale])
    new_bias = ew.run_n(f_sub, [Bias, ew.run_n(f_mul, [ew.run_n(f_mul, [mean, inv_std]), Scale])])
    y = ew.run_n(f_affine, [xv, new_scale.reshape(cshape), new_bias.reshape(cshape)], shape=tuple(xv.shape))
    if is_test_mode(is_test, trainable_statistics):  # 0-D zeros, as the NumPy kernel
        mean, inv_std = full((), 0, mean.dtype), full((), 0, inv_std.dtype)
    return y.reshape(tuple(X.shape)), mean_out, var_out, mean, inv_std, reserve


def batch_norm_grad(X, Scale, Bias, Mean, Variance, SavedMean, SavedVariance, ReserveSpace, MeanOut,
                    VarianceOut, dY, *, momentum, epsilon, data_layout, is_test, use_global_stats,
                    trainable_statistics, need):
    X, Scale, dY = dev(X), dev(Scale), dev(dY)
    check_run("batch_norm_grad", X, (("Scale", Scale),), data_layout)
    Scale, _ = affine_defaults(X, Scale, None, dev(SavedMean), data_layout, full)
    if tuple(dY.shape) != tuple(X.shape):
        raise InvalidArgument(f"batch_norm_grad: Y@GRAD has shape {list(dY.shape)}, X {list(X.shape)}")
    dt = X.dtype
    T = dt.type
    xv, cshape = _views(X, data_layout)
    dy = dY.reshape(tuple(xv.shape))
    count = X.size // xv.shape[1]
    use_global = is_test or use_global_stats
    if use_global:
        mean = dev(Mean if Mean is not None else MeanOut)
        var = dev(Variance if Variance is not None else VarianceOut)
        if mean is None or var is None:
            raise InvalidArgument("batch_norm_grad: global statistics need input Mean/Variance or "
                                  "MeanOut/VarianceOut, none was given")
        inv_std = ew.run1(f_inv_sqrt_global, var, T(epsilon))
    else:
        mean, inv_std = dev(SavedMean), dev(SavedVariance)
    if count == 1 and not use_global:
        return ((copy(dY) if need[0] else None), (full(Scale.shape, 0, dt) if need[1] else None),
                (full(Scale.shape, 0, dt) if need[2] else None))
    xm = ew.run_n(f_sub, [xv, mean.reshape(cshape)])
    dy_sum = channel_sums(dy)
    dy_xhat_sum = channel_sums(ew.run_n(f_mul3, [xm, inv_std.reshape(cshape), dy]))
    dx = None
    if need[0]:
        k = ew.run1(f_over, ew.run_n(f_mul, [Scale, inv_std]), T(1 if use_global else count))
        if use_global:
            dx = ew.run_n(f_mul, [k.reshape(cshape), dy])
        else:
            lead = ew.run_n(f_dx_lead, [dy, dy_sum.reshape(cshape)], T(X.shape[0]), T(count // X.shape[0]))
            tail = ew.run_n(f_mul3, [xm, dy_xhat_sum.reshape(cshape), inv_std.reshape(cshape)],
                            shape=tuple(xv.shape))
            dx = ew.run_n(f_mul, [k.reshape(cshape), ew.run_n(f_sub, [lead, tail])])
        dx = dx.reshape(tuple(X.shape))
    return dx, (dy_xhat_sum if need[1] else None), (dy_sum if need[2] else None)


register_kernel("batch_norm", "cuda", batch_norm)
register_kernel("batch_norm_grad", "cuda", batch_norm_grad)
