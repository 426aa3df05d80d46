"""``paddle.distributed.fleet.dataset``: the data sets ``Executor.train_from_dataset`` reads.

``dataset.py`` holds ``InMemoryDataset`` / ``QueueDataset`` (also
``paddle.distributed.InMemoryDataset`` ...), ``multi_slot.py`` the text
format they read, ``factory.py`` the 1.x ``paddle.base.DatasetFactory``.
Paddle's ``FileInstantDataset``, ``BoxPSDataset`` and ``TreeIndex`` are not
implemented: asking for them is ``Unimplemented`` naming them.
"""
from refimpl.framework import namespace_getattr

from .dataset import DatasetBase, InMemoryDataset, QueueDataset

__all__ = ["DatasetBase", "InMemoryDataset", "QueueDataset"]

__getattr__ = namespace_getattr(__name__)
