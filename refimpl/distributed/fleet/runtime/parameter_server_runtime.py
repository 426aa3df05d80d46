"""``ParameterServerRuntime``: the parameter-server runtime's name and its optimizer-state table.

Mirrors the part of Paddle 3.3.1's ``fleet/runtime/parameter_server_runtime.py``
that scripts and tests reach without servers: ``_get_optimizer_status(op,
param)``, the names of a parameter's optimizer accumulators that are sliced
with the parameter (``param_moment1_0`` ...) and those that are kept whole
(``param_beta1_pow_acc_0`` ...). Difference: the running runtime of a
refimpl parameter-server job is ``refimpl.distributed.ps.PSRuntime``, which
``fleet.init_worker`` / ``run_server`` drive; the hooks here do nothing.
"""
from __future__ import annotations

from typing import List, Tuple

from refimpl.core.errors import InvalidArgument

from .runtime_base import RuntimeBase

#: optimizer -> accumulators shaped like the parameter (split with it across servers)
RESHAPED = {"sgd": [], "adam": ["moment1_0", "moment2_0"], "adagrad": ["moment_0"],
            "adamax": ["moment_0", "inf_norm_0"], "momentum": ["velocity_0"], "lars_momentum": ["velocity_0"],
            "rmsprop": ["momentum_0", "mean_square_0", "mean_grad_0"], "decayed_adagrad": ["moment_0"],
            "ftrl": ["squared_0", "linear_0"]}
#: optimizer -> accumulators of their own shape (kept whole)
ORIGIN_SHAPED = {"adam": ["beta1_pow_acc_0", "beta2_pow_acc_0"], "adamax": ["beta1_pow_acc_0"]}


class ParameterServerRuntime(RuntimeBase):
    """The parameter-server runtime (see the module docstring)."""

    def _get_optimizer_status(self, op: str, param_name: str) -> Tuple[List[str], List[str]]:
        """``(reshaped_names, origin_names)`` of ``param_name``'s accumulators under optimizer ``op``."""
        if op not in RESHAPED:
            raise InvalidArgument(f"fleet can not support optimizer: {op}, only this can be supported: "
                                  f"{list(RESHAPED)}")
        return ([f"{param_name}_{v}" for v in RESHAPED[op]],
                [f"{param_name}_{v}" for v in ORIGIN_SHAPED.get(op, [])])


__all__ = ["ParameterServerRuntime", "RESHAPED", "ORIGIN_SHAPED"]
