"""Tensor functions of the top-level API (``paddle.mean``, ``paddle.reshape``...).

Mirrors ``paddle.tensor``'s legacy static-graph branch: each function makes a
LayerHelper named after the op (``mean_0``, ``reshape2_0``) and appends the
same op with the same attrs. ``patch.py`` adds the Python operators to
Variable, as Paddle's ``math_op_patch`` does.

Each module lists its public names in ``__all__`` and this package re-exports them all;
``refimpl/__init__.py`` re-exports them again as ``paddle.<name>``.
"""
from .attribute import *  # noqa: F401,F403
from .creation import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .logic import *  # noqa: F401,F403
from .manipulation import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403
from .search import *  # noqa: F401,F403
from .stat import *  # noqa: F401,F403
from . import attribute, creation, linalg, logic, manipulation, math, search, stat
from . import patch  # noqa: F401

__all__ = [*attribute.__all__, *creation.__all__, *linalg.__all__, *logic.__all__, *manipulation.__all__,
           *math.__all__, *search.__all__, *stat.__all__]

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
