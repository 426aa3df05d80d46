"""``paddle.base.io``: the static DataLoader.

Mirrors ``python/paddle/base/io.py``. Differences: in Paddle 3.3.1
``base.io.DataLoader`` (``base/reader.py``) is a class of its own next to
``paddle.io.DataLoader``; here both names are ``refimpl.io.DataLoader``, whose
``from_generator`` is the static loader both give.
"""
from refimpl.framework import namespace_getattr
from refimpl.io import DataLoader

__all__ = ["DataLoader"]

__getattr__ = namespace_getattr(__name__)
