"""Activations of ``paddle.nn.functional`` in static mode (``paddle/nn/functional/activation.py``)."""
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import _unary, _var

__all__ = ['relu', 'tanh', 'sigmoid', 'gelu', 'softmax', 'silu', 'leaky_relu', 'log_sigmoid', 'hardsigmoid']


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
