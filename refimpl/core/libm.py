"""The C library's ``log``, ``logf`` and ``erf``, as Paddle's CPU kernels get them, over NumPy arrays.

Paddle's random kernels call ``std::log`` / ``std::erf`` of the C library (glibc on Linux), and
their numbers depend on its last bit. NumPy's float32 ``log`` rounds differently from glibc's
``logf`` in about a fifth of the cases, and glibc's ``logf`` is not correctly rounded either (0.7%
of the results differ from the nearest float). So:

* :func:`log` for float follows glibc's ``logf`` algorithm (Arm's optimized-routines, in glibc
  since 2.27) in NumPy doubles, and asks the C library itself (ctypes) for the rare elements whose
  double lies within 2**-40 of a float rounding tie, where a last-bit difference of the emulation
  (fused multiply-adds or not) could matter. For double it is NumPy's ``log``, which calls the C
  library's where NumPy has no SIMD version of its own.
* Both fast paths are checked once against the C library on a fixed sample; where one disagrees
  (another C library), every element goes through ctypes (slower, still exact).
* :func:`erf` (scalar) is the C library's, or Python's ``math.erf`` where none is found.

Differences from the C library: none expected on glibc; without a loadable C library the emulation
and NumPy are used unchecked.
"""
import ctypes
import ctypes.util
import math
from typing import List, Tuple

import numpy as np

__all__ = ["log", "erf"]


def _libm(name: str, t: type):
    """The C library's function ``name`` (``name + "f"`` for float) as a Python function, or None."""
    try:
        fn = getattr(ctypes.CDLL(ctypes.util.find_library("m")), name + "f" if t is np.float32 else name)
    except (OSError, AttributeError, TypeError):
        return None
    c = ctypes.c_float if t is np.float32 else ctypes.c_double
    fn.restype, fn.argtypes = c, [c]
    return fn


_LIBM_LOGF, _LIBM_LOG = _libm("log", np.float32), _libm("log", np.float64)
_LIBM_ERF = _libm("erf", np.float64)

# glibc's logf (since 2.27, from Arm's optimized-routines, MIT): x = 2**k * z, z in one of 16
# subintervals around c = 1 / invc, log(x) = k * ln2 + log(c) + p(z * invc - 1), all in double,
# rounded to float once at the end. Rows (invc, log(c)); then ln2 and p's coefficients of r**4..r**2.
_LOGF_TAB = np.array([float.fromhex(h) for h in """
    0x1.661ec79f8f3bep+0 -0x1.57bf7808caadep-2  0x1.571ed4aaf883dp+0 -0x1.2bef0a7c06ddbp-2
    0x1.49539f0f010bp+0  -0x1.01eae7f513a67p-2  0x1.3c995b0b80385p+0 -0x1.b31d8a68224e9p-3
    0x1.30d190c8864a5p+0 -0x1.6574f0ac07758p-3  0x1.25e227b0b8eap+0  -0x1.1aa2bc79c81p-3
    0x1.1bb4a4a1a343fp+0 -0x1.a4e76ce8c0e5ep-4  0x1.12358f08ae5bap+0 -0x1.1973c5a611cccp-4
    0x1.0953f419900a7p+0 -0x1.252f438e10c1ep-5  0x1p+0 0x0p+0
    0x1.e608cfd9a47acp-1  0x1.aa5aa5df25984p-5  0x1.ca4b31f026aap-1   0x1.c5e53aa362eb4p-4
    0x1.b2036576afce6p-1  0x1.526e57720db08p-3  0x1.9c2d163a1aa2dp-1  0x1.bc2860d22477p-3
    0x1.886e6037841edp-1  0x1.1058bc8a07ee1p-2  0x1.767dcf5534862p-1  0x1.4043057b6ee09p-2
    """.split()]).reshape(16, 2)
_LN2 = float.fromhex("0x1.62e42fefa39efp-1")
_LOGF_P = [float.fromhex(h) for h in ("-0x1.00ea348b88334p-2", "0x1.5575b0be00b6ap-2", "-0x1.ffffef20a4123p-2")]


def _logf_double(x: np.ndarray) -> np.ndarray:
    """glibc's logf before its final rounding, for positive normal floats, within a few ulps of double."""
    ix = x.view(np.uint32)
    tmp = ix - np.uint32(0x3F330000)
    i = (tmp >> np.uint32(19)) & np.uint32(15)
    k = (tmp.view(np.int32) >> np.int32(23)).astype(np.float64)
    z = (ix - (tmp & np.uint32(0xFF800000))).view(np.float32).astype(np.float64)
    r = z * _LOGF_TAB[i, 0] - 1
    r2 = r * r
    y = _LOGF_P[0] * r2 + (_LOGF_P[1] * r + _LOGF_P[2])
    return y * r2 + ((_LOGF_TAB[i, 1] + k * _LN2) + r)


def _logf_emulated(x: np.ndarray) -> np.ndarray:
    """``logf`` of positive normal floats: the emulation, or the C library's own near a tie.

    The emulation can differ from glibc's double result by a few ulps of double (fused or not);
    that changes the float only where the double lies that close to a rounding midpoint, and
    there (about 2 in 10**5 elements) the C library itself is asked.
    """
    y = _logf_double(x)
    f = y.astype(np.float32)
    other = np.where(y > f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf)))
    mid = (f.astype(np.float64) + other) / 2
    near = (np.abs(y - mid) <= np.abs(y) * 2.0 ** -40) | (x < np.finfo(np.float32).tiny)
    if near.any() and _LIBM_LOGF is not None:
        f[near] = [_LIBM_LOGF(v) for v in x[near].tolist()]
    return f


def _fast_logs_agree() -> Tuple[bool, bool]:
    """Whether the fast float log (the emulation) and NumPy's double log give the C library's
    results on a fixed sample (NumPy's double log is the C library's where it has no SIMD one)."""
    x = np.concatenate([np.linspace(1e-6, 1, 3001, dtype=np.float32),
                        np.float32(1) - np.arange(1, 200, dtype=np.float32) * np.float32(2.0 ** -24)])
    f_ok = _LIBM_LOGF is None or np.array_equal(
        _logf_emulated(x), np.array([_LIBM_LOGF(v) for v in x.tolist()], np.float32))
    d = np.concatenate([x.astype(np.float64) * (1 + 2.0 ** -30), np.linspace(1e-9, 1, 2001)])
    d_ok = _LIBM_LOG is None or np.array_equal(np.log(d), np.array([_LIBM_LOG(v) for v in d.tolist()]))
    return f_ok, d_ok


_FAST_LOG_OK: List[Tuple[bool, bool]] = []


def log(r2: np.ndarray, t: type) -> np.ndarray:
    """``std::log`` of ``r2`` (positive) in type ``t``, as the C library computes it."""
    if not _FAST_LOG_OK:
        _FAST_LOG_OK.append(_fast_logs_agree())
    f_ok, d_ok = _FAST_LOG_OK[0]
    if t is np.float32 and f_ok:
        return _logf_emulated(r2)
    fn = _LIBM_LOGF if t is np.float32 else _LIBM_LOG
    if fn is None or (t is np.float64 and d_ok):  # no C library to ask, or NumPy's log is its log
        return np.log(r2.astype(np.float64)).astype(t)
    return np.array([fn(v) for v in r2.tolist()], t)


def erf(v: float) -> float:
    """The C library's ``erf`` of a double."""
    return _LIBM_ERF(v) if _LIBM_ERF is not None else math.erf(v)
