"""The rank context: which rank the running code is, and its communicators.

Mirrors Paddle's parallel environment (``ParallelEnv``: rank and world size)
together with its registry of communicators by ring id
(``CommContextManager``), which collective op kernels consult at run time.
The holder of the current context lives below the kernels, in
``refimpl.core.comm_context`` (:func:`current` looks at the calling thread,
then the process, then a single-rank default); this module defines the
:class:`RankContext` put there, installs the single-rank default, and
re-exports the holder's functions under their old names.

Because kernels look the context up when they run, the executor needs no
knowledge of ranks at all.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, TYPE_CHECKING

from refimpl.core import comm_context
from refimpl.core.comm_context import (has_thread_context, rank_guard, record,  # noqa: F401
                                       set_comm_trace, set_current, set_process_context)
from refimpl.core.errors import AlreadyExists, NotFound

if TYPE_CHECKING:
    from .communicator import Communicator


if TYPE_CHECKING:  # the core function itself at run time; typed here as returning the full RankContext
    def current() -> RankContext: ...
else:
    from refimpl.core.comm_context import current  # noqa: F401


_default_ctx = None
_lock = threading.Lock()


class RankContext:
    """One rank: ``rank``, ``world_size``, the ``world`` it belongs to and its communicators.

    ``world`` is an ``InProcessWorld`` or an ``MPIWorld``; it makes the
    communicator of each group (``world.new_communicator(ring_id, ranks,
    rank)``). ``trace`` is an optional event trace for send/recv records
    outside an executor run (see :func:`set_comm_trace`); ``ps_runtime``
    is the rank's parameter-server runtime once a PS job made one.
    """

    ps_runtime = None

    def __init__(self, rank: int, world_size: int, world: Any) -> None:
        self.rank, self.world_size, self.world = rank, world_size, world
        self.backend = world.backend
        self.comms = {}      # ring_id -> Communicator (only groups this rank belongs to)
        self.groups = {}     # ring_id -> ranks, for every group created (member or not)
        self.trace = None
        self.add_group(0, range(world_size))
        self.world_comm = self.comms.get(0)  # ring 0 as made: the world, whatever a program binds ring 0 to

    def add_group(self, ring_id: int, ranks: Sequence[int]) -> Optional[Communicator]:
        """Create the communicator of group ``ring_id`` (None if this rank is not in ``ranks``)."""
        ranks = tuple(ranks)
        if ring_id in self.groups:
            raise AlreadyExists(f"rank {self.rank}: ring_id {ring_id} already names the group {list(self.groups[ring_id])}")
        self.groups[ring_id] = ranks
        comm = self.world.new_communicator(ring_id, ranks, self.rank)
        if comm is not None:
            self.comms[ring_id] = comm
        return comm

    def bind_ring(self, ring_id: int, group_ring_id: int) -> None:
        """Make ``ring_id`` answer with the group of ``group_ring_id`` on this rank.

        Paddle's ring ids are per process (ranks 0,1 and ranks 2,3 may both call their own
        model-parallel ring 0); refimpl's worlds name each group by one world-wide id, so a
        program's ring id is bound, rank by rank, to the group this rank belongs to.
        """
        self.groups[ring_id] = self.groups[group_ring_id]
        comm = self.comms.get(group_ring_id)
        if comm is None:
            self.comms.pop(ring_id, None)
        else:
            self.comms[ring_id] = comm

    def bind_world(self, ring_id: int) -> None:
        """Make ``ring_id`` answer with the communicator of the whole world again (see :meth:`bind_ring`)."""
        self.groups[ring_id] = tuple(range(self.world_size))
        self.comms[ring_id] = self.world_comm

    def snapshot_rings(self, ring_ids: Optional[Iterable[int]] = None) -> Dict[int, Tuple[tuple, Any]]:
        """What ``ring_ids`` (default: every ring) answer with now: ring id -> (ranks, communicator or None).

        A program whose ring ids another program rebinds later (:meth:`bind_ring`) keeps its own table
        this way and puts it back with :meth:`restore_rings` before it runs.
        """
        ids = list(self.groups) if ring_ids is None else list(ring_ids)
        return {i: (self.groups[i], self.comms.get(i)) for i in ids if i in self.groups}

    def restore_rings(self, snapshot: Dict[int, Tuple[tuple, Any]]) -> None:
        """Make each ring id of ``snapshot`` (from :meth:`snapshot_rings`) answer as it did then."""
        for ring_id, (ranks, comm) in snapshot.items():
            self.groups[ring_id] = ranks
            if comm is None:
                self.comms.pop(ring_id, None)
            else:
                self.comms[ring_id] = comm

    def comm(self, ring_id: int = 0) -> Communicator:
        """The communicator for ``ring_id``; NotFound (naming the rank and ring) if there is none."""
        c = self.comms.get(ring_id)
        if c is None:
            if ring_id in self.groups:
                raise NotFound(f"rank {self.rank} is not a member of ring_id {ring_id} "
                               f"(ranks {list(self.groups[ring_id])})")
            raise NotFound(f"rank {self.rank}: no communicator for ring_id {ring_id} (known rings: "
                           f"{sorted(self.comms)}); create it with new_group on every rank first")
        return c

    def __repr__(self):
        return f"RankContext(rank={self.rank}, world_size={self.world_size}, backend={self.backend!r})"


def _default():
    """The single-rank context of code that runs outside any rank (made once)."""
    global _default_ctx
    with _lock:
        if _default_ctx is None:
            from .inprocess import InProcessWorld
            _default_ctx = InProcessWorld(1).context(0)
        return _default_ctx


comm_context.set_default_factory(_default)
