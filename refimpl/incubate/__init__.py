"""``paddle.incubate``."""
from . import optimizer
