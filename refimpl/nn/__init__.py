"""``paddle.nn`` in static mode: layers, functional forms, initializers and gradient clipping."""
from . import functional, initializer
from .functional import relu, gelu, softmax
from .clip import *  # noqa: F401,F403
from .layer import *  # noqa: F401,F403
from .layer import loss  # noqa: F401  (paddle.nn.loss is paddle.nn.layer.loss, as in Paddle)

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
