"""Hybrid ranks: P thread ranks in each of T MPI processes (T trainers x P places).

Mirrors Paddle's data parallelism over several trainers with several places
each, where one NCCL communicator spans every device of every trainer
(``nranks = num_trainers * places`` in ``compiled_program.cc``).
Global rank = trainer id * P + place; a group's ranks are kept sorted, so
they are grouped by process.

A collective first meets the calling process's member threads as in-process
ranks; the last of them to arrive combines their parts in rank order, makes
the single MPI call of its process for that collective (over the processes
that hold members of the group), and hands every thread its share. So a sum
over 4 ranks on 2 processes is ``(x0 + x1) + (x2 + x3)``, not the in-process
``((x0 + x1) + x2) + x3``: equal within rounding, not bit for bit.
Point-to-point messages between processes go over MPI on a channel per
(source place, destination place). ``all_gather`` / ``reduce_scatter`` need
the same number of group members on each member process.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional, Sequence, TYPE_CHECKING

import numpy as np

from refimpl.core.errors import InvalidArgument, Unimplemented

from .communicator import (DEFAULT_TIMEOUT, RankFailed, ReduceOp, check_recv, check_root, exit_code_of,
                           check_scatter_shape, finish_avg, reduce_arrays, reduce_op)
from .inprocess import InProcessCommunicator, InProcessWorld, _into, run_threads

if TYPE_CHECKING:
    from .communicator import Communicator
    from .mpi import MPIWorld


class HybridWorld(InProcessWorld):
    """This process's ``places`` thread ranks of a job of ``places * MPI size`` ranks."""

    backend = "hybrid"

    def __init__(self, places: int, mpi_world: MPIWorld, timeout: Optional[float] = DEFAULT_TIMEOUT) -> None:
        super().__init__(places * mpi_world.nranks, timeout)
        self.places, self.mpi, self.trainer = places, mpi_world, mpi_world.rank
        self.outer = {}  # ring_id -> (MPI communicator of the member processes or None, their trainer ids)
        self.split_lock = threading.Lock()

    def local_ranks(self) -> Sequence[int]:
        return range(self.trainer * self.places, (self.trainer + 1) * self.places)

    def new_communicator(self, ring_id: int, ranks: Sequence[int], rank: int) -> Optional[Communicator]:
        ranks = tuple(int(r) for r in ranks)
        if list(ranks) != sorted(ranks):
            raise InvalidArgument(f"hybrid ranks: group ranks {list(ranks)} must be sorted")
        with self.split_lock:  # the first thread of each process makes the MPI communicator
            if ring_id not in self.outer:
                trainers = sorted({r // self.places for r in ranks if 0 <= r < self.nranks})
                # collective over all processes (non-members get None), as Paddle's new_group
                self.outer[ring_id] = (self.mpi.new_communicator(ring_id, trainers, self.trainer), trainers)
        return super().new_communicator(ring_id, ranks, rank)


class HybridCommunicator(InProcessCommunicator):
    """A thread rank's communicator: threads meet in-process, processes over MPI."""

    backend = "hybrid"
    world: HybridWorld

    def __init__(self, world: HybridWorld, ring_id: int, ranks: Sequence[int], global_rank: int) -> None:
        super().__init__(world, ring_id, ranks, global_rank)
        self.members = [r for r in self.ranks if r // world.places == world.trainer]
        self.outer, self.trainers = world.outer[ring_id]
        counts = {t: sum(1 for r in self.ranks if r // world.places == t) for t in self.trainers}
        self.even = len(set(counts.values())) == 1

    def _local(self):
        return len(self.members), self.members.index(self.global_rank), self.members

    def _across(self, call):
        """``call(MPI communicator)``: the process's one MPI call; a mismatch names the trainer."""
        try:
            return call(self.outer)
        except InvalidArgument as exc:
            raise InvalidArgument(f"between trainers: {exc.args[0]}") from None

    def _reduce_all(self, xs, op):
        base = ReduceOp.SUM if op == ReduceOp.AVG else op
        local = reduce_arrays(xs, base)
        total = self._across(lambda c: c.all_reduce(local, base))
        return finish_avg(total, self.nranks) if op == ReduceOp.AVG else total

    def all_reduce(self, x: np.ndarray, op: int = ReduceOp.SUM,
                   out: Optional[np.ndarray] = None) -> np.ndarray:
        op, x = reduce_op(op), np.asarray(x)
        return _into(out, self._collective("all_reduce", (op,), x, lambda xs: self._fanout(self._reduce_all(xs, op))))

    def broadcast(self, x: np.ndarray, root: int = 0, out: Optional[np.ndarray] = None) -> np.ndarray:
        check_root(root, self.nranks, self.where("broadcast"))
        x, g = np.asarray(x), self.ranks[root]
        owner = g // self.world.places

        def combine(xs):
            val = xs[self.members.index(g)] if owner == self.world.trainer else np.empty_like(xs[0])
            return self._fanout(self._across(lambda c: c.broadcast(val, self.trainers.index(owner))))
        return _into(out, self._collective("broadcast", (root,), x, combine))

    def reduce(self, x: np.ndarray, root: int = 0, op: int = ReduceOp.SUM,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        check_root(root, self.nranks, self.where("reduce"))
        op, x, g = reduce_op(op), np.asarray(x), self.ranks[root]

        def combine(xs):
            total = self._reduce_all(xs, op)
            return [total if r == g else xs[i] for i, r in enumerate(self.members)]
        return _into(out, self._collective("reduce", (root, op), x, combine))

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        self._need_even("all_gather")
        x = np.asarray(x)
        join = np.stack if x.ndim == 0 else np.concatenate
        return self._collective("all_gather", (), x,
                                lambda xs: self._fanout(self._across(lambda c: c.all_gather(join(xs)))))

    def reduce_scatter(self, x: np.ndarray, op: int = ReduceOp.SUM) -> np.ndarray:
        self._need_even("reduce_scatter")
        op, x = reduce_op(op), np.asarray(x)
        check_scatter_shape(x, self.nranks, self.where("reduce_scatter"))

        def combine(xs):
            chunks = np.split(self._reduce_all(xs, op), self.nranks)
            return [chunks[self.ranks.index(r)] for r in self.members]
        return self._collective("reduce_scatter", (op,), x, combine)

    def barrier(self) -> None:
        self._collective("barrier", (), None,
                         lambda xs: (self._across(lambda c: c.barrier()), [None] * len(self.members))[1])

    def _need_even(self, what):
        if not self.even:
            raise Unimplemented(f"{self.where(what)}: hybrid ranks need the same number of group members "
                                f"on every process (group {list(self.ranks)}, {self.world.places} places each)")

    def _channel(self, src, dst):
        p = self.world.places
        return 1 + (src % p) * p + dst % p

    def send(self, x: np.ndarray, peer: int) -> None:
        self.check_peer(peer, "send")
        dst = self.ranks[peer]
        if dst // self.world.places == self.world.trainer:
            return super().send(x, peer)
        self.world.raise_if_failed(self.global_rank)
        self.outer.send(x, self.trainers.index(dst // self.world.places), self._channel(self.global_rank, dst))

    def recv(self, peer: int, shape: Optional[Sequence[int]] = None, dtype: Any = None) -> np.ndarray:
        self.check_peer(peer, "recv")
        src = self.ranks[peer]
        if src // self.world.places == self.world.trainer:
            return super().recv(peer, shape, dtype)
        what = self.where(f"recv from peer {peer}")
        a = self.outer.recv(self.trainers.index(src // self.world.places), channel=self._channel(src, self.global_rank),
                            what=f"{what} (global rank {src})")
        check_recv(a, shape, dtype, what)
        return a


HybridWorld.communicator_class = HybridCommunicator


def run_hybrid(places: int, fn: Callable[..., Any], *args: Any, timeout: Optional[float] = DEFAULT_TIMEOUT,
               abort_on_error: bool = True, **kwargs: Any) -> List[Any]:
    """Run ``fn`` as this MPI process's ``places`` thread ranks; call it on every process.

    Returns this process's results (one per place). If a rank fails, the
    whole MPI job is aborted with its name and error (``abort_on_error``),
    else :class:`RankFailed` is raised here and the other processes stop
    at their watchdog timeout.
    """
    from .mpi import init_mpi
    ctx = init_mpi(timeout=timeout)
    world = HybridWorld(places, ctx.world, timeout)
    try:
        return run_threads(world, world.local_ranks(), fn, args, kwargs, timeout)
    except RankFailed as exc:
        if abort_on_error:  # the job's exit status says which: a rank raised, or one of its threads hung
            ctx.world.abort(str(exc), exit_code_of(exc))
        raise
