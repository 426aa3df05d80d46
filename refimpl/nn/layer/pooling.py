"""Pooling layers: MaxPool2D, AvgPool2D, AdaptiveAvgPool2D (``python/paddle/nn/layer/pooling.py``).

Parameterless layers that keep their arguments and call ``F.max_pool2d`` /
``F.avg_pool2d`` / ``F.adaptive_avg_pool2d`` (one ``pool2d`` op, ``pool2d_k.tmp_0``).
"""
from __future__ import annotations

from typing import Any, Optional

from refimpl.framework.variable import Variable
from refimpl.nn import functional as F

from .layers import Layer

__all__ = ["MaxPool2D", "AvgPool2D", "AdaptiveAvgPool2D"]


class MaxPool2D(Layer):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, return_mask: bool = False,
                 ceil_mode: bool = False, data_format: str = "NCHW", name: Optional[str] = None) -> None:
        super().__init__()
        self.ksize, self.stride, self.padding = kernel_size, stride, padding
        self.return_mask, self.ceil_mode = return_mask, ceil_mode
        self.data_format, self.name = data_format, name

    def forward(self, x: Variable) -> Any:
        return F.max_pool2d(x, kernel_size=self.ksize, stride=self.stride, padding=self.padding,
                            return_mask=self.return_mask, ceil_mode=self.ceil_mode,
                            data_format=self.data_format, name=self.name)

    def extra_repr(self) -> str:
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"


class AvgPool2D(Layer):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 exclusive: bool = True, divisor_override: Optional[int] = None, data_format: str = "NCHW",
                 name: Optional[str] = None) -> None:
        super().__init__()
        self.ksize, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.exclusive, self.divisor = ceil_mode, exclusive, divisor_override
        self.data_format, self.name = data_format, name

    def forward(self, x: Variable) -> Variable:
        return F.avg_pool2d(x, kernel_size=self.ksize, stride=self.stride, padding=self.padding,
                            ceil_mode=self.ceil_mode, exclusive=self.exclusive, divisor_override=self.divisor,
                            data_format=self.data_format, name=self.name)

    def extra_repr(self) -> str:
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2D(Layer):
    def __init__(self, output_size: Any, data_format: str = "NCHW", name: Optional[str] = None) -> None:
        super().__init__()
        self._output_size, self._data_format, self._name = output_size, data_format, name

    def forward(self, x: Variable) -> Variable:
        return F.adaptive_avg_pool2d(x, output_size=self._output_size, data_format=self._data_format,
                                     name=self._name)

    def extra_repr(self) -> str:
        return f"output_size={self._output_size}"
