"""``MPIRoleMaker``: the collective role of a job started without Paddle's launcher.

New in refimpl (Paddle 3.3.1 has no such class; Paddle 1.x had an MPI role
maker in ``incubate.fleet``). It answers every accessor of
:class:`~.role_maker.PaddleCloudRoleMaker` (collective mode), taking the
rank and size from, in order:

1. the in-process rank running the code (``run_in_process`` / ``run_hybrid``
   threads; the environment is shared by the threads, so it cannot say);
2. the ``PADDLE_*`` environment, as ``PaddleCloudRoleMaker`` reads it;
3. MPI, when the process runs under ``mpiexec`` (mpi4py, imported only then);
4. otherwise: a single non-distributed worker.

Under MPI, generating the role gathers the host names (a collective call),
so it must happen on every rank (``fleet.init`` does). Endpoints are made up
as ``host:6170+local rank``; refimpl never connects to them.
"""
from __future__ import annotations

import os
from typing import Any

from refimpl.core.errors import Unimplemented

from .role_maker import PaddleCloudRoleMaker, Role, getenv_or_backup


class MPIRoleMaker(PaddleCloudRoleMaker):
    """A collective role maker: rank and size from in-process ranks, ``PADDLE_*`` or MPI (module docstring).

    ``_rank_source()`` says where the answer came from.
    """

    def __init__(self, is_collective: bool = True, **kwargs: Any) -> None:
        if not is_collective:
            raise Unimplemented("MPIRoleMaker is collective only; for parameter-server mode use PaddleCloudRoleMaker "
                                "(python -m refimpl.distributed.launch --server_num S --worker_num W)")
        super().__init__(is_collective=True, **kwargs)
        self._source = None

    def _rank_source(self):
        """``"inprocess"``, ``"env"``, ``"mpi"`` or ``"none"`` (generating the role if needed)."""
        if not self._role_is_generated:
            self._generate_role()
        return self._source

    def _collective_env(self):
        from refimpl.distributed.communication import context
        if context.has_thread_context():
            ctx = context.current()
            self._from_ranks("inprocess", ctx.rank, ["127.0.0.1"] * ctx.world_size)
        elif getenv_or_backup("PADDLE_TRAINER_ENDPOINTS") is not None or "PADDLE_TRAINER_ID" in os.environ:
            self._source = "env"
            super()._collective_env()
        elif _under_mpiexec():
            from mpi4py import MPI
            from refimpl.distributed.communication.mpi_monitor import allgather_text
            ctx = context.current()  # the MPI job refimpl joined, if it did
            world = ctx.world.world_comm if ctx.backend == "mpi" else MPI.COMM_WORLD
            hosts = allgather_text(world, MPI.Get_processor_name())  # buffers, not a pickled allgather
            self._from_ranks("mpi", world.Get_rank(), hosts)
        else:
            self._source = "none"
            super()._collective_env()

    def _from_ranks(self, source, rank, hosts):
        self._source, self._training_role, self._role, self._current_id = source, "TRAINER", Role.WORKER, rank
        local = [sum(1 for h in hosts[:r] if h == hosts[r]) for r in range(len(hosts))]
        self._set_workers([f"{h}:{6170 + i}" for h, i in zip(hosts, local)])
        self._cur_endpoint = self._worker_endpoints[rank]
        self._local_rank = str(local[rank])
        self._non_distributed = len(hosts) == 1


def _under_mpiexec():
    from refimpl.distributed.communication import context
    launched = any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"))
    return launched or context.current().backend == "mpi"


__all__ = ["MPIRoleMaker"]
