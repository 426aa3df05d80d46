"""``paddle.nn.Bilinear`` (``python/paddle/nn/layer/common.py``).

Creates ``weight`` ``[out_features, in1_features, in2_features]`` (Xavier-uniform, as Paddle's
default) and ``bias`` ``[1, out_features]`` (zeros; none with ``bias_attr=False``), named after
the layer (``bilinear_0.w_0`` / ``bilinear_0.b_0``), and calls ``F.bilinear``.
"""
from __future__ import annotations

from typing import Any, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.dtype_default import get_default_dtype
from refimpl.framework.variable import Variable
from refimpl.nn import functional as F

from .layers import Layer

__all__ = ["Bilinear"]


class Bilinear(Layer):
    """out = x1 @ weight[k] @ x2 (+ bias) for each of the out_features k."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, weight_attr: Any = None,
                 bias_attr: Any = None, name: Optional[str] = None) -> None:
        super().__init__()
        for arg, v in (("in1_features", in1_features), ("in2_features", in2_features),
                       ("out_features", out_features)):
            if not isinstance(v, int) or v <= 0:
                raise InvalidArgument(f"Bilinear: {arg} must be a positive int, got {v!r}")
        self._weight_attr, self._bias_attr, self._name = weight_attr, bias_attr, name
        self._in1_features, self._in2_features, self._out_features = in1_features, in2_features, out_features
        self._dtype = dtype = get_default_dtype()  # Paddle's Bilinear: self._helper.get_default_dtype()
        self.weight = self.create_parameter(attr=weight_attr, shape=[out_features, in1_features, in2_features],
                                            dtype=dtype, is_bias=False)
        self.bias = self.create_parameter(attr=bias_attr, shape=[1, out_features], dtype=dtype, is_bias=True)

    def forward(self, x1: Variable, x2: Variable) -> Variable:
        return F.bilinear(x1, x2, self.weight, self.bias, self._name)

    def extra_repr(self) -> str:
        name_str = f", name={self._name}" if self._name else ""
        return (f"in1_features={self._in1_features}, in2_features={self._in2_features}, "
                f"out_features={self._out_features}, dtype={self._dtype}{name_str}")
