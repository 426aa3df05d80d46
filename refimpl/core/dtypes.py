"""Data types: Paddle's names, its ``VarType`` enum values and NumPy dtypes.

Paddle keeps dtypes as ``core.VarDesc.VarType`` enum members (FP32 = 5,
INT64 = 3, ...); op attributes such as ``fill_constant.dtype`` store the
integer. Here a dtype is just its Paddle name (``"float32"``), and this module
converts between the name, the enum integer and ``numpy.dtype``. bfloat16
is ``ml_dtypes.bfloat16`` (``bfloat16.py``: Paddle shows it to Python as uint16).
"""
from typing import Any

import numpy as np

from .bfloat16 import BFLOAT16
from .errors import InvalidArgument

# Paddle's VarType enum values for the dense data types.
VARTYPE = {
    "bool": 0, "int16": 1, "int32": 2, "int64": 3, "float16": 4,
    "float32": 5, "float64": 6, "uint8": 20, "int8": 21, "bfloat16": 22,
    "complex64": 23, "complex128": 24,
}
VARTYPE_TO_NAME = {v: k for k, v in VARTYPE.items()}

_NUMPY = {
    "bool": np.bool_, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
    "uint8": np.uint8, "int8": np.int8, "complex64": np.complex64,
    "complex128": np.complex128, "bfloat16": BFLOAT16,  # ml_dtypes' (see bfloat16.py)
}
# uint16 is bfloat16's bit pattern: Paddle has no uint16 tensors and reads the name, NumPy's uint16 and
# a uint16 array as bfloat16 (``convert_np_dtype_to_dtype_``)
_ALIASES = {"float": "float32", "double": "float64", "int": "int64", "half": "float16", "uint16": "bfloat16"}


def convert_dtype(dtype: Any) -> str:
    """Return the Paddle dtype name for a name, a VarType int or a NumPy dtype.

    Only a string, an integer (not a boolean), a ``numpy.dtype`` or a type
    (``np.float32``, ``float``) is a dtype; anything else (a list, a dict, a
    boolean) is InvalidArgument, never NumPy's own error for it.
    """
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in VARTYPE:
            return name
    elif isinstance(dtype, (int, np.integer)) and not isinstance(dtype, (bool, np.bool_)):
        if int(dtype) in VARTYPE_TO_NAME:
            return VARTYPE_TO_NAME[int(dtype)]
    elif isinstance(dtype, (np.dtype, type)):
        try:
            name = np.dtype(dtype).name
        except (TypeError, ValueError):
            name = None
        name = _ALIASES.get(name, name) if name == "uint16" else name
        if name in VARTYPE:
            return name
    raise InvalidArgument(f"unsupported dtype {_short(dtype)}; expected one of {sorted(VARTYPE)}")


def _short(v: Any) -> str:
    r = repr(v) if not isinstance(v, (list, dict, tuple)) else f"<{type(v).__name__} of {len(v)}>"
    return r if len(r) <= 60 else r[:57] + "..."


def to_numpy_dtype(dtype: Any) -> np.dtype:
    """The ``numpy.dtype`` for a Paddle dtype given in any accepted form."""
    name = convert_dtype(dtype)
    if name not in _NUMPY:
        raise InvalidArgument(f"dtype {name!r} has no NumPy equivalent here")
    return np.dtype(_NUMPY[name])


def to_vartype(dtype: Any) -> int:
    """The VarType enum integer (as stored in op attrs) for a dtype."""
    return VARTYPE[convert_dtype(dtype)]
