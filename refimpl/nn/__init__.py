"""``paddle.nn`` pieces used by static programs: functional ops and initializers."""
from . import functional, initializer
from .functional import relu, gelu, softmax
