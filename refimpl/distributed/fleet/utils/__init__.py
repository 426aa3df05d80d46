"""``paddle.distributed.fleet.utils``: helpers around fleet jobs.

Mirrors the package of Paddle 3.3.1 as far as static scripts use it:
``LocalFS`` / ``HDFSClient`` (``fs``) and the fleet logger's level
(``log_util``, re-exported as ``fleet.set_log_level``). Difference:
``recompute`` and ``DistributedInfer`` (dygraph / parameter-server inference
helpers) are not provided.
"""
from . import log_util  # noqa: F401
from .fs import *  # noqa: F401,F403
from .fs import __all__ as _fs_all

__all__ = list(_fs_all)
