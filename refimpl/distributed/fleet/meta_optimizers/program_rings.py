"""The rings a static program names, bound to groups of this rank's world.

Paddle's ring ids are per process: ``c_comm_init(ring_id=0)`` on ranks 0,1
and on ranks 2,3 (``CollectiveHelper._init_communicator`` in
``paddle/distributed/fleet/meta_optimizers/common.py``) make two different
communicators that both answer to ring 0 in their own processes. refimpl's
worlds (in-process threads, MPI) name every group by one world-wide id, so a
meta-optimizer that writes such a program calls :func:`bind_rings` while it
builds it: every group of every ring is created on every rank, in the same
order (as ``paddle.distributed.new_group``), and the program's ring id is
bound on this rank to the group that holds it. The ``c_comm_init`` ops of
the startup program then find their ring ready, with the right size and rank.
A group keeps the order it is given (a pipeline's pair ring of stages 1 and 0
has stage 1 as its rank 0, as Paddle's ``_init_pair_comm`` numbers it).
"""
from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from refimpl.core.errors import InvalidArgument
from refimpl.distributed import collective
from refimpl.distributed.communication import context

#: one ring of a program: its ring id and the partition of the ranks into its groups
Ring = Tuple[int, Sequence[Sequence[int]]]


def bind_rings(rings: Sequence[Ring]) -> bool:
    """Create the groups of ``rings`` and bind each ring id to this rank's group of it.

    Returns False (and binds nothing) when this rank's world is smaller than the ranks the
    rings name: a lone process building the program of one trainer among several, as Paddle's
    unit tests do; running that program then fails naming the missing ring.
    """
    ctx = context.current()
    need = 1 + max((r for _, groups in rings for g in groups for r in g), default=-1)
    if ctx.world_size < need:
        return False
    for ring_id, groups in rings:
        mine = None
        for g in groups:
            gid = _new_group(ctx, [int(r) for r in g])
            if ctx.rank in g:
                if mine is not None:
                    raise InvalidArgument(f"ring {ring_id}: rank {ctx.rank} is in two of its groups {list(groups)}")
                mine = gid
        if mine is None:
            raise InvalidArgument(f"ring {ring_id}: rank {ctx.rank} is in none of its groups {list(groups)}")
        ctx.bind_ring(ring_id, mine)
    return True


def _new_group(ctx: Any, ranks: List[int]) -> int:
    """A fresh world-wide group of ``ranks``; its id. Ascending ranks go through ``collective.new_group``;
    others (a pipeline's pair ring whose rank 0 is the later stage) keep their order: ``ranks[i]`` is the
    group's rank ``i``, as the program's ``peer`` / ``rank`` attrs count."""
    if ranks == sorted(ranks):
        return collective.new_group(ranks).id
    gid = max(collective._FIRST_NEW_RING - 1, max(ctx.groups)) + 1
    ctx.add_group(gid, ranks)
    return gid


def partition(world: int, degree: int, inner: int) -> list:
    """The groups of ``degree`` ranks ``inner`` apart that tile ``range(world)``.

    ``partition(8, 2, 1)`` -> [[0, 1], [2, 3], ...] (neighbours: a model-parallel ring);
    ``partition(8, 2, 4)`` -> [[0, 4], [1, 5], ...] (a data-parallel ring over the replicas).
    """
    if degree < 1 or inner < 1 or world % (degree * inner):
        raise InvalidArgument(f"cannot tile {world} ranks with groups of {degree} ranks {inner} apart")
    groups = []
    for outer in range(world // (degree * inner)):
        for i in range(inner):
            groups.append([outer * degree * inner + i + k * inner for k in range(degree)])
    return groups


__all__ = ["bind_rings", "partition", "Ring"]
