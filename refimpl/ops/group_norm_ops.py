"""Group and instance normalisation: group_norm, instance_norm and their grads.

Mirrors Paddle 3.3.1's ops (CPU kernels ``paddle/phi/kernels/cpu/group_norm_kernel.cc``,
``group_norm_grad_kernel.cc``, ``instance_norm_kernel.cc``, ``instance_norm_grad_kernel.cc``;
shapes ``GroupNormInferMeta`` / ``InstanceNormInferMeta`` in ``paddle/phi/infermeta/ternary.cc``).

``group_norm``: X, Scale?, Bias? -> Y, Mean, Variance; attrs epsilon, groups, data_layout. X is at
least 2-D with C at dim 1 (``NCHW``) or last (``NHWC``); the C channels form ``groups`` groups of
``C / groups`` consecutive channels. Per (n, group): ``mean = sum(x) / m``, ``var = max(sum(x*x) / m -
mean*mean, 0)`` (one pass, E[x²] - E[x]², as Paddle's CPU kernel), ``Mean`` / ``Variance`` of shape
(N, groups) hold mean and var, ``y = (x - mean) * (1 / sqrt(var + eps)) [* scale] [+ bias]``. The sums
are added in the order of Paddle's kernel: channel after channel, each channel's pixels into 8 running
lanes (blocks of 8), the lanes added in order onto the running total, then the channel's ragged tail.

``group_norm_grad`` reads X, Scale?, Bias?, Y, Mean, Variance, Y@GRAD and, like Paddle's kernel,
recovers x̂ from Y (``(y - bias) / scale``, a zero scale left out): with ``g = dy * scale``,
``dx = (g - x̂ * sum(g * x̂) / m - sum(g) / m) / sqrt(var + eps)``, ``d_scale = sum(dy * x̂)``,
``d_bias = sum(dy)`` per channel. As in Paddle's kernel, ``sum(g)`` is only added up when Scale is
given: without Scale the ``- mean(dy)`` term is missing from dx (Paddle 3.3.1 computes exactly that).

``instance_norm``: X, Scale?, Bias? -> Y, SavedMean, SavedVariance; attr epsilon. X is 2-D to 5-D
(N, C, ...); per (n, c): mean and biased two-pass variance over the remaining dims, ``SavedMean`` (N*C,)
the mean and ``SavedVariance`` (N*C,) the inverse std ``1 / sqrt(var + eps)``;
``y = (x - mean) * inv_std * scale + bias`` (ones / zeros when absent). ``instance_norm_grad`` reads X,
Scale?, Bias? (no need buffer), SavedMean, SavedVariance, Y@GRAD: ``x̂ = (x - mean) * inv_std``,
``dx = scale * inv_std * (dy - mean(dy) - x̂ * mean(dy * x̂))``; d_scale = sum over (n, pixels) of
``dy * x̂``, d_bias of ``dy``, computed only when both are asked for (as Paddle's kernel).

group_norm and its grad round every step as Paddle's CPU kernels do (sums in their loop order,
the inverse std in float64, rounded once), which reproduces Paddle's numbers bit for bit.
Differences from Paddle: instance_norm's sums add one element after the other (Paddle's Eigen
reductions add in an order of their own), so its results may differ from Paddle's in the last bits.
"""
from typing import Optional, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import check_choice, f32, first, grads_like
from .grad_maker import simple_grad
from .registry import register_op

__all__ = ["check_group_norm", "check_instance_norm", "group_view", "group_sums", "inv_std64", "in_order", "row_sums"]

_GN_ATTRS = {"epsilon": f32(1e-5), "groups": -1, "data_layout": "NCHW"}
_IN_ATTRS = {"epsilon": f32(1e-5)}
_LAYOUTS = ("NCHW", "NHWC")
_LANES = 8


# ---- shapes and checks -----------------------------------------------------------------------
def _channels(shape, data_layout: str) -> int:
    shape = tuple(shape)
    return shape[1] if data_layout == "NCHW" else shape[-1]


def check_group_norm(op: str, shape, groups: int, data_layout: str) -> int:
    """Paddle's GroupNormInferMeta checks; returns C."""
    check_choice(op, "data_layout", data_layout, _LAYOUTS)
    if len(shape) < 2:
        raise InvalidArgument(f"{op}: input X must be at least 2-D, got shape {list(shape)}")
    c = _channels(shape, data_layout)
    if groups < 1:
        raise InvalidArgument(f"{op}: attr groups must be >= 1, got {groups}")
    if c >= 0 and groups > c:
        raise InvalidArgument(f"{op}: attr groups ({groups}) must be <= the number of channels ({c}) of X "
                              f"(shape {list(shape)}, data_layout {data_layout})")
    if c >= 0 and c % groups:
        raise InvalidArgument(f"{op}: the {c} channels of X (shape {list(shape)}) are not divisible by "
                              f"groups={groups}")
    return c


def _check_param(op: str, slot: str, shape, c: int) -> None:
    if len(shape) != 1 or (c >= 0 and shape[0] >= 0 and shape[0] != c):
        raise InvalidArgument(f"{op}: input {slot} must have shape [C] = [{c}], got {list(shape)}")


def _gn_infer(ins, attrs):
    shape, dt = first(ins, "X")
    c = check_group_norm("group_norm", shape, attrs["groups"], attrs["data_layout"])
    for slot in ("Scale", "Bias"):
        if ins.get(slot):
            _check_param("group_norm", slot, first(ins, slot)[0], c)
    stat = ((tuple(shape)[0], attrs["groups"]), dt)
    return {"Y": (tuple(shape), dt), "Mean": stat, "Variance": stat}


def check_instance_norm(op: str, shape) -> int:
    if not 2 <= len(shape) <= 5:
        raise InvalidArgument(f"{op}: input X must be 2-D to 5-D, got shape {list(shape)} ({len(shape)}-D)")
    return tuple(shape)[1]


def _in_infer(ins, attrs):
    shape, dt = first(ins, "X")
    c = check_instance_norm("instance_norm", shape)
    for slot in ("Scale", "Bias"):
        if ins.get(slot):
            _check_param("instance_norm", slot, first(ins, slot)[0], c)
    n, nc = tuple(shape)[0], -1
    if n >= 0 and c >= 0:
        nc = n * c
    return {"Y": (tuple(shape), dt), "SavedMean": ((nc,), dt), "SavedVariance": ((nc,), dt)}


# ---- group_norm ------------------------------------------------------------------------------
def group_view(a: np.ndarray, groups: int, data_layout: str) -> np.ndarray:
    """``a`` as (N, groups, C / groups, pixels): channel after channel, pixels in memory order."""
    n = a.shape[0]
    if data_layout == "NCHW":
        return a.reshape(n, groups, a.shape[1] // groups, -1)
    c = a.shape[-1]
    return a.reshape(n, -1, groups, c // groups).transpose(0, 2, 3, 1)


def group_sums(v: np.ndarray) -> np.ndarray:
    """Sums over the last two axes of (N, G, cpg, HW), added in the order of Paddle's CPU kernel."""
    hw = v.shape[-1]
    rest = hw % _LANES
    blocks = v[..., :hw - rest].reshape(v.shape[:3] + (-1, _LANES))
    if blocks.shape[3]:
        lanes = np.cumsum(blocks, axis=3, dtype=v.dtype)[:, :, :, -1]
    else:
        lanes = np.zeros(v.shape[:3] + (_LANES,), v.dtype)
    terms = np.concatenate([lanes, v[..., hw - rest:]], axis=3).reshape(v.shape[0], v.shape[1], -1)
    return np.cumsum(terms, axis=2, dtype=v.dtype)[:, :, -1] + v.dtype.type(0)  # (+0: Paddle starts at 0)


def _channel_vec(p: Optional[np.ndarray], groups: int):
    return None if p is None else p.reshape(1, groups, -1, 1)


@register_op("group_norm", ["X", "Scale?", "Bias?"], ["Y", "Mean", "Variance"], _GN_ATTRS,
             infer_shape=_gn_infer,
             grad=simple_grad("group_norm_grad", ["X", "Scale", "Bias", "Y", "Mean", "Variance", "Y@GRAD"],
                              ["X@GRAD", "Scale@GRAD", "Bias@GRAD"]))
def group_norm(X: np.ndarray, Scale: Optional[np.ndarray], Bias: Optional[np.ndarray], *, epsilon: float,
               groups: int, data_layout: str) -> Tuple:
    """See the module docstring; every step rounded in X's dtype."""
    check_group_norm("group_norm", X.shape, groups, data_layout)
    T = X.dtype.type
    xv = group_view(X, groups, data_layout)
    count = T(xv.shape[2] * xv.shape[3])
    mean = group_sums(xv) / count
    var = np.maximum(group_sums(xv * xv) / count - mean * mean, T(0))
    inv = inv_std64(var, epsilon)
    y = (xv - mean[:, :, None, None]) * inv[:, :, None, None]
    if Scale is not None:
        y = y * _channel_vec(Scale, groups)
    if Bias is not None:
        y = y + _channel_vec(Bias, groups)
    return _from_group_view(y, X.shape, data_layout), mean, var


def _from_group_view(v: np.ndarray, shape, data_layout: str) -> np.ndarray:
    if data_layout == "NCHW":
        return v.reshape(shape)
    return np.ascontiguousarray(v.transpose(0, 3, 1, 2)).reshape(shape)


def _gn_grad_infer(ins, attrs):
    check_choice("group_norm_grad", "data_layout", attrs["data_layout"], _LAYOUTS)
    return grads_like(**{"X@GRAD": "X", "Scale@GRAD": "Scale", "Bias@GRAD": "Bias"})(ins, attrs)


@register_op("group_norm_grad", ["X", "Scale?", "Bias?", "Y", "Mean", "Variance", "Y@GRAD"],
             ["X@GRAD", "Scale@GRAD", "Bias@GRAD"], _GN_ATTRS, infer_shape=_gn_grad_infer)
def group_norm_grad(X: np.ndarray, Scale: Optional[np.ndarray], Bias: Optional[np.ndarray], Y: np.ndarray,
                    Mean: np.ndarray, Variance: np.ndarray, dY: np.ndarray, *, epsilon: float, groups: int,
                    data_layout: str, need: Tuple[bool, bool, bool]) -> Tuple:
    """See the module docstring (x̂ from Y, Paddle's missing ``mean(dy)`` term without Scale)."""
    check_group_norm("group_norm_grad", Y.shape, groups, data_layout)
    T = Y.dtype.type
    yv, dy = group_view(Y, groups, data_layout), group_view(dY, groups, data_layout)
    n = yv.shape[0]
    inv = inv_std64(Variance, epsilon)[:, :, None, None]
    m_inv = T(1.0 / (yv.shape[2] * yv.shape[3]))
    s = _channel_vec(Scale, groups)
    val = yv - _channel_vec(Bias, groups) if Bias is not None else yv
    dp_scale = in_order(val * dy, n, groups)
    if s is not None:
        g = dy * s
        dp_bias = in_order(g, n, groups)
        xhat = val / np.where(s != 0, s, T(1))
    else:
        g, dp_bias, xhat = dy, np.zeros_like(dp_scale), val
    dx = dscale = dbias = None
    if need[0]:
        dx = ((g - (m_inv * dp_scale)[:, :, None, None] * xhat) - (m_inv * dp_bias)[:, :, None, None]) * inv
        dx = _from_group_view(dx, Y.shape, data_layout)
    if need[1] and Scale is not None:
        dscale = _channel_in_order(xhat * dy).reshape(Scale.shape)
    if need[2] and Bias is not None:
        dbias = _channel_in_order(dy).reshape(Bias.shape)
    return dx, dscale, dbias


def inv_std64(var: np.ndarray, epsilon: float) -> np.ndarray:
    """``1 / sqrt(var + eps)`` computed in float64 and rounded once, as Paddle's group_norm kernels give it."""
    return (1.0 / np.sqrt(var.astype(np.float64) + np.float64(epsilon))).astype(var.dtype)


def in_order(v: np.ndarray, n: int, groups: int) -> np.ndarray:
    """Per (n, group) sums of a (N, G, cpg, HW) array, one element after the other (Paddle's loop order)."""
    return row_sums(v.reshape(n * groups, -1)).reshape(n, groups)


def _channel_in_order(v: np.ndarray) -> np.ndarray:
    """Per-channel sums of a (N, G, cpg, HW) array, sample after sample, pixels in order (Paddle's loop order)."""
    return row_sums(np.ascontiguousarray(v.transpose(1, 2, 0, 3)).reshape(v.shape[1] * v.shape[2], -1))


def row_sums(a: np.ndarray) -> np.ndarray:
    """Sums of the rows of a 2-D array, each added from zero one element after the other.

    ``+ 0`` after the in-order cumulative sum gives what starting from +0 gives (a -0.0 total becomes
    +0.0; nothing else changes)."""
    if not a.shape[1]:
        return np.zeros(a.shape[0], a.dtype)
    return np.cumsum(a, axis=1, dtype=a.dtype)[:, -1] + a.dtype.type(0)


# ---- instance_norm ---------------------------------------------------------------------------
def _instance_rows(X: np.ndarray) -> np.ndarray:
    return X.reshape(X.shape[0] * X.shape[1], -1)


def _per_row(p: Optional[np.ndarray], n: int, c: int, value: float, dtype) -> np.ndarray:
    """A per-channel vector repeated for every sample, as a (N*C, 1) column."""
    p = np.full((c,), value, dtype) if p is None else p.reshape(-1)
    return np.tile(p, n)[:, None]


@register_op("instance_norm", ["X", "Scale?", "Bias?"], ["Y", "SavedMean", "SavedVariance"], _IN_ATTRS,
             infer_shape=_in_infer,
             grad=simple_grad("instance_norm_grad", ["X", "Scale", "Bias", "SavedMean", "SavedVariance", "Y@GRAD"],
                              ["X@GRAD", "Scale@GRAD", "Bias@GRAD"]))
def instance_norm(X: np.ndarray, Scale: Optional[np.ndarray], Bias: Optional[np.ndarray], *,
                  epsilon: float) -> Tuple:
    """See the module docstring; every step rounded in X's dtype."""
    check_instance_norm("instance_norm", X.shape)
    T = X.dtype.type
    n, c = X.shape[:2]
    rows = _instance_rows(X)
    count = T(rows.shape[1])
    mean = row_sums(rows) / count
    d = rows - mean[:, None]
    inv_std = np.sqrt(row_sums(d * d) / count + T(epsilon))
    inv_std = T(1) / inv_std
    y = d * inv_std[:, None] * _per_row(Scale, n, c, 1, X.dtype) + _per_row(Bias, n, c, 0, X.dtype)
    return y.reshape(X.shape), mean, inv_std


def _in_grad_infer(ins, attrs):
    return grads_like(**{"X@GRAD": "X", "Scale@GRAD": "Scale", "Bias@GRAD": "Bias"})(ins, attrs)


@register_op("instance_norm_grad", ["X", "Scale?", "Bias?", "SavedMean", "SavedVariance", "Y@GRAD"],
             ["X@GRAD", "Scale@GRAD", "Bias@GRAD"], _IN_ATTRS, infer_shape=_in_grad_infer,
             no_need_buffer=["Bias"])
def instance_norm_grad(X: np.ndarray, Scale: Optional[np.ndarray], Bias, SavedMean: np.ndarray,
                       SavedVariance: np.ndarray, dY: np.ndarray, *, epsilon: float,
                       need: Tuple[bool, bool, bool]) -> Tuple:
    """See the module docstring. Bias is never read (no need buffer)."""
    check_instance_norm("instance_norm_grad", X.shape)
    T = X.dtype.type
    n, c = X.shape[:2]
    rows, dy = _instance_rows(X), _instance_rows(dY)
    count = T(rows.shape[1])
    inv = SavedVariance.reshape(-1, 1)
    xhat = (rows - SavedMean.reshape(-1, 1)) * inv
    dx = dscale = dbias = None
    if need[1] and need[2] and Scale is not None and Bias is not None:
        dbias = row_sums(row_sums(dy).reshape(n, c).T)
        dscale = row_sums(row_sums(xhat * dy).reshape(n, c).T)
    if need[0]:
        dy_mean = (row_sums(dy) / count)[:, None]
        dyx_mean = (row_sums(dy * xhat) / count)[:, None]
        dx = _per_row(Scale, n, c, 1, X.dtype) * inv * (dy - dy_mean - xhat * dyx_mean)
        dx = dx.reshape(X.shape)
    return dx, dscale, dbias
