"""Optimizers (``paddle.optimizer``): SGD, Momentum, Adam, AdamW and LR schedules."""
from . import lr
from .optimizer import Optimizer
from .sgd import SGD, Adam, AdamW, Momentum
