"""Activation layers: ReLU, GELU, Tanh, Sigmoid, Softmax, PReLU (``python/paddle/nn/layer/activation.py``).

Parameterless layers that call the functional forms (``F.relu`` ...); their ops
and temporaries are named after the functional helper (``relu_0.tmp_0``), not
after the layer (``re_lu_0``), as in Paddle. PReLU holds its weight under the layer's name
(``p_re_lu_0.w_0``).
"""
from __future__ import annotations

from typing import Any, Optional

from refimpl.framework.dtype_default import get_default_dtype
from refimpl.framework.variable import Variable
from refimpl.nn import functional as F
from refimpl.nn.initializer import Constant

from .layers import Layer

__all__ = ["ReLU", "GELU", "Tanh", "Sigmoid", "Softmax", "PReLU"]


class _Unary(Layer):
    """A layer that is one functional call with an optional name."""

    def __init__(self, name: Optional[str] = None) -> None:
        super().__init__()
        self._name = name

    def extra_repr(self) -> str:
        return f"name={self._name}" if self._name else ""


class ReLU(_Unary):
    def forward(self, x: Variable) -> Variable:
        return F.relu(x, self._name)


class Tanh(_Unary):
    def forward(self, x: Variable) -> Variable:
        return F.tanh(x, self._name)


class Sigmoid(_Unary):
    def forward(self, x: Variable) -> Variable:
        return F.sigmoid(x, self._name)


class GELU(Layer):
    def __init__(self, approximate: Any = False, name: Optional[str] = None) -> None:
        super().__init__()
        self._approximate, self._name = approximate, name

    def forward(self, x: Variable) -> Variable:
        return F.gelu(x, self._approximate, self._name)

    def extra_repr(self) -> str:
        return f"approximate={self._approximate}" + (f", name={self._name}" if self._name else "")


class Softmax(Layer):
    def __init__(self, axis: int = -1, name: Optional[str] = None) -> None:
        super().__init__()
        self._axis, self._name = axis, name

    def forward(self, x: Variable) -> Variable:
        return F.softmax(x, self._axis, name=self._name)

    def extra_repr(self) -> str:
        return f"axis={self._axis}" + (f", name={self._name}" if self._name else "")


class PReLU(Layer):
    """PReLU with a learnable weight of ``num_parameters`` values (``p_re_lu_0.w_0``, Constant(init));
    ``F.prelu`` picks mode ``all`` for one value, ``channel`` for more."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, weight_attr: Any = None,
                 data_format: str = "NCHW", name: Optional[str] = None) -> None:
        super().__init__()
        self._num_parameters, self._init = num_parameters, init
        self._weight_attr, self._data_format, self._name = weight_attr, data_format, name
        # Paddle's PReLU asks for get_default_dtype(); its repr still shows the Layer's own "float32"
        self._weight = self.create_parameter(attr=weight_attr, shape=[num_parameters], dtype=get_default_dtype(),
                                             is_bias=False, default_initializer=Constant(init))

    def forward(self, x: Variable) -> Variable:
        return F.prelu(x, self._weight, data_format=self._data_format)

    def extra_repr(self) -> str:
        name = f", name={self._name}" if self._name else ""
        return (f"num_parameters={self._num_parameters}, data_format={self._data_format}, init={self._init}, "
                f"dtype={self._dtype or 'float32'}{name}")
