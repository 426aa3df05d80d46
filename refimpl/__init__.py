"""refimpl: a readable re-implementation of PaddlePaddle's static-graph runtime.

``import refimpl as paddle`` gives the legacy static API shape:
``paddle.static.Program``, ``paddle.static.nn.fc``, ``paddle.optimizer.SGD``,
``paddle.static.Executor`` ... See README.md for the map of modules.
"""
from . import core, flags as _flags_mod, ops  # noqa: F401  (ops registers every op)
from .core import CPUPlace, CUDAPlace
from .core.dtypes import convert_dtype
from .flags import get_flags, set_flags
from .executor.backend import get_backend, set_backend
from . import framework, executor, static, tensor, nn, optimizer, incubate, utils
from . import io  # noqa: F401  (DataLoader.from_generator)
from .framework import unique_name
from .tensor import *  # noqa: F401,F403  (paddle.add, paddle.where ...: every name of refimpl.tensor's __all__)
from .static.layer_helper import ParamAttr
from . import regularizer  # noqa: F401

__version__ = "0.1.0"

float32, float64, int32, int64, bool_ = "float32", "float64", "int32", "int64", "bool"
float16 = "float16"


def seed(n):
    """Make the random initialisers deterministic (``uniform_random`` etc.)."""
    from .core import random as _random
    _random.seed(n)


def enable_static():
    """Static mode is the only mode; kept for API compatibility."""


def disable_static():
    from .core.errors import Unimplemented
    raise Unimplemented("refimpl implements the static graph only (no dygraph mode)")


def in_dynamic_mode():
    return False
