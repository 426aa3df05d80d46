"""Which rank the running code is: the holder collective and PS kernels consult.

Mirrors Paddle's ``CommContextManager``
(``paddle/phi/core/distributed/comm_context_manager.h``): the registry, kept
below the kernels, in which a collective kernel finds the communicator of
its ``ring_id``. Paddle has one per process. refimpl can run several ranks
as threads of one process, so :func:`current` looks in three places, in
order:

1. the calling thread's context (set by ``run_in_process`` for each rank);
2. the process-wide context (set by ``init_parallel_env`` under ``mpiexec``);
3. a default single-rank context, made by the factory that
   ``refimpl.distributed.communication`` installs when it is imported, so a
   program with collective ops also runs alone, as on one device.

A context is any object with the :class:`RankContextLike` attributes; the
real one is ``refimpl.distributed.communication.context.RankContext``. The
kernels look it up when they run, so neither they nor the executor import
the communication layer. Differences: Paddle's manager holds communicators
only; here the context also carries the send/recv trace and the rank's
parameter-server runtime (Paddle keeps that in a ``TheOnePSRuntime``
singleton).
"""
import contextlib
import threading
from typing import Any, Callable, Iterator, Mapping, Optional, Protocol

from .errors import PreconditionNotMet

_local = threading.local()
_process_ctx = None
_default_factory: Optional[Callable[[], "RankContextLike"]] = None


class RankContextLike(Protocol):
    """What kernels use of a rank context.

    ``rank`` (global rank), ``comms`` (ring id -> communicator of the groups
    this rank belongs to), ``comm(ring_id)`` (that communicator, or a
    NotFound naming the rank and ring), ``trace`` (an event trace for
    send/recv records outside an executor run, or None) and ``ps_runtime``
    (the rank's parameter-server runtime, with ``require_client(what)``, or
    None).
    """

    rank: int
    comms: Mapping[int, Any]
    trace: Any
    ps_runtime: Any

    def comm(self, ring_id: int = 0) -> Any: ...


def set_default_factory(factory: Optional[Callable[[], RankContextLike]]) -> None:
    """Install the maker of the single-rank context used outside any rank (None removes it)."""
    global _default_factory
    _default_factory = factory


def current() -> RankContextLike:
    """The rank context of the calling code (thread, then process, then a single rank)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is not None:
        return ctx
    if _process_ctx is not None:
        return _process_ctx
    if _default_factory is None:
        raise PreconditionNotMet("no rank context: import refimpl.distributed (or refimpl) so that a "
                                 "single-rank context exists, or run inside run_in_process / mpiexec")
    return _default_factory()


def has_thread_context() -> bool:
    """Whether the calling thread runs as a rank of its own (in-process or hybrid ranks)."""
    return getattr(_local, "ctx", None) is not None


def set_current(ctx: Optional[RankContextLike]) -> None:
    """Make ``ctx`` the context of the calling thread (``None`` clears it)."""
    _local.ctx = ctx


def set_process_context(ctx: Optional[RankContextLike]) -> None:
    """Make ``ctx`` the context of every thread without its own (MPI ranks)."""
    global _process_ctx
    _process_ctx = ctx


@contextlib.contextmanager
def rank_guard(ctx: RankContextLike) -> Iterator[RankContextLike]:
    """Run a block as the rank of ``ctx`` in this thread."""
    old = getattr(_local, "ctx", None)
    _local.ctx = ctx
    try:
        yield ctx
    finally:
        _local.ctx = old


def set_comm_trace(trace: Any) -> None:
    """Record send/recv events of the current rank into ``trace`` (None stops).

    Collective ops run by an executor with a trace record into that trace
    anyway; this covers calls outside a traced run.
    """
    current().trace = trace


def record(kind: str, var: Optional[str], nbytes: int, peer: Optional[int], ring_id: int,
           trace: Any = None, **where: Any) -> None:
    """Add a ``send``/``recv`` event (peer, var, bytes) to ``trace`` or the context's trace."""
    ctx = current()
    trace = trace if trace is not None else ctx.trace
    if trace is not None:
        trace.add(kind, var=var, nbytes=int(nbytes), rank=ctx.rank,
                  extra={"peer": peer, "ring_id": ring_id}, **where)
