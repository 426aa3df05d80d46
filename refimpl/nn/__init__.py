"""``paddle.nn`` in static mode: layers, functional forms, initializers and gradient clipping."""
from . import functional, initializer
from .functional import relu, gelu, softmax
from .clip import *  # noqa: F401,F403
from .layer import *  # noqa: F401,F403
