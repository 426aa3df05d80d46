"""DenseTensor: the value a scope variable holds.

Mirrors ``paddle.base.core.DenseTensor`` (formerly LoDTensor) as seen from
Python: ``set(ndarray, place)``, ``np.array(tensor)``, ``shape()``,
``_dtype()``, ``_numel()``. The data is a NumPy array (or, with the CUDA
backend, a device array) kept in ``_array``; ``None`` means uninitialised or
freed by the garbage collector. The executor reads and writes ``_array``
directly, which is why it is a plain attribute.
"""
import numpy as np

from .bfloat16 import as_paddle_host, from_bits
from .dtypes import convert_dtype
from .errors import InvalidArgument, PreconditionNotMet
from .place import CPUPlace


class TensorMeta:
    """Shape and dtype of a tensor whose buffer was freed.

    Paddle's GC frees a tensor's memory but keeps its dims, so an op whose
    input is "no need buffer" (it reads only the shape) still runs. A kernel
    receives this in place of the array for such inputs.
    """

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class DenseTensor:
    __slots__ = ("_array", "_place", "_meta")

    def __init__(self, array=None, place=None):
        self._array = array
        self._place = place or CPUPlace()
        self._meta = None

    def set(self, value, place=None):
        """Copy ``value`` (array-like) into this tensor, as Paddle does."""
        try:
            arr = np.array(value, copy=True)
        except Exception as exc:  # ragged lists and the like
            raise InvalidArgument(f"DenseTensor.set: cannot convert value to an array: {exc}") from None
        if arr.dtype == np.float64 and not isinstance(value, np.ndarray):
            arr = arr.astype(np.float32)
        if arr.dtype == np.uint16:  # Paddle's bfloat16 bit patterns (it has no uint16 tensors)
            arr = from_bits(arr)
        convert_dtype(arr.dtype)  # rejects object arrays, strings...
        self._array = arr
        if place is not None:
            self._place = place

    def _is_initialized(self):
        return self._array is not None

    def _check(self):
        if self._array is None:
            raise PreconditionNotMet("the tensor is not initialized (never set, or freed by GC)")
        return self._array

    def shape(self):
        return list(self._check().shape)

    def _dtype(self):
        return convert_dtype(self._check().dtype)

    def _numel(self):
        return int(self._check().size)

    def nbytes(self):
        return 0 if self._array is None else int(self._array.nbytes)

    def _clear(self):
        """Free the buffer, keeping shape and dtype (what the GC does)."""
        a = self._array
        if a is not None:
            m = self._meta
            if m is None or m.shape != a.shape or m.dtype is not a.dtype:
                self._meta = TensorMeta(a.shape, a.dtype)
            self._array = None

    def _place_(self):
        return self._place

    def __array__(self, dtype=None, copy=None):
        """``np.array(t)`` copies (NumPy's default ``copy=True``); ``np.asarray(t)`` may share.

        A bfloat16 tensor reads as its uint16 bit patterns, as in Paddle."""
        arr = as_paddle_host(np.asarray(self._check()))
        if dtype is not None and arr.dtype != np.dtype(dtype):
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def __repr__(self):
        if self._array is None:
            return "DenseTensor(<uninitialized>)"
        return f"DenseTensor(shape={list(self._array.shape)}, dtype={self._array.dtype}, place={self._place})"
