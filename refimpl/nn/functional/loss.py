"""Losses of ``paddle.nn.functional`` in static mode (``paddle/nn/functional/loss.py``).

cross_entropy (``softmax_with_cross_entropy``; a label of input's rank - 1 unsqueezed first, "mean"
with ``ignore_index >= 0`` over the kept labels only), binary_cross_entropy_with_logits
(``sigmoid_cross_entropy_with_logits``, after Paddle's ``paddle.full([1], 1.0)`` constant that
also builds ``pos_weight``'s ``label * (pos_weight - 1) + 1``), mse_loss (``paddle.square`` of
``paddle.subtract``, then mean / sum) and square_error_cost (``elementwise_sub`` + ``square`` under
one helper), as Paddle's static branches build them.
"""
from refimpl.core.errors import InvalidArgument
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor import math as _math
from refimpl.tensor.logic import equal
from refimpl.tensor.manipulation import cast, squeeze, unsqueeze
from refimpl.tensor.math import check_variable, mean, sum as _sum

__all__ = ['cross_entropy', 'binary_cross_entropy_with_logits', 'mse_loss', 'square_error_cost']

_FLOATS = ('float32', 'float64')


def cross_entropy(input, label, weight=None, ignore_index=-100, reduction="mean",
                  soft_label=False, axis=-1, use_softmax=True, name=None):
    """softmax_with_cross_entropy, then mean/sum/none over the per-sample losses.

    A label of rank one less than input is unsqueezed at ``axis`` first (``unsqueeze2``) and, for
    reduction "none", the loss squeezed back (``squeeze2``). "mean" with ``ignore_index >= 0``
    divides the summed loss by the number of labels not equal to ignore_index (1 when there are
    none), as Paddle's static branch: sum, ``label != ignore_index``, cast, sum, equal-to-0, add, div.
    """
    check_variable(input, "cross_entropy")
    check_variable(label, "cross_entropy")
    if reduction not in ("mean", "sum", "none"):
        raise InvalidArgument(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if weight is not None:
        raise InvalidArgument("cross_entropy: weight is not supported")
    input_dims, label_dims = len(input.shape), len(label.shape)
    if input_dims == 0:
        raise InvalidArgument(f"cross_entropy: input {input.name!r} must have rank > 0, got a 0-D tensor")
    if input_dims - 1 != label_dims and input_dims != label_dims:
        raise InvalidArgument(f"cross_entropy: label {label.name!r} must have the rank of input {input.name!r} "
                              f"({input_dims}) or one less, got rank {label_dims}")
    if input_dims - 1 == label_dims:
        label = unsqueeze(label, axis=axis)
    helper = LayerHelper("softmax_with_cross_entropy", name=name)
    softmax_out = helper.create_variable_for_type_inference(input.dtype)
    loss = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type="softmax_with_cross_entropy", inputs={"Logits": input, "Label": label},
                     outputs={"Softmax": softmax_out, "Loss": loss},
                     attrs={"soft_label": soft_label, "ignore_index": ignore_index,
                            "numeric_stable_mode": True, "axis": axis, "use_softmax": use_softmax})
    if reduction == "sum":
        return _sum(loss, name=name)
    if reduction == "mean":
        if ignore_index < 0:
            return mean(loss, name=name)
        loss_sum = _sum(loss, name=name)
        count = _sum(cast(label != ignore_index, loss_sum.dtype), name=name)
        return loss_sum / (count + equal(count, 0.0))
    if input_dims - 1 == label_dims:
        return squeeze(loss, axis=axis)
    return loss


def _float_var(x, arg, api):
    check_variable(x, api)
    if str(x.dtype) not in _FLOATS:
        raise InvalidArgument(f"{api}: {arg} {x.name!r} must be float32 or float64, got {x.dtype}")
    return x


def _check_reduction(api, reduction):
    if reduction not in ("mean", "sum", "none"):
        raise InvalidArgument(f"{api}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _reduce(out, reduction, name):
    if reduction == "mean":
        return mean(out, name=name)
    if reduction == "sum":
        return _sum(out, name=name)
    return out


def binary_cross_entropy_with_logits(logit, label, weight=None, reduction="mean", pos_weight=None, name=None):
    """Sigmoid cross entropy of logits against 0/1 labels, optionally weighted, then reduced."""
    api = "binary_cross_entropy_with_logits"
    _check_reduction(api, reduction)
    _float_var(logit, "logit", api)
    _float_var(label, "label", api)
    from refimpl.tensor.creation import full  # paddle.full
    helper = LayerHelper("sigmoid_cross_entropy_with_logits", name=name)
    out = helper.create_variable_for_type_inference(logit.dtype)
    one = full(shape=[1], fill_value=1.0, dtype=logit.dtype)
    if pos_weight is not None:
        _float_var(pos_weight, "pos_weight", api)
        pos_weight = _math.add(_math.multiply(label, _math.subtract(pos_weight, one)), one)
    helper.append_op(type="sigmoid_cross_entropy_with_logits",
                     inputs={"X": logit, "Label": label, "pos_weight": pos_weight},
                     outputs={"Out": out}, attrs={"ignore_index": -100, "normalize": False})
    if weight is not None:
        _float_var(weight, "weight", api)
        out = _math.multiply(out, weight, name=name if reduction == "none" else None)
    return _reduce(out, reduction, name)


def mse_loss(input, label, reduction="mean", name=None):
    """(input - label) ** 2, then mean / sum / none."""
    _check_reduction("mse_loss", reduction)
    _float_var(input, "input", "mse_loss")
    _float_var(label, "label", "mse_loss")
    if reduction == "none":
        return _math.square(_math.subtract(input, label), name=name)
    return _reduce(_math.square(_math.subtract(input, label)), reduction, name)


def square_error_cost(input, label):
    """(input - label) ** 2 element by element (ops ``elementwise_sub``, ``square``; helper ``square_error_cost``)."""
    _float_var(input, "input", "square_error_cost")
    _float_var(label, "label", "square_error_cost")
    helper = LayerHelper("square_error_cost")
    minus = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type="elementwise_sub", inputs={"X": [input], "Y": [label]}, outputs={"Out": [minus]})
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type="square", inputs={"X": [minus]}, outputs={"Out": [out]})
    return out
