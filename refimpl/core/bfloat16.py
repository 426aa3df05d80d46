"""bfloat16 on the host: the NumPy dtype (``ml_dtypes.bfloat16``), rounding, and Paddle's uint16 view.

Mirrors ``paddle/phi/common/bfloat16.h`` (the float32 -> bfloat16 conversion)
and what Paddle's Python layer does with bfloat16 tensors
(``paddle/fluid/pybind/tensor_py.h``): NumPy has no bfloat16, so Paddle hands
a bfloat16 tensor to Python as a ``uint16`` array of its bit patterns
(``np.array(tensor)``, fetches) and takes a ``uint16`` array as bfloat16
(``tensor.set``, feeds of a bfloat16 variable). Paddle has no uint16 tensors,
so that reading is never ambiguous.

Here a bfloat16 tensor holds an ``ml_dtypes.bfloat16`` array; the uint16 view
appears only where Paddle shows it. Rounding from float32 is round to nearest
even, as Paddle's and ml_dtypes' conversions are; the one difference between
them is NaN, which Paddle writes as 0x7FFF whatever its sign and payload
(ml_dtypes keeps a quiet NaN's sign and top payload bits): :func:`round_to_bfloat16`
gives Paddle's bits.

Paddle 2.6.2's CPU ``cast`` to bfloat16 truncated instead (it kept the top 16
bits; its oneDNN op outputs were rounded to nearest even). ``cast`` converts
with :func:`cast_to_bfloat16`, which follows 3.3.1 unless
``with legacy_truncating_cast():`` asks for 2.6.2's conversion, so that
programs recorded by 2.6.2 (the zoo's ``gpt_bf16``) replay bit for bit.
"""
import contextlib
from typing import Any, Iterator

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
BITS = np.dtype(np.uint16)      # how Paddle shows a bfloat16 array to Python
PADDLE_NAN_BITS = 0x7FFF        # the NaN Paddle's float32 -> bfloat16 conversion writes


def is_bfloat16(dtype: Any) -> bool:
    return np.dtype(dtype) == BFLOAT16


def round_to_bfloat16(a: Any) -> np.ndarray:
    """``a`` (any real dtype) rounded to bfloat16, round to nearest even, NaN as Paddle writes it."""
    a = np.asarray(a)
    if a.dtype == BFLOAT16:
        return a
    out = np.asarray(a.astype(np.float32) if a.dtype != np.float32 else a).astype(BFLOAT16)
    nan = np.isnan(out)
    if nan.any():
        out.view(BITS)[nan] = PADDLE_NAN_BITS
    return out


_CAST = {"truncate": False}


def truncate_to_bfloat16(a: Any) -> np.ndarray:
    """``a`` as bfloat16 by dropping the low 16 bits of its float32 pattern (Paddle 2.6.2's CPU conversion)."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return (bits >> 16).astype(BITS).view(BFLOAT16)


def cast_to_bfloat16(a: Any) -> np.ndarray:
    """What the ``cast`` op writes: :func:`round_to_bfloat16` (3.3.1), or 2.6.2's truncation (see below)."""
    a = np.asarray(a)
    if a.dtype == BFLOAT16:
        return a
    return truncate_to_bfloat16(a) if _CAST["truncate"] else round_to_bfloat16(a)


def cast_truncates() -> bool:
    """Whether ``cast`` to bfloat16 truncates now (inside :func:`legacy_truncating_cast`)."""
    return _CAST["truncate"]


@contextlib.contextmanager
def legacy_truncating_cast() -> Iterator[None]:
    """Within this block ``cast`` to bfloat16 truncates, as Paddle 2.6.2's CPU kernel did (process-wide)."""
    old = _CAST["truncate"]
    _CAST["truncate"] = True
    try:
        yield
    finally:
        _CAST["truncate"] = old


def from_bits(bits: np.ndarray) -> np.ndarray:
    """A uint16 array of bit patterns read as bfloat16 (a view, no copy)."""
    return np.asarray(bits).view(BFLOAT16)


def to_bits(a: np.ndarray) -> np.ndarray:
    """A bfloat16 array as Paddle hands it to Python: its uint16 bit patterns (a view)."""
    return a.view(BITS)


def as_paddle_host(a: Any) -> Any:
    """A host value as Paddle's Python sees it: bfloat16 becomes its uint16 view, anything else is unchanged."""
    if isinstance(a, np.ndarray) and a.dtype == BFLOAT16:
        return a.view(BITS)
    return a
