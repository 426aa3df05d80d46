"""Pausing Python's cyclic garbage collector while a program is built in bulk.

Paddle keeps programs in C++ (``paddle/fluid/framework/program_desc.h``); here
they are Python objects, and so is everything derived from them (clones,
split parts, gradient ops, prepared steps). Building those creates many
long-lived objects and almost no garbage, yet CPython's collector runs a full
collection each time the long-lived heap has grown by a quarter, walking
every live object: at 3,000 layers that is more than half of preparing a
program. :func:`paused_cyclic_gc` turns the collector off while such a step
runs and back on after it (what ``timeit`` does while timing); cyclic garbage
made meanwhile is collected by the next collection, so nothing leaks. Steps
may nest and run on several threads: the collector comes back on when the
last one ends, and only if it was on when the first one began.
"""
import functools
import gc
import threading
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False}


def _enter() -> None:
    with _lock:
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1


def _exit() -> None:
    with _lock:
        _state["depth"] -= 1
        if _state["depth"] == 0 and _state["was_enabled"]:
            gc.enable()


def paused_cyclic_gc(fn: F) -> F:
    """Decorate a bulk-building step: the cyclic collector is paused while it runs."""
    @functools.wraps(fn)
    def paused(*args: Any, **kwargs: Any) -> Any:
        _enter()
        try:
            return fn(*args, **kwargs)
        finally:
            _exit()
    return paused  # type: ignore[return-value]
