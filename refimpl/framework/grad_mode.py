"""Grad mode: ``paddle.is_grad_enabled``, ``set_grad_enabled``, ``no_grad``, ``enable_grad``.

Mirrors ``python/paddle/base/dygraph/base.py`` of Paddle 3.3.1: one
process-wide switch (Paddle keeps it in C++, ``core._has_grad``), True at
import; ``set_grad_enabled(mode)`` sets it at once and, used as a context
manager or a decorator, puts the old value back on exit; ``no_grad`` and
``enable_grad`` set it to False / True for a ``with`` block or a decorated
function (a generator function keeps the mode for its whole iteration).

In static mode the switch changes nothing that is built, in Paddle as here:
``y = x * 2`` under ``no_grad()`` still has ``stop_gradient=False`` and
``append_backward`` differentiates it (checked with Paddle 3.3.1). Only
dygraph reads it, and refimpl has no dygraph.

Differences: Paddle's ``no_grad`` is the class ``no_grad_`` (``paddle.no_grad()``
an instance); here the class itself is named ``no_grad``. A ``mode`` that is
not a bool raises InvalidArgument (a TypeError from pybind in Paddle).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

from refimpl.core.errors import InvalidArgument

__all__ = ["is_grad_enabled", "set_grad_enabled", "no_grad", "enable_grad"]

_F = TypeVar("_F", bound=Callable[..., Any])

_grad_enabled = True


def is_grad_enabled() -> bool:
    """Paddle's ``paddle.is_grad_enabled()``: True unless ``no_grad`` / ``set_grad_enabled(False)`` is in force."""
    return _grad_enabled


def _set_grad_enabled(mode: Any, api: str) -> None:
    global _grad_enabled
    if not isinstance(mode, bool):
        raise InvalidArgument(f"{api}: argument 'mode' must be a bool, got {mode!r}")
    _grad_enabled = mode


class _DecoratorContextManager:
    """A context manager that also decorates functions and generator functions (a fresh copy per call)."""

    def __call__(self, func: _F) -> _F:
        if inspect.isgeneratorfunction(func):
            @functools.wraps(func)
            def generator(*args: Any, **kwargs: Any) -> Any:
                with self._clone():
                    yield from func(*args, **kwargs)
            return generator  # type: ignore[return-value]

        @functools.wraps(func)
        def function(*args: Any, **kwargs: Any) -> Any:
            with self._clone():
                return func(*args, **kwargs)
        return function  # type: ignore[return-value]

    def _clone(self) -> "_DecoratorContextManager":
        return type(self)()

    def __enter__(self) -> None:
        raise NotImplementedError

    def __exit__(self, *exc: Any) -> None:
        raise NotImplementedError


class _SwitchGrad(_DecoratorContextManager):
    """Set the grad mode to ``_mode`` on entry, put the old one back on exit."""

    _mode = True

    def __enter__(self) -> None:
        self._prev = _grad_enabled
        _set_grad_enabled(self._mode, type(self).__name__)

    def __exit__(self, *exc: Any) -> None:
        _set_grad_enabled(self._prev, type(self).__name__)


class no_grad(_SwitchGrad):
    """Paddle's ``paddle.no_grad()``: grad mode off inside ``with no_grad():`` or a ``@no_grad()`` function."""

    _mode = False


class enable_grad(_SwitchGrad):
    """Paddle's ``paddle.enable_grad()``: grad mode on inside, whatever ``no_grad`` said outside."""

    _mode = True


class set_grad_enabled(_DecoratorContextManager):
    """Paddle's ``paddle.set_grad_enabled(mode)``: sets the mode now; as a context manager, restores it on exit."""

    def __init__(self, mode: bool) -> None:
        self.prev = _grad_enabled
        _set_grad_enabled(mode, "paddle.set_grad_enabled")
        self.mode = mode

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        _set_grad_enabled(self.prev, "paddle.set_grad_enabled")

    def _clone(self) -> "set_grad_enabled":
        return set_grad_enabled(self.mode)
