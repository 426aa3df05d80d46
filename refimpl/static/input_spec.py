"""``paddle.static.InputSpec``: the shape, dtype and name of a model input.

Mirrors ``InputSpec`` of ``python/paddle/static/input.py`` (Paddle 3.3.1):
``None`` dims become -1, the shape is kept as a tuple, ``batch`` / ``unbatch``
change the spec in place and return it, ``repr`` prints what Paddle prints.
Differences: ``dtype`` is refimpl's dtype name (``"float32"``, the value
``paddle.float32`` has here); ``from_tensor`` takes a static Variable.
"""
from typing import Any, Optional, Sequence, Union

import numpy as np

from refimpl.core.dtypes import convert_dtype
from refimpl.core.errors import InvalidArgument
from refimpl.framework import Variable

__all__ = ["InputSpec"]


def _shape(shape: Any) -> tuple:
    if not isinstance(shape, (tuple, list)):
        raise InvalidArgument(f"Type of `shape` in InputSpec should be one of (tuple, list), "
                              f"but received {type(shape).__name__}.")
    dims = []
    for d in shape:
        d = -1 if d is None else d
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < -1:
            raise InvalidArgument(f"InputSpec: bad dim {d!r} in shape {list(shape)}")
        dims.append(int(d))
    return tuple(dims)


class InputSpec:
    """Describes a feed: ``InputSpec([None, 784], 'float32', 'x')``."""

    def __init__(self, shape: Sequence[Optional[int]], dtype: Any = "float32", name: Optional[str] = None,
                 stop_gradient: bool = False) -> None:
        self.shape = _shape(shape)
        self.dtype = convert_dtype(dtype)
        self.name = name
        self.stop_gradient = stop_gradient

    @classmethod
    def from_tensor(cls, tensor: Variable, name: Optional[str] = None) -> "InputSpec":
        """The spec of a static Variable (its shape, dtype and, unless ``name`` is given, its name)."""
        if not isinstance(tensor, Variable):
            raise InvalidArgument(f"InputSpec.from_tensor: expected a Variable, got {type(tensor).__name__}")
        return cls(list(tensor.shape or ()), tensor.dtype, name or tensor.name)

    @classmethod
    def from_numpy(cls, ndarray: np.ndarray, name: Optional[str] = None) -> "InputSpec":
        """The spec of a NumPy array."""
        return cls(ndarray.shape, ndarray.dtype, name)

    def batch(self, batch_size: Union[int, Sequence[int]]) -> "InputSpec":
        """Prepend a batch dim (in place, as Paddle)."""
        if isinstance(batch_size, (list, tuple)):
            if len(batch_size) != 1:
                raise InvalidArgument(f"Length of batch_size: {batch_size} shall be 1, but received "
                                      f"{len(batch_size)}.")
            batch_size = batch_size[0]
        elif not isinstance(batch_size, int) or isinstance(batch_size, bool):
            raise InvalidArgument(f"type(batch_size) shall be `int`, but received {type(batch_size).__name__}.")
        self.shape = (-1 if batch_size is None else batch_size,) + self.shape
        return self

    def unbatch(self) -> "InputSpec":
        """Drop the leading dim (in place, as Paddle)."""
        if not self.shape:
            raise InvalidArgument("Not support to unbatch a InputSpec when len(shape) == 0.")
        self.shape = self.shape[1:]
        return self

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(shape={self.shape}, dtype=paddle.{self.dtype}, name={self.name}, "
                f"stop_gradient={self.stop_gradient})")
