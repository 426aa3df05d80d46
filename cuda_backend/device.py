"""Device arrays, transfers and launch configurations for the CUDA backend.

Mirrors what Paddle's GPU ``DeviceContext`` and allocator give a kernel: a
place to allocate output tensors (here ``numba.cuda.device_array``, whose
``nbytes`` equals the NumPy array's, so the executor's memory accounting is
byte for byte the CPU one) and a launch configuration. Differences: there is
one stream (numba's default), so kernels run in program order; the
allocator is numba's (frees go back when the last reference dies, batched by
numba's deferred-deallocation queue, which plays the stream-ordered
collector).

Launches use grid-stride loops, so any grid is correct: on a GPU the grid
covers the data, under the simulator (``NUMBA_ENABLE_CUDASIM=1``, one Python
thread per CUDA thread) it is a couple of threads, set by
``REFIMPL_CUDASIM_LAUNCH="blocks,threads"`` (default "1,2").
"""
import contextlib
import functools
import math
import os
import sys
import threading

import numpy as np

from refimpl.core.bfloat16 import BFLOAT16
from refimpl.core.errors import Unavailable

MAXD = 6  # highest rank the broadcasting / strided kernels take (shapes are padded to it)


class CudaUnavailable(Unavailable):
    """CUDA was asked for, but there is neither a GPU (with its driver) nor the simulator."""


try:
    from numba import config as _nb_config
    from numba import cuda
    _IMPORT_ERROR = None
except ImportError as exc:  # numba / numba-cuda not installed
    cuda, _nb_config, _IMPORT_ERROR = None, None, exc


def simulated():
    return bool(cuda is not None and _nb_config.ENABLE_CUDASIM)


def available():
    """True when kernels can run: a CUDA GPU with its driver, or numba's simulator."""
    if cuda is None:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001  (a broken driver counts as no GPU)
        return False


def require():
    """Raise :class:`CudaUnavailable` (saying why) unless kernels can run."""
    if cuda is None:
        raise CudaUnavailable(f"the CUDA backend needs numba and numba-cuda (pip install numba numba-cuda): "
                              f"{_IMPORT_ERROR}")
    if not available():
        raise CudaUnavailable("the CUDA backend was requested but no CUDA GPU is available and the simulator "
                              "is off; set NUMBA_ENABLE_CUDASIM=1 (before numba is imported) to use the "
                              "simulator, or use the numpy backend")


def _no_fma_contraction():
    """Compile without fusing ``a * b + c`` into an FMA (NVVM's default), unless fastmath is asked for.

    NumPy rounds the product and the sum separately; so must the kernels for
    float32 results to match the CPU backend bit for bit.
    """
    from numba.cuda.cudadrv import nvvm
    if getattr(nvvm.compile_ir, "_refimpl", False):
        return
    original = nvvm.compile_ir

    def compile_ir(llvmir, **options):
        if not options.get("fastmath"):
            options.setdefault("fma", False)
        return original(llvmir, **options)
    compile_ir._refimpl = True
    nvvm.compile_ir = compile_ir


def _locked_shared_arrays():
    """Make the simulator's ``cuda.shared.array`` give every thread of a block the same array.

    The simulator (numba-cuda 0.30) keys a block's shared arrays by the
    calling line, looked up and then stored without a lock: a thread switch
    between the two lets threads of one block each allocate an array of
    their own, so a kernel that exchanges data through shared memory (the
    tiled matmul) reads garbage once in a while. Looking up and storing
    under one lock restores what a GPU guarantees.
    """
    from numba.cuda.simulator import kernelapi
    from numba.core import types
    from numba.np import numpy_support
    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "_refimpl", False):
        return
    original, lock = shared.array, threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory (one buffer), or the simulator's error
            return original(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            res = self._allocations.get(key)
            if res is None:
                dtype = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype
                res = self._allocations[key] = np.empty(shape, dtype)
        return res
    array._refimpl, array.__wrapped__ = True, original
    shared.array = array


if cuda is not None:
    if _nb_config.ENABLE_CUDASIM:
        _locked_shared_arrays()
    else:
        _no_fma_contraction()


# ---- launch configuration --------------------------------------------------------
def _sim_launch():
    text = os.environ.get("REFIMPL_CUDASIM_LAUNCH", "1,2")
    b, t = (int(v) for v in text.split(","))
    return max(b, 1), max(t, 1)


THREADS = 256
MAX_BLOCKS = 1024
SIM_LAUNCH = _sim_launch()


def grid(n):
    """(blocks, threads) for ``n`` independent work items of a grid-stride kernel."""
    if simulated():
        return SIM_LAUNCH
    return max(1, min(MAX_BLOCKS, math.ceil(n / THREADS))), THREADS


_SIM_LOCK = threading.Lock()
LAUNCH_HOOKS = []  # callables (kernel, args) seen before every launch (compile_check records with one)


def launch(kernel, n, *args):
    """Run ``kernel`` over ``n`` work items (nothing when ``n == 0``)."""
    if n > 0:
        blocks, threads = grid(n)
        launch_config(kernel, blocks, threads, *args)


def launch_config(kernel, blocks, threads, *args):
    """``kernel[blocks, threads](*args)``; one launch at a time under the simulator.

    The simulator swaps the kernel's ``cuda`` module for its fake one while a
    launch runs, which two in-process ranks (threads) must not do at once.
    """
    for hook in LAUNCH_HOOKS:
        hook(kernel, args)
    if simulated():
        with _SIM_LOCK:
            kernel[blocks, threads](*args)
    else:
        kernel[blocks, threads](*args)


def tag(kernel, *recipe):
    """Mark a kernel made by a factory with how to make it again (see ``compile_check.resolve``)."""
    kernel.refimpl_recipe = recipe
    return kernel


FACTORIES = []  # "module:qualname" of every kernel_factory, for compile_check


def kernel_factory(make):
    """Decorator for ``make(DT)`` returning a kernel for scalar type DT: one kernel per dtype, tagged."""
    name = (make.__module__, make.__qualname__)
    FACTORIES.append(":".join(name))

    @functools.lru_cache(maxsize=None)
    def made(DT):
        with making_kernels():
            return tag(make(DT), "factory", *name, np.dtype(DT).str)
    return made


def making_kernels():
    """Hold while a factory makes kernels: under the simulator, the lock launches take.

    A factory's ``@cuda.jit`` reads its module's ``cuda``, which the
    simulator replaces by its fake module (which has no ``jit``) while a
    kernel of that module runs; an in-process rank that makes a kernel while
    another rank launches one must wait for the launch.
    """
    return _SIM_LOCK if simulated() else contextlib.nullcontext()


# ---- arrays ----------------------------------------------------------------------------
def is_device(a):
    return getattr(a, "__cuda_ndarray__", False) or hasattr(a, "__cuda_array_interface__")


def empty(shape, dtype):
    return cuda.device_array(tuple(int(d) for d in shape), dtype=np.dtype(dtype))


def to_device(a):
    """``a`` on the device: device arrays pass through, host values are copied (contiguous)."""
    if a is None or is_device(a):
        return a
    a = np.asarray(a)
    if a.dtype == BFLOAT16:  # numba has no bfloat16: the device holds its uint16 patterns (ops_amp.py)
        a = a.view(np.uint16)
    return cuda.to_device(a if a.flags.c_contiguous else a.copy())  # (ascontiguousarray would make 0-d 1-d)


def to_host(a):
    """A host NumPy copy of ``a`` (device or host)."""
    if is_device(a):
        host = a.copy_to_host()
        return host.view(BFLOAT16) if host.dtype == np.uint16 else host  # uint16 on the device is bfloat16
    return np.array(a, copy=True)


def dev(a):
    """A kernel input on the device (host inputs, e.g. persistables set with ``tensor.set``, are copied)."""
    return a if a is None or is_device(a) else to_device(a)


def device_dtype(a):
    """The dtype ``a`` has once on the device (a host ``ml_dtypes.bfloat16`` array: uint16); None if none.

    Kernels that choose a path by dtype before calling :func:`dev` ask this, so a host bfloat16
    array (from ``tensor.set``, ``amp_init``, ``static.load``...) takes the bfloat16 path."""
    dt = getattr(a, "dtype", None)
    return np.dtype(np.uint16) if dt == BFLOAT16 else dt


def flat(a):
    """A contiguous device array as 1-D (a view; 0-d arrays become shape (1,), 0-size ones (0,))."""
    return a.reshape(a.size if a.ndim else 1) if a.ndim != 1 else a


def scalar_of(a, dtype=None):
    """Element 0 of a small tensor as a host scalar (a device -> host read, as Paddle's ``GetValue``)."""
    v = to_host(a).reshape(-1)[0] if is_device(a) else np.asarray(a).reshape(-1)[0]
    return np.dtype(dtype).type(v) if dtype is not None else v


def copy(a):
    """A fresh device copy of device array ``a``."""
    out = empty(a.shape, a.dtype)
    if a.size:
        out.copy_to_device(a)
    return out


# ---- shapes -------------------------------------------------------------------------------
def contiguous_strides(shape):
    """Element strides of a C-contiguous array of ``shape``."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def padded(shape, fill=1):
    """``shape`` left-padded with ``fill`` to MAXD dims."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > MAXD:
        raise Unavailable(f"cuda backend: tensors of rank {len(shape)} > {MAXD} are not supported")
    return (fill,) * (MAXD - len(shape)) + shape


def bcast_strides(in_shape, out_shape):
    """MAXD element strides reading an ``in_shape`` array broadcast to ``out_shape`` (0 on broadcast dims)."""
    ins = padded(in_shape)
    outs = padded(out_shape)
    st = padded(contiguous_strides(tuple(in_shape)), 0)
    return tuple(0 if (i == 1 and o != 1) else s for i, o, s in zip(ins, outs, st))
