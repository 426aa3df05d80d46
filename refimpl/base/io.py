"""``paddle.base.io``: the static DataLoader.

Mirrors ``python/paddle/base/io.py``. Differences: in Paddle 3.3.1
``base.io.DataLoader`` (``base/reader.py``) is a class of its own next to
``paddle.io.DataLoader``; here both names are ``refimpl.io.DataLoader``, whose
``from_generator`` is the static loader both give.
"""
from refimpl.framework import namespace_getattr
from refimpl.io import DataLoader

from refimpl.static.io_vars import *  # noqa: F401,F403  (is_parameter, is_persistable, save_vars ...)
from refimpl.static import io_vars as _io_vars

__all__ = ["DataLoader"] + list(_io_vars.__all__)

__getattr__ = namespace_getattr(__name__)
