"""Convolution layers: Conv1D/2D/3D and Conv1D/2D/3DTranspose (``python/paddle/nn/layer/conv.py``, ``_ConvNd``).

A conv's filter ``[out_channels, in_channels // groups, *kernel_size]`` (``conv2d_0.w_0``) starts as
N(0, std) with std = sqrt(2 / (prod(kernel_size) * in_channels)) (Paddle's default; ``in_channels``,
not divided by ``groups``); a transposed conv's filter ``[in_channels, out_channels // groups,
*kernel_size]`` (``conv2d_transpose_0.w_0``) starts from Paddle's default initializer (Xavier
uniform); the bias (``.b_0``) as zeros. The calls are the functional forms (``F.conv2d`` picks
``depthwise_conv2d`` when ``groups == in_channels``, ``F.conv2d_transpose`` picks
``depthwise_conv2d_transpose`` when also one filter per group, as Paddle does); a ``padding_mode``
other than ``"zeros"`` pads first with ``F.pad`` and convolves with no padding. The transposed
layers' ``forward(x, output_size=None)`` passes ``output_size`` on. ``print(layer)`` gives Paddle's
``extra_repr``.

Differences: Paddle 3.3.1's ``device`` / ``dtype`` keywords are not taken; a transposed layer whose
``out_channels`` ``groups`` does not divide raises here (Paddle builds a filter with fewer channels); ``Conv2D`` also takes
``padding_mode``, ``weight_attr``, ``bias_attr`` and ``data_format`` by position (3.3.1 makes them
keyword-only).
"""
from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.nn import functional as F
from refimpl.nn.initializer import Normal

from .layers import Layer

__all__ = ["Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
_FORMATS = {1: ("NCL", "NLC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
_ALL_FORMATS = ("NCL", "NLC", "NCHW", "NHWC", "NCDHW", "NDHWC")


def _to_list(api: str, arg: str, value: Any, n: int) -> List[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * n
    if isinstance(value, (list, tuple)) and len(value) == n and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]
    raise InvalidArgument(f"{api}: {arg} must be an int or a list of {n} ints, got {value!r}")


class _ConvNd(Layer):
    """What the six layers share: argument checks, the filter and bias, ``extra_repr``."""

    _nd = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, padding_mode: str = "zeros", weight_attr: Any = None,
                 bias_attr: Any = None, data_format: Optional[str] = None, output_padding: Any = 0,
                 bias: bool = True) -> None:
        super().__init__()
        api, nd = type(self).__name__, self._nd
        data_format = _FORMATS[nd][0] if data_format is None else data_format
        if bias is False:  # 3.3.1's keyword; the same as bias_attr=False
            bias_attr = False
        if weight_attr is False:
            raise InvalidArgument(f"{api}: weight_attr should not be False")
        if padding_mode not in _PADDING_MODES:
            raise InvalidArgument(f"{api}: padding_mode must be one of {set(_PADDING_MODES)}, got {padding_mode!r}")
        if padding_mode != "zeros" and not isinstance(padding, int):
            raise InvalidArgument(f"{api}: with padding_mode={padding_mode!r} padding must be an int, "
                                  f"got {padding!r}")
        if data_format not in _ALL_FORMATS:  # Paddle checks the format against every rank's here
            raise InvalidArgument(f"{api}: data_format must be one of {list(_ALL_FORMATS)}, got {data_format!r}")
        if not isinstance(groups, int) or groups <= 0:
            raise InvalidArgument(f"{api}: groups must be an int > 0, got {groups!r}")
        if self._transposed and out_channels % groups != 0:
            raise InvalidArgument(f"{api}: out_channels ({out_channels}) must be divisible by groups ({groups})")
        if not self._transposed and in_channels % groups != 0:  # (the transposed call checks it)
            raise InvalidArgument(f"{api}: in_channels ({in_channels}) must be divisible by groups ({groups})")
        self._in_channels, self._out_channels, self._groups = in_channels, out_channels, groups
        self._kernel_size = _to_list(api, "kernel_size", kernel_size, nd)
        self._stride = _to_list(api, "stride", stride, nd)
        self._dilation = _to_list(api, "dilation", dilation, nd)
        self._padding, self._padding_mode, self._data_format = padding, padding_mode, data_format
        self.output_padding = output_padding
        self._param_attr, self._bias_attr = weight_attr, bias_attr
        if self._transposed:
            shape, init = [in_channels, out_channels // groups] + self._kernel_size, None
        else:
            std = math.sqrt(2.0 / (math.prod(self._kernel_size) * in_channels))
            shape, init = [out_channels, in_channels // groups] + self._kernel_size, Normal(0.0, std)
        self._dtype = None  # Paddle's _ConvNd (dtype=None): the parameters take the default dtype
        self.weight = self.create_parameter(shape=shape, attr=weight_attr, dtype=self._dtype,
                                            default_initializer=init)
        self.bias = self.create_parameter(attr=bias_attr, shape=[out_channels], is_bias=True, dtype=self._dtype)

    def _padded(self, x: Variable):
        """(x, padding): x padded by ``F.pad`` for a padding_mode other than "zeros", then no conv padding."""
        if self._padding_mode == "zeros":
            return x, self._padding
        p = self._padding  # Paddle's _reverse_repeat_list: [p, p] per spatial dim
        return F.pad(x, [p] * (2 * self._nd), mode=self._padding_mode, data_format=self._data_format), 0

    def extra_repr(self) -> str:
        text = f"{self._in_channels}, {self._out_channels}, kernel_size={self._kernel_size}"
        if self._stride != [1] * self._nd:
            text += f", stride={self._stride}"
        if self._padding != 0:
            text += f", padding={self._padding}"
        if self._padding_mode != "zeros":
            text += f", padding_mode={self._padding_mode}"
        if self.output_padding != 0:
            text += f", output_padding={self.output_padding}"
        if self._dilation != [1] * self._nd:
            text += f", dilation={self._dilation}"
        if self._groups != 1:
            text += f", groups={self._groups}"
        return text + f", data_format={self._data_format}"


class Conv1D(_ConvNd):
    """1-D convolution over NCL (or NLC) inputs."""

    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, *, bias: bool = True, padding_mode: str = "zeros",
                 weight_attr: Any = None, bias_attr: Any = None, data_format: str = "NCL") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, padding_mode,
                         weight_attr, bias_attr, data_format, bias=bias)

    def forward(self, x: Variable) -> Variable:
        x, padding = self._padded(x)
        return F.conv1d(x, self.weight, bias=self.bias, stride=self._stride, padding=padding,
                        dilation=self._dilation, groups=self._groups, data_format=self._data_format)


class Conv2D(_ConvNd):
    """2-D convolution over NCHW (or NHWC) inputs."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, padding_mode: str = "zeros", weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCHW", bias: bool = True) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, padding_mode,
                         weight_attr, bias_attr, data_format, bias=bias)

    def forward(self, x: Variable) -> Variable:
        x, padding = self._padded(x)
        return F.conv2d(x, self.weight, bias=self.bias, stride=self._stride, padding=padding,
                        dilation=self._dilation, groups=self._groups, data_format=self._data_format)


class Conv3D(_ConvNd):
    """3-D convolution over NCDHW (or NDHWC) inputs."""

    _nd = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, *, bias: bool = True, padding_mode: str = "zeros",
                 weight_attr: Any = None, bias_attr: Any = None, data_format: str = "NCDHW") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, padding_mode,
                         weight_attr, bias_attr, data_format, bias=bias)

    def forward(self, x: Variable) -> Variable:
        x, padding = self._padded(x)
        return F.conv3d(x, self.weight, bias=self.bias, stride=self._stride, padding=padding,
                        dilation=self._dilation, groups=self._groups, data_format=self._data_format)


class _ConvTransposeNd(_ConvNd):
    _transposed = True
    _functional = "conv2d_transpose"

    def forward(self, x: Variable, output_size: Optional[Sequence[int]] = None) -> Variable:
        return getattr(F, self._functional)(
            x, self.weight, bias=self.bias, output_size=output_size, output_padding=self.output_padding,
            padding=self._padding, stride=self._stride, dilation=self._dilation, groups=self._groups,
            data_format=self._data_format)


class Conv1DTranspose(_ConvTransposeNd):
    """1-D transposed convolution over NCL (or NLC) inputs."""

    _nd, _functional = 1, "conv1d_transpose"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, dilation: Any = 1, weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCL") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, "zeros",
                         weight_attr, bias_attr, data_format, output_padding)


class Conv2DTranspose(_ConvTransposeNd):
    """2-D transposed convolution over NCHW (or NHWC) inputs."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, dilation: Any = 1, groups: int = 1, weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCHW") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, "zeros",
                         weight_attr, bias_attr, data_format, output_padding)


class Conv3DTranspose(_ConvTransposeNd):
    """3-D transposed convolution over NCDHW (or NDHWC) inputs."""

    _nd, _functional = 3, "conv3d_transpose"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, dilation: Any = 1, groups: int = 1, weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCDHW") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, "zeros",
                         weight_attr, bias_attr, data_format, output_padding)
