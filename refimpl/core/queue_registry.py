"""Data loaders' blocking queues by name, for the ``create_py_reader`` op.

Mirrors how Paddle's ``create_py_reader`` op finds its queue: the scope
variable named in its ``blocking_queue`` input holds a
``LoDTensorBlockingQueueHolder`` (``paddle/fluid/operators/reader/
lod_tensor_blocking_queue.h``). refimpl keeps that, and also registers each
queue here by the same name (``refimpl.io.blocking_queue`` fills it), so a
program run in a scope the loader never saw (a pipeline rank's fresh scope)
still reaches its queue; Paddle looks only in the scope. The registry holds
weak references: a queue lives as long as its loader.
"""
import weakref
from typing import Any, Optional

_QUEUES: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()


def register(name: str, queue: Any) -> None:
    """Make ``queue`` findable as ``name`` while something else keeps it alive."""
    _QUEUES[name] = queue


def lookup(name: str) -> Optional[Any]:
    """The queue registered under ``name`` (None if there is none)."""
    return _QUEUES.get(name)
