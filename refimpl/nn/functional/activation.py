"""Activations of ``paddle.nn.functional`` in static mode (``paddle/nn/functional/activation.py``)."""
from refimpl.core.dtypes import convert_dtype, to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import check_variable, unary_op

__all__ = ['relu', 'tanh', 'sigmoid', 'gelu', 'softmax', 'silu', 'leaky_relu', 'log_sigmoid', 'hardsigmoid',
           'log_softmax', 'prelu']


def relu(x, name=None):
    return unary_op("relu", x, name)


def tanh(x, name=None):
    return unary_op("tanh", x, name)


def sigmoid(x, name=None):
    return unary_op("sigmoid", x, name)


def gelu(x, approximate=False, name=None):
    return unary_op("gelu", x, name, approximate=approximate)


def _cast_first(helper, x, dtype, api, allowed):
    """x cast to ``dtype`` by a ``cast`` op of ``helper`` (Paddle's ``dtype=`` of softmax / log_softmax)."""
    if dtype is None:
        return x
    if convert_dtype(dtype) not in allowed:
        raise InvalidArgument(f"{api}: dtype must be one of {', '.join(allowed)}, got {dtype!r}")
    out = helper.create_variable_for_type_inference(convert_dtype(dtype))
    helper.append_op(type="cast", inputs={"X": x}, outputs={"Out": out},
                     attrs={"in_dtype": to_vartype(x.dtype), "out_dtype": to_vartype(dtype)})
    return out


def softmax(x, axis=-1, dtype=None, name=None):
    """Op ``softmax`` along ``axis``; with ``dtype``, x is cast first (op ``cast``, same helper)."""
    check_variable(x, "softmax")
    helper = LayerHelper("softmax", name=name)
    src = _cast_first(helper, x, dtype, "softmax", ("bfloat16", "float16", "float32", "float64"))
    out = helper.create_variable_for_type_inference(src.dtype)
    helper.append_op(type="softmax", inputs={"X": src}, outputs={"Out": out}, attrs={"axis": axis})
    return out


def silu(x, name=None):
    return unary_op("silu", x, name)


def leaky_relu(x, negative_slope=0.01, name=None):
    return unary_op("leaky_relu", x, name, alpha=float(negative_slope))


def log_sigmoid(x, name=None):
    check_variable(x, "log_sigmoid")
    helper = LayerHelper("log_sigmoid", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="logsigmoid", inputs={"X": x}, outputs={"Out": out})
    return out


def hardsigmoid(x, slope=0.1666667, offset=0.5, name=None):
    check_variable(x, "hardsigmoid")
    helper = LayerHelper("hardsigmoid", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="hard_sigmoid", inputs={"X": x}, outputs={"Out": out},
                     attrs={"slope": slope, "offset": offset})
    return out


def log_softmax(x, axis=-1, dtype=None, name=None):
    """log(softmax(x)) along ``axis`` (op ``log_softmax``); with ``dtype``, x is cast first (op ``cast``)."""
    check_variable(x, "log_softmax")
    nd = len(x.shape)
    if not isinstance(axis, int) or not -max(nd, 1) <= axis < max(nd, 1):
        raise InvalidArgument(f"log_softmax: axis {axis!r} is out of range for x {x.name!r} of shape "
                              f"{list(x.shape)}")
    helper = LayerHelper("log_softmax", name=name)
    src = _cast_first(helper, x, dtype, "log_softmax", ("float32", "float64"))
    out = helper.create_variable_for_type_inference(src.dtype)
    helper.append_op(type="log_softmax", inputs={"X": src}, outputs={"Out": out}, attrs={"axis": axis})
    return out


_PRELU_FORMATS = ("NC", "NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC")


def prelu(x, weight, data_format="NCHW", name=None):
    """max(0, x) + weight * min(0, x) (op ``prelu``): one weight for all (mode ``all``) or, for a weight of
    more than one element, one per channel (mode ``channel``), as Paddle picks the mode."""
    check_variable(x, "prelu")
    check_variable(weight, "prelu")
    mode = "all"
    if len(weight.shape) == 1 and weight.shape[0] > 1:
        if data_format not in _PRELU_FORMATS:
            raise InvalidArgument(f"prelu: data_format must be one of {', '.join(_PRELU_FORMATS)}, "
                                  f"got {data_format!r}")
        data_format = "NCHW" if data_format[1] == "C" else "NHWC"
        if len(x.shape) < 2:
            raise InvalidArgument(f"prelu: x {x.name!r} must be at least 2-D when weight has more than one "
                                  f"element, got shape {list(x.shape)}")
        channels = x.shape[1] if data_format == "NCHW" else x.shape[-1]
        if weight.shape[0] != channels:
            raise InvalidArgument(f"prelu: the size of weight {weight.name!r} ({weight.shape[0]}) must equal the "
                                  f"number of channels of x {x.name!r} ({channels}, shape {list(x.shape)}, "
                                  f"data_format {data_format})")
        mode = "channel"
    helper = LayerHelper("prelu", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="prelu", inputs={"X": x, "Alpha": weight}, outputs={"Out": out},
                     attrs={"mode": mode, "data_format": data_format})
    return out
