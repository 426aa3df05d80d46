"""Common layers: Linear, Embedding, Dropout, Flatten, Identity (``python/paddle/nn/layer/common.py``).

Each creates its parameters when constructed (named after the layer:
``linear_0.w_0`` / ``linear_0.b_0``, ``embedding_0.w_0``) and calls the
functional form when called. Default initialisers as Paddle's: Xavier-uniform
weights, zero biases.
"""
from __future__ import annotations

from typing import Any, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.dtype_default import get_default_dtype
from refimpl.framework.variable import Variable
from refimpl.nn import functional as F

from .layers import Layer

__all__ = ["Identity", "Linear", "Embedding", "Dropout", "Flatten"]


class Identity(Layer):
    """Returns its input."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Variable) -> Variable:
        return input


class Linear(Layer):
    """y = x @ weight + bias with weight [in_features, out_features] (``F.linear``)."""

    def __init__(self, in_features: int, out_features: int, weight_attr: Any = None, bias_attr: Any = None,
                 name: Optional[str] = None) -> None:
        super().__init__()
        self._dtype = get_default_dtype()  # Paddle's Linear: self._helper.get_default_dtype()
        self._weight_attr, self._bias_attr = weight_attr, bias_attr
        self.weight = self.create_parameter(shape=[in_features, out_features], attr=weight_attr,
                                            dtype=self._dtype, is_bias=False)
        self.bias = self.create_parameter(shape=[out_features], attr=bias_attr, dtype=self._dtype, is_bias=True)
        self.name = name

    def forward(self, input: Variable) -> Variable:
        return F.linear(input, weight=self.weight, bias=self.bias, name=self.name)

    def extra_repr(self) -> str:
        name_str = f", name={self.name}" if self.name else ""
        return (f"in_features={self.weight.shape[0]}, out_features={self.weight.shape[1]}, "
                f"dtype={self._dtype}{name_str}")


class Embedding(Layer):
    """A [num_embeddings, embedding_dim] table looked up by integer ids (``F.embedding``)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0, sparse: bool = False,
                 scale_grad_by_freq: bool = False, weight_attr: Any = None, name: Optional[str] = None) -> None:
        super().__init__()
        if num_embeddings <= 0:
            raise InvalidArgument(f"Embedding: num_embeddings must be greater than 0, got {num_embeddings}")
        if embedding_dim <= 0:
            raise InvalidArgument(f"Embedding: embedding_dim must be greater than 0, got {embedding_dim}")
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise InvalidArgument(f"Embedding: padding_idx must be within [-{num_embeddings}, {num_embeddings}), "
                                  f"got {padding_idx}")
        self._num_embeddings, self._embedding_dim = num_embeddings, embedding_dim
        self._padding_idx = padding_idx  # as given: F.embedding resolves None and negative values
        self._max_norm, self._norm_type = max_norm, norm_type
        self._sparse, self._scale_grad_by_freq = sparse, scale_grad_by_freq
        self._weight_attr, self._name = weight_attr, name
        self._dtype = get_default_dtype()  # Paddle's Embedding (its dtype=None)
        self.weight = self.create_parameter(attr=weight_attr, shape=[num_embeddings, embedding_dim],
                                            dtype=self._dtype, is_bias=False)

    def forward(self, x: Variable) -> Variable:
        return F.embedding(x, weight=self.weight, padding_idx=self._padding_idx, max_norm=self._max_norm,
                           norm_type=self._norm_type, sparse=self._sparse,
                           scale_grad_by_freq=self._scale_grad_by_freq, name=self._name)

    def extra_repr(self) -> str:
        text = f"{self._num_embeddings}, {self._embedding_dim}"
        if self._padding_idx is not None:
            text += f", padding_idx={self._padding_idx}"
        text += f", sparse={self._sparse}, scale_grad_by_freq={self._scale_grad_by_freq}"
        return text + (f", name={self._name}" if self._name is not None else "")


class Dropout(Layer):
    """``F.dropout`` with ``training`` taken from the layer's mode (``Layer.train`` / ``Layer.eval``).

    3.3.1's signature (``inplace`` second); ``inplace`` changes nothing in a static program.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False, axis: Any = None, mode: str = "upscale_in_train",
                 name: Optional[str] = None) -> None:
        super().__init__()
        self.p, self.inplace, self.axis, self.mode, self.name = p, inplace, axis, mode, name

    def forward(self, input: Variable) -> Variable:
        return F.dropout(input, p=self.p, axis=self.axis, training=self.training, mode=self.mode, name=self.name)

    def extra_repr(self) -> str:
        name_str = f", name={self.name}" if self.name else ""
        return f"p={self.p}, axis={self.axis}, mode={self.mode}{name_str}, inplace={self.inplace}"


class Flatten(Layer):
    """``paddle.flatten(x, start_axis, stop_axis)``; by default every dim after the batch dim."""

    def __init__(self, start_axis: int = 1, stop_axis: int = -1) -> None:
        super().__init__()
        self.start_axis, self.stop_axis = start_axis, stop_axis

    def forward(self, input: Variable) -> Variable:
        from refimpl.tensor.manipulation import flatten
        return flatten(input, start_axis=self.start_axis, stop_axis=self.stop_axis)
