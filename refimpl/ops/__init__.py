"""Op definitions and NumPy kernels, all registered in ``registry.OPS``.

Importing this package registers every op. Modules are grouped by kind
(math, activation, loss, manipulation, ...), one Paddle op per function.
"""
from . import registry
from .registry import OPS, get_op_def, has_op, register_kernel, register_op
from . import math_ops  # noqa: F401  (registers ops)

import importlib as _importlib

for _m in ("activation_ops", "loss_ops", "manipulation_ops", "creation_ops", "logic_ops",
           "nn_ops", "optimizer_ops", "control_flow_ops"):
    try:
        _importlib.import_module(f"{__name__}.{_m}")
    except ModuleNotFoundError as _e:  # modules land one by one while the project grows
        if _e.name != f"{__name__}.{_m}":
            raise
