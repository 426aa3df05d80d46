"""Normalisation layers: LayerNorm, BatchNorm1D / 2D / 3D (``python/paddle/nn/layer/norm.py``).

``LayerNorm`` holds a weight (ones) and a bias (zeros) of ``prod(normalized_shape)``
elements. The batch norms hold, in Paddle's order, ``weight`` (``batch_norm2d_0.w_0``,
ones), ``bias`` (``.b_0``, zeros) and the running statistics ``_mean`` (``.w_1``,
zeros) and ``_variance`` (``.w_2``, ones): persistable, non-trainable parameters
(``stop_gradient``) that the ``batch_norm`` op updates in training. ``training``
(``Layer.train`` / ``Layer.eval``) picks batch or running statistics, unless
``use_global_stats`` says otherwise. The input rank is checked when the layer is
called (``InvalidArgument``, Paddle's ValueError message).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Sequence, Union

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.nn import functional as F
from refimpl.nn.initializer import Constant
from refimpl.static.layer_helper import ParamAttr

from .layers import Layer

__all__ = ["LayerNorm", "BatchNorm1D", "BatchNorm2D", "BatchNorm3D"]


class LayerNorm(Layer):
    """Normalise the trailing ``normalized_shape`` dims (``F.layer_norm``)."""

    def __init__(self, normalized_shape: Union[int, Sequence[int]], epsilon: float = 1e-5,
                 weight_attr: Any = None, bias_attr: Any = None, name: Optional[str] = None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = [int(normalized_shape)]
        self._normalized_shape = list(normalized_shape)
        self._epsilon = epsilon
        self._weight_attr, self._bias_attr = weight_attr, bias_attr
        shape = [math.prod(self._normalized_shape)]
        self.weight = None if weight_attr is False else self.create_parameter(
            attr=weight_attr, dtype=self._dtype, shape=shape, default_initializer=Constant(1.0))
        self.bias = None if bias_attr is False else self.create_parameter(
            attr=bias_attr, dtype=self._dtype, shape=shape, default_initializer=Constant(0.0), is_bias=True)

    def forward(self, input: Variable) -> Variable:
        return F.layer_norm(input, normalized_shape=self._normalized_shape, weight=self.weight, bias=self.bias,
                            epsilon=self._epsilon)

    def extra_repr(self) -> str:
        return f"normalized_shape={self._normalized_shape}, epsilon={self._epsilon}"


class _BatchNormBase(Layer):
    """Parameters and forward of the batch norms; subclasses say which ranks and layouts they take."""

    _ranks: Sequence[int] = ()
    _layouts: dict = {}

    def __init__(self, num_features: int, momentum: float = 0.9, epsilon: float = 1e-05, weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCHW", use_global_stats: Optional[bool] = None,
                 name: Optional[str] = None) -> None:
        super().__init__()
        self._num_features = num_features
        self._weight_attr, self._bias_attr = weight_attr, bias_attr
        self._use_global_stats = use_global_stats
        shape = [num_features]
        self.weight = None if weight_attr is False else self.create_parameter(
            attr=weight_attr, shape=shape, dtype=self._dtype, default_initializer=Constant(1.0))
        self.bias = None if bias_attr is False else self.create_parameter(
            attr=bias_attr, shape=shape, dtype=self._dtype, is_bias=True)
        self._mean = self._statistic(None if name is None else name + "_mean", 0.0, shape)
        self._variance = self._statistic(None if name is None else name + "_variance", 1.0, shape)
        self._data_format = data_format
        self._momentum, self._epsilon = momentum, epsilon
        self._name = name

    def _statistic(self, name: Optional[str], value: float, shape: Sequence[int]) -> Variable:
        attr = ParamAttr(name=name, initializer=Constant(value), trainable=False, do_model_average=True)
        p = self.create_parameter(dtype=self._dtype, attr=attr, shape=shape)
        p.stop_gradient = True
        return p

    def _checked_layout(self, input: Variable) -> str:
        layout = self._layouts.get(self._data_format)
        if layout is None:
            raise InvalidArgument(f"{type(self).__name__}: expected {' or '.join(self._layouts)} for data_format, "
                                  f"got {self._data_format!r}")
        if len(input.shape) not in self._ranks:
            want = " or ".join(f"{r}D" for r in self._ranks)
            raise InvalidArgument(f"{type(self).__name__}: expected {want} input (got {len(input.shape)}D input "
                                  f"{input.name!r} of shape {list(input.shape)})")
        return layout

    def forward(self, input: Variable) -> Variable:
        layout = self._checked_layout(input)
        return F.batch_norm(input, self._mean, self._variance, weight=self.weight, bias=self.bias,
                            training=self.training, momentum=self._momentum, epsilon=self._epsilon,
                            data_format=layout, use_global_stats=self._use_global_stats)

    def extra_repr(self) -> str:
        text = f"num_features={self._num_features}, momentum={self._momentum}, epsilon={self._epsilon}"
        if self._data_format != "NCHW":
            text += f", data_format={self._data_format}"
        return text + (f", name={self._name}" if self._name is not None else "")


class BatchNorm1D(_BatchNormBase):
    """Batch norm of [N, C] or [N, C, L] (``NCL``) / [N, L, C] (``NLC``) inputs."""

    _ranks = (2, 3)
    _layouts = {"NC": "NCHW", "NCL": "NCHW", "NCHW": "NCHW", "NLC": "NHWC", "NHWC": "NHWC"}

    def __init__(self, num_features: int, momentum: float = 0.9, epsilon: float = 1e-05, weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCL", use_global_stats: Optional[bool] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(num_features, momentum, epsilon, weight_attr, bias_attr, data_format, use_global_stats,
                         name)


class BatchNorm2D(_BatchNormBase):
    """Batch norm of [N, C, H, W] (``NCHW``) or [N, H, W, C] (``NHWC``) inputs."""

    _ranks = (4,)
    _layouts = {"NCHW": "NCHW", "NHWC": "NHWC"}


class BatchNorm3D(_BatchNormBase):
    """Batch norm of [N, C, D, H, W] (``NCDHW``) or [N, D, H, W, C] (``NDHWC``) inputs."""

    _ranks = (5,)
    _layouts = {"NCDHW": "NCHW", "NCHW": "NCHW", "NDHWC": "NHWC", "NHWC": "NHWC"}

    def __init__(self, num_features: int, momentum: float = 0.9, epsilon: float = 1e-05, weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCDHW", use_global_stats: Optional[bool] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(num_features, momentum, epsilon, weight_attr, bias_attr, data_format, use_global_stats,
                         name)
