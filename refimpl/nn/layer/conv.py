"""Convolution layer: Conv2D (``python/paddle/nn/layer/conv.py``, ``_ConvNd``).

The filter ``[out_channels, in_channels // groups, kh, kw]`` (``conv2d_0.w_0``)
starts as N(0, std) with std = sqrt(2 / (kh * kw * in_channels)) (Paddle's
default; ``in_channels``, not divided by ``groups``), the bias (``conv2d_0.b_0``)
as zeros. The call is ``F.conv2d`` (which picks ``depthwise_conv2d`` when
``groups == in_channels``, as Paddle does); a ``padding_mode`` other than
``"zeros"`` pads first with ``F.pad`` and convolves with no padding.
"""
from __future__ import annotations

import math
from typing import Any, List

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.nn import functional as F
from refimpl.nn.initializer import Normal

from .layers import Layer

__all__ = ["Conv2D"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _pair(api: str, arg: str, value: Any) -> List[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value, value]
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]
    raise InvalidArgument(f"{api}: {arg} must be an int or a list of 2 ints, got {value!r}")


class Conv2D(Layer):
    """2-D convolution over NCHW (or NHWC) inputs."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, padding_mode: str = "zeros", weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCHW", bias: bool = True) -> None:
        super().__init__()
        if bias is False:  # 3.3.1's keyword; the same as bias_attr=False
            bias_attr = False
        if weight_attr is False:
            raise InvalidArgument("Conv2D: weight_attr should not be False")
        if padding_mode not in _PADDING_MODES:
            raise InvalidArgument(f"Conv2D: padding_mode must be one of {set(_PADDING_MODES)}, got {padding_mode!r}")
        if padding_mode != "zeros" and not isinstance(padding, int):
            raise InvalidArgument(f"Conv2D: with padding_mode={padding_mode!r} padding must be an int, "
                                  f"got {padding!r}")
        if data_format not in ("NCHW", "NHWC"):
            raise InvalidArgument(f"Conv2D: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
        if groups <= 0 or in_channels % groups != 0:
            raise InvalidArgument(f"Conv2D: in_channels ({in_channels}) must be divisible by groups ({groups})")
        self._in_channels, self._out_channels, self._groups = in_channels, out_channels, groups
        self._kernel_size = _pair("Conv2D", "kernel_size", kernel_size)
        self._stride = _pair("Conv2D", "stride", stride)
        self._dilation = _pair("Conv2D", "dilation", dilation)
        self._padding, self._padding_mode, self._data_format = padding, padding_mode, data_format
        self._param_attr, self._bias_attr = weight_attr, bias_attr
        std = math.sqrt(2.0 / (math.prod(self._kernel_size) * in_channels))
        self.weight = self.create_parameter(shape=[out_channels, in_channels // groups] + self._kernel_size,
                                            attr=weight_attr, dtype=self._dtype,
                                            default_initializer=Normal(0.0, std))
        self.bias = self.create_parameter(attr=bias_attr, shape=[out_channels], is_bias=True, dtype=self._dtype)

    def forward(self, x: Variable) -> Variable:
        padding = self._padding
        if self._padding_mode != "zeros":
            p = self._padding  # Paddle's _reverse_repeat_list([p, p], 2): [left, right, top, bottom]
            x = F.pad(x, [p, p, p, p], mode=self._padding_mode, data_format=self._data_format)
            padding = 0
        return F.conv2d(x, self.weight, bias=self.bias, stride=self._stride, padding=padding,
                        dilation=self._dilation, groups=self._groups, data_format=self._data_format)

    def extra_repr(self) -> str:
        text = f"{self._in_channels}, {self._out_channels}, kernel_size={self._kernel_size}"
        if self._stride != [1, 1]:
            text += f", stride={self._stride}"
        if self._padding != 0:
            text += f", padding={self._padding}"
        if self._padding_mode != "zeros":
            text += f", padding_mode={self._padding_mode}"
        if self._dilation != [1, 1]:
            text += f", dilation={self._dilation}"
        if self._groups != 1:
            text += f", groups={self._groups}"
        return text + f", data_format={self._data_format}"
