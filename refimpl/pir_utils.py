"""``paddle.pir_utils``: the guards that switch between Paddle's two IRs.

Mirrors the guards of ``python/paddle/pir_utils.py`` (Paddle 3.3.1).
refimpl builds the legacy ProgramDesc IR only, so:

- ``OldIrGuard`` / ``DygraphOldIrGuard`` (run a block on the legacy IR) are
  no-ops: that is the only IR there is;
- ``IrGuard`` / ``DygraphPirGuard`` (run a block on PIR) raise Unimplemented
  when entered, as ``paddle.framework.in_pir_mode()`` stays False.

Paddle's guards also decorate functions (``@IrGuard()``); so do these.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from refimpl.core.errors import Unimplemented

__all__ = ["IrGuard", "OldIrGuard", "DygraphPirGuard", "DygraphOldIrGuard"]

_F = TypeVar("_F", bound=Callable[..., Any])


class _Guard:
    def __call__(self, func: _F) -> _F:
        @functools.wraps(func)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            with type(self)():
                return func(*args, **kwargs)
        return guarded  # type: ignore[return-value]

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        pass


class OldIrGuard(_Guard):
    """Paddle's ``pir_utils.OldIrGuard``: the legacy IR inside; refimpl's only IR, so nothing to switch."""


class DygraphOldIrGuard(_Guard):
    """Paddle's ``pir_utils.DygraphOldIrGuard``: a no-op here, as ``OldIrGuard``."""


class IrGuard(_Guard):
    """Paddle's ``pir_utils.IrGuard``: PIR inside; raises Unimplemented when entered."""

    def __enter__(self) -> None:
        raise Unimplemented(f"paddle.pir_utils.{type(self).__name__}: refimpl implements the legacy ProgramDesc "
                            "IR only; there is no PIR to switch to (drop the guard to build the legacy program)")


class DygraphPirGuard(IrGuard):
    """Paddle's ``pir_utils.DygraphPirGuard``: raises Unimplemented when entered, as ``IrGuard``."""
