"""The parameter-server runtime of one rank, behind ``fleet.init_server`` & co.

Mirrors Paddle's ``TheOnePSRuntime`` (``paddle.distributed.ps.the_one_ps``):
``init_server`` builds the server's tables from the startup program (or a
saved model), ``run_server`` serves, ``init_worker`` starts the worker's
communicator and pulls the initial parameters, ``stop_worker`` says
goodbye, and the save / load / shrink calls gather from or scatter to the
servers. Jobs run on the same communicators as collective jobs: MPI ranks
under ``mpiexec`` (``python -m refimpl.distributed.launch --server_num S
--worker_num W``) or thread ranks (:func:`run_ps_in_process`); server ``i``
is rank ``i`` and worker ``j`` rank ``S + j``.

Differences from Paddle: no brpc, no endpoints actually opened (the
``PADDLE_*`` endpoints only name the roles), one runtime per rank context,
models saved as one ``.npz`` archive (no pickle; ``refimpl.core.npz_archive``)
written atomically: a temporary file beside it, fsynced, renamed into place
(``refimpl.core.atomic_file``), so a kill mid-save leaves the previous model
loadable. :func:`load_npz` is all or nothing: a missing, truncated or
corrupted file, a plain ``.npy``, an entry whose header does not match its
size or (when the caller says what it expects) the table's shape and dtype
raise a typed error naming the file and the entry before anything is used.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, TYPE_CHECKING, Tuple

import numpy as np

from refimpl.core import atomic_file, npz_archive
from refimpl.core.errors import InvalidArgument, NotFound, PreconditionNotMet
from refimpl.distributed.communication import DEFAULT_TIMEOUT, InProcessWorld, context
from refimpl.distributed.communication.inprocess import run_threads

from .client import PSClient
from .server import ParameterServer

if TYPE_CHECKING:
    from refimpl.core.scope import Scope
    from refimpl.distributed.communication.context import RankContext
    from refimpl.distributed.fleet.base.role_maker import RoleMakerBase, UserDefinedRoleMaker
    from .transpile import PSJob

MODEL_FILE = "persistables.npz"


# ---- in-process jobs and their role makers ------------------------------------------------------
def run_ps_in_process(server_num: int, worker_num: int, fn: Callable[..., Any], *args: Any,
                      timeout: Optional[float] = DEFAULT_TIMEOUT, **kwargs: Any) -> List[Any]:
    """Run ``fn`` on ``server_num + worker_num`` thread ranks (servers first); return their results.

    Inside, ``fleet.init()`` (no role maker) gives each thread its PS role;
    failures and timeouts behave as in ``run_in_process``.
    """
    if server_num < 1 or worker_num < 1:
        raise InvalidArgument(f"a PS job needs >= 1 server and >= 1 worker, got {server_num} and {worker_num}")
    world = InProcessWorld(server_num + worker_num, timeout)
    world.ps_layout = (server_num, worker_num)
    return run_threads(world, range(server_num + worker_num), fn, args, kwargs, timeout)


def endpoints(server_num: int, worker_num: int, host: str = "127.0.0.1",
              base_port: int = 6170) -> Tuple[List[str], List[str]]:
    """Made-up endpoints of the servers and of the workers (ports in rank order)."""
    return ([f"{host}:{base_port + i}" for i in range(server_num)],
            [f"{host}:{base_port + server_num + j}" for j in range(worker_num)])


def thread_role_maker() -> Optional[UserDefinedRoleMaker]:
    """A UserDefinedRoleMaker for the calling thread rank of a ``run_ps_in_process`` job, else None."""
    if not context.has_thread_context():
        return None
    ctx = context.current()
    layout = getattr(ctx.world, "ps_layout", None)
    if layout is None:
        return None
    from refimpl.distributed.fleet.base.role_maker import Role, UserDefinedRoleMaker
    s, w = layout
    servers, workers = endpoints(s, w)
    is_server = ctx.rank < s
    return UserDefinedRoleMaker(is_collective=False, role=Role.SERVER if is_server else Role.WORKER,
                                current_id=ctx.rank if is_server else ctx.rank - s, worker_num=w,
                                server_endpoints=servers, worker_endpoints=workers)


def join_mpi_if_launched() -> Optional[RankContext]:
    """Under mpiexec, outside thread ranks: join the MPI job (once); return this rank's context."""
    ctx = context.current()
    under_mpi = any(k in os.environ for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))
    if ctx.backend != "mpi" and not context.has_thread_context() and under_mpi:
        from refimpl.distributed.communication import init_mpi
        ctx = init_mpi()
    return ctx


def _rank_context(server_num, worker_num):
    """This rank's context: the thread's, else the MPI job's (joined here if needed)."""
    ctx = join_mpi_if_launched()
    if ctx.world_size != server_num + worker_num:
        raise PreconditionNotMet(f"the job has {server_num} server(s) and {worker_num} worker(s) but this "
                                 f"process's communication world has {ctx.world_size} rank(s); start it with "
                                 f"`python -m refimpl.distributed.launch --server_num S --worker_num W` or "
                                 f"refimpl.distributed.ps.run_ps_in_process")
    return ctx


# ---- the runtime --------------------------------------------------------------------------------
class PSRuntime:
    """One rank's part of a PS job: a ParameterServer or a PSClient."""

    def __init__(self, job: PSJob, role_maker: RoleMakerBase) -> None:
        self.job, self.rm = job, role_maker
        self.ctx = _rank_context(job.server_num, job.worker_num)
        self.comm = self.ctx.comm(0)
        self.server: Optional[ParameterServer] = None
        self.client: Optional[PSClient] = None
        self.ctx.ps_runtime = self  # where the ps_* op kernels find it (refimpl.core.comm_context)

    def _executor(self):
        from refimpl.executor import Executor
        from refimpl.core.place import CPUPlace
        return Executor(CPUPlace())

    # ---- server side --------------------------------------------------------------------------
    def init_server(self, dirname: Optional[str] = None) -> None:
        from refimpl.core.scope import Scope
        exe, scratch = self._executor(), Scope()
        exe.run(self.job.startup, scope=scratch)
        full = {}
        for full_name, _ in self.job.server_vars[self.rm._server_index()].values():
            v = scratch.find_var(full_name)
            if v is not None and v.is_initialized():
                full[full_name] = np.array(v.get_tensor())
        if dirname:
            full.update(load_npz(dirname, expected={n: (v.shape, v.dtype) for n, v in full.items()}))
        self.server = ParameterServer(self.job, self.rm._server_index(), self.comm, exe, Scope())
        self.server.init_from(full)

    def run_server(self) -> int:
        if self.server is None:
            raise PreconditionNotMet("run_server: call fleet.init_server() first")
        return self.server.serve()

    # ---- worker side --------------------------------------------------------------------------
    def init_worker(self, scope: Scope) -> None:
        self.client = PSClient(self.job, self.rm._worker_index(), self.comm)
        self.scope = scope
        self.refresh(scope)
        if self.job.mode == "geo":
            self.client.last_seen = {n: np.array(scope.find_var(n).get_tensor()) for n in self.job.plan.names}

    def refresh(self, scope: Scope) -> None:
        """Copy the servers' parameters into ``scope``."""
        for name, value in self.require_client("refresh").pull().items():
            scope.var(name).get_tensor().set(value)

    def require_client(self, what: str) -> PSClient:
        if self.client is None:
            raise PreconditionNotMet(f"{what}: call fleet.init_worker() on this worker first")
        return self.client


# ---- files --------------------------------------------------------------------------------------
def save_npz(dirname: str, values: Dict[str, np.ndarray]) -> str:
    """Write ``values`` atomically to ``dirname/persistables.npz``; return its path."""
    path = os.path.join(dirname, MODEL_FILE)
    arrays = {k: np.asarray(v) for k, v in sorted(values.items())}
    atomic_file.write_file(path, lambda f: npz_archive.write(f, arrays))
    return path


def load_npz(dirname: str, expected: Optional[Dict[str, Tuple[Tuple[int, ...], Any]]] = None
             ) -> Dict[str, np.ndarray]:
    """The arrays of a model saved by :func:`save_npz` (``dirname`` or the ``.npz`` path itself).

    ``expected`` ({name: (shape, dtype)}) is checked against the entries'
    headers before any data is read: a missing entry is ``NotFound``, another
    shape or dtype ``InvalidArgument``.
    """
    path = dirname if dirname.endswith(".npz") else os.path.join(dirname, MODEL_FILE)
    with npz_archive.NpzReader(path, "saved PS model") as r:
        for name, (shape, dtype) in (expected or {}).items():
            got = r.headers.get(name)
            if got is None:
                raise NotFound(f"saved PS model {path!r} has no entry {name!r} (a table of this server)")
            if got[0] != tuple(shape) or got[1] != np.dtype(dtype):
                raise InvalidArgument(f"saved PS model {path!r}: entry {name!r} has shape {list(got[0])} dtype "
                                      f"{got[1]}, the table holds shape {list(shape)} dtype {np.dtype(dtype)}")
        return r.read()
