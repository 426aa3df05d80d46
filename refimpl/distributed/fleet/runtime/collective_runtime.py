"""``CollectiveRuntime``: the runtime of collective training (Paddle: ``fleet/runtime/collective_runtime.py``).

Mirrors Paddle 3.3.1: collective jobs have no servers, so the worker and
server hooks only warn that they should not be called. Difference: the
warnings go to the ``refimpl.distributed.fleet`` logger (Paddle: the root
logger).
"""
from __future__ import annotations

import logging
from typing import Any

from .runtime_base import RuntimeBase

logger = logging.getLogger("refimpl.distributed.fleet")


def _not_for_collective(name):
    logger.warning("You should not call '%s' method for collective mode.", name)


class CollectiveRuntime(RuntimeBase):
    """The hooks of a collective job: each warns and does nothing."""

    def _init_worker(self, *args: Any) -> None:
        _not_for_collective("init_worker")

    def _run_worker(self) -> None:
        _not_for_collective("run_worker")

    def _init_server(self, *args: Any, **kwargs: Any) -> None:
        _not_for_collective("init_server")

    def _run_server(self) -> None:
        _not_for_collective("run_server")

    def _stop_worker(self) -> None:
        _not_for_collective("stop_worker")


__all__ = ["CollectiveRuntime"]
