"""Communication: one interface, several ways to move tensors between ranks.

``communicator`` defines the interface (all_reduce, broadcast, reduce,
all_gather, reduce_scatter, send, recv, barrier; groups keyed by ring id)
and ``ReduceOp``; ``inprocess`` runs P ranks as threads of one process
(``run_in_process``); ``mpi`` runs them as MPI processes (``init_mpi``,
imported lazily so mpi4py is optional), watched by ``mpi_monitor``, which
names a hung or dead rank; ``hybrid`` runs P thread ranks in
each MPI process (``run_hybrid``); ``context`` says which rank the
running code is and holds its communicators, which collective ops look up.
"""
from __future__ import annotations

from typing import Optional, TYPE_CHECKING

from .communicator import DEFAULT_TIMEOUT, Communicator, RankFailed, RankHung, ReduceOp, reduce_arrays, reduce_op
from .context import (RankContext, current, has_thread_context, rank_guard, record, set_comm_trace,
                      set_current, set_process_context)
from .inprocess import InProcessCommunicator, InProcessWorld, run_in_process
from .hybrid import HybridWorld, run_hybrid

if TYPE_CHECKING:
    from .context import RankContext


def init_mpi(timeout: Optional[float] = None, check_meta: bool = True,
             abort_on_error: bool = True) -> RankContext:
    """Join the MPI job (needs mpi4py); see ``mpi.init_mpi``."""
    from .mpi import init_mpi as _init
    return _init(timeout=timeout, check_meta=check_meta, abort_on_error=abort_on_error)


__all__ = ["DEFAULT_TIMEOUT", "Communicator", "RankFailed", "RankHung", "ReduceOp", "reduce_arrays", "reduce_op",
           "RankContext", "current", "has_thread_context", "rank_guard", "record", "set_comm_trace", "set_current",
           "set_process_context", "InProcessCommunicator", "InProcessWorld", "run_in_process", "HybridWorld",
           "run_hybrid", "init_mpi"]
