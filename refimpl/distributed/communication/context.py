"""The rank context: which rank the running code is, and its communicators.

Mirrors Paddle's parallel environment (``ParallelEnv``: rank and world size)
together with its registry of communicators by ring id
(``CommContextManager``), which collective op kernels consult at run time.
Paddle has one per process. refimpl can run several ranks as threads of one
process, so :func:`current` looks in three places, in order:

1. the calling thread's context (set by ``run_in_process`` for each rank);
2. the process-wide context (set by ``init_parallel_env`` under ``mpiexec``);
3. a default single-rank context (rank 0 of 1), so a program with collective
   ops also runs alone, as on one device.

Because kernels look the context up when they run, the executor needs no
knowledge of ranks at all.
"""
import contextlib
import threading

from refimpl.core.errors import AlreadyExists, NotFound

_local = threading.local()
_process_ctx = None
_default_ctx = None
_lock = threading.Lock()


class RankContext:
    """One rank: ``rank``, ``world_size``, the ``world`` it belongs to and its communicators.

    ``world`` is an ``InProcessWorld`` or an ``MPIWorld``; it makes the
    communicator of each group (``world.new_communicator(ring_id, ranks,
    rank)``). ``trace`` is an optional event trace for send/recv records
    outside an executor run (see :func:`set_comm_trace`).
    """

    def __init__(self, rank, world_size, world):
        self.rank, self.world_size, self.world = rank, world_size, world
        self.backend = world.backend
        self.comms = {}      # ring_id -> Communicator (only groups this rank belongs to)
        self.groups = {}     # ring_id -> ranks, for every group created (member or not)
        self.trace = None
        self.add_group(0, range(world_size))

    def add_group(self, ring_id, ranks):
        """Create the communicator of group ``ring_id`` (None if this rank is not in ``ranks``)."""
        ranks = tuple(ranks)
        if ring_id in self.groups:
            raise AlreadyExists(f"rank {self.rank}: ring_id {ring_id} already names the group {list(self.groups[ring_id])}")
        self.groups[ring_id] = ranks
        comm = self.world.new_communicator(ring_id, ranks, self.rank)
        if comm is not None:
            self.comms[ring_id] = comm
        return comm

    def comm(self, ring_id=0):
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


def current():
    """The rank context of the calling code (thread, then process, then a single rank)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is not None:
        return ctx
    if _process_ctx is not None:
        return _process_ctx
    return _default()


def _default():
    global _default_ctx
    with _lock:
        if _default_ctx is None:
            from .inprocess import InProcessWorld
            _default_ctx = InProcessWorld(1).context(0)
        return _default_ctx


def has_thread_context():
    """Whether the calling thread runs as a rank of its own (in-process or hybrid ranks)."""
    return getattr(_local, "ctx", None) is not None


def set_current(ctx):
    """Make ``ctx`` the context of the calling thread (``None`` clears it)."""
    _local.ctx = ctx


def set_process_context(ctx):
    """Make ``ctx`` the context of every thread without its own (MPI ranks)."""
    global _process_ctx
    _process_ctx = ctx


@contextlib.contextmanager
def rank_guard(ctx):
    """Run a block as the rank of ``ctx`` in this thread."""
    old = getattr(_local, "ctx", None)
    _local.ctx = ctx
    try:
        yield ctx
    finally:
        _local.ctx = old


def set_comm_trace(trace):
    """Record send/recv events of the current rank into ``trace`` (None stops).

    Collective ops run by an executor with a trace record into that trace
    anyway; this covers calls outside a traced run.
    """
    current().trace = trace


def record(kind, var, nbytes, peer, ring_id, trace=None, **where):
    """Add a ``send``/``recv`` event (peer, var, bytes) to ``trace`` or the context's trace."""
    ctx = current()
    trace = trace if trace is not None else ctx.trace
    if trace is not None:
        trace.add(kind, var=var, nbytes=int(nbytes), rank=ctx.rank,
                  extra={"peer": peer, "ring_id": ring_id}, **where)
