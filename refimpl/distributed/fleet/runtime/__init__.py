"""``paddle.distributed.fleet.runtime``: what each training mode does around the training loop.

Mirrors the package of Paddle 3.3.1: ``runtime_base.RuntimeBase``,
``CollectiveRuntime`` and ``ParameterServerRuntime``; ``fleet.minimize``
stores one of them as ``fleet._runtime_handle`` (``base.runtime_factory``).
Difference: ``TheOnePSRuntime`` is not provided (refimpl's parameter-server
runtime is ``refimpl.distributed.ps.PSRuntime``).
"""
from . import runtime_base  # noqa: F401
from .collective_runtime import CollectiveRuntime
from .parameter_server_runtime import ParameterServerRuntime
from .runtime_base import RuntimeBase

__all__ = ["RuntimeBase", "CollectiveRuntime", "ParameterServerRuntime"]
