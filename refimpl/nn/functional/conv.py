"""Convolutions in static mode: ``F.conv1d/2d/3d`` and ``F.conv1d/2d/3d_transpose``
(``paddle/nn/functional/conv.py``).

Paddle's static branch (``conv2d`` -> ``_conv_nd``) appends one ``conv2d`` op, or
``depthwise_conv2d`` when every input channel is its own group (``groups == C != 1`` and the
filters a multiple of C), then the bias: NCHW reshapes it to ``[1, C, 1, 1]`` (a ``reshape2``
op) and adds it with ``axis=-1``; NHWC adds it as it is. Padding may be an int, 2 ints (h, w),
4 ints (top, bottom, left, right), 4 per-dim pairs including the zero batch / channel pairs,
or "SAME" / "VALID" (``padding_algorithm``); symmetric 4-value paddings are stored as 2.

``conv1d`` is Paddle's: the weight is copied (``assign``) and unsqueezed to ``[C_out, C / g, 1, K]``,
x unsqueezed at dim -2 (NCL) or -3 (NLC), one ``conv2d`` op (CPU Paddle never picks the depthwise op
for 1-D), the bias added with ``axis`` = the channel dim into a var named ``elementwise_add_N``, and
the result squeezed back.

``conv3d`` is ``conv2d``'s path over (D, H, W) (never the depthwise op: CPU Paddle picks
``depthwise_conv3d`` only under a CUDA accuracy flag). ``conv2d_transpose`` appends one
``conv2d_transpose`` op, or ``depthwise_conv2d_transpose`` when every input channel is its own
group with one filter each (``groups == C != 1``, weight ``[C, 1, ...]``), then the bias as conv2d
does; ``conv3d_transpose`` stores ``data_format`` "NCHW" / "NHWC" and adds its bias with
``axis`` = the channel dim into ``elementwise_add_N``; ``conv1d_transpose`` unsqueezes x at -1 (NCL)
or -2 (NLC) and the weight at -1, runs a conv2d_transpose over [.., L, 1] and squeezes back. The
attrs ``output_size`` / ``output_padding`` are ``[]`` when not given (never both).

Differences: the op's ``use_cudnn`` / ``fuse_relu_before_depthwise_conv`` attrs are not stored
(Paddle 3.3.1's op proto drops them too); a kernel larger than the padded input raises here
when the program is built, where Paddle 3.3.1 raises only when the op runs; so do an ``output_size``
outside ``[inferred, inferred + stride)``, an ``output_padding`` not below ``max(stride, dilation)`` and
a transposed conv's size <= 0. An ``output_size`` given as a Tensor raises Unimplemented.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument
from refimpl.framework import unique_name
from refimpl.framework.variable import Variable
from refimpl.ops.conv_ops import conv_geometry
from refimpl.static.layer_helper import LayerHelper

__all__ = ['conv2d', 'conv1d', 'conv3d', 'conv1d_transpose', 'conv2d_transpose', 'conv3d_transpose']

FLOAT_DTYPES = ("float16", "bfloat16", "uint16", "float32", "float64")


# ---- argument checks shared with pooling.py -------------------------------------------------------
def check_input(api: str, x: Any, ndim: int) -> Variable:
    """``x`` must be a floating static Variable of rank ``ndim``."""
    if not isinstance(x, Variable):
        raise InvalidArgument(f"{api}: x must be a static Variable, got {type(x).__name__}")
    if len(x.shape) != ndim:
        raise InvalidArgument(f"{api}: x {x.name!r} must be a {ndim}-D tensor, got shape {list(x.shape)}")
    if str(x.dtype) not in FLOAT_DTYPES:
        raise InvalidArgument(f"{api}: x {x.name!r} must be a floating tensor, got dtype {x.dtype}")
    return x


def check_data_format(api: str, data_format: str) -> bool:
    """True for channel-last ("NHWC"); InvalidArgument unless "NCHW" or "NHWC"."""
    if data_format not in ("NCHW", "NHWC"):
        raise InvalidArgument(f"{api}: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
    return data_format == "NHWC"


def to_list(api: str, arg: str, value: Any, n: int) -> List[int]:
    """Paddle's ``convert_to_list``: an int repeated ``n`` times, or a list / tuple of ``n`` ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * n
    if isinstance(value, (list, tuple)) and len(value) == n and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    raise InvalidArgument(f"{api}: {arg} must be an int or a list of {n} ints, got {value!r}")


def update_padding(api: str, padding: Any, channel_last: bool, num_dims: int = 2) -> Tuple[List[int], str]:
    """(paddings, padding_algorithm) as Paddle's ``_update_padding_nd`` makes them."""
    if isinstance(padding, str):
        algo = padding.upper()
        if algo not in ("SAME", "VALID"):
            raise InvalidArgument(f"{api}: unknown padding {padding!r}, it can only be 'SAME' or 'VALID'")
        return [0] * num_dims, algo
    if isinstance(padding, (list, tuple)):
        padding = list(padding)
        if len(padding) == 2 + num_dims and isinstance(padding[0], (list, tuple)):
            outer = (padding[0], padding[-1]) if channel_last else (padding[0], padding[1])
            if any(list(p) != [0, 0] for p in outer):
                raise InvalidArgument(f"{api}: non-zero padding {padding} in the batch or channel "
                                      "dimensions is not supported")
            inner = padding[1:-1] if channel_last else padding[2:]
            padding = [int(v) for pair in inner for v in pair]
        elif not (len(padding) in (num_dims, 2 * num_dims) and isinstance(padding[0], int)):
            raise InvalidArgument(f"{api}: invalid padding {padding!r}")
        if len(padding) == 2 * num_dims and padding[0::2] == padding[1::2]:
            padding = padding[0::2]
        padding = to_list(api, "padding", padding, len(padding))
    else:
        padding = to_list(api, "padding", padding, num_dims)
    if any(p < 0 for p in padding):
        raise InvalidArgument(f"{api}: padding must be >= 0, got {padding}")
    return padding, "EXPLICIT"


# ---- conv2d -------------------------------------------------------------------------------------------
def check_fits(api: str, x: Variable, khw: Sequence[int], stride, padding, dilation, algo, channel_last,
               hw: Optional[Sequence[int]] = None):
    """The output of every spatial dim (``hw``, by default x's) must be > 0: the kernel fits the padded input."""
    if hw is None:
        hw = x.shape[1:3] if channel_last else x.shape[2:4]
    try:
        conv_geometry(api, hw, khw, stride, padding, dilation, algo)
    except InvalidArgument as e:
        raise InvalidArgument(f"{api}: x {x.name!r} of shape {list(x.shape)}: {e.args[0]}") from None


def _conv_nd(x: Variable, weight: Variable, bias: Optional[Variable] = None, stride: Sequence[int] = (1, 1),
             padding: Sequence[int] = (0, 0), padding_algorithm: str = "EXPLICIT",
             dilation: Sequence[int] = (1, 1), groups: int = 1, data_format: str = "NCHW",
             channel_dim: int = 1, op_type: str = "conv2d", use_cudnn: bool = True,
             name: Optional[str] = None) -> Variable:
    """The conv op with attrs already normalised, then the bias (Paddle's ``_conv_nd``, static branch)."""
    helper = LayerHelper(op_type, name=name)
    pre_bias = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs={"Input": [x], "Filter": [weight]}, outputs={"Output": [pre_bias]},
                     attrs={"strides": list(stride), "paddings": list(padding), "dilations": list(dilation),
                            "groups": groups, "padding_algorithm": padding_algorithm,
                            "data_format": data_format})
    if bias is None:
        return pre_bias
    out = helper.create_variable_for_type_inference(x.dtype)
    if not (channel_dim == -1 or len(pre_bias.shape) == len(bias.shape)):
        from refimpl.tensor.manipulation import reshape
        trailing = len(pre_bias.shape) - len(bias.shape) - channel_dim
        bias = reshape(bias, [1] * channel_dim + list(bias.shape) + [1] * trailing)
    helper.append_op(type="elementwise_add", inputs={"X": [pre_bias], "Y": [bias]}, outputs={"Out": [out]},
                     attrs={"axis": -1})
    return out


def _check_groups(api: str, x: Variable, weight: Any, channel_dim: int, groups: Any, ndim: int):
    """(channels of x, filters of weight), both divisible by ``groups``."""
    if not isinstance(weight, Variable) or len(weight.shape) != ndim:
        raise InvalidArgument(f"{api}: weight must be a {ndim}-D static Variable, got "
                              f"{getattr(weight, 'shape', type(weight).__name__)}")
    num_channels, num_filters = x.shape[channel_dim], weight.shape[0]
    if not isinstance(groups, int) or groups == 0:
        raise InvalidArgument(f"{api}: groups must be a non-zero int, got {groups!r}")
    if num_channels != -1 and groups != -1 and num_channels % groups:
        raise InvalidArgument(f"{api}: the {num_channels} channels of x {x.name!r} (shape {list(x.shape)}) "
                              f"are not divisible by groups={groups}")
    if num_filters != -1 and groups != -1 and num_filters % groups:
        raise InvalidArgument(f"{api}: the {num_filters} filters of weight {weight.name!r} (shape "
                              f"{list(weight.shape)}) are not divisible by groups={groups}")
    return num_channels, num_filters


def conv2d(x: Variable, weight: Variable, bias: Optional[Variable] = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, data_format: str = "NCHW", name: Optional[str] = None) -> Variable:
    """2-D convolution of x [N, C, H, W] (or NHWC) with weight [C_out, C / groups, KH, KW]."""
    api = "conv2d"
    channel_last = check_data_format(api, data_format)
    check_input(api, x, 4)
    channel_dim = -1 if channel_last else 1
    num_channels, num_filters = _check_groups(api, x, weight, channel_dim, groups, 4)
    padding, algo = update_padding(api, padding, channel_last)
    stride = to_list(api, "stride", stride, 2)
    dilation = to_list(api, "dilation", dilation, 2)
    check_fits(api, x, weight.shape[2:], stride, padding, dilation, algo, channel_last)
    op_type = "conv2d"
    if num_channels == groups and num_channels != 1 and num_filters % num_channels == 0:
        op_type = "depthwise_conv2d"
    return _conv_nd(x, weight, bias, stride, padding, algo, dilation, groups, data_format, channel_dim,
                    op_type, name=name)


def conv1d(x: Variable, weight: Variable, bias: Optional[Variable] = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, data_format: str = "NCL", name: Optional[str] = None) -> Variable:
    """1-D convolution of x [N, C, L] (or NLC) with weight [C_out, C / groups, K], as a conv2d over [.., 1, L]."""
    from refimpl.tensor.creation import assign  # paddle.assign
    from refimpl.tensor.manipulation import squeeze, unsqueeze  # paddle.squeeze / unsqueeze
    api = "conv1d"
    if data_format not in ("NCL", "NLC"):
        raise InvalidArgument(f"{api}: data_format must be 'NCL' or 'NLC', got {data_format!r}")
    channel_last = data_format == "NLC"
    channel_dim = -1 if channel_last else 1
    check_input(api, x, 3)
    _check_groups(api, x, weight, channel_dim, groups, 3)
    padding, algo = update_padding(api, padding, channel_last, num_dims=1)
    padding = [0, *padding] if len(padding) == 1 else [0, 0, *padding]
    stride = [1, *to_list(api, "stride", stride, 1)]
    dilation = [1, *to_list(api, "dilation", dilation, 1)]
    check_fits(api, x, [1, weight.shape[2]], stride, padding, dilation, algo, channel_last,
               hw=[1, x.shape[1] if channel_last else x.shape[2]])
    weight = unsqueeze(assign(weight), axis=[-2])
    axis = -3 if channel_last else -2
    x = unsqueeze(x, axis=[axis])
    out = _conv_nd(x, weight, None, stride, padding, algo, dilation, groups, "NHWC" if channel_last else "NCHW",
                   channel_dim, "conv2d", name=name)
    if bias is not None:
        summed = out.block.create_var(name=unique_name.generate("elementwise_add"), dtype=x.dtype)
        LayerHelper("elementwise_add").append_op(type="elementwise_add", inputs={"X": [out], "Y": [bias]},
                                                 outputs={"Out": [summed]}, attrs={"axis": channel_dim})
        out = summed
    return squeeze(out, axis=[axis])


# ---- conv3d -------------------------------------------------------------------------------------------
def _channel_last(api: str, data_format: str, formats: Sequence[str]) -> bool:
    if data_format not in formats:
        raise InvalidArgument(f"{api}: data_format must be one of {list(formats)}, got {data_format!r}")
    return data_format == formats[1]


def conv3d(x: Variable, weight: Variable, bias: Optional[Variable] = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, data_format: str = "NCDHW", name: Optional[str] = None) -> Variable:
    """3-D convolution of x [N, C, D, H, W] (or NDHWC) with weight [C_out, C / groups, KD, KH, KW]."""
    api = "conv3d"
    channel_last = _channel_last(api, data_format, ("NCDHW", "NDHWC"))
    check_input(api, x, 5)
    channel_dim = -1 if channel_last else 1
    _check_groups(api, x, weight, channel_dim, groups, 5)
    padding, algo = update_padding(api, padding, channel_last, num_dims=3)
    stride = to_list(api, "stride", stride, 3)
    dilation = to_list(api, "dilation", dilation, 3)
    check_fits(api, x, weight.shape[2:], stride, padding, dilation, algo, channel_last,
               hw=x.shape[1:4] if channel_last else x.shape[2:5])
    return _conv_nd(x, weight, bias, stride, padding, algo, dilation, groups, data_format, channel_dim,
                    "conv3d", name=name)


# ---- transposed convolutions ----------------------------------------------------------------------------
def add_with_axis(x: Variable, y: Variable, axis: int) -> Variable:
    """Paddle's ``_add_with_axis`` (static): one ``elementwise_add`` into a var named ``elementwise_add_N``."""
    out = x.block.create_var(name=unique_name.generate("elementwise_add"), dtype=x.dtype)
    LayerHelper("elementwise_add").append_op(type="elementwise_add", inputs={"X": [x], "Y": [y]},
                                             outputs={"Out": [out]}, attrs={"axis": axis})
    return out


def transpose_output_size(api: str, output_size: Any, output_padding: Any, nd: int) -> Tuple[List[int], List[int]]:
    """(output_size, output_padding) as the attrs store them: [] when not given; never both."""
    if output_size is None:
        output_size = []
    else:
        if output_padding != 0:
            raise InvalidArgument(f"{api}: output_padding option is mutually exclusive with output_size")
        if isinstance(output_size, Variable) or (isinstance(output_size, (list, tuple)) and any(
                isinstance(v, Variable) for v in output_size)):
            from refimpl.core.errors import Unimplemented
            raise Unimplemented(f"{api}: an output_size given as a Tensor is not implemented in refimpl "
                                "(pass ints)")
        output_size = to_list(api, "output_size", output_size, nd)
    output_padding = [] if output_padding == 0 else to_list(api, "output_padding", output_padding, nd)
    return output_size, output_padding


def check_transpose(api: str, x: Variable, w_shape: Sequence[int], attrs: dict, nd: int) -> None:
    """The transposed conv op's own checks (output_size range, output > 0), raised naming the API."""
    from refimpl.ops.conv_transpose_ops import conv_transpose_shapes
    try:
        conv_transpose_shapes(api, tuple(x.shape), tuple(w_shape), attrs, nd)
    except InvalidArgument as e:
        raise InvalidArgument(f"{api}: x {x.name!r} of shape {list(x.shape)}: {e.args[0]}") from None


def conv_transpose_op(api: str, op_type: str, x: Variable, weight: Variable, attrs: dict, nd: int,
                      name: Optional[str] = None) -> Tuple[LayerHelper, Variable]:
    """Append one transposed conv op (attrs in Paddle's order); its helper and its output."""
    check_transpose(api, x, weight.shape, attrs, nd)
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs={"Input": [x], "Filter": [weight]}, outputs={"Output": [out]},
                     attrs=attrs)
    return helper, out


def _transpose_attrs(output_padding, output_size, stride, padding, algo, dilation, groups, data_format) -> dict:
    return {"output_padding": output_padding, "output_size": output_size, "strides": stride, "paddings": padding,
            "padding_algorithm": algo, "dilations": dilation, "groups": groups, "data_format": data_format}


def _check_transpose_input(api: str, x: Variable, weight: Any, channel_dim: int, groups: Any, ndim: int) -> int:
    check_input(api, x, ndim)
    if not isinstance(weight, Variable) or len(weight.shape) != ndim:
        raise InvalidArgument(f"{api}: weight must be a {ndim}-D static Variable, got "
                              f"{getattr(weight, 'shape', type(weight).__name__)}")
    num_channels = x.shape[channel_dim]
    if not isinstance(groups, int) or groups <= 0:
        raise InvalidArgument(f"{api}: groups must be an int > 0, got {groups!r}")
    if num_channels != -1 and num_channels % groups:
        raise InvalidArgument(f"{api}: the {num_channels} channels of x {x.name!r} (shape {list(x.shape)}) "
                              f"are not divisible by groups={groups}")
    return num_channels


def conv2d_transpose(x: Variable, weight: Variable, bias: Optional[Variable] = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, dilation: Any = 1, groups: int = 1,
                     output_size: Any = None, data_format: str = "NCHW", name: Optional[str] = None) -> Variable:
    """2-D transposed convolution of x [N, C, H, W] (or NHWC) with weight [C, C_out / groups, KH, KW]."""
    api = "conv2d_transpose"
    channel_last = _channel_last(api, data_format, ("NCHW", "NHWC"))
    channel_dim = -1 if channel_last else 1
    num_channels = _check_transpose_input(api, x, weight, channel_dim, groups, 4)
    padding, algo = update_padding(api, padding, channel_last)
    stride = to_list(api, "stride", stride, 2)
    dilation = to_list(api, "dilation", dilation, 2)
    output_size, output_padding = transpose_output_size(api, output_size, output_padding, 2)
    op_type = "conv2d_transpose"
    if num_channels == groups and num_channels != 1 and weight.shape[1] == 1:
        op_type = "depthwise_conv2d_transpose"
    attrs = _transpose_attrs(output_padding, output_size, stride, padding, algo, dilation, groups, data_format)
    helper, pre_bias = conv_transpose_op(api, op_type, x, weight, attrs, 2, name)
    if bias is None:
        return pre_bias
    out = helper.create_variable_for_type_inference(x.dtype)
    if not channel_last:
        from refimpl.tensor.manipulation import reshape
        bias = reshape(bias, [1, *bias.shape, 1, 1])
    LayerHelper("elementwise_add").append_op(type="elementwise_add", inputs={"X": [pre_bias], "Y": [bias]},
                                             outputs={"Out": [out]}, attrs={"axis": -1})
    return out


def conv1d_transpose(x: Variable, weight: Variable, bias: Optional[Variable] = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1,
                     output_size: Any = None, data_format: str = "NCL", name: Optional[str] = None) -> Variable:
    """1-D transposed convolution of x [N, C, L] (or NLC), as a conv2d_transpose over [.., L, 1]."""
    from refimpl.tensor.manipulation import squeeze, unsqueeze  # paddle.squeeze / unsqueeze
    api = "conv1d_transpose"
    channel_last = _channel_last(api, data_format, ("NCL", "NLC"))
    channel_dim = -1 if channel_last else 1
    num_channels = _check_transpose_input(api, x, weight, channel_dim, groups, 3)
    padding, algo = update_padding(api, padding, channel_last, num_dims=1)
    padding = [*padding, 0] if len(padding) == 1 else [*padding, 0, 0]
    stride = [*to_list(api, "stride", stride, 1), 1]
    dilation = [*to_list(api, "dilation", dilation, 1), 1]
    output_size, output_padding = transpose_output_size(api, output_size, output_padding, 1)
    output_size = [*output_size, 1] if output_size else []
    output_padding = [*output_padding, 0] if output_padding else []
    if output_padding and output_padding[0] > stride[0]:
        raise InvalidArgument(f"{api}: output_padding {output_padding[0]} must not be greater than "
                              f"stride {stride[0]}")
    op_type = "conv2d_transpose"
    if num_channels == groups and num_channels != 1 and weight.shape[1] == 1:
        op_type = "depthwise_conv2d_transpose"
    axis = -2 if channel_last else -1
    x = unsqueeze(x, axis=[axis])
    weight = unsqueeze(weight, axis=[-1])
    attrs = _transpose_attrs(output_padding, output_size, stride, padding, algo, dilation, groups,
                             "NHWC" if channel_last else "NCHW")
    _, out = conv_transpose_op(api, op_type, x, weight, attrs, 2, name)
    if bias is not None:
        out = add_with_axis(out, bias, channel_dim)
    return squeeze(out, axis=[axis])


def conv3d_transpose(x: Variable, weight: Variable, bias: Optional[Variable] = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1,
                     output_size: Any = None, data_format: str = "NCDHW", name: Optional[str] = None) -> Variable:
    """3-D transposed convolution of x [N, C, D, H, W] (or NDHWC) with weight [C, C_out / groups, KD, KH, KW]."""
    api = "conv3d_transpose"
    channel_last = _channel_last(api, data_format, ("NCDHW", "NDHWC"))
    channel_dim = -1 if channel_last else 1
    _check_transpose_input(api, x, weight, channel_dim, groups, 5)
    padding, algo = update_padding(api, padding, channel_last, num_dims=3)
    stride = to_list(api, "stride", stride, 3)
    dilation = to_list(api, "dilation", dilation, 3)
    output_size, output_padding = transpose_output_size(api, output_size, output_padding, 3)
    attrs = _transpose_attrs(output_padding, output_size, stride, padding, algo, dilation, groups,
                             "NHWC" if channel_last else "NCHW")
    _, out = conv_transpose_op(api, "conv3d_transpose", x, weight, attrs, 3, name)
    return out if bias is None else add_with_axis(out, bias, channel_dim)
