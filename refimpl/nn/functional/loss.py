"""Losses of ``paddle.nn.functional`` in static mode (``paddle/nn/functional/loss.py``)."""
from refimpl.core.errors import InvalidArgument
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import _var, mean, sum as _sum

__all__ = ['cross_entropy']


def cross_entropy(input, label, weight=None, ignore_index=-100, reduction="mean",
                  soft_label=False, axis=-1, use_softmax=True, name=None):
    """softmax_with_cross_entropy, then mean/sum/none over the per-sample losses."""
    _var(input, "cross_entropy")
    _var(label, "cross_entropy")
    if reduction not in ("mean", "sum", "none"):
        raise InvalidArgument(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if weight is not None:
        raise InvalidArgument("cross_entropy: weight is not supported")
    helper = LayerHelper("softmax_with_cross_entropy", name=name)
    softmax_out = helper.create_variable_for_type_inference(input.dtype)
    loss = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type="softmax_with_cross_entropy", inputs={"Logits": input, "Label": label},
                     outputs={"Softmax": softmax_out, "Loss": loss},
                     attrs={"soft_label": soft_label, "ignore_index": ignore_index,
                            "numeric_stable_mode": True, "axis": axis, "use_softmax": use_softmax})
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return _sum(loss)
    return loss
