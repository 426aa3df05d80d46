"""Float64 math device functions with NumPy's edge cases (inf / nan, never an exception).

The CUDA kernels compute transcendental functions in float64 and round once
to the array's type, so the GPU and numba's simulator (which runs Python's
``math``, which raises on ``log(0)`` or overflow) agree and are (nearly)
correctly rounded. NumPy's own SIMD exp / log / tanh / pow (AVX-512 builds)
are not correctly rounded, so against the NumPy kernels these ops agree
within a few ulp, not bit for bit (the per-op conformance tests allow 4).
Paddle's GPU kernels use the float32 CUDA intrinsics instead (within an ulp
or two as well).
"""
import math

import numpy as np

from .device import cuda

EXP_MAX = 709.782712893384  # exp(x) overflows float64 above this
EXP_MIN = -745.1332191019412  # and underflows to 0 below this


@cuda.jit(device=True)
def exp64(x):
    v = np.float64(x)
    if v > EXP_MAX:
        return np.float64(math.inf)
    if v < EXP_MIN:
        return np.float64(0.0)
    return np.float64(math.exp(v))


@cuda.jit(device=True)
def log64(x):
    v = np.float64(x)
    if v > 0:
        if v == math.inf:
            return v
        return np.float64(math.log(v))
    if v == 0:
        return np.float64(-math.inf)
    return np.float64(math.nan)


@cuda.jit(device=True)
def sqrt64(x):
    v = np.float64(x)
    if v >= 0:
        return np.float64(math.sqrt(v))
    return np.float64(math.nan)


@cuda.jit(device=True)
def tanh64(x):
    return np.float64(math.tanh(np.float64(x)))


@cuda.jit(device=True)
def erf64(x):
    return np.float64(math.erf(np.float64(x)))


@cuda.jit(device=True)
def pow64(x, y):
    return np.float64(x) ** np.float64(y)
