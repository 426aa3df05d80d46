"""Loss ops: softmax_with_cross_entropy and its grad.

Mirrors Paddle's ``softmax_with_cross_entropy`` (slots Logits, Label ->
Softmax, Loss) and ``softmax_with_cross_entropy_grad`` (Label, Softmax,
Loss@GRAD -> Logits@GRAD), CPU semantics:

* the softmax clips shifted logits at -64, as Paddle's softmax does;
* the loss is ``-log(softmax)`` with Paddle's "tolerable value" clamp, so a
  probability of exactly 0 (possible with ``use_softmax=False``) gives a loss
  of 1e20 rather than inf;
* hard labels are integers shaped like Logits with the ``axis`` dim 1 (a
  label without that dim is accepted too); rows whose label equals
  ``ignore_index`` get loss 0 and gradient 0;
* soft labels are shaped like Logits; the gradient is Paddle's
  ``(softmax - label) * dloss``, which assumes each label row sums to 1.

``numeric_stable_mode`` is accepted and ignored (the CPU kernel always
subtracts the max). In-place pairs as in Paddle: Softmax may reuse Logits,
Logits@GRAD may reuse Softmax.
"""
import numpy as np

from refimpl.core.errors import InvalidArgument

from .activation_ops import softmax_values
from .common import first, grads_like
from .grad_maker import simple_grad
from .registry import register_op

_TOLERABLE = 1e20  # Paddle's kApproInf
_ATTRS = {"soft_label": False, "use_softmax": True, "numeric_stable_mode": True,
          "ignore_index": -100, "axis": -1}


def _neg_log(p):
    """-log(p), clamped to +-1e20 like Paddle's TolerableValue."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -np.log(p)
    return np.clip(out, -_TOLERABLE, _TOLERABLE, out=out)


def _hard_index(Label, logits_ndim, axis):
    """Integer labels with the class dim (size 1) at ``axis``."""
    lab = np.asarray(Label)
    if lab.ndim == logits_ndim - 1:
        lab = np.expand_dims(lab, axis)
    if lab.ndim != logits_ndim or lab.shape[axis] != 1:
        raise InvalidArgument(f"softmax_with_cross_entropy: hard label shape {list(np.shape(Label))} "
                              f"does not fit logits of rank {logits_ndim} at axis {axis}")
    return lab.astype(np.int64, copy=False)


def _safe_labels(lab, ignore_index, n_class):
    """Labels with ignored ones replaced by 0 (so they can index), and the ignore mask."""
    ignored = lab == ignore_index
    safe = np.where(ignored, 0, lab)
    if safe.size and (safe.min() < 0 or safe.max() >= n_class):
        raise InvalidArgument(f"softmax_with_cross_entropy: label out of range [0, {n_class}) "
                              f"(and not ignore_index {ignore_index})")
    return safe, ignored


def _infer(ins, attrs):
    shape, dt = first(ins, "Logits")
    axis = attrs["axis"] % len(shape) if shape else 0
    loss = tuple(1 if i == axis else d for i, d in enumerate(shape))
    return {"Softmax": (tuple(shape), dt), "Loss": (loss, dt)}


@register_op("softmax_with_cross_entropy", ["Logits", "Label"], ["Softmax", "Loss"], _ATTRS,
             infer_shape=_infer, inplace={"Softmax": "Logits"},
             grad=simple_grad("softmax_with_cross_entropy_grad", ["Label", "Softmax", "Loss@GRAD"],
                              ["Logits@GRAD"]))
def softmax_with_cross_entropy(Logits, Label, *, soft_label, use_softmax, ignore_index, axis):
    axis = axis % Logits.ndim
    prob = softmax_values(Logits, axis) if use_softmax else Logits.copy()
    if soft_label:
        loss = (Label * _neg_log(prob)).sum(axis=axis, keepdims=True)
    else:
        lab, ignored = _safe_labels(_hard_index(Label, Logits.ndim, axis), ignore_index,
                                    Logits.shape[axis])
        loss = _neg_log(np.take_along_axis(prob, lab, axis=axis))
        loss[ignored] = 0
    return prob, loss.astype(Logits.dtype, copy=False)


@register_op("softmax_with_cross_entropy_grad", ["Label", "Softmax", "Loss@GRAD"], ["Logits@GRAD"],
             _ATTRS, infer_shape=grads_like(**{"Logits@GRAD": "Softmax"}),
             inplace={"Logits@GRAD": "Softmax"})
def softmax_with_cross_entropy_grad(Label, Softmax, dLoss, *, soft_label, use_softmax,
                                    ignore_index, axis):
    axis = axis % Softmax.ndim
    if soft_label:
        if use_softmax:
            return (Softmax - Label) * dLoss
        with np.errstate(divide="ignore", invalid="ignore"):
            return -Label / Softmax * dLoss
    lab, ignored = _safe_labels(_hard_index(Label, Softmax.ndim, axis), ignore_index,
                                Softmax.shape[axis])
    scale = np.where(ignored, 0, dLoss).astype(Softmax.dtype, copy=False)
    if use_softmax:
        dx = Softmax * scale
        at = np.take_along_axis(dx, lab, axis=axis)
        np.put_along_axis(dx, lab, at - scale, axis=axis)
        return dx
    dx = np.zeros_like(Softmax)
    with np.errstate(divide="ignore", invalid="ignore"):
        picked = -scale / np.take_along_axis(Softmax, lab, axis=axis)
    np.put_along_axis(dx, lab, np.where(ignored, 0, picked), axis=axis)
    return dx
