"""Do ``sharding_configs`` and ``hybrid_configs`` name the same mp / pp degrees?

refimpl's addition; no Paddle file mirrors it. Paddle 3.3.1's static
``ShardingOptimizer`` (``paddle/distributed/fleet/meta_optimizers/sharding_optimizer.py``,
``_get_hybrid_degree``) reads its degrees from ``sharding_configs`` only, while
``fleet.init`` builds its topology (``HybridCommunicateGroup``) from
``hybrid_configs``: a job giving both with different values trains with one
layout while fleet's topology reports another. :func:`check_hybrid_degrees`
rejects that before anything is built, the same on every rank.

Rule: for ``mp_degree`` and ``pp_degree``, a ``hybrid_configs`` value above 1
(its default is 1: "not given") must equal the ``sharding_configs`` value.
"""
from __future__ import annotations

from typing import Any, Mapping

from ...base.compat_errors import InvalidArgumentAssertion

__all__ = ["check_hybrid_degrees", "CHECKED_DEGREES"]

#: the degrees both config groups carry; sharding_configs' one is what the sharding optimizer uses
CHECKED_DEGREES = ("mp_degree", "pp_degree")


def _degree(configs: Mapping[str, Any], key: str) -> int:
    value = configs.get(key, 1)
    return 1 if value in (None, -1, 0) else int(value)


def check_hybrid_degrees(sharding_configs: Mapping[str, Any], hybrid_configs: Mapping[str, Any]) -> None:
    """InvalidArgument (also an AssertionError) naming both options and values when they disagree."""
    for key in CHECKED_DEGREES:
        hybrid, sharding = _degree(hybrid_configs, key), _degree(sharding_configs, key)
        if hybrid > 1 and hybrid != sharding:
            raise InvalidArgumentAssertion(
                f"sharding_configs['{key}'] ({sharding}) and hybrid_configs['{key}'] ({hybrid}) must be equal: "
                f"the sharding optimizer would train with {sharding} while fleet's topology says {hybrid}")
