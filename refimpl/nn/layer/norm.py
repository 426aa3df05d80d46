"""Normalisation layers: LayerNorm, BatchNorm1D / 2D / 3D, GroupNorm, InstanceNorm1D / 2D / 3D,
SpectralNorm (``python/paddle/nn/layer/norm.py``).

``LayerNorm`` holds a weight (ones) and a bias (zeros) of ``prod(normalized_shape)``
elements. The batch norms hold, in Paddle's order, ``weight`` (``batch_norm2d_0.w_0``,
ones), ``bias`` (``.b_0``, zeros) and the running statistics ``_mean`` (``.w_1``,
zeros) and ``_variance`` (``.w_2``, ones): persistable, non-trainable parameters
(``stop_gradient``) that the ``batch_norm`` op updates in training. ``training``
(``Layer.train`` / ``Layer.eval``) picks batch or running statistics, unless
``use_global_stats`` says otherwise. The input rank is checked when the layer is
called (``InvalidArgument``, Paddle's ValueError message). GroupNorm's weight / bias are
``group_norm_0.w_0`` / ``.b_0``; the instance norms' ``scale`` / ``bias`` are ``instance_norm2d_0.w_0``
/ ``.b_0`` (both or neither), their temporaries ``instance_norm_0.tmp_*`` (the functional helper's);
SpectralNorm holds the power iteration's ``weight_u`` / ``weight_v`` and names its output after the
layer (``spectral_norm_0.tmp_0``).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Sequence, Union

from refimpl.core.errors import InvalidArgument
from refimpl.framework.dtype_default import get_default_dtype
from refimpl.framework.variable import Variable
from refimpl.nn import functional as F
from refimpl.nn.initializer import Constant, Normal
from refimpl.static.layer_helper import LayerHelper, ParamAttr

from .layers import Layer

__all__ = ["LayerNorm", "BatchNorm1D", "BatchNorm2D", "BatchNorm3D", "GroupNorm", "InstanceNorm1D",
           "InstanceNorm2D", "InstanceNorm3D", "SpectralNorm"]


class LayerNorm(Layer):
    """Normalise the trailing ``normalized_shape`` dims (``F.layer_norm``)."""

    def __init__(self, normalized_shape: Union[int, Sequence[int]], epsilon: float = 1e-5,
                 weight_attr: Any = None, bias_attr: Any = None, name: Optional[str] = None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = [int(normalized_shape)]
        self._normalized_shape = list(normalized_shape)
        self._epsilon = epsilon
        self._dtype = get_default_dtype()  # Paddle's LayerNorm (its dtype=None)
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
        # Paddle's _BatchNormBase: the default dtype, but float32 parameters and statistics under float16
        self._dtype = "float32" if get_default_dtype() == "float16" else get_default_dtype()
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


class GroupNorm(Layer):
    """Group normalisation over ``num_groups`` groups of channels, with a weight (``group_norm_0.w_0``,
    ones) and a bias (``.b_0``, zeros) of ``num_channels`` values unless ``affine=False`` or the attr
    is False (``F.group_norm``)."""

    def __init__(self, num_groups: int, num_channels: int, epsilon: float = 1e-5, *, affine: bool = True,
                 device: Any = None, dtype: Any = None, weight_attr: Any = None, bias_attr: Any = None,
                 data_format: str = "NCHW", name: Optional[str] = None) -> None:
        super().__init__(dtype=dtype)
        if dtype is None:  # Paddle's GroupNorm: self._helper.get_default_dtype() if dtype is None
            self._dtype = get_default_dtype()
        self._epsilon, self._num_channels, self._num_groups = epsilon, num_channels, num_groups
        if data_format not in ("NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC"):
            raise InvalidArgument(f"GroupNorm: unsupported data layout {data_format!r}, expected one of "
                                  "NCL, NCHW, NCDHW, NLC, NHWC, NDHWC")
        self._data_format = "NCHW" if data_format[1] == "C" else "NHWC"
        if not affine:
            weight_attr = bias_attr = False
        self._weight_attr, self._bias_attr = weight_attr, bias_attr
        shape = [num_channels]
        self.weight = None if weight_attr is False else self._affine(weight_attr, shape, Constant(1.0), False)
        self.bias = None if bias_attr is False else self._affine(bias_attr, shape, Constant(0.0), True)

    def _affine(self, attr: Any, shape: Sequence[int], init: Any, is_bias: bool) -> Variable:
        p = self.create_parameter(attr=attr, shape=shape, dtype=self._dtype, default_initializer=init,
                                  is_bias=is_bias)
        p.stop_gradient = attr is not None and getattr(attr, "learning_rate", None) == 0.0
        return p

    def forward(self, input: Variable) -> Variable:
        channels = input.shape[1] if self._data_format == "NCHW" else input.shape[-1]
        if channels >= 0 and channels % self._num_groups:
            raise InvalidArgument(f"GroupNorm: expected number of channels in input to be divisible by num_groups, "
                                  f"but got input channel is {channels} and num_groups is {self._num_groups}")
        return F.group_norm(input, self._num_groups, self._epsilon, self.weight, self.bias, self._data_format)

    def extra_repr(self) -> str:
        return f"num_groups={self._num_groups}, num_channels={self._num_channels}, epsilon={self._epsilon}"


class _InstanceNormBase(Layer):
    """Parameters (``scale`` ones and ``bias`` zeros, both or neither) and forward of the instance norms."""

    _ranks: Sequence[int] = ()

    def __init__(self, num_features: int, epsilon: float = 1e-5, momentum: float = 0.9, weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCHW", name: Optional[str] = None) -> None:
        super().__init__()
        if (weight_attr is False) != (bias_attr is False):
            raise InvalidArgument(f"{type(self).__name__}: weight_attr and bias_attr must be set to False at the "
                                  f"same time, got weight_attr={weight_attr!r}, bias_attr={bias_attr!r}")
        self._momentum, self._epsilon = momentum, epsilon
        self._weight_attr, self._bias_attr = weight_attr, bias_attr
        self._num_features, self._data_format = num_features, data_format
        if weight_attr is not False:  # no dtype, as Paddle's: the default dtype
            self.scale = self.create_parameter(attr=weight_attr, shape=[num_features],
                                               default_initializer=Constant(1.0), is_bias=False)
            self.bias = self.create_parameter(attr=bias_attr, shape=[num_features],
                                              default_initializer=Constant(0.0), is_bias=True)
        else:
            self.scale = self.bias = None

    def forward(self, input: Variable) -> Variable:
        if len(input.shape) not in self._ranks:
            want = " or ".join(f"{r}D" for r in self._ranks)
            raise InvalidArgument(f"{type(self).__name__}: expected {want} input (got {len(input.shape)}D input "
                                  f"{input.name!r} of shape {list(input.shape)})")
        return F.instance_norm(input, weight=self.scale, bias=self.bias, momentum=self._momentum,
                               eps=self._epsilon, data_format=self._data_format)

    def extra_repr(self) -> str:
        return f"num_features={self._num_features}, epsilon={self._epsilon}"


class InstanceNorm1D(_InstanceNormBase):
    """Instance norm of [N, C] or [N, C, L] inputs."""

    _ranks = (2, 3)


class InstanceNorm2D(_InstanceNormBase):
    """Instance norm of [N, C, H, W] inputs."""

    _ranks = (4,)


class InstanceNorm3D(_InstanceNormBase):
    """Instance norm of [N, C, D, H, W] inputs."""

    _ranks = (5,)


class SpectralNorm(Layer):
    """Spectral normalisation of a weight of ``weight_shape`` (op ``spectral_norm``), with the power
    iteration's vectors ``weight_u`` (``spectral_norm_0.w_0``) and ``weight_v`` (``.w_1``): Normal(0, 1),
    not trainable (stop_gradient)."""

    def __init__(self, weight_shape: Sequence[int], dim: int = 0, power_iters: int = 1, eps: float = 1e-12,
                 dtype: Any = "float32") -> None:
        super().__init__(dtype=dtype)
        self._power_iters, self._eps, self._dim = power_iters, eps, dim
        self._weight_shape = [int(d) for d in weight_shape]
        if math.prod(self._weight_shape) <= 0:
            raise InvalidArgument(f"SpectralNorm: any dimension of weight_shape cannot be 0, got {self._weight_shape}")
        if not 0 <= dim < len(self._weight_shape):
            raise InvalidArgument(f"SpectralNorm: the input dim should be less than the length of weight_shape "
                                  f"({len(self._weight_shape)}), but received dim={dim}")
        h = self._weight_shape[dim]
        w = math.prod(self._weight_shape) // h
        self.weight_u = self.create_parameter(attr=ParamAttr(), shape=[h], dtype=self._dtype,
                                              default_initializer=Normal(0.0, 1.0))
        self.weight_u.stop_gradient = True
        self.weight_v = self.create_parameter(attr=ParamAttr(), shape=[w], dtype=self._dtype,
                                              default_initializer=Normal(0.0, 1.0))
        self.weight_v.stop_gradient = True

    def forward(self, x: Variable) -> Variable:
        from refimpl.static.nn.norm import append_spectral_norm
        if str(x.dtype) not in ("float32", "float64"):
            raise InvalidArgument(f"SpectralNorm: input {x.name!r} must be float32 or float64, got {x.dtype}")
        helper = LayerHelper(self.full_name(), name=self.full_name())
        out = helper.create_variable_for_type_inference(self._dtype)
        return append_spectral_norm(helper, x, self.weight_u, self.weight_v, self._dim, self._power_iters,
                                    self._eps, out)
