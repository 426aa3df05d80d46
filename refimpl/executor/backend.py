"""Which backend runs the kernels, and the two host <-> device transfers.

Mirrors the part of Paddle's ``Place`` / ``DeviceContext`` machinery the
executor sees: ``CUDAPlace`` selects the "cuda" kernels, ``CPUPlace`` the
process default backend, which is "numpy" unless ``REFIMPL_BACKEND`` or
:func:`set_backend` says "cuda" (so one flag moves a whole program, its
startup and its pipeline ranks to the GPU, as the issue asks). Feeds go in
through :func:`to_device` and fetches come out through :func:`to_host`;
those are the only transfers a step makes. With the NumPy backend both are
(nearly) free: ``to_device`` is the identity and ``to_host`` a copy, as
before. The CUDA backend (the ``cuda_backend`` package) is imported the
first time it is asked for, which registers its kernels.
"""
import os

import numpy as np

from refimpl.core.errors import InvalidArgument
from refimpl.core.place import CPUPlace

BACKENDS = ("numpy", "cuda")
_loaded = {"numpy": True}


def ensure(backend):
    """Make ``backend``'s kernels available (imports ``cuda_backend`` once); returns ``backend``."""
    if backend not in _loaded:
        if backend != "cuda":
            raise InvalidArgument(f"unknown backend {backend!r}; choose one of {list(BACKENDS)}")
        import cuda_backend  # noqa: F401  (checks the device, registers the kernels)
        cuda_backend.require()
        _loaded[backend] = True
    return backend


def set_backend(name):
    """Run programs on ``name`` ("numpy" or "cuda") wherever the place does not say otherwise."""
    if name not in BACKENDS:
        raise InvalidArgument(f"unknown backend {name!r}; choose one of {list(BACKENDS)}")
    ensure(name)
    CPUPlace.backend = name


def get_backend():
    return CPUPlace.backend


def collector_class(backend):
    """The garbage collector class for ``backend`` (the hook the executor selects it through).

    NumPy: the CPU ``GarbageCollector``. CUDA: the backend's own collector
    (``cuda_backend.garbage_collector``: stream-ordered, or unsafe-fast under
    ``FLAGS_fast_eager_deletion_mode``), which keeps the CPU plan, batching
    and accounting and differs only in when device memory is released.
    """
    if backend == "numpy":
        from .garbage_collector import GarbageCollector
        return GarbageCollector
    from cuda_backend.garbage_collector import collector_class as cuda_collector_class
    return cuda_collector_class()


def to_device(array, backend):
    """A fed host array as the backend's tensor value (the identity for NumPy)."""
    if backend == "numpy":
        return array
    import cuda_backend
    return cuda_backend.to_device(array)


def to_host(array):
    """A fresh host copy of a tensor value (NumPy array or device array)."""
    if isinstance(array, np.ndarray):
        return array.copy()
    copy_to_host = getattr(array, "copy_to_host", None)
    return copy_to_host() if copy_to_host is not None else np.array(array, copy=True)


def _from_env():
    name = os.environ.get("REFIMPL_BACKEND", "").strip().lower()
    if name and name != "numpy":
        if name not in BACKENDS:
            raise InvalidArgument(f"REFIMPL_BACKEND={name!r}: choose one of {list(BACKENDS)}")
        CPUPlace.backend = name  # the kernels are loaded (and the device checked) on first use


_from_env()
