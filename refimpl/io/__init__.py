"""Feeding data the static-graph way (Paddle's ``paddle.io`` / ``paddle.base.reader``).

``DataLoader.from_generator`` (``dataloader.py``) pushes batches from a
Python generator through a bounded multi-device blocking queue
(``blocking_queue.py``) that the ``read`` op (``ops/reader_ops.py``) pops.
``EOFException`` is Paddle's ``paddle.base.core.EOFException``: defined in
``refimpl.core.errors`` (so ``refimpl.core.EOFException``), re-exported here.
"""
from .blocking_queue import BlockingQueue, EOFException
from .dataloader import DataLoader, GeneratorLoader
from refimpl.framework import namespace_getattr

__all__ = ["DataLoader", "GeneratorLoader", "BlockingQueue", "EOFException"]

__getattr__ = namespace_getattr(__name__)   # a paddle.io name refimpl lacks: Unimplemented naming it
