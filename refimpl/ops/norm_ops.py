"""Batch normalisation: batch_norm and batch_norm_grad, training and inference.

Mirrors Paddle 3.3.1's ops (proto: ``paddle/fluid/operators/batch_norm_op.cc``; CPU kernels:
``paddle/phi/kernels/cpu/batch_norm_kernel.cc``, ``batch_norm_grad_kernel.cc``; shapes:
``BatchNormInferMeta`` in ``paddle/phi/infermeta/multiary.cc``).

``batch_norm``: X, Scale?, Bias?, Mean, Variance, MomentumTensor? -> Y, MeanOut, VarianceOut,
SavedMean, SavedVariance, ReserveSpace?. X is 2-D to 5-D; C is dim 1 (``NCHW``) or the last dim
(``NHWC``); a 2-D X is (N, C) in both layouts; an absent Scale is all ones, an absent Bias zeros. With batch statistics (training), per channel:
mean, biased variance, ``SavedMean = mean``, ``SavedVariance = sqrt(1 / (var + eps))`` (the
inverse std, as Paddle's CPU kernel keeps it for the grad), the running statistics
``MeanOut = Mean * m + mean * (1 - m)`` (same for the variance; ``m`` is MomentumTensor's value
when given, else the attr), and ``Y = x * (inv_std * scale) + (bias - mean * inv_std * scale)``.
With global statistics (``is_test`` and not ``trainable_statistics``, or ``use_global_stats``) the
running Mean / Variance normalise (``inv_std = 1 / sqrt(var + eps)``) and are left as they are.
MeanOut / VarianceOut are the same variables as Mean / Variance in every Paddle program.

``batch_norm_grad`` (slots of Paddle's grad maker: MeanOut / VarianceOut always, Mean / Variance
only with global statistics): d_bias = sum(dy), d_scale = sum((x - mean) * inv_std * dy),
dx = scale * inv_std / NHW * (dy * N * HW - d_bias - (x - mean) * d_scale * inv_std), or
``scale * inv_std * dy`` with global statistics (``is_test or use_global_stats``).

Rounding order: every step is rounded in X's dtype in the order of Paddle's CPU kernel above.
The per-channel sums are where the order cannot be Paddle's exactly (Eigen's vectorised ``sum()``
depends on the CPU's packet width and the data's alignment). Here: NHWC (and 2-D) sums add the
N*HW rows one after the other, as Paddle does; NCHW sums take NumPy's pairwise sum over the HW
elements of each (n, c) and then add those N partial sums in order of n, as Paddle does (Eigen's
per-column ``sum()`` replaced by NumPy's). Replaying Paddle's recorded lenet and resnet-block
programs (``oracle/zoo``) this way gives Paddle's losses and parameters within 1e-5.

In test mode (``is_test`` and not ``trainable_statistics``) SavedMean / SavedVariance have shape
``[]`` (Paddle 3.3.1 and 2.6.2 infer no dims for them then).

Differences from Paddle: the kernels never write into their inputs: MeanOut / VarianceOut are new
arrays (so a failed run puts the old running statistics back, as for any out-of-place output). In
test mode SavedMean / SavedVariance are 0-D zeros, and with ``use_global_stats`` in training they
hold the mean and inverse std used (Paddle leaves them unwritten in both cases: a fetch gives no
value or whatever the memory held); ReserveSpace is an empty array (Paddle's CPU kernel does not
allocate it). The
grad computes d_scale / d_bias each when asked (Paddle's CPU kernel only when both are).
Paddle's extra attrs ``use_mkldnn`` and ``fuse_with_relu`` are not proto attrs in 3.3.1 and are
not declared.
"""
from typing import Optional, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import check_choice, f32, first, grads_like
from .registry import register_op


_BN_ATTRS = {"momentum": f32(0.9), "epsilon": f32(1e-5), "data_layout": "NCHW", "is_test": False,
             "use_global_stats": False, "trainable_statistics": False}
_LAYOUTS = ("NCHW", "NHWC")
PARAM_SLOTS = ("Scale", "Bias", "Mean", "Variance")


# ---- shapes and checks ----------------------------------------------------------------
def _channel_dim(shape, data_layout):
    shape = tuple(shape)  # a device array's shape may not take negative indices
    return shape[1] if data_layout == "NCHW" else shape[-1]


def _check_x_rank(op: str, shape) -> None:
    if not 2 <= len(shape) <= 5:
        raise InvalidArgument(f"{op}: input X must be 2-D to 5-D, got shape {list(shape)} ({len(shape)}-D)")


def _check_param(op: str, slot: str, shape, c: int) -> None:
    if len(shape) != 1 or (c >= 0 and shape[0] >= 0 and shape[0] != c):
        raise InvalidArgument(f"{op}: input {slot} must have shape [C] = [{c}] (C = X's channel dim), "
                              f"got {list(shape)}")


def _bn_infer(ins, attrs):
    check_choice("batch_norm", "data_layout", attrs["data_layout"], _LAYOUTS)
    shape, dt = first(ins, "X")
    _check_x_rank("batch_norm", shape)
    c = _channel_dim(shape, attrs["data_layout"])
    saved_dt = "float32" if dt in ("float16", "bfloat16") else dt
    for slot in PARAM_SLOTS:
        if ins.get(slot):
            p_shape, p_dt = first(ins, slot)
            _check_param("batch_norm", slot, p_shape, c)
            if p_dt is not None and saved_dt is not None and p_dt != saved_dt:
                raise InvalidArgument(f"batch_norm: input {slot} has dtype {p_dt}, X of dtype {dt} needs {saved_dt}")
    mean_shape = (c,) if c >= 0 else tuple(first(ins, "Mean")[0])
    saved_shape = () if is_test_mode(attrs["is_test"], attrs["trainable_statistics"]) else mean_shape
    return {"Y": (tuple(shape), dt), "MeanOut": (mean_shape, first(ins, "Mean")[1]),
            "VarianceOut": (mean_shape, first(ins, "Variance")[1]), "SavedMean": (saved_shape, saved_dt),
            "SavedVariance": (saved_shape, saved_dt), "ReserveSpace": ((-1,), None)}


def check_run(op: str, x, params, data_layout: str) -> None:
    """The O(1) run-time checks (a program loaded from JSON has no build-time ones)."""
    check_choice(op, "data_layout", data_layout, _LAYOUTS)
    _check_x_rank(op, x.shape)
    c = _channel_dim(x.shape, data_layout)
    for slot, p in params:
        if p is not None:
            _check_param(op, slot, p.shape, c)


def _views(x, data_layout: str):
    """X as (N, C, HW) for NCHW (rank > 2), else as (N * HW, C); and the shape of a channel vector."""
    if data_layout == "NCHW" and x.ndim > 2:
        x3 = x.reshape(x.shape[0], x.shape[1], -1)
        return x3, (1, x.shape[1], 1)
    return x.reshape(-1, x.shape[-1]), (1, x.shape[-1])


def channel_sums(v: np.ndarray) -> np.ndarray:
    """Per-channel sums of a (N, C, HW) or (N * HW, C) view, in the order the module docstring gives."""
    if v.ndim == 3:
        v = np.add.reduce(v, axis=2)  # NumPy's pairwise sum over HW
    return np.add.reduce(v, axis=0)   # rows in order


# ---- batch_norm ------------------------------------------------------------------------------------
def is_test_mode(is_test: bool, trainable_statistics: bool) -> bool:
    """Paddle's test mode: SavedMean / SavedVariance get no shape (``[]``) and no value."""
    return is_test and not trainable_statistics


def uses_global_stats(is_test: bool, use_global_stats: bool, trainable_statistics: bool) -> bool:
    """Whether the forward normalises with Mean / Variance instead of the batch's statistics."""
    return is_test_mode(is_test, trainable_statistics) or use_global_stats


def affine_defaults(X, Scale, Bias, Mean, data_layout: str, fill):
    """Scale and Bias, each all ones / all zeros when absent (``weight_attr=False`` / ``bias_attr=False``,
    as Paddle's kernel treats a missing Scale and Bias); ``fill(shape, value, dtype)`` makes the array."""
    c = _channel_dim(X.shape, data_layout)
    dt = Mean.dtype if Mean is not None else X.dtype
    return (fill((c,), 1, dt) if Scale is None else Scale), (fill((c,), 0, dt) if Bias is None else Bias)


def _momentum(MomentumTensor, momentum):
    return float(np.asarray(MomentumTensor).reshape(-1)[0]) if MomentumTensor is not None else momentum


def _bn_grad_maker(g):
    """Paddle's BatchNormGradMaker: Mean / Variance (the running ones) only with global statistics."""
    a = g.attrs()
    ins = {"X": g.input("X"), "Scale": g.input("Scale"), "Bias": g.input("Bias"),
           "SavedMean": g.output("SavedMean"), "SavedVariance": g.output("SavedVariance")}
    if g.output("ReserveSpace"):
        ins["ReserveSpace"] = g.output("ReserveSpace")
    if a.get("use_global_stats") or a.get("is_test"):
        ins["Mean"], ins["Variance"] = g.output("MeanOut"), g.output("VarianceOut")
    ins["MeanOut"], ins["VarianceOut"] = g.output("MeanOut"), g.output("VarianceOut")
    ins["Y@GRAD"] = g.output_grad("Y")
    outs = {"X@GRAD": g.input_grad("X"), "Scale@GRAD": g.input_grad("Scale"), "Bias@GRAD": g.input_grad("Bias")}
    return [g.op("batch_norm_grad", ins, outs)]


@register_op("batch_norm", ["X", "Scale?", "Bias?", "Mean", "Variance", "MomentumTensor?"],
             ["Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance", "ReserveSpace?"], _BN_ATTRS,
             infer_shape=_bn_infer, grad=_bn_grad_maker)
def batch_norm(X: np.ndarray, Scale: np.ndarray, Bias: np.ndarray, Mean: np.ndarray, Variance: np.ndarray,
               MomentumTensor: Optional[np.ndarray], *, momentum: float, epsilon: float, data_layout: str,
               is_test: bool, use_global_stats: bool, trainable_statistics: bool) -> Tuple:
    """See the module docstring; every step in X's dtype, in the order of Paddle's CPU kernel."""
    check_run("batch_norm", X, zip(PARAM_SLOTS, (Scale, Bias, Mean, Variance)), data_layout)
    Scale, Bias = affine_defaults(X, Scale, Bias, Mean, data_layout, np.full)
    T = X.dtype.type
    xv, cshape = _views(X, data_layout)
    count = X.size // xv.shape[1]  # N * HW
    reserve = np.empty((0,), X.dtype)
    if uses_global_stats(is_test, use_global_stats, trainable_statistics):
        mean, inv_std = Mean.copy(), T(1) / np.sqrt(Variance + T(epsilon))
        mean_out, var_out = Mean.copy(), Variance.copy()
    elif count == 1:  # as Paddle: one element per channel gives y = x, statistics untouched
        zeros = np.zeros(Mean.shape, X.dtype)
        return X.copy(), Mean.copy(), Variance.copy(), zeros, zeros.copy(), reserve
    else:
        n = T(count)
        mean = channel_sums(xv) / n
        d = xv - mean.reshape(cshape)
        var = channel_sums(d * d) / n
        m = _momentum(MomentumTensor, momentum)
        keep, take = T(m), T(1.0 - m)
        mean_out, var_out = Mean * keep + mean * take, Variance * keep + var * take
        inv_std = np.sqrt(T(1) / (var + T(epsilon)))
    new_scale = inv_std * Scale
    new_bias = Bias - mean * inv_std * Scale
    y = xv * new_scale.reshape(cshape) + new_bias.reshape(cshape)
    if is_test_mode(is_test, trainable_statistics):  # 0-D, as inferred (Paddle leaves them unwritten)
        mean, inv_std = np.zeros((), mean.dtype), np.zeros((), inv_std.dtype)
    return y.reshape(X.shape), mean_out, var_out, mean, inv_std, reserve


# ---- batch_norm_grad ---------------------------------------------------------------------------------
def _bn_grad_infer(ins, attrs):
    check_choice("batch_norm_grad", "data_layout", attrs["data_layout"], _LAYOUTS)
    return grads_like(**{"X@GRAD": "X", "Scale@GRAD": "Scale", "Bias@GRAD": "Bias"})(ins, attrs)


@register_op("batch_norm_grad", ["X", "Scale?", "Bias?", "Mean?", "Variance?", "SavedMean", "SavedVariance",
                                 "ReserveSpace?", "MeanOut?", "VarianceOut?", "Y@GRAD"],
             ["X@GRAD", "Scale@GRAD", "Bias@GRAD"], _BN_ATTRS, infer_shape=_bn_grad_infer)
def batch_norm_grad(X: np.ndarray, Scale: np.ndarray, Bias: np.ndarray, Mean: Optional[np.ndarray],
                    Variance: Optional[np.ndarray], SavedMean: np.ndarray, SavedVariance: np.ndarray,
                    ReserveSpace: Optional[np.ndarray], MeanOut: Optional[np.ndarray],
                    VarianceOut: Optional[np.ndarray], dY: np.ndarray, *, momentum: float, epsilon: float,
                    data_layout: str, is_test: bool, use_global_stats: bool, trainable_statistics: bool,
                    need: Tuple[bool, bool, bool]) -> Tuple:
    """See the module docstring. Global statistics here are ``is_test or use_global_stats``, as in
    Paddle's grad kernel (which, unlike the forward one, ignores trainable_statistics)."""
    check_run("batch_norm_grad", X, (("Scale", Scale),), data_layout)
    Scale, _ = affine_defaults(X, Scale, Bias, SavedMean, data_layout, np.full)
    if dY.shape != X.shape:
        raise InvalidArgument(f"batch_norm_grad: Y@GRAD has shape {list(dY.shape)}, X {list(X.shape)}")
    T = X.dtype.type
    xv, cshape = _views(X, data_layout)
    dy = dY.reshape(xv.shape)
    count = X.size // xv.shape[1]
    use_global = is_test or use_global_stats
    if use_global:
        mean = Mean if Mean is not None else MeanOut
        var = Variance if Variance is not None else VarianceOut
        if mean is None or var is None:
            raise InvalidArgument("batch_norm_grad: global statistics need input Mean/Variance or "
                                  "MeanOut/VarianceOut, none was given")
        inv_std = T(1) / np.sqrt(var + T(epsilon))
    else:
        mean, inv_std = SavedMean, SavedVariance
    if count == 1 and not use_global:  # as Paddle: dx = dy, zero parameter grads
        zeros = np.zeros(Scale.shape, X.dtype)
        return (dY.copy() if need[0] else None), (zeros if need[1] else None), (zeros.copy() if need[2] else None)
    xm = xv - mean.reshape(cshape)
    dy_sum = channel_sums(dy)
    dy_xhat_sum = channel_sums(xm * inv_std.reshape(cshape) * dy)
    dx = None
    if need[0]:
        k = Scale * inv_std / T(1 if use_global else count)
        if use_global:
            dx = k.reshape(cshape) * dy
        else:
            n, hw = T(X.shape[0]), T(count // X.shape[0])
            inner = dy * n * hw - dy_sum.reshape(cshape) - xm * dy_xhat_sum.reshape(cshape) * inv_std.reshape(cshape)
            dx = k.reshape(cshape) * inner
        dx = dx.reshape(X.shape)
    return dx, (dy_xhat_sum if need[1] else None), (dy_sum if need[2] else None)
