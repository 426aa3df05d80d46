"""Feeding data the static-graph way (Paddle's ``paddle.io`` / ``paddle.base.reader``).

``DataLoader.from_generator`` (``dataloader.py``) pushes batches from a
Python generator through a bounded multi-device blocking queue
(``blocking_queue.py``) that the ``read`` op (``ops/reader_ops.py``) pops.
``EOFException`` is Paddle's ``paddle.base.core.EOFException``; it is also
reachable as ``refimpl.core.EOFException``.
"""
from refimpl import core as _core

from .blocking_queue import BlockingQueue, EOFException
from .dataloader import DataLoader, GeneratorLoader

_core.EOFException = EOFException  # Paddle's spelling: paddle.base.core.EOFException

__all__ = ["DataLoader", "GeneratorLoader", "BlockingQueue", "EOFException"]
