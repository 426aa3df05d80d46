"""The global default dtype: ``paddle.set_default_dtype`` / ``paddle.get_default_dtype``.

Mirrors ``python/paddle/framework/framework.py`` (the two functions) and the
class attribute they share in ``python/paddle/base/layer_helper_base.py``
(``LayerHelperBase.__dtype``, "float32" at import). Every API that Paddle lets
fall back on the default reads :func:`get_default_dtype` when called: the
layers' parameters (``Linear``, ``Embedding``, the convs, the norms, ``PReLU``,
``Bilinear``, ``Layer.create_parameter`` with no dtype), ``static.data`` with
no dtype, and the creation functions (``zeros``, ``ones``, ``full``, ``eye``,
``arange`` of floats, ``to_tensor`` of Python floats). Places where Paddle
writes "float32" itself (``SpectralNorm``'s default, ``static.nn.embedding``,
optimizer accumulators, AMP's loss scaling, an int tensor divided) do not.

Accepted, as Paddle's: the strings "float16", "float32", "float64" and
"bfloat16"; the NumPy types ``np.float16`` / ``np.float32`` / ``np.float64``;
a ``numpy.dtype`` equal to one of the four names; refimpl's dtype constants
(``refimpl.float64`` is the string "float64"). Anything else is a
``TypeError`` (:class:`~refimpl.framework.variable.BadType`, also an
InvalidArgument) with Paddle's words.

Differences: the default is one module-level value for the whole process, as
Paddle's class attribute is; the in-process ranks (threads) therefore share it.
A NumPy array is never a dtype here (Paddle's ``in`` test would take a
one-element array of a name and store its ``str``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .variable import BadType

__all__ = ["set_default_dtype", "get_default_dtype"]

# Paddle's LayerHelperBase.__dtype at import.
_default_dtype = "float32"

# What each branch of Paddle's set_default_dtype lets through (its error message lists them).
_NUMPY_TYPES = (np.float16, np.float32, np.float64)
_NAMES = ("float16", "float32", "float64", "bfloat16")


def set_default_dtype(d: Any) -> None:
    """Make ``d`` the default dtype (see the module docstring for what ``d`` may be); returns None.

    A type (``np.float64``) must be one of NumPy's three float types; any
    other value must equal one of the four names. Otherwise a TypeError
    (:class:`BadType`) with Paddle 3.3.1's message.
    """
    global _default_dtype
    if isinstance(d, type):
        if d not in _NUMPY_TYPES:
            raise BadType(f"set_default_dtype only supports [float16, float32, float64] , "
                          f"but received {d.__name__}")
        _default_dtype = d.__name__
        return
    # Paddle compares with ``in``: a numpy.dtype equals its name, so it passes and becomes that name.
    if not any(_equals(d, name) for name in _NAMES):
        raise BadType(f"set_default_dtype only supports [float16, float32, float64, bfloat16] , "
                      f"but received {d}")
    _default_dtype = str(d)


def _equals(d: Any, name: str) -> bool:
    """``d == name`` as Paddle's ``d in [...]`` asks it, without NumPy's elementwise answer for an array."""
    if isinstance(d, np.ndarray):
        return False
    return bool(d == name)


def get_default_dtype() -> str:
    """The default dtype's name: "float32" unless :func:`set_default_dtype` changed it."""
    return _default_dtype
