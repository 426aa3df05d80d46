"""``paddle.nn.functional`` in static mode: activations, softmax, cross_entropy, dropout."""
from refimpl.core.errors import InvalidArgument
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import _unary, _var, mean, sum as _sum


def relu(x, name=None):
    return _unary("relu", x, name)


def tanh(x, name=None):
    return _unary("tanh", x, name)


def sigmoid(x, name=None):
    return _unary("sigmoid", x, name)


def gelu(x, approximate=False, name=None):
    return _unary("gelu", x, name, approximate=approximate)


def softmax(x, axis=-1, dtype=None, name=None):
    return _unary("softmax", x, name, axis=axis)


def dropout(x, p=0.5, axis=None, training=True, mode="upscale_in_train", name=None):
    _var(x, "dropout")
    if p == 0:  # Paddle returns x itself for p == 0, in training and in inference alike
        return x
    if not 0 <= p <= 1:
        raise InvalidArgument(f"dropout: p must be in [0, 1], got {p}")
    impl = {"upscale_in_train": "upscale_in_train", "downscale_in_infer": "downgrade_in_infer"}.get(mode)
    if impl is None:
        raise InvalidArgument(f"dropout: mode must be 'upscale_in_train' or 'downscale_in_infer', got {mode!r}")
    helper = LayerHelper("dropout", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    mask = helper.create_variable_for_type_inference("uint8", stop_gradient=True)
    helper.append_op(type="dropout", inputs={"X": [x]}, outputs={"Out": [out], "Mask": [mask]},
                     attrs={"dropout_prob": float(p), "is_test": not training,
                            "dropout_implementation": impl})
    return out


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


def silu(x, name=None):
    return _unary("silu", x, name)


def leaky_relu(x, negative_slope=0.01, name=None):
    return _unary("leaky_relu", x, name, alpha=float(negative_slope))


def log_sigmoid(x, name=None):
    _var(x, "log_sigmoid")
    helper = LayerHelper("log_sigmoid", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="logsigmoid", inputs={"X": x}, outputs={"Out": out})
    return out


def hardsigmoid(x, slope=0.1666667, offset=0.5, name=None):
    _var(x, "hardsigmoid")
    helper = LayerHelper("hardsigmoid", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="hard_sigmoid", inputs={"X": x}, outputs={"Out": out},
                     attrs={"slope": slope, "offset": offset})
    return out


def linear(x, weight, bias=None, name=None):
    """x @ weight (+ bias): ``matmul_v2`` then ``elementwise_add`` (helper ``linear``)."""
    _var(x, "linear")
    helper = LayerHelper("linear", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="matmul_v2", inputs={"X": x, "Y": weight}, outputs={"Out": out},
                     attrs={"trans_x": False, "trans_y": False})
    if bias is None:
        return out
    res = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="elementwise_add", inputs={"X": [out], "Y": [bias]}, outputs={"Out": [res]},
                     attrs={"axis": -1})
    return res
