"""Optimizers (``paddle.optimizer``): SGD, Momentum, Adam, AdamW and LR schedules."""
from . import lr
from .optimizer import Optimizer
from .sgd import SGD, Adam, AdamW, Momentum
from .lamb import *  # noqa: F401,F403  (Lamb)

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
