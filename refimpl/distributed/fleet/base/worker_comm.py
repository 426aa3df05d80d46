"""Communication among the workers of a role maker (Paddle: the ``Gloo`` helper in ``role_maker.py``).

Mirrors what Paddle 3.3.1's ``PaddleCloudRoleMaker._barrier`` / ``_all_reduce`` /
``_all_gather`` answer: with several workers, the reduced array and the list
of every worker's object; for a lone worker in a plain process (Paddle:
Gloo not initialised) the input itself, unchanged. Difference: refimpl runs
them on the rank's communicator (in-process threads or MPI), not on Gloo,
and a role that names more workers than the process's world has raises
``PreconditionNotMet`` (Paddle warns and answers the input, which would be a
wrong sum).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented


class WorkerComm:
    """``_barrier`` / ``_all_reduce`` / ``_all_gather`` for a role maker that has ``_worker_num()``."""

    # given by the role maker this is mixed into (declared only: a method here would shadow the role maker's)
    _worker_num: Callable[[], int]

    def _worker_comm(self, comm_world: str) -> Optional[Any]:
        """The communicator of the workers; None for a lone worker in a plain process (Paddle: no Gloo)."""
        if comm_world not in ("worker", "server", "all"):
            raise InvalidArgument(f"argument error, comm_world must in ['worker', 'server', 'all'], got {comm_world!r}")
        if comm_world == "server":
            raise Unimplemented("refimpl has no parameter servers, so no 'server' communication world")
        from refimpl.distributed.communication import context
        ctx = context.current()
        if ctx.world_size == 1 and self._worker_num() == 1:
            return None
        if ctx.world_size != self._worker_num():
            raise PreconditionNotMet(f"the role maker has {self._worker_num()} worker(s) but this process's "
                                     f"communication world has {ctx.world_size} rank(s); start the ranks with "
                                     f"run_in_process or mpiexec and call fleet.init / init_parallel_env first")
        return ctx.world_comm  # not ctx.comm(0): a tensor-parallel program binds ring 0 to its model group

    def _barrier(self, comm_world: str = "worker") -> None:
        """Wait for every worker (``comm_world``: ``worker`` or ``all``)."""
        comm = self._worker_comm(comm_world)
        if comm is not None:
            comm.barrier()

    def _all_reduce(self, input: Any, mode: str = "sum", comm_world: str = "worker") -> Any:
        """``input`` (a number, list or array) reduced over the workers (an array); ``mode``: sum, max, min or prod.

        A lone worker gets ``input`` back unchanged, as from Paddle without Gloo.
        """
        comm = self._worker_comm(comm_world)
        if comm is None:
            return input
        arr = np.array(input)
        return comm.all_reduce(arr, mode.lower()).reshape(arr.shape)

    def _all_gather(self, input: Any, comm_world: str = "worker") -> Any:
        """Every worker's ``input`` in worker order, a list of objects of ``input``'s kind (Gloo's answer).

        A lone worker gets ``input`` back unchanged, as from Paddle without Gloo.
        """
        comm = self._worker_comm(comm_world)
        if comm is None:
            return input
        arr = np.asarray(input)
        parts = np.split(comm.all_gather(arr.reshape(1, -1)), comm.nranks)
        if arr.ndim == 0:
            return [p.reshape(()).item() for p in parts]
        if isinstance(input, (list, tuple)):
            return [type(input)(p.reshape(arr.shape).tolist()) for p in parts]
        return [p.reshape(arr.shape) for p in parts]


__all__ = ["WorkerComm"]
