"""Static-graph conv layers: ``static.nn.conv3d``, ``conv2d_transpose``, ``conv3d_transpose``.

Mirrors the functions of the same names in ``python/paddle/static/nn/common.py`` (Paddle 3.3.1,
legacy IR); ``static.nn.conv2d`` lives in :mod:`refimpl.static.nn.common`. Each call creates its
filter and bias (``conv3d_0.w_0`` / ``.b_0``, ``conv2d_transpose_0.w_0`` ...), appends one op, the
bias (``elementwise_add`` with ``axis`` = the channel dim) and ``act``:

* ``conv3d``: filter ``[num_filters, C / groups, KD, KH, KW]`` from Normal(0, sqrt(2 / (KD*KH*KW*C))).
* ``conv2d_transpose`` / ``conv3d_transpose``: filter ``[C, num_filters / groups, *K]`` from Paddle's
  default (Xavier uniform). ``filter_size`` may be left out when ``output_size`` is given: it is then
  ``(output - (in - 1) * stride + pad_lo + pad_hi - 1) // dilation + 1`` per dim. ``conv2d_transpose``
  is ``depthwise_conv2d_transpose`` when ``groups == C == num_filters`` and ``use_cudnn=False``.
  ``conv3d_transpose`` stores ``data_format`` "NCHW" / "NHWC", as Paddle does.

Differences: the ``use_cudnn`` attr is not stored (Paddle 3.3.1's op proto drops it); Paddle lets
``groups`` that do not divide the channels or ``num_filters`` through to a failing kernel, and checks
``output_size`` and sizes <= 0 only when the op runs: here each raises InvalidArgument when the
layer is built. An ``output_size`` given as a Tensor raises Unimplemented.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument
from refimpl.nn.initializer import Normal

from ..layer_helper import LayerHelper
from .common import _append_bias

if TYPE_CHECKING:
    from refimpl.framework.variable import Variable

__all__ = ['conv3d', 'conv2d_transpose', 'conv3d_transpose']


def _check_common(api: str, input: Any, ndim: int, data_format: str, formats: Sequence[str], param_attr: Any,
                  use_cudnn: Any) -> int:
    """The checks every layer here makes; returns the (known) number of input channels."""
    from refimpl.nn.functional.conv import check_input
    if data_format not in formats:
        raise InvalidArgument(f"{api}: data_format must be one of {list(formats)}, got {data_format!r}")
    check_input(api, input, ndim)
    if param_attr is False:
        raise InvalidArgument(f"{api}: param_attr must not be False")
    if not isinstance(use_cudnn, bool):
        raise InvalidArgument(f"{api}: use_cudnn must be True or False, got {use_cudnn!r}")
    channels = input.shape[-1] if data_format == formats[1] else input.shape[1]
    if channels < 0:
        raise InvalidArgument(f"{api}: the channel dim of input {input.name!r} (shape {list(input.shape)}) "
                              "must be known")
    return channels


def _check_groups(api: str, input: Variable, groups: Any, channels: int, num_filters: int) -> int:
    groups = 1 if groups is None else groups
    if not isinstance(groups, int) or isinstance(groups, bool) or groups <= 0:
        raise InvalidArgument(f"{api}: groups must be an int > 0, got {groups!r}")
    if channels % groups or num_filters % groups:
        raise InvalidArgument(f"{api}: groups={groups} must divide the {channels} channels of input "
                              f"{input.name!r} (shape {list(input.shape)}) and num_filters={num_filters}")
    return groups


def conv3d(input: Variable, num_filters: int, filter_size: Any, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: Optional[int] = None, param_attr: Any = None, bias_attr: Any = None,
           use_cudnn: bool = True, act: Optional[str] = None, name: Optional[str] = None,
           data_format: str = "NCDHW") -> Variable:
    """3-D convolution with a new filter and bias, then ``act`` (ops ``conv3d``, ``elementwise_add``)."""
    from refimpl.nn.functional.conv import check_fits, to_list, update_padding
    api = "static.nn.conv3d"
    channels = _check_common(api, input, 5, data_format, ("NCDHW", "NDHWC"), param_attr, use_cudnn)
    channel_last = data_format == "NDHWC"
    g = _check_groups(api, input, groups, channels, num_filters)
    helper = LayerHelper("conv3d", name=name)
    filter_size = to_list(api, "filter_size", filter_size, 3)
    stride = to_list(api, "stride", stride, 3)
    dilation = to_list(api, "dilation", dilation, 3)
    padding, algo = update_padding(api, padding, channel_last, num_dims=3)
    check_fits(api, input, filter_size, stride, padding, dilation, algo, channel_last,
               hw=input.shape[1:4] if channel_last else input.shape[2:5])
    std = (2.0 / (filter_size[0] * filter_size[1] * filter_size[2] * channels)) ** 0.5
    w = helper.create_parameter(param_attr, [num_filters, channels // g, *filter_size], input.dtype,
                                default_initializer=Normal(0.0, std))
    pre_bias = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type="conv3d", inputs={"Input": input, "Filter": w}, outputs={"Output": pre_bias},
                     attrs={"strides": stride, "paddings": padding, "dilations": dilation, "groups": g,
                            "padding_algorithm": algo, "data_format": data_format})
    dim = 4 if channel_last else 1
    return helper.append_activation(_append_bias(helper, pre_bias, bias_attr, dim, dim + 1), act)


def _transpose_padding(api: str, padding: Any, channel_last: bool, nd: int) -> Any:
    """(paddings [lo0, hi0, ...], padding_algorithm) as Paddle's ``_update_padding`` of these layers."""
    from refimpl.nn.functional.conv import to_list
    if isinstance(padding, str):
        algo = padding.upper()
        if algo not in ("SAME", "VALID"):
            raise InvalidArgument(f"{api}: unknown padding {padding!r}, it can only be 'SAME' or 'VALID'")
        return [0] * (2 * nd), algo
    if isinstance(padding, (list, tuple)) and len(padding) == nd + 2 and isinstance(padding[0], (list, tuple)):
        outer = (padding[0], padding[-1]) if channel_last else (padding[0], padding[1])
        if any(list(p) != [0, 0] for p in outer):
            raise InvalidArgument(f"{api}: non-zero padding {list(padding)} in the batch or channel dimensions "
                                  "is not supported")
        padding = [int(v) for pair in (padding[1:-1] if channel_last else padding[2:]) for v in pair]
    if isinstance(padding, (list, tuple)) and len(padding) == 2 * nd:
        pads = to_list(api, "padding", list(padding), 2 * nd)
    else:
        pads = [p for p in to_list(api, "padding", padding, nd) for _ in range(2)]
    if min(pads) < 0:
        raise InvalidArgument(f"{api}: padding must be >= 0, got {pads}")
    return pads, "EXPLICIT"


def _filter_from_output(api: str, input: Variable, output_size: List[int], stride: Any, pads: Any, dilation: Any,
                        channel_last: bool) -> List[int]:
    """Paddle's filter size for a given output size: ``(out - (in - 1) * s + p_lo + p_hi - 1) // d + 1``."""
    sizes = input.shape[1:-1] if channel_last else input.shape[2:]
    ks = []
    for i, size in enumerate(sizes):
        k = (output_size[i] - (size - 1) * stride[i] + pads[2 * i] + pads[2 * i + 1] - 1) // dilation[i] + 1
        if size < 0 or k <= 0:
            raise InvalidArgument(f"{api}: cannot derive filter_size from output_size {output_size} for input "
                                  f"{input.name!r} of shape {list(input.shape)} (dim {i} gives {k})")
        ks.append(k)
    return ks


def _conv_transpose(api: str, op_type: str, nd: int, input: Any, num_filters: Any, output_size: Any,
                    filter_size: Any, padding: Any, stride: Any, dilation: Any, groups: Any, param_attr: Any,
                    bias_attr: Any, use_cudnn: Any, act: Any, name: Any, data_format: Any,
                    formats: Any) -> Variable:
    from refimpl.nn.functional.conv import check_transpose, to_list, transpose_output_size
    channels = _check_common(api, input, nd + 2, data_format, formats, param_attr, use_cudnn)
    if not isinstance(num_filters, int) or num_filters <= 0:
        raise InvalidArgument(f"{api}: num_filters must be an int > 0, got {num_filters!r}")
    channel_last = data_format == formats[1]
    if op_type == "conv2d_transpose" and channels == groups == num_filters and not use_cudnn:
        op_type = "depthwise_conv2d_transpose"
    helper = LayerHelper(op_type, name=name)
    stride = to_list(api, "stride", stride, nd)
    dilation = to_list(api, "dilation", dilation, nd)
    pads, algo = _transpose_padding(api, padding, channel_last, nd)
    output_size, _ = transpose_output_size(api, output_size, 0, nd)
    if filter_size is None:
        if not output_size:
            raise InvalidArgument(f"{api}: output_size must be set when filter_size is None")
        filter_size = _filter_from_output(api, input, output_size, stride, pads, dilation, channel_last)
    else:
        filter_size = to_list(api, "filter_size", filter_size, nd)
    if pads[0::2] == pads[1::2]:
        pads = pads[0::2]
    g = _check_groups(api, input, groups, channels, num_filters)
    fmt = ("NHWC" if channel_last else "NCHW") if nd == 3 else data_format
    attrs = {"output_size": output_size, "strides": stride, "paddings": pads, "padding_algorithm": algo,
             "dilations": dilation, "groups": g, "data_format": fmt}
    check_transpose(api, input, [channels, num_filters // g, *filter_size], dict(attrs, output_padding=[]), nd)
    w = helper.create_parameter(param_attr, [channels, num_filters // g, *filter_size], input.dtype)
    pre_bias = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type=op_type, inputs={"Input": [input], "Filter": [w]}, outputs={"Output": pre_bias},
                     attrs=attrs)
    dim = nd + 1 if channel_last else 1
    return helper.append_activation(_append_bias(helper, pre_bias, bias_attr, dim, dim + 1), act)


def conv2d_transpose(input: Variable, num_filters: int, output_size: Any = None, filter_size: Any = None,
                     padding: Any = 0, stride: Any = 1, dilation: Any = 1, groups: Optional[int] = None,
                     param_attr: Any = None, bias_attr: Any = None, use_cudnn: bool = True,
                     act: Optional[str] = None, name: Optional[str] = None, data_format: str = "NCHW") -> Variable:
    """2-D transposed convolution with a new filter ``[C, num_filters / groups, KH, KW]`` and bias."""
    return _conv_transpose("static.nn.conv2d_transpose", "conv2d_transpose", 2, input, num_filters, output_size,
                           filter_size, padding, stride, dilation, groups, param_attr, bias_attr, use_cudnn, act,
                           name, data_format, ("NCHW", "NHWC"))


def conv3d_transpose(input: Variable, num_filters: int, output_size: Any = None, filter_size: Any = None,
                     padding: Any = 0, stride: Any = 1, dilation: Any = 1, groups: Optional[int] = None,
                     param_attr: Any = None, bias_attr: Any = None, use_cudnn: bool = True,
                     act: Optional[str] = None, name: Optional[str] = None, data_format: str = "NCDHW") -> Variable:
    """3-D transposed convolution with a new filter ``[C, num_filters / groups, KD, KH, KW]`` and bias."""
    return _conv_transpose("static.nn.conv3d_transpose", "conv3d_transpose", 3, input, num_filters, output_size,
                           filter_size, padding, stride, dilation, groups, param_attr, bias_attr, use_cudnn, act,
                           name, data_format, ("NCDHW", "NDHWC"))
