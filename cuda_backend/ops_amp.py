"""CUDA kernels for refimpl.ops.amp_ops, and float16 / bfloat16 tensors on the device.

Mirrors Paddle's GPU ``check_finite_and_unscale`` / ``update_loss_scaling``
(``paddle/phi/kernels/gpu/amp_kernel.cu``) with the CPU kernels' semantics
(see ``refimpl/ops/amp_ops.py``): one launch per gradient finds an inf/nan
(a flag set by any thread), one scales it; the flag is read back to the host
between gradients, as the CPU kernel decides per gradient, and the loss
scaling state (one value each) is updated on the host with the same
function as the NumPy kernel (Paddle's GPU kernel does it in a one-thread
launch).

Low-precision dtypes on the device: float16 is numba's own; bfloat16 (which
numba does not know) is held as its uint16 bit patterns. Paddle has no uint16
tensors, so a uint16 device array always is bfloat16: ``device.to_device`` turns
a host ``ml_dtypes.bfloat16`` array into one and ``device.to_host`` back. The
low-precision op wrapper
(``refimpl/ops/low_precision.py``) gets this backend's :func:`widen` (exact,
``bits << 16``) and :func:`round_to` (float32 -> bfloat16 round to nearest
even with NaN as 0x7FFF, as Paddle; float32 -> float16 by the device's
round-to-nearest-even conversion), and ``cast`` uses the same two (or, inside
``refimpl.core.bfloat16.legacy_truncating_cast``, Paddle 2.6.2's truncation).
"""
import numpy as np

from refimpl.core.bfloat16 import BFLOAT16, PADDLE_NAN_BITS, cast_truncates
from refimpl.ops import low_precision
from refimpl.ops.amp_ops import update_loss_scaling as host_kernel
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, device_dtype, empty, flat, is_device, launch, scalar_of
from .device import to_device as _to_device

BITS = np.dtype(np.uint16)  # bfloat16 on the device
LOW_PRECISION = (np.dtype(np.float16), BFLOAT16)        # as the host names them
LOW_PRECISION_ON_DEVICE = (np.dtype(np.float16), BITS)  # as the device holds them


# ---- bfloat16 <-> float32 ----------------------------------------------------------------------
@cuda.jit
def _widen_bf16(bits, out_bits):
    """out (float32, as uint32 patterns) = the bfloat16 ``bits`` shifted into the high half: exact."""
    for i in range(cuda.grid(1), bits.size, cuda.gridsize(1)):
        out_bits[i] = np.uint32(bits[i]) << np.uint32(16)


@cuda.jit
def _round_bf16(x_bits, out, nan_bits):
    """out = float32 patterns rounded to bfloat16, to nearest even; any NaN becomes ``nan_bits``."""
    for i in range(cuda.grid(1), x_bits.size, cuda.gridsize(1)):
        b = x_bits[i]
        if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
            out[i] = nan_bits
        else:
            lsb = (b >> np.uint32(16)) & np.uint32(1)
            out[i] = np.uint16((b + np.uint32(0x7FFF) + lsb) >> np.uint32(16))


@cuda.jit
def _truncate_bf16(x_bits, out):
    """out = the high 16 bits of each float32 pattern (Paddle 2.6.2's CPU cast, ``legacy_truncating_cast``)."""
    for i in range(cuda.grid(1), x_bits.size, cuda.gridsize(1)):
        out[i] = np.uint16(x_bits[i] >> np.uint32(16))


@cuda.jit
def _convert(x, out):
    """out = x converted to out's dtype (float16 <-> float32 on the device: round to nearest even)."""
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        out[i] = x[i]


def is_bfloat16(a) -> bool:
    return a is not None and getattr(a, "dtype", None) == BITS


def widen(a):
    """A float16 / bfloat16 device array as float32 (exactly); anything else as it is."""
    if not isinstance(a, np.ndarray) and not is_device(a) or device_dtype(a) not in LOW_PRECISION_ON_DEVICE:
        return a  # None, a shape-only TensorMeta, a float32 array...
    a = dev(a)  # a host bfloat16 array becomes its uint16 patterns here
    out = empty(a.shape, np.float32)
    if a.dtype == BITS:
        launch(_widen_bf16, a.size, flat(a), flat(out).view(np.uint32))
    else:
        launch(_convert, a.size, flat(a), flat(out))
    return out


def round_to(a, dtype: str):
    """A float32 (or float64) device array rounded to ``dtype`` ("float16" or "bfloat16")."""
    if a is None or getattr(a, "dtype", None) is None or np.dtype(a.dtype).kind != "f":
        return a
    a = dev(a)
    if dtype == "bfloat16":
        if a.dtype != np.float32:
            a = _converted(a, np.float32)
        out = empty(a.shape, BITS)
        launch(_round_bf16, a.size, flat(a).view(np.uint32), flat(out), np.uint16(PADDLE_NAN_BITS))
        return out
    return _converted(a, np.float16)


def _converted(a, dtype):
    out = empty(a.shape, dtype)
    launch(_convert, a.size, flat(a), flat(out))
    return out


def cast(X, dtype):
    """``cast`` when X or the target is float16 / bfloat16 (``ops_manipulation.cast`` hands these over)."""
    X = dev(X)
    if np.dtype(dtype) == BFLOAT16:
        if is_bfloat16(X):
            return X
        wide = X if X.dtype == np.float32 else _converted(widen(X), np.float32)
        if not cast_truncates():
            return round_to(wide, "bfloat16")
        out = empty(wide.shape, BITS)
        launch(_truncate_bf16, wide.size, flat(wide).view(np.uint32), flat(out))
        return out
    wide = widen(X)
    if np.dtype(dtype) == np.float16 and wide.dtype.kind == "f":
        return X if X.dtype == np.float16 else round_to(wide, "float16")
    return wide if wide.dtype == np.dtype(dtype) else _converted(wide, dtype)


low_precision.register_backend("cuda", widen, round_to)


# ---- check_finite_and_unscale ----------------------------------------------------------------------
@cuda.jit
def _find_nonfinite(x, flag):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        v = x[i]
        if not (v - v == 0):  # inf - inf and nan - nan are NaN; every finite v gives 0
            flag[0] = True


@cuda.jit
def _scaled(x, out, s):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        out[i] = x[i] * s


def _nonfinite(x) -> bool:
    flag = _to_device(np.zeros(1, np.bool_))
    launch(_find_nonfinite, x.size, flat(x), flag)
    return bool(scalar_of(flag))


def check_finite_and_unscale(X, Scale):
    scale = scalar_of(dev(Scale))
    found, outs = False, []
    for x in X:
        x = dev(x)
        inverse = x.dtype.type(1.0 / float(scale))
        if not found:
            found = _nonfinite(x)
        out = empty(x.shape, x.dtype)
        launch(_scaled, x.size, flat(x), flat(out), x.dtype.type(0) if found else inverse)
        outs.append(out)
    return outs, _to_device(np.array([found]))


# ---- update_loss_scaling ------------------------------------------------------------------------
@cuda.jit
def _fill(out, v):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = v


def _zeros_or_same(x, zero: bool):
    """New zeros shaped like x after an overflow; else x itself (Out is X, as in the NumPy kernel)."""
    x = dev(x)
    if not zero:
        return x
    out = empty(x.shape, x.dtype)
    launch(_fill, out.size, flat(out), x.dtype.type(0))
    return out


def update_loss_scaling(X, FoundInfinite, PrevLossScaling, InGoodSteps, InBadSteps, StopUpdate, *,
                        incr_every_n_steps, decr_every_n_nan_or_inf, incr_ratio, decr_ratio, stop_update):
    state = [np.asarray(scalar_of(dev(t))).reshape(1) for t in (FoundInfinite, PrevLossScaling, InGoodSteps,
                                                                 InBadSteps)]
    stop = None if StopUpdate is None else np.asarray(scalar_of(dev(StopUpdate))).reshape(1)
    # the counters and the scale (one value each) through the NumPy kernel's own rules, on the host
    _, scale, good, bad = host_kernel([], *state, stop, incr_every_n_steps=incr_every_n_steps,
                                      decr_every_n_nan_or_inf=decr_every_n_nan_or_inf, incr_ratio=incr_ratio,
                                      decr_ratio=decr_ratio, stop_update=stop_update)
    found = bool(state[0][0])
    outs = [_zeros_or_same(x, found) for x in X]
    shapes = [tuple(dev(t).shape) for t in (PrevLossScaling, InGoodSteps, InBadSteps)]
    return (outs, _to_device(scale.reshape(shapes[0])), _to_device(good.reshape(shapes[1])),
            _to_device(bad.reshape(shapes[2])))


register_kernel("check_finite_and_unscale", "cuda", check_finite_and_unscale)
register_kernel("update_loss_scaling", "cuda", update_loss_scaling)
