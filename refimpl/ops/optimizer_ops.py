"""Optimizer ops: sgd, momentum, adam, adamw (dense gradients).

Each mirrors the Paddle op of the same name (slots and attrs as Paddle's
proto) and Paddle's CPU formulas, in the parameter's dtype:

* sgd:      p -= lr * g
* momentum: g' = g (+ coeff * p with "l2_decay");
            v = mu * v + g'; p -= lr * v, or with Nesterov
            p -= lr * (g' + mu * v). Like Paddle's CPU kernel, this ignores
            ``rescale_grad`` (Paddle's GPU kernel multiplies g by it).
* adam:     lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t);
            m1 = b1 m1 + (1 - b1) g;  m2 = b2 m2 + (1 - b2) g^2;
            p -= lr_t * m1 / (sqrt(m2) + eps * sqrt(1 - b2^t));
            float32 rounds as Paddle's AVX kernel does, with fused multiply-adds
            (m1, m2 and p each rounded once; see ``_adam_step``).
            then ``b1^t *= b1``, ``b2^t *= b2`` (unless use_global_beta_pow).
            amsgrad uses max(m2, Moment2Max) in the denominator.
* adamw:    with_decay: p -= lr * lr_ratio * coeff * p first (fused for float32); then the
            adam update with the plain lr (lr_ratio scales only the decay,
            as in Paddle's CPU kernel).

The kernels update Param, the accumulators and the beta pows IN PLACE and
return those same arrays as the outputs (ParamOut, VelocityOut, ...), so a
training step allocates no new persistent buffers. Difference from Paddle:
if a program names a ParamOut var different from Param, both vars end up
holding the one updated array. With ``MasterParam`` (multi_precision) the
update runs on the master copy and Param receives its cast. SelectedRows
(sparse) gradients and ``lazy_mode`` are not supported.
"""
import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import f32, first
from .registry import register_op


def _scalar(t, dtype):
    """Element 0 of a one-element tensor, as a scalar of ``dtype``."""
    return dtype.type(t.flat[0] if isinstance(t, np.ndarray) else np.asarray(t).reshape(-1)[0])


def _target(Param, MasterParam, multi_precision):
    return MasterParam if (multi_precision and MasterParam is not None) else Param


def _sync_master(Param, target):
    """After updating a master copy, cast it back into Param (in place)."""
    if target is not Param:
        Param[...] = target.astype(Param.dtype)


def _same_shape(name, a, b):
    if a.shape != b.shape:
        raise InvalidArgument(f"{name}: Param shape {list(a.shape)} != Grad shape {list(b.shape)}")


# What every optimizer kernel requires of its inputs, checked by the executor for all the
# in-place updates of a run before the first one writes (so none is half-applied):
# these slots share one shape, and these hold one value.
UPDATE_CHECK = {"same_shape": ("Param", "Grad", "Velocity", "Moment1", "Moment2", "Moment2Max", "MasterParam"),
                "one_value": ("LearningRate", "Beta1Pow", "Beta2Pow")}


def _param_infer(*pairs):
    """infer_shape: each output slot is shaped like an input slot."""
    def infer(ins, attrs):
        return {o: first(ins, i) for o, i in pairs if ins.get(i)}
    return infer


# ---- sgd ------------------------------------------------------------------
@register_op("sgd", ["Param", "LearningRate", "Grad", "MasterParam?"], ["ParamOut", "MasterParamOut?"],
             {"multi_precision": False}, check=UPDATE_CHECK, writes_inputs=True,
             infer_shape=_param_infer(("ParamOut", "Param"), ("MasterParamOut", "MasterParam")))
def sgd(Param, LearningRate, Grad, MasterParam, *, multi_precision):
    if MasterParam is None or not multi_precision:  # the common case, without a master copy
        if Param.shape != Grad.shape:
            _same_shape("sgd", Param, Grad)
        np.subtract(Param, Grad * Param.dtype.type(LearningRate.flat[0]), out=Param)
        return Param, None
    p = _target(Param, MasterParam, multi_precision)
    _same_shape("sgd", p, Grad)
    step = Grad * _scalar(LearningRate, p.dtype)
    np.subtract(p, step, out=p)
    _sync_master(Param, p)
    return Param, (p if p is not Param else None)


# ---- momentum -----------------------------------------------------------------
def _momentum_infer(ins, attrs):
    """As ``_param_infer``, but (Paddle's MomentumInferMeta) the velocity of a float16 / bfloat16
    parameter is float32."""
    pairs = (("ParamOut", "Param"), ("VelocityOut", "Velocity"), ("MasterParamOut", "MasterParam"))
    out = _param_infer(*pairs)(ins, attrs)
    if "VelocityOut" in out and first(ins, "Param")[1] in ("float16", "bfloat16"):
        out["VelocityOut"] = (out["VelocityOut"][0], "float32")
    return out


@register_op("momentum", ["Param", "Grad", "Velocity", "LearningRate", "MasterParam?"],
             ["ParamOut", "VelocityOut", "MasterParamOut?"],
             {"mu": f32(0.9), "use_nesterov": False, "regularization_method": "",
              "regularization_coeff": 0.0, "multi_precision": False, "rescale_grad": 1.0},
             check=UPDATE_CHECK, writes_inputs=True,
             infer_shape=_momentum_infer)
def momentum(Param, Grad, Velocity, LearningRate, MasterParam, *, mu, use_nesterov,
             regularization_method, regularization_coeff, multi_precision, rescale_grad):
    p = _target(Param, MasterParam, multi_precision)
    _same_shape("momentum", p, Grad)
    dt = p.dtype.type
    g = Grad  # Paddle's CPU kernel ignores rescale_grad
    if regularization_method == "l2_decay":
        g = g + p * dt(regularization_coeff)
    v = Velocity
    np.multiply(v, dt(mu), out=v)
    np.add(v, g, out=v)
    lr = _scalar(LearningRate, p.dtype)
    if use_nesterov:
        step = v * dt(mu)
        step += g
        step *= lr
    else:
        step = v * lr
    np.subtract(p, step, out=p)
    _sync_master(Param, p)
    return Param, v, (p if p is not Param else None)


# ---- adam / adamw -----------------------------------------------------------------
_ADAM_IN = ["Param", "Grad", "LearningRate", "Moment1", "Moment2", "Moment2Max?", "Beta1Pow",
            "Beta2Pow", "MasterParam?", "SkipUpdate?", "Beta1Tensor?", "Beta2Tensor?",
            "EpsilonTensor?"]
_ADAM_OUT = ["ParamOut", "Moment1Out", "Moment2Out", "Moment2MaxOut?", "Beta1PowOut",
             "Beta2PowOut", "MasterParamOut?"]
_ADAM_ATTRS = {"beta1": f32(0.9), "beta2": f32(0.999), "epsilon": f32(1e-8),
               "lazy_mode": False, "min_row_size_to_use_multithread": 1000,
               "multi_precision": False, "use_global_beta_pow": False, "amsgrad": False}
_ADAMW_ATTRS = dict(_ADAM_ATTRS, lr_ratio=1.0, coeff=f32(0.01), with_decay=False)
_adam_infer = _param_infer(("ParamOut", "Param"), ("Moment1Out", "Moment1"), ("Moment2Out", "Moment2"),
                           ("Moment2MaxOut", "Moment2Max"), ("Beta1PowOut", "Beta1Pow"),
                           ("Beta2PowOut", "Beta2Pow"), ("MasterParamOut", "MasterParam"))


def _fused_into(out, a, b, c, scratch=None):
    """out = a * b + c rounded once, as float32 fused multiply-adds are: a float32 product is exact in
    float64, so only the sum rounds there before the float32 result (a second rounding that can differ
    from a true FMA only in the rare double-rounding ties). ``scratch``: a float64 buffer like ``out``."""
    wide = np.multiply(a, b, dtype=np.float64, out=scratch)
    np.add(wide, c, out=wide)
    np.copyto(out, wide, casting="same_kind")


def _adam_step(p, g, lr, m1, m2, m2max, b1pow, b2pow, beta1, beta2, eps):
    """One in-place Adam update of ``p``, ``m1``, ``m2`` (and ``m2max``); Paddle's CPU order.

    float32 follows Paddle's AVX kernel, with fused multiply-adds: lr_t = lr * (sqrt(1 - b2^t) / (1 - b1^t)),
    m1 = fma(b1, m1, (1 - b1) g), m2 = fma(b2, m2, g g (1 - b2)), p = fma(m1 / (sqrt(m2) + eps_t), -lr_t, p).
    Other dtypes round every step.
    """
    dt = p.dtype.type
    b1, b2 = dt(beta1), dt(beta2)
    b1p, b2p = dt(b1pow.reshape(-1)[0]), dt(b2pow.reshape(-1)[0])
    eps_t = dt(eps) * np.sqrt(dt(1) - b2p)
    if p.dtype != np.float32:
        lr_t = dt(lr * np.sqrt(dt(1) - b2p) / (dt(1) - b1p))
        np.multiply(m1, b1, out=m1)
        m1 += g * (dt(1) - b1)
        np.multiply(m2, b2, out=m2)
        sq = g * (dt(1) - b2)
        sq *= g
        m2 += sq
    else:
        lr_t = dt(lr * (np.sqrt(dt(1) - b2p) / (dt(1) - b1p)))
        wide = np.empty(p.shape, np.float64)
        sq = g * (dt(1) - b1)
        _fused_into(m1, b1, m1, sq, wide)
        np.multiply(g, g, out=sq)
        sq *= dt(1) - b2
        _fused_into(m2, b2, m2, sq, wide)
    if m2max is not None:
        np.maximum(m2max, m2, out=m2max)
    denom = np.sqrt(m2 if m2max is None else m2max, out=sq)
    denom += eps_t
    step = np.divide(m1, denom, out=denom)
    if p.dtype == np.float32:
        _fused_into(p, step, -lr_t, p, wide)
        return
    step *= lr_t
    np.subtract(p, step, out=p)


def _adam_kernel(Param, Grad, LearningRate, Moment1, Moment2, Moment2Max, Beta1Pow, Beta2Pow,
                 MasterParam, SkipUpdate, Beta1Tensor, Beta2Tensor, EpsilonTensor, attrs, decay):
    m2max = Moment2Max if attrs["amsgrad"] else None
    outs = [Param, Moment1, Moment2, m2max, Beta1Pow, Beta2Pow, MasterParam]
    if SkipUpdate is not None and bool(np.asarray(SkipUpdate).reshape(-1)[0]):
        return tuple(outs)
    p = _target(Param, MasterParam, attrs["multi_precision"])
    _same_shape("adam", p, Grad)
    dt = p.dtype
    beta1 = _scalar(Beta1Tensor, dt) if Beta1Tensor is not None else dt.type(attrs["beta1"])
    beta2 = _scalar(Beta2Tensor, dt) if Beta2Tensor is not None else dt.type(attrs["beta2"])
    eps = _scalar(EpsilonTensor, dt) if EpsilonTensor is not None else dt.type(attrs["epsilon"])
    lr = _scalar(LearningRate, dt)
    if decay is not None and decay[1]:  # adamw: decoupled weight decay, then plain Adam
        rate = lr * dt.type(decay[0]) * dt.type(decay[1])
        if dt == np.float32:
            _fused_into(p, p, -rate, p)  # Paddle's AVX kernel: fma(p, -lr * lr_ratio * coeff, p)
        else:
            p -= p * rate
    _adam_step(p, Grad, lr, Moment1, Moment2, m2max, Beta1Pow, Beta2Pow, beta1, beta2, eps)
    if not attrs["use_global_beta_pow"]:
        np.multiply(Beta1Pow, Beta1Pow.dtype.type(beta1), out=Beta1Pow)
        np.multiply(Beta2Pow, Beta2Pow.dtype.type(beta2), out=Beta2Pow)
    _sync_master(Param, p)
    outs[6] = p if p is not Param else None
    return tuple(outs)


def adam_kernels(update):
    """The adam and adamw kernels over one backend's Adam ``update(*slots, attrs, decay)``.

    ``slots`` are the inputs in ``_ADAM_IN``'s order; the kernels' keyword
    arguments are the attrs the registry passes. adam updates with
    ``decay=None``; adamw with its decoupled weight decay ``(lr_ratio, coeff)``,
    ``coeff`` 0 when ``with_decay`` is off.
    """
    def adam(*slots, beta1, beta2, epsilon, multi_precision, use_global_beta_pow, amsgrad):
        attrs = dict(beta1=beta1, beta2=beta2, epsilon=epsilon, multi_precision=multi_precision,
                     use_global_beta_pow=use_global_beta_pow, amsgrad=amsgrad)
        return update(*slots, attrs, None)

    def adamw(*slots, beta1, beta2, epsilon, lr_ratio, coeff, with_decay, multi_precision, use_global_beta_pow,
              amsgrad):
        attrs = dict(beta1=beta1, beta2=beta2, epsilon=epsilon, multi_precision=multi_precision,
                     use_global_beta_pow=use_global_beta_pow, amsgrad=amsgrad)
        return update(*slots, attrs, (lr_ratio, coeff if with_decay else 0.0))
    return adam, adamw


adam, adamw = adam_kernels(_adam_kernel)
register_op("adam", _ADAM_IN, _ADAM_OUT, _ADAM_ATTRS, infer_shape=_adam_infer, check=UPDATE_CHECK, writes_inputs=True)(adam)
register_op("adamw", _ADAM_IN, _ADAM_OUT, _ADAMW_ATTRS, infer_shape=_adam_infer, check=UPDATE_CHECK, writes_inputs=True)(adamw)
