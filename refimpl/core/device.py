"""Host <-> device transfers of tensor values, one converter pair per backend.

Mirrors the copies Paddle's ``phi::Copy`` (``paddle/phi/core/tensor_utils.h``)
makes between a ``CPUPlace`` and a device place: a fed host array becomes the
backend's tensor value with :func:`to_device`, and any tensor value comes back
as a fresh host array with :func:`to_host`. The NumPy backend is built in (the
identity and a copy); a device backend registers its pair when it is imported
(``cuda_backend`` does, and the executor imports it before any of its kernels
runs), so kernels and ops reach the device without importing a backend.

Differences: Paddle picks the copy from the source and destination places;
here ``to_device`` is keyed by the backend's name and ``to_host`` asks each
registered backend whether it owns the value.
"""
from typing import Any, Callable, Dict, NamedTuple

import numpy as np

from .errors import InvalidArgument


class Converters(NamedTuple):
    """One backend's transfers: host array -> value, value -> host array, and "is this value mine"."""

    to_device: Callable[[np.ndarray], Any]
    to_host: Callable[[Any], np.ndarray]
    owns: Callable[[Any], bool]


def _identity(array: np.ndarray) -> np.ndarray:
    return array


def _copy(array: Any) -> np.ndarray:
    return np.array(array, copy=True)


def _is_ndarray(value: Any) -> bool:
    return isinstance(value, np.ndarray)


_CONVERTERS: Dict[str, Converters] = {"numpy": Converters(_identity, _copy, _is_ndarray)}


def register_converters(backend: str, to_device: Callable[[np.ndarray], Any],
                        to_host: Callable[[Any], np.ndarray], owns: Callable[[Any], bool]) -> None:
    """Install ``backend``'s transfers (registering again replaces them)."""
    _CONVERTERS[backend] = Converters(to_device, to_host, owns)


def to_device(array: np.ndarray, backend: str) -> Any:
    """A host array as ``backend``'s tensor value (the identity for NumPy)."""
    conv = _CONVERTERS.get(backend)
    if conv is None:
        raise InvalidArgument(f"no device transfers for backend {backend!r} (known: {sorted(_CONVERTERS)}); "
                              f"a device backend registers them when it is loaded")
    return conv.to_device(array)


def to_host(value: Any) -> np.ndarray:
    """A fresh host copy of a tensor value (NumPy array or a registered backend's device array)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    for conv in _CONVERTERS.values():
        if conv.owns(value):
            return conv.to_host(value)
    return np.array(value, copy=True)
