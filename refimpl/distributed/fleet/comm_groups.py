"""The communicate groups of static-graph collective training (fleet.init's 'global' / 'model' rings).

Mirrors ``_CommunicateGroup`` of ``paddle/distributed/fleet/base/topology.py``
and the static branch of ``Fleet.init`` in ``paddle/distributed/fleet/fleet.py``
(Paddle 3.3.1) that fills it: a table of group name -> ``Group`` (rank,
ring id, ranks). The groups only describe rings for the ops the
meta-optimizers write; they create no communicator. Split out of
refimpl's ``fleet.py`` to keep that module small.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from .base.compat_errors import InvalidArgumentAssertion, PreconditionAssertion


class _CommunicateGroup:
    """Paddle's static-mode group table: name -> ``Group`` of a ring id.

    refimpl's addition: ``strategy``, the ``DistributedStrategy`` the table was made from (None when
    filled by hand), which the tensor-parallel layers read their ``mp_configs`` from and which names
    the options to set when there is no ``'model'`` group."""

    def __init__(self, strategy: Optional[Any] = None) -> None:
        self.groups: Dict[str, Any] = {}
        self.strategy = strategy

    def set_comm_group(self, group_name: str, group_rank: int, group_size: int, ring_id: int,
                       group_ranks: List[int]) -> None:
        """Record group ``group_name``: this rank's index in it, its size, ring id and member ranks."""
        from refimpl.distributed.collective import Group
        self.groups[group_name] = Group(group_rank, ring_id, group_ranks)

    def get_group(self, group_name: str) -> Any:
        """The ``Group`` named ``group_name`` (a typed assertion error naming the known ones if absent)."""
        if group_name not in self.groups:
            raise PreconditionAssertion(f"no '{group_name}' group; the groups are {sorted(self.groups)}")
        return self.groups[group_name]

    def has_group(self, group_name: str) -> bool:
        return group_name in self.groups

    def get_model_parallel_group(self) -> Any:
        """The ``'model'`` group; when absent, a typed error naming the options that make one."""
        if "model" not in self.groups and self.strategy is not None:
            s = self.strategy
            raise PreconditionAssertion(
                "no model-parallel group on this rank: set strategy.tensor_parallel = True with "
                "tensor_parallel_configs['tensor_parallel_degree'] > 1 (or strategy.sharding with "
                f"sharding_configs['mp_degree'] > 1) before fleet.init; got tensor_parallel={s.tensor_parallel}, "
                f"tensor_parallel_degree={s.tensor_parallel_configs['tensor_parallel_degree']}, "
                f"sharding={s.sharding}")
        return self.get_group("model")

    def get_model_parallel_world_size(self) -> int:
        return int(self.get_group("model").nranks)

    def get_model_parallel_rank(self) -> int:
        return int(self.get_group("model").rank)


def static_comm_groups(strategy: Any, rank: int, size: int) -> _CommunicateGroup:
    """The groups of ``size`` workers as seen by ``rank``: 'global' always (ring 3 under sharding, else
    0), and 'model' when sharding or tensor parallelism asks for a model-parallel degree > 1."""
    use_sharding, use_tp = strategy.sharding, strategy.tensor_parallel
    ranks = list(range(size))
    groups = _CommunicateGroup(strategy)
    groups.set_comm_group("global", rank, size, 3 if use_sharding else 0, ranks)  # ring 3: sharding's
    if not (use_sharding or use_tp):
        return groups
    mp_sharding = int(strategy.sharding_configs["mp_degree"]) if use_sharding else 1
    mp_tp = int(strategy.tensor_parallel_configs["tensor_parallel_degree"]) if use_tp else 1
    if use_sharding and use_tp and mp_sharding != mp_tp:
        raise InvalidArgumentAssertion(f"sharding_configs['mp_degree'] ({mp_sharding}) must equal "
                                       f"tensor_parallel_configs['tensor_parallel_degree'] ({mp_tp})")
    mp_degree = mp_sharding if use_sharding else mp_tp
    if mp_degree > 1:
        if size % mp_degree != 0:
            raise InvalidArgumentAssertion(f"the {size} workers cannot be split into model-parallel "
                                           f"groups of {mp_degree}")
        group_id = rank // mp_degree
        groups.set_comm_group("model", rank % mp_degree, mp_degree, 0,
                              [r for r in ranks if r // mp_degree == group_id])
    return groups


__all__: list = []
