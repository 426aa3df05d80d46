"""The groups and ring ids of static sharding: ``ShardingOptimizer._build_groups``.

Mirrors ``_build_groups`` / ``_init_comm`` of
``paddle/distributed/fleet/meta_optimizers/sharding_optimizer.py`` (Paddle
3.3.1). The ring ids are fixed: model parallel 0, sharding 1, pure data
parallel 2, global 3 (used by nothing this slice writes), pipeline 4 (the
pipe: this rank's stage peers) and its stage pairs from 20; a parallelism that
is off gets -1. The rank layout nests
mp -> sharding -> pp -> dp: a rank's sharding rank is ``(rank // mp) %
sharding``, its dp rank ``rank // (sharding * mp * pp)``, and its sharding
group the ``sharding`` ranks ``mp`` apart, its dp group the ``dp`` ranks
``sharding * mp * pp`` apart.

refimpl addition: :meth:`ShardingGroups.world_rings` lists, for
``program_rings.bind_rings``, every group of every ring this program names,
so that each rank's ring 1 / ring 2 is bound to its world-wide group.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument

from ..program_rings import partition

MP_RING_ID, SHARDING_RING_ID, DP_RING_ID, GLOBAL_RING_ID, PP_RING_ID = 0, 1, 2, 3, 4
#: the first ring of the pipeline's stage pairs (``_pipeline_opt['ring_id']``; one ring per pair from here)
PP_PAIR_RING_BASE = 20


@dataclass
class ShardingGroups:
    """This rank's place in the mp x sharding x pp x dp layout (Paddle's ``_build_groups`` fields)."""
    global_rank: int
    global_endpoints: List[str]
    mp_degree: int
    sharding_degree: int
    pp_degree: int
    dp_degree: int
    current_endpoint: str = ""
    mp_ring_id: int = -1
    mp_rank: int = -1
    mp_group_id: int = -1
    mp_group_endpoints: List[str] = field(default_factory=list)
    sharding_ring_id: int = -1
    sharding_rank: int = -1
    sharding_group_id: int = -1
    sharding_group_endpoints: List[str] = field(default_factory=list)
    pp_ring_id: int = -1
    pp_pair_ring_id: int = -1
    pp_rank: int = -1
    pp_group_id: int = -1
    pp_group_endpoints: List[str] = field(default_factory=list)
    dp_ring_id: int = -1
    dp_rank: int = -1
    dp_group_endpoints: List[str] = field(default_factory=list)
    global_ring_id: int = GLOBAL_RING_ID

    @property
    def world_size(self) -> int:
        return len(self.global_endpoints)

    def build(self) -> "ShardingGroups":
        """Fill the ranks, ids and endpoints (Paddle's ``_build_groups``; checks as Paddle asserts)."""
        n, r, eps = self.world_size, self.global_rank, self.global_endpoints
        self.current_endpoint = eps[r]
        for name in ("mp_degree", "sharding_degree", "pp_degree", "dp_degree"):
            if n % getattr(self, name):
                raise InvalidArgument(f"sharding_configs['{name}'] = {getattr(self, name)}: the world size {n} "
                                      "should be divisible by it")
        mp, sh = self.mp_degree, self.sharding_degree
        if mp > 1:
            self.mp_ring_id, self.mp_rank, self.mp_group_id = MP_RING_ID, r % mp, r // mp
            self.mp_group_endpoints = [e for i, e in enumerate(eps) if i // mp == self.mp_group_id]
        if sh > 1:
            self.sharding_ring_id = SHARDING_RING_ID
            self.sharding_rank = (r // mp) % sh
            self.sharding_group_id = r // (mp * sh)
            self.sharding_group_endpoints = [e for i, e in enumerate(eps) if i // (mp * sh) == self.sharding_group_id
                                             and (mp == 1 or i % mp == self.mp_rank)]
        if self.pp_degree > 1:
            pp = self.pp_degree
            self.pp_ring_id, self.pp_pair_ring_id = PP_RING_ID, PP_PAIR_RING_BASE
            self.pp_rank, self.pp_group_id = r // (sh * mp) % pp, r // (mp * sh * pp)
            first = r % (sh * mp) + self.pp_group_id * (mp * sh * pp)
            self.pp_group_endpoints = [eps[first + sh * mp * i] for i in range(pp)]
        if self.dp_degree > 1:
            inner = sh * mp * self.pp_degree
            self.dp_ring_id, self.dp_rank = DP_RING_ID, r // inner
            self.dp_group_endpoints = [eps[r % inner + inner * i] for i in range(self.dp_degree)]
        return self

    def world_rings(self, pipeline_pair: Sequence[Tuple[int, int]] = (),
                    pp_ring_map: Optional[Dict[int, int]] = None) -> List[Tuple[int, Sequence[Sequence[int]]]]:
        """Every group of the rings the program names, for ``bind_rings`` (the same list on every rank).

        With a pipeline: its ring 4 (the pipes, ``pp`` ranks ``sharding * mp`` apart) and, for each
        stage pair ``(a, b)`` of the legacy ``PipelineOptimizer`` (``pipeline_pair``, its ring in
        ``pp_ring_map[a * 1000 + b]``), the two ranks of every pipe at stages ``a`` and ``b`` in that
        order (Paddle's ``_init_pair_comm``: stage ``a`` is the pair ring's rank 0)."""
        n, mp, sh, pp = self.world_size, self.mp_degree, self.sharding_degree, self.pp_degree
        rings: List[Tuple[int, Sequence[Sequence[int]]]] = []
        if mp > 1:
            rings.append((MP_RING_ID, partition(n, mp, 1)))
        if sh > 1:
            rings.append((SHARDING_RING_ID, partition(n, sh, mp)))
        if pp > 1:
            pipes = partition(n, pp, sh * mp)
            rings.append((PP_RING_ID, pipes))
            for a, b in pipeline_pair:
                ring = (pp_ring_map or {}).get(a * 1000 + b)
                if ring is None:
                    raise InvalidArgument(f"pipeline pair {(a, b)}: no ring in pp_ring_map {pp_ring_map}")
                rings.append((ring, [[pipe[a], pipe[b]] for pipe in pipes]))
        if self.dp_degree > 1:
            rings.append((DP_RING_ID, partition(n, self.dp_degree, sh * mp * pp)))
        return rings


__all__ = ["ShardingGroups", "PP_PAIR_RING_BASE", "MP_RING_ID", "SHARDING_RING_ID", "DP_RING_ID", "GLOBAL_RING_ID", "PP_RING_ID"]
