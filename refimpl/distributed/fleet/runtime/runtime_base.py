"""``RuntimeBase``: what a fleet runtime does around training (Paddle: ``fleet/runtime/runtime_base.py``).

Mirrors Paddle 3.3.1: every hook (``_run_worker``, ``_init_server``,
``_run_server``, ``_stop_worker``, ``_save_inference_model``,
``_save_persistables``) does nothing; ``_set_basic_info(context)`` keeps
the fleet context. Subclasses say what their mode does.
"""
from __future__ import annotations

from typing import Any, Dict


class RuntimeBase:
    """A runtime whose hooks do nothing."""

    def __init__(self) -> None:
        self.context: Dict[str, Any] = {}

    def _set_basic_info(self, context: Dict[str, Any]) -> None:
        self.context = context

    def _run_worker(self) -> None:
        pass

    def _init_server(self, *args: Any, **kwargs: Any) -> None:
        pass

    def _run_server(self) -> None:
        pass

    def _stop_worker(self) -> None:
        pass

    def _save_inference_model(self, *args: Any, **kwargs: Any) -> None:
        pass

    def _save_persistables(self, *args: Any, **kwargs: Any) -> None:
        pass


__all__ = ["RuntimeBase"]
