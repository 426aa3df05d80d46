"""``paddle.nn.functional`` in static mode: one module per family, as in ``paddle/nn/functional/``.

Each submodule lists its public names in ``__all__``; this package re-exports them all.
"""
from .activation import *  # noqa: F401,F403
from .bilinear import *  # noqa: F401,F403
from .common import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .input import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
