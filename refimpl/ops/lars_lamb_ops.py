"""The layer-wise adaptive optimizer ops: lamb and lars_momentum (dense gradients).

Mirrors Paddle 3.3.1's ``lamb`` (``paddle/phi/kernels/impl/lamb_kernel_impl.h``,
``funcs/lamb_functors.h``) and ``lars_momentum`` (``paddle/phi/kernels/cpu/
lars_momentum_kernel.cc``): slots and attrs as in Paddle's op protos, the CPU
kernels' order of float operations, every step rounded in the parameter's dtype
(the CPU wheel is built without fused multiply-adds here).

::

    * lamb:  m1 = b1 m1 + (1 - b1) g;  m2 = b2 m2 + (1 - b2) g g;
             r = (m1 / (1 - b1^t)) / (sqrt(m2 / (1 - b2^t)) + eps) + wd p;
             with wd > 0 or ``always_adapt``: ratio = |p| / |r| (1 when either is 0), else 1;
             p -= (lr ratio) r;  then b1^t *= b1, b2^t *= b2.
    * lars_momentum (per tensor of its lists): g' = rescale_grad g;
             local_lr = lr lars_coeff |p| / (|g'| + wd |p| + eps) when wd > 0 and both norms are > 0,
             else lr;  v = mu v + local_lr (g' + wd p);  p -= v.

The norms are Eigen's ``x.square().sum()`` on the CPU: :func:`squared_norm`
adds in that order (see there). Like the other optimizer kernels, these update
Param and the accumulators IN PLACE and return the same arrays. With
``MasterParam`` (``multi_precision``) the update runs on the float32 master copy
and Param receives its cast (Paddle's CPU lars kernel ignores the master copy;
refimpl updates it as Paddle's GPU kernel does). SelectedRows gradients are not
supported. A true ``SkipUpdate`` leaves every input untouched.
"""
from typing import List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import f32, first
from .registry import register_op

__all__ = ["squared_norm", "norm_plan", "float_attr", "check_shapes"]

# Eigen's tensor reduction on the CPU (the AVX build: 8 float32 or 4 float64 lanes): a run longer than
# LEAF packets is split in two at a packet boundary and the halves' sums are added; a shorter run is added
# two packets at a time into two lane accumulators, then one more packet if one is left, then the last
# elements one by one, and the lanes are folded in halves at the end.
LANE_BYTES = 32
LEAF = 1024


def norm_plan(n: int, itemsize: int) -> List[Tuple[int, int]]:
    """The (start, count) runs :func:`squared_norm` reduces directly, left to right (their sums are added
    in a balanced tree that this order of leaves determines: see :func:`_tree_sum`)."""
    lanes = LANE_BYTES // itemsize
    runs: List[Tuple[int, int]] = []

    def split(first: int, count: int) -> None:
        if count > lanes * LEAF:
            half = lanes * -(-(first + -(-count // 2)) // lanes)
            left = min(half - first, count)
            split(first, left)
            if left < count:
                split(half, count - left)
        else:
            runs.append((first, count))
    split(0, n)
    return runs


def _fold(acc: np.ndarray) -> np.generic:
    """Eigen's ``predux``: add the upper half of the lanes onto the lower half until one is left."""
    while acc.size > 1:
        half = acc.size // 2
        acc = acc[:half] + acc[half:]
    return acc[0]


def _run_sum(x: np.ndarray) -> np.generic:
    lanes = LANE_BYTES // x.itemsize
    n, start = x.size, 0
    acc = np.zeros(lanes, x.dtype)
    if n >= 2 * lanes:
        start = n // (2 * lanes) * 2 * lanes
        # axis 0 is not the contiguous axis: NumPy adds the blocks one after another, in order
        pair = np.add.reduce(x[:start].reshape(-1, 2, lanes), axis=0)
        acc = pair[0] + pair[1]
    if start <= n - lanes:
        acc = acc + x[start:start + lanes]
        start += lanes
    tail = x.dtype.type(0)
    for v in x[start:]:
        tail = tail + v
    return tail + _fold(acc)


def _tree_sum(first: int, count: int, lanes: int, leaves: dict) -> np.generic:
    if count > lanes * LEAF:
        half = lanes * -(-(first + -(-count // 2)) // lanes)
        left = min(half - first, count)
        total = _tree_sum(first, left, lanes, leaves)
        if left < count:
            total = total + _tree_sum(half, count - left, lanes, leaves)
        return total
    return leaves[first]


def squared_norm(x: np.ndarray) -> np.generic:
    """sum(x * x) in ``x``'s dtype, added in the order of Paddle's CPU ``SquaredL2Norm`` (Eigen).

    The order was worked out against Paddle 3.3.1's results: it reproduces its norms bit for bit for
    the sizes tests/test_lars_lamb.py records (5 to 20000 elements), but not for every size (after a
    few lamb steps on 1500 and 3000 elements the trust ratio, hence every parameter, differs by an ulp).
    """
    x = np.ascontiguousarray(x).reshape(-1)
    sq = x * x
    lanes = LANE_BYTES // x.itemsize
    leaves = {s: _run_sum(sq[s:s + c]) for s, c in norm_plan(x.size, x.itemsize)}
    return _tree_sum(0, x.size, lanes, leaves)


def float_attr(dt, value):
    """A float attr as the kernel sees it: Paddle stores float attrs as float32, then casts to T."""
    return dt(np.float32(value))


def _scalar(t: np.ndarray, dtype: np.dtype) -> np.generic:
    return dtype.type(np.asarray(t).reshape(-1)[0])


def check_shapes(op: str, p: np.ndarray, g: np.ndarray, *accs: Tuple[str, np.ndarray]) -> None:
    if p.shape != g.shape:
        raise InvalidArgument(f"{op}: Param shape {list(p.shape)} != Grad shape {list(g.shape)}")
    for name, a in accs:
        if a.shape != p.shape:
            raise InvalidArgument(f"{op}: {name} shape {list(a.shape)} != Param shape {list(p.shape)}")


# ---- lamb -----------------------------------------------------------------------------------------
def lamb_trust_ratio_div(p, g, m1, m2, b1p, b2p, beta1, beta2, eps, wd):
    """Update ``m1``, ``m2`` in place and return Paddle's ``trust_ratio_div`` (all in ``p``'s dtype)."""
    dt = p.dtype.type
    b1, b2, one = float_attr(dt, beta1), float_attr(dt, beta2), dt(1)
    np.multiply(m1, b1, out=m1)
    m1 += (one - b1) * g
    sq = (one - b2) * g
    sq *= g
    np.multiply(m2, b2, out=m2)
    m2 += sq
    r = m1 / (one - b1p)
    denom = np.sqrt(m2 / (one - b2p))
    denom += float_attr(dt, eps)
    r /= denom
    r += float_attr(dt, wd) * p
    return r


def lamb_ratio(p_norm_sq, r_norm_sq):
    pn, rn = np.sqrt(p_norm_sq), np.sqrt(r_norm_sq)
    return pn / rn if (pn > 0 and rn > 0) else pn.dtype.type(1)


_LAMB_IN = ["Param", "Grad", "LearningRate", "Moment1", "Moment2", "Beta1Pow", "Beta2Pow", "MasterParam?",
            "SkipUpdate?"]
_LAMB_OUT = ["ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut?", "Beta2PowOut?", "MasterParamOut?"]
LAMB_ATTRS = {"weight_decay": f32(0.01), "beta1": f32(0.9), "beta2": f32(0.999), "epsilon": f32(1e-6),
              "always_adapt": False, "multi_precision": False}
LAMB_CHECK = {"same_shape": ("Param", "Grad", "Moment1", "Moment2", "MasterParam"),
              "one_value": ("LearningRate", "Beta1Pow", "Beta2Pow")}


def _like(*pairs):
    def infer(ins, attrs):
        return {o: first(ins, i) for o, i in pairs if ins.get(i)}
    return infer


def lamb_master(Param, MasterParam, multi_precision):
    """The array the update runs on: the float32 master copy with ``multi_precision``."""
    if not multi_precision:
        return Param
    if MasterParam is None:
        raise InvalidArgument("lamb: multi_precision is set but the MasterParam input is empty")
    return MasterParam


@register_op("lamb", _LAMB_IN, _LAMB_OUT, LAMB_ATTRS, check=LAMB_CHECK, writes_inputs=True,
             infer_shape=_like(("ParamOut", "Param"), ("Moment1Out", "Moment1"), ("Moment2Out", "Moment2"),
                               ("Beta1PowOut", "Beta1Pow"), ("Beta2PowOut", "Beta2Pow"),
                               ("MasterParamOut", "MasterParam")))
def lamb(Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow, MasterParam, SkipUpdate, *,
         weight_decay, beta1, beta2, epsilon, always_adapt, multi_precision):
    master = MasterParam if multi_precision else None
    outs = (Param, Moment1, Moment2, Beta1Pow, Beta2Pow, master)
    if SkipUpdate is not None and bool(np.asarray(SkipUpdate).reshape(-1)[0]):
        return outs
    p = lamb_master(Param, MasterParam, multi_precision)
    check_shapes("lamb", p, Grad, ("Moment1", Moment1), ("Moment2", Moment2))
    dt = p.dtype
    g = Grad.astype(dt, copy=False)
    b1p, b2p = _scalar(Beta1Pow, dt), _scalar(Beta2Pow, dt)
    r = lamb_trust_ratio_div(p, g, Moment1, Moment2, b1p, b2p, beta1, beta2, epsilon, weight_decay)
    zero = dt.type(0)
    adapt = float_attr(dt.type, weight_decay) > zero or always_adapt
    ratio = lamb_ratio(squared_norm(p), squared_norm(r)) if adapt else lamb_ratio(zero, zero)
    r *= _scalar(LearningRate, dt) * ratio
    np.subtract(p, r, out=p)
    if p.size:  # Paddle advances the pows in the update's first element
        np.multiply(Beta1Pow, Beta1Pow.dtype.type(float_attr(dt.type, beta1)), out=Beta1Pow)
        np.multiply(Beta2Pow, Beta2Pow.dtype.type(float_attr(dt.type, beta2)), out=Beta2Pow)
    if p is not Param:
        Param[...] = p.astype(Param.dtype)
    return outs


# ---- lars_momentum ------------------------------------------------------------------------------------
LARS_ATTRS = {"mu": f32(0.9), "lars_coeff": f32(0.001), "lars_weight_decay": [f32(0.0005)],
              "epsilon": f32(0.0), "multi_precision": False, "rescale_grad": f32(1.0)}


def _lars_infer(ins, attrs):
    out = {"ParamOut": list(ins.get("Param") or []), "VelocityOut": list(ins.get("Velocity") or [])}
    if ins.get("MasterParam"):
        out["MasterParamOut"] = list(ins["MasterParam"])
    return out


def lars_check(Param: Sequence, Grad: Sequence, Velocity: Sequence, LearningRate: Sequence,
               MasterParam: Optional[Sequence], lars_weight_decay: Sequence[float], multi_precision: bool) -> None:
    """The list lengths agree (one weight decay per parameter), as Paddle's InferShape requires."""
    n = len(Param)
    for name, lst in (("Grad", Grad), ("Velocity", Velocity), ("LearningRate", LearningRate),
                      ("attr lars_weight_decay", lars_weight_decay)):
        if len(lst) != n:
            raise InvalidArgument(f"lars_momentum: {name} has {len(lst)} entries, Param has {n}")
    if multi_precision and (MasterParam is None or len(MasterParam) != n):
        raise InvalidArgument(f"lars_momentum: multi_precision needs one MasterParam per Param ({n}), got "
                              f"{0 if MasterParam is None else len(MasterParam)}")


def lars_local_lr(lr, lars_coeff, p_norm, g_norm, wd, eps):
    """Paddle's ``lr * lars_coeff * |p| / (|g| + wd * |p| + eps)``, left to right; lr when it does not apply."""
    dt = p_norm.dtype.type
    if wd > 0 and p_norm > 0 and g_norm > 0:
        return lr * float_attr(dt, lars_coeff) * p_norm / (g_norm + wd * p_norm + float_attr(dt, eps))
    return lr


@register_op("lars_momentum", ["Param*", "Grad*", "Velocity*", "LearningRate*", "MasterParam*?"],
             ["ParamOut*", "VelocityOut*", "MasterParamOut*?"], LARS_ATTRS, writes_inputs=True,
             infer_shape=_lars_infer)
def lars_momentum(Param, Grad, Velocity, LearningRate, MasterParam, *, mu, lars_coeff, lars_weight_decay, epsilon,
                  multi_precision, rescale_grad):
    lars_check(Param, Grad, Velocity, LearningRate, MasterParam, lars_weight_decay, multi_precision)
    masters = list(MasterParam) if multi_precision else None
    for i, (param, g, v) in enumerate(zip(Param, Grad, Velocity)):
        p = masters[i] if masters is not None else param
        check_shapes("lars_momentum", p, g, ("Velocity", v))
        dt = p.dtype.type
        rg = float_attr(dt, rescale_grad) * g.astype(p.dtype, copy=False)
        wd = float_attr(dt, lars_weight_decay[i])
        lr = _scalar(LearningRate[i], p.dtype)
        local = lars_local_lr(lr, lars_coeff, np.sqrt(squared_norm(p)), np.sqrt(squared_norm(rg)), wd, epsilon)
        np.multiply(v, float_attr(dt, mu), out=v)
        rg += wd * p
        rg *= local
        v += rg
        np.subtract(p, v, out=p)
        if p is not param:
            param[...] = p.astype(param.dtype)
    return list(Param), list(Velocity), masters
