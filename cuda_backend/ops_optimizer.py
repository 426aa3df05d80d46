"""CUDA kernels for refimpl.ops.optimizer_ops: sgd, momentum, adam, adamw, in place.

Mirrors Paddle's GPU optimizer kernels (one fused elementwise kernel per
update) with the CPU kernels' formulas and rounding order: the learning rate
and beta powers are read on the device (no host round trip), Param and the
accumulators are updated in place and returned as ParamOut etc., and the
beta powers are advanced by a second one-thread launch after the update has
read them. ``SkipUpdate`` and the ``Beta*Tensor`` inputs are read back to
the host, as Paddle's CPU path does.
"""
import numpy as np

from refimpl.ops.optimizer_ops import _same_shape, adam_kernels
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, flat, kernel_factory, launch, launch_config, scalar_of
from .fmath import sqrt64
from .ops_manipulation import cast_to


def _lr(LearningRate, dtype):
    lr = dev(LearningRate)
    return flat(lr if lr.dtype == dtype else cast_to(lr, dtype))


def _target(Param, MasterParam, multi_precision):
    return dev(MasterParam) if (multi_precision and MasterParam is not None) else dev(Param)


def _sync(Param, p):
    """After updating a master copy, cast it back into Param (in place when Param is on the device)."""
    if p is Param:
        return Param
    out = dev(Param)
    out.copy_to_device(cast_to(p, out.dtype))
    return out


# ---- sgd --------------------------------------------------------------------------------------
@cuda.jit
def _sgd(p, g, lr):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        p[i] = p[i] - g[i] * lr[0]


def sgd(Param, LearningRate, Grad, MasterParam, *, multi_precision):
    p = _target(Param, MasterParam, multi_precision)
    _same_shape("sgd", p, Grad)
    launch(_sgd, p.size, flat(p), flat(dev(Grad)), _lr(LearningRate, p.dtype))
    master = multi_precision and MasterParam is not None
    return (_sync(Param, p) if master else p), (p if master else None)


# ---- momentum ------------------------------------------------------------------------------------
@cuda.jit
def _momentum(p, g, v, lr, mu, coeff, l2, nesterov):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        gi = g[i]
        if l2:
            gi = gi + p[i] * coeff
        vi = v[i] * mu
        vi = vi + gi
        v[i] = vi
        if nesterov:
            s = vi * mu
            s = s + gi
            s = s * lr[0]
        else:
            s = vi * lr[0]
        p[i] = p[i] - s


def momentum(Param, Grad, Velocity, LearningRate, MasterParam, *, mu, use_nesterov, regularization_method,
             regularization_coeff, multi_precision, rescale_grad):
    p = _target(Param, MasterParam, multi_precision)
    _same_shape("momentum", p, Grad)
    v = dev(Velocity)
    dt = p.dtype.type
    launch(_momentum, p.size, flat(p), flat(dev(Grad)), flat(v), _lr(LearningRate, p.dtype), dt(mu),
           dt(regularization_coeff), regularization_method == "l2_decay", bool(use_nesterov))
    master = multi_precision and MasterParam is not None
    return (_sync(Param, p) if master else p), v, (p if master else None)


# ---- adam / adamw -----------------------------------------------------------------------------------
@cuda.jit(device=True)
def fused64(a, b, c):
    """a * b + c rounded once to float64 (exact for float32 inputs up to that one rounding)."""
    return np.float64(a) * np.float64(b) + np.float64(c)


@kernel_factory
def _adam_kernel(DT):
    """The NumPy kernel's order: float32 with Paddle's AVX fused multiply-adds, other dtypes step by step."""
    one = DT(1)
    fused = DT is np.float32

    @cuda.jit
    def adam(p, g, lr, m1, m2, m2max, amsgrad, b1pow, b2pow, b1, b2, eps, ratio, coeff):
        b1p, b2p = DT(b1pow[0]), DT(b2pow[0])
        lr0 = DT(lr[0])
        root = DT(sqrt64(one - b2p))
        lr_t = lr0 * (root / (one - b1p)) if fused else lr0 * root / (one - b1p)
        eps_t = eps * root
        rate = lr0 * ratio * coeff
        c1, c2 = one - b1, one - b2
        for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
            pi = p[i]
            gi = g[i]
            if fused:
                if coeff != 0:  # adamw: decoupled weight decay first
                    pi = DT(fused64(pi, -rate, pi))
                a = DT(fused64(b1, m1[i], gi * c1))
                s = gi * gi
                q = DT(fused64(b2, m2[i], s * c2))
            else:
                if coeff != 0:
                    pi = pi - pi * rate
                a = m1[i] * b1
                a = a + gi * c1
                s = gi * c2
                s = s * gi
                q = m2[i] * b2
                q = q + s
            m1[i] = a
            m2[i] = q
            if amsgrad:
                if m2max[i] > q:
                    q = m2max[i]
                m2max[i] = q
            step = a / (DT(sqrt64(q)) + eps_t)
            if fused:
                p[i] = DT(fused64(step, -lr_t, pi))
            else:
                p[i] = pi - step * lr_t
    return adam


@cuda.jit
def _advance_pows(b1pow, b2pow, b1, b2):
    if cuda.grid(1) == 0:
        b1pow[0] = b1pow[0] * b1
        b2pow[0] = b2pow[0] * b2


def _adam(Param, Grad, LearningRate, Moment1, Moment2, Moment2Max, Beta1Pow, Beta2Pow, MasterParam,
          SkipUpdate, Beta1Tensor, Beta2Tensor, EpsilonTensor, attrs, decay):
    m2max = dev(Moment2Max) if attrs["amsgrad"] else None
    m1, m2, b1pow, b2pow = dev(Moment1), dev(Moment2), dev(Beta1Pow), dev(Beta2Pow)
    if SkipUpdate is not None and bool(scalar_of(SkipUpdate)):
        return dev(Param), m1, m2, m2max, b1pow, b2pow, dev(MasterParam)
    p = _target(Param, MasterParam, attrs["multi_precision"])
    _same_shape("adam", p, Grad)
    dt = p.dtype.type
    b1 = scalar_of(Beta1Tensor, p.dtype) if Beta1Tensor is not None else dt(attrs["beta1"])
    b2 = scalar_of(Beta2Tensor, p.dtype) if Beta2Tensor is not None else dt(attrs["beta2"])
    eps = scalar_of(EpsilonTensor, p.dtype) if EpsilonTensor is not None else dt(attrs["epsilon"])
    ratio, coeff = (dt(1), dt(0)) if decay is None or not decay[1] else (dt(decay[0]), dt(decay[1]))
    kernel = _adam_kernel(p.dtype.type)
    launch(kernel, p.size, flat(p), flat(dev(Grad)), _lr(LearningRate, p.dtype), flat(m1), flat(m2),
           flat(m2max if m2max is not None else m1), m2max is not None, flat(b1pow), flat(b2pow), b1, b2, eps,
           ratio, coeff)
    if not attrs["use_global_beta_pow"]:
        launch_config(_advance_pows, 1, 1, flat(b1pow), flat(b2pow), b1pow.dtype.type(b1), b2pow.dtype.type(b2))
    master = attrs["multi_precision"] and MasterParam is not None
    return (_sync(Param, p) if master else p), m1, m2, m2max, b1pow, b2pow, (p if master else None)


adam, adamw = adam_kernels(_adam)

register_kernel("sgd", "cuda", sgd)
register_kernel("momentum", "cuda", momentum)
register_kernel("adam", "cuda", adam)
register_kernel("adamw", "cuda", adamw)
