"""The CUDA backend: numba.cuda kernels registered into refimpl's op registry.

Mirrors Paddle's GPU kernels (``phi/kernels/gpu``) and ``CUDAPlace``: the
same op types, slots and attrs as the NumPy kernels in ``refimpl.ops``,
registered under the "cuda" key, so the interpreter, the GC, the passes and
the schedules are shared and only the kernels differ. Tensors hold numba
device arrays; feeds and fetches are the only host transfers of a step
(``refimpl.executor.backend``). Without a GPU, ``NUMBA_ENABLE_CUDASIM=1``
(set before numba is imported) runs the same kernels in numba's simulator.
Importing the package registers its host <-> device transfers with
``refimpl.core.device`` (the executor imports it before any cuda kernel runs).

Use: ``refimpl.set_backend("cuda")``, ``REFIMPL_BACKEND=cuda`` or
``Executor(CUDAPlace(0))``; importing this package registers no kernel until
:func:`require` succeeds.
"""
import importlib

from refimpl.core import device as _core_device

from .device import CudaUnavailable, available, simulated, to_host  # noqa: F401
from . import device as _device

# the modules that register kernels (``ew`` holds the shared ones they are made from)
OP_MODULES = ("ops_activation", "ops_collective", "ops_creation", "ops_manipulation", "ops_math", "ops_matmul",
              "ops_nn", "ops_optimizer", "ops_conv", "ops_pool", "ops_norm", "ops_index", "ops_reduce",
              "ops_reduce_loss", "ops_linalg", "ops_metric", "ops_strided_slice", "ops_pad",
              "ops_conv_transpose", "ops_group_norm", "ops_prelu", "ops_spectral_norm", "ops_py_func",
              "ops_amp", "ops_lars_lamb", "ops_dgc", "ops_model_parallel",
              "ops_partial_p2p", "ops_nop")
_installed = []


def require():
    """Check that CUDA (or the simulator) is there, then register every cuda kernel once."""
    _device.require()
    if not _installed:
        for name in OP_MODULES:
            importlib.import_module(f"{__name__}.{name}")
        _installed.append(True)


def to_device(array):
    """A host array copied to the device (device arrays pass through)."""
    require()
    return _device.to_device(array)


_core_device.register_converters("cuda", to_device, _device.to_host, _device.is_device)


def missing_kernels():
    """Op types that have a NumPy kernel but no CUDA one (empty once everything is registered)."""
    from refimpl.ops.registry import OPS
    return sorted(t for t, d in OPS.items() if "numpy" in d.kernels and "cuda" not in d.kernels)
