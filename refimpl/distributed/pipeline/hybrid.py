"""Where a rank sits in tensor x pipeline x data parallelism, and the rings that follows.

Mirrors the rank layout of Paddle 3.3.1's hybrid parallelism: fleet's
``CommunicateTopology`` (``paddle/distributed/fleet/base/topology.py``, axes
data, pipe, sharding, sep, model, the last varying fastest) and, for the
legacy static graph, ``ShardingOptimizer._build_groups``
(``paddle/distributed/fleet/meta_optimizers/sharding_optimizer.py``: "mp
--> sharding --> pp --> dp", so that with sharding degree 1 a rank is
``dp_rank * pp * mp + stage * mp + mp_rank``). Both give the same groups:

* a *pipe* group per (dp rank, mp rank): the ``pp`` stages of one pipeline;
* a *model* group per (dp rank, stage): the ``mp`` neighbours that hold the
  shards of one stage's tensor-parallel layers (the program's ring 0);
* a *data* group per (stage, mp rank): the replicas of one shard, over which
  the pipeline's optimizer job averages the accumulated gradients.

:class:`HybridLayout` holds them (read from fleet's ``HybridCommunicateGroup``
when there is one, else computed), :meth:`HybridLayout.bind_model_ring` binds
the program's ring 0 to this rank's model group (as
``TensorParallelOptimizer`` does through ``program_rings.bind_rings``), and
:func:`broadcast_stage_params` writes the startup broadcasts that make the
replicas start alike.

Differences from Paddle: Paddle's legacy ``PipelineOptimizer`` hard-codes
``mp_degree = 1`` (its tensor x pipeline path is ShardingOptimizer's hybrid
mode); refimpl's pipeline runs stage programs holding tensor-parallel ops for
either. The ring ids are refimpl's world-wide group ids, not Paddle's
per-process ring numbers (0 model, 2 data, 20+ pipeline pairs).
"""
from __future__ import annotations

from typing import Any, Iterable, List, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole

__all__ = ["HybridLayout", "broadcast_stage_params", "MODEL_RING"]

MODEL_RING = 0  # the ring the tensor-parallel ops name (mp_ops: a group of None is ring 0)


class HybridLayout:
    """The pipe, model and data groups of ``world = dp x pp x mp`` ranks, and this rank's place in them.

    ``pipes[i]``: the ranks of pipeline ``i`` in stage order (Paddle's
    ``get_comm_list("pipe")`` order: dp rank major, mp rank minor);
    ``pipe_index``: the pipeline this rank is in; ``stage``, ``dp_rank``,
    ``mp_rank``: its coordinates; ``model_groups`` / ``data_groups``: all
    groups of those axes; ``dp_ring`` / ``mp_ring``: this rank's group ids of
    them when the world already holds those groups (fleet's hybrid group),
    else None (see :meth:`create_data_rings`).
    """

    def __init__(self, rank: int, dp: int, pp: int, mp: int = 1) -> None:
        for name, value in (("dp_degree", dp), ("pp_degree", pp), ("mp_degree", mp)):
            if int(value) < 1:
                raise InvalidArgument(f"hybrid layout: {name} must be >= 1, got {value}")
        self.dp, self.pp, self.mp, self.rank = int(dp), int(pp), int(mp), int(rank)
        self.world = self.dp * self.pp * self.mp
        if not 0 <= self.rank < self.world:
            raise InvalidArgument(f"hybrid layout: rank {rank} is outside dp_degree ({dp}) x pp_degree ({pp}) x "
                                  f"mp_degree ({mp}) = {self.world} ranks")
        self.dp_rank, rest = divmod(self.rank, self.pp * self.mp)
        self.stage, self.mp_rank = divmod(rest, self.mp)
        self.pipes = [[self.rank_of(d, s, m) for s in range(pp)] for d in range(dp) for m in range(mp)]
        self.model_groups = [[self.rank_of(d, s, m) for m in range(mp)] for d in range(dp) for s in range(pp)]
        self.data_groups = [[self.rank_of(d, s, m) for d in range(dp)] for s in range(pp) for m in range(mp)]
        self.pipe_index = self.dp_rank * self.mp + self.mp_rank
        self.dp_ring: Optional[int] = None
        self.mp_ring: Optional[int] = None

    def rank_of(self, dp_rank: int, stage: int, mp_rank: int) -> int:
        return (dp_rank * self.pp + stage) * self.mp + mp_rank

    @classmethod
    def from_hcg(cls, hcg: Any) -> "HybridLayout":
        """The layout of fleet's ``HybridCommunicateGroup`` (its groups and ring ids); sharding / sep must be 1."""
        topo = hcg.topology()
        for axis in ("sharding", "sep"):
            if axis in topo.get_hybrid_group_names() and topo.get_dim(axis) > 1:
                raise InvalidArgument(f"pipeline: hybrid_configs {axis}_degree = {topo.get_dim(axis)} is not "
                                      f"supported with the pipeline (only dp x pp x mp)")
        layout = cls(hcg.get_global_rank(), hcg.get_data_parallel_world_size(),
                     hcg.get_pipe_parallel_world_size(), hcg.get_model_parallel_world_size())
        got = {"pipe": layout.pipes, "data": layout.data_groups, "model": layout.model_groups}
        for axis, mine in got.items():   # the formula and fleet's topology must agree (axis order)
            if sorted(sorted(g) for g in topo.get_comm_list(axis)) != sorted(sorted(g) for g in mine):
                raise InvalidArgument(f"pipeline: hybrid_parallel_order {topo.get_hybrid_group_names()} gives "
                                      f"{axis} groups {topo.get_comm_list(axis)}; the pipeline needs Paddle's "
                                      f"order (dp, pp, sharding, sep, mp), i.e. {mine}")
        layout.dp_ring = hcg.get_data_parallel_group().id if layout.dp > 1 else None
        layout.mp_ring = hcg.get_model_parallel_group().id if layout.mp > 1 else None
        return layout

    def can_host(self) -> bool:
        """Whether this rank's world has the ranks the layout names (not so for a lone process building one
        trainer's program among several, as Paddle's unit tests do: the rings are then left out)."""
        return context.current().world_size >= self.world

    def create_data_rings(self, base: int) -> None:
        """Without fleet's groups: data group ``i`` (of :attr:`data_groups`) as ring ``base - 1 - i``, on every
        rank in the same order; :attr:`dp_ring` becomes this rank's."""
        if self.dp == 1 or self.dp_ring is not None:
            return
        from refimpl.distributed.fleet.meta_optimizers.pipeline_optimizer import claim_ring
        for i, ranks in enumerate(self.data_groups):
            if self.can_host():   # a ring id left by another layout is bound to a fresh group (claim_ring)
                claim_ring(base - 1 - i, ranks)
        self.dp_ring = base - 1 - (self.stage * self.mp + self.mp_rank)

    def bind_model_ring(self) -> bool:
        """Bind the program's ring 0 (the tensor-parallel ops') to this rank's model group.

        Uses fleet's model group when the layout came from it; else creates the
        model groups (every rank, same order) with ``program_rings.bind_rings``.
        False when ``mp == 1`` or the world cannot host the layout.
        """
        if self.mp == 1 or not self.can_host():
            return False
        if self.mp_ring is not None:
            context.current().bind_ring(MODEL_RING, self.mp_ring)
            return True
        from refimpl.distributed.fleet.meta_optimizers.program_rings import bind_rings
        return bind_rings([(MODEL_RING, self.model_groups)])

    def __repr__(self) -> str:
        return (f"HybridLayout(rank={self.rank}, dp={self.dp}, pp={self.pp}, mp={self.mp}, stage={self.stage}, "
                f"dp_rank={self.dp_rank}, mp_rank={self.mp_rank})")


def broadcast_stage_params(startup: Any, params: Iterable[str], ring_id: int, skip_distributed: bool) -> List[str]:
    """Append to ``startup`` a ``broadcast`` from root 0 over ``ring_id`` of each of ``params`` (this stage's),
    then a ``c_sync_comm_stream`` -- Paddle's ``_broadcast_params`` of its pipeline and tensor-parallel
    meta-optimizers. With ``skip_distributed``, parameters whose startup variable is marked ``is_distributed``
    (``paddle.distributed.split``'s shards) keep each rank's own draw. Returns the names broadcast."""
    block = startup.global_block()
    done = []
    for name in params:
        var = block.vars.get(name)
        if var is None or (skip_distributed and getattr(var, "is_distributed", False)):
            continue
        block.append_op(type="broadcast", inputs={"x": [name]}, outputs={"out": [name]},
                        attrs={"ring_id": ring_id, "root": 0, OP_ROLE_ATTR: OpRole.Forward})
        done.append(name)
    if done:
        block.append_op(type="c_sync_comm_stream", inputs={"X": [done[-1]]}, outputs={"Out": [done[-1]]},
                        attrs={"ring_id": ring_id, OP_ROLE_ATTR: OpRole.Forward})
    return done
