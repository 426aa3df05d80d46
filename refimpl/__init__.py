"""refimpl: a readable re-implementation of PaddlePaddle's static-graph runtime.

``import refimpl as paddle`` gives the legacy static API shape:
``paddle.static.Program``, ``paddle.static.nn.fc``, ``paddle.optimizer.SGD``,
``paddle.static.Executor`` ... See README.md for the map of modules.
``python -m refimpl.compat script.py`` runs an unmodified Paddle script with
``import paddle`` mapped here (``refimpl/compat.py``, docs/compat.md).

Mirrors ``python/paddle/__init__.py``: the top-level names, ``paddle.base``,
``paddle.framework``, and ``paddle.distributed`` (with ``fleet``) reachable as
an attribute. ``distributed`` sits above this package in the layering
(``tests/test_layering.py``), so it is imported at the end of this module.
A Paddle name refimpl lacks raises Unimplemented naming it (``paddle.xyz``),
never a bare AttributeError; each namespace module (``paddle.nn`` ...) ends
with the same ``__getattr__``.
"""
from . import core, flags as _flags_mod, ops  # noqa: F401  (ops registers every op)
from .core import CPUPlace, CUDAPlace
from .core.dtypes import convert_dtype
from .flags import get_flags, set_flags
from .executor.backend import get_backend, set_backend
from . import framework, executor, static, tensor, nn, optimizer, incubate, utils
from . import io  # noqa: F401  (DataLoader.from_generator)
from .framework import unique_name, in_dynamic_mode, enable_static, disable_static
from .framework import get_default_dtype, set_default_dtype  # noqa: F401  (framework/dtype_default.py)
from .framework.io import *  # noqa: F401,F403  (paddle.save, paddle.load)
from .framework.grad_mode import *  # noqa: F401,F403  (paddle.is_grad_enabled, set_grad_enabled, no_grad)
from .tensor import *  # noqa: F401,F403  (paddle.add, paddle.where ...: every name of refimpl.tensor's __all__)
from .static.layer_helper import LayerHelper, ParamAttr
from .static.input import create_parameter  # noqa: F401  (paddle.create_parameter is static's)
from . import regularizer  # noqa: F401

# paddle.framework's names that live above refimpl.framework's layer
framework.ParamAttr = ParamAttr
framework.LayerHelper = LayerHelper

from . import base  # noqa: E402  (paddle.base: re-exports of the modules above)
from .base import is_compiled_with_cuda  # noqa: E402

__version__ = "0.1.0"

float32, float64, int32, int64, bool_ = "float32", "float64", "int32", "int64", "bool"
float16 = "float16"


def seed(n):
    """Paddle's ``paddle.seed``: reseed this thread's CPU generator (``std::seed_seq({n})``); returns it."""
    from .core import random as _random
    return _random.seed(n)


from .core.random import get_rng_state, set_rng_state, get_cuda_rng_state, set_cuda_rng_state  # noqa: E402


# ``import paddle`` makes ``paddle.distributed`` and ``paddle.distributed.fleet`` reachable; distributed sits
# above this package in the layering (tests/test_layering.py lists this import in KNOWN_UPWARD), so it is
# imported last, once everything below is set up.
from . import distributed  # noqa: E402,F401
from .distributed.fleet.dataset import factory as _dataset_factory  # noqa: E402
# paddle.base.DatasetFactory: the legacy factory of paddle.distributed's data sets
base.DatasetFactory = _dataset_factory.DatasetFactory
del _dataset_factory

# A missing name raises Unimplemented naming it; each namespace module ends with the same line.
__getattr__ = framework.namespace_getattr(__name__)
