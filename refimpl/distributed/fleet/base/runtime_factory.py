"""The runtime-handler guard of the parameter-server methods of ``Fleet``.

Mirrors the ``inited_runtime_handler`` / ``is_non_distributed_check``
decorators of ``paddle/distributed/fleet/fleet.py`` (Paddle 3.3.1) and the
choice ``RuntimeFactory`` makes at ``minimize``: Paddle creates a runtime
handle (``CollectiveRuntime`` or ``TheOnePSRuntime``) when the program is
minimized, and ``init_worker``, ``stop_worker``, ``init_server``,
``run_server``, the save / load methods and ``shrink`` first

* do nothing, after a warning, when the fleet is non-distributed;
* raise ``ValueError`` ("Fleet can not find suitable runtime handler") when
  no handle exists yet: before ``fleet.init`` or before ``minimize``.

``RuntimeFactory._create_runtime(context)`` picks the handle as Paddle's
does; ``DistributedOptimizer.minimize`` stores it in ``fleet._runtime_handle``.
Difference: the guarded methods themselves are
``refimpl.distributed.ps.fleet_api``'s, which run refimpl's PS runtime (and
warn in collective mode, as Paddle's ``CollectiveRuntime`` does); the handle
only says that ``minimize`` has run and in which mode.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Dict

from .compat_errors import PreconditionValue

logger = logging.getLogger("refimpl.distributed.fleet")


class RuntimeFactory:
    """Paddle's ``RuntimeFactory``: the runtime for a fleet context (its ``role_maker``)."""

    def _create_runtime(self, context: Dict[str, Any]) -> Any:
        from ..runtime import CollectiveRuntime, ParameterServerRuntime
        rm = context.get("role_maker")
        runtime = CollectiveRuntime() if rm is None or rm._is_collective else ParameterServerRuntime()
        runtime._set_basic_info(context)
        return runtime


def guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` behind Paddle's two checks (non-distributed: warn and return; no runtime: ValueError)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        rm = self._role_maker
        if rm is not None and rm._is_non_distributed():
            logger.warning("%s() function doesn't work when use non_distributed fleet.", method.__name__)
            return None
        if self._runtime_handle is None:
            raise PreconditionValue(f"Fleet can not find suitable runtime handler: fleet.{method.__name__}() "
                                    f"needs fleet.init(...) and then distributed_optimizer(opt).minimize(loss)")
        return method(self, *args, **kwargs)
    return call


#: the ``Fleet`` methods Paddle puts behind both checks
GUARDED = ("init_worker", "stop_worker", "init_server", "run_server", "save_persistables", "save_inference_model",
           "load_model", "shrink")


def install(cls: type) -> type:
    """Class decorator: wrap ``cls``'s (inherited) :data:`GUARDED` methods with :func:`guarded`."""
    for name in GUARDED:
        setattr(cls, name, guarded(getattr(cls, name)))
    return cls


__all__ = ["guarded", "install", "GUARDED", "RuntimeFactory"]
