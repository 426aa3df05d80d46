"""Which backend runs the kernels, and the two host <-> device transfers.

Mirrors the part of Paddle's ``Place`` / ``DeviceContext`` machinery the
executor sees: the backend is a property of the place an executor runs on
(``CPUPlace`` -> "numpy", ``CUDAPlace`` -> "cuda"). The process default,
"numpy" unless ``REFIMPL_BACKEND`` or :func:`set_backend` says "cuda", is
only what an executor without a place takes (:func:`default_place`, as
Paddle's ``Executor()`` takes ``_current_expected_place()``), so one flag
moves a script's plain ``Executor()``s, its pipeline ranks and the CLI to
the GPU, while an executor given a place keeps it. Feeds go in
through :func:`to_device` and fetches come out through :func:`to_host`;
those are the only transfers a step makes. With the NumPy backend both are
(nearly) free: ``to_device`` is the identity and ``to_host`` a copy, as
before. The CUDA backend (the ``cuda_backend`` package) is imported the
first time it is asked for, which registers its kernels.
"""
from __future__ import annotations

import os
from typing import Any

from refimpl.core import device as _core_device
from refimpl.core.errors import InvalidArgument
from refimpl.core.place import CPUPlace, CUDAPlace, Place

BACKENDS = ("numpy", "cuda")
_loaded = {"numpy": True}
_default = {"backend": "numpy"}


def ensure(backend: str) -> str:
    """Make ``backend``'s kernels available (imports ``cuda_backend`` once); returns ``backend``."""
    if backend not in _loaded:
        if backend != "cuda":
            raise InvalidArgument(f"unknown backend {backend!r}; choose one of {list(BACKENDS)}")
        import cuda_backend  # noqa: F401  (checks the device, registers the kernels)
        cuda_backend.require()
        _loaded[backend] = True
    return backend


def set_backend(name: str) -> None:
    """Make ``name`` ("numpy" or "cuda") the backend of executors created without a place."""
    if name not in BACKENDS:
        raise InvalidArgument(f"unknown backend {name!r}; choose one of {list(BACKENDS)}")
    ensure(name)
    _default["backend"] = name


def get_backend() -> str:
    """The default backend (what ``set_backend`` / ``REFIMPL_BACKEND`` chose; "numpy" otherwise)."""
    return _default["backend"]


def default_place() -> Place:
    """The place of an executor created without one: ``CUDAPlace(0)`` when the default backend is cuda."""
    return CUDAPlace(0) if _default["backend"] == "cuda" else CPUPlace()


def collector_class(backend: str) -> type:
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


def fused_writer(backend: str) -> Any:
    """``(write_into_fused, outside_fused)`` of ``backend``: keep a var's memory in a ``coalesce_tensor``
    buffer when an op writes it, and keep other vars out of such buffers
    (``refimpl.ops.fused_buffers``; the CUDA backend's device-array twins)."""
    if backend == "numpy":
        from refimpl.ops import fused_buffers
        return fused_buffers.write_into_fused, fused_buffers.outside_fused
    from cuda_backend import ops_collective
    return ops_collective.write_into_fused, ops_collective.outside_fused


def to_device(array: Any, backend: str) -> Any:
    """A fed host array as the backend's tensor value (``refimpl.core.device.to_device``, backend loaded first)."""
    return _core_device.to_device(array, ensure(backend))


to_host = _core_device.to_host  # a fresh host copy of a tensor value (NumPy array or device array)


def _from_env():
    name = os.environ.get("REFIMPL_BACKEND", "").strip().lower()
    if name and name != "numpy":
        if name not in BACKENDS:
            raise InvalidArgument(f"REFIMPL_BACKEND={name!r}: choose one of {list(BACKENDS)}")
        _default["backend"] = name  # the kernels are loaded (and the device checked) on first use


_from_env()
