"""One parameter server: its blocks, its optimizer program and its request loop.

Mirrors Paddle's ``BrpcPsServer`` with dense tables (``MemoryDenseTable``)
and the ``run_server`` loop: the server holds its blocks of the parameters
and of the optimizer state in a scope, and answers workers' requests until
every worker has sent ``stop``. By mode:

* **sync**: gradients of a step are collected from every worker still
  running; when all have arrived their mean (summed in worker order) goes
  through the server program once; a ``pull`` sent after a push waits for
  that update (the step barrier);
* **async**: each pushed gradient goes through the server program at once;
* **geo**: each pushed parameter delta is added to the blocks.

Differences from Paddle: requests are read from the workers in a fixed
round-robin order (a worker waiting for a reply is skipped), so even async
and GEO training are deterministic; there are no threads, queues or sparse
tables. A worker that fails or stays silent past the communicator's timeout
ends ``serve`` with :class:`WorkerFailed` naming it.
"""
from __future__ import annotations

import logging
from typing import Any, List, Optional, Sequence, TYPE_CHECKING

import numpy as np

from refimpl.core.errors import ExecutionTimeout, PreconditionNotMet, Unavailable
from refimpl.distributed.communication import RankFailed

from . import protocol as P

if TYPE_CHECKING:
    from refimpl.core.scope import Scope
    from refimpl.distributed.communication.communicator import Communicator
    from refimpl.executor.executor import Executor
    from .transpile import PSJob

logger = logging.getLogger("refimpl.distributed.ps")


class WorkerFailed(Unavailable):
    """A worker died or went silent while a server was serving it (``worker``: its index)."""

    def __init__(self, message: str, worker: Optional[int] = None) -> None:
        super().__init__(message)
        self.worker = worker


class ParameterServer:
    """Server ``index`` of ``job`` (a PSJob), talking over ``comm`` (the world communicator)."""

    def __init__(self, job: PSJob, index: int, comm: Communicator, executor: Executor, scope: Scope) -> None:
        self.job, self.index, self.comm, self.exe, self.scope = job, index, comm, executor, scope
        self.blocks = job.plan.on_server(index)
        self.program = job.server_programs[index]
        self.vars = job.server_vars[index]           # server var -> (full var, Block or None)
        self.workers = [job.server_num + j for j in range(job.worker_num)]
        self.pushed = {}                             # sync: worker rank -> its gradients of this step
        self.held = {}                               # worker rank -> kind of the request awaiting a reply
        self.updates = 0

    # ---- state ----------------------------------------------------------------------------
    def init_from(self, full: Any) -> None:
        """Fill every server variable from ``full`` (full-size values by name, e.g. a startup scope)."""
        for name, (src, block) in self.vars.items():
            if src not in full:
                raise PreconditionNotMet(f"server {self.index}: no initial value for {src!r}")
            value = np.asarray(full[src])
            self.set(name, block.rows(value) if block is not None else value)

    def get(self, name: str) -> np.ndarray:
        return np.array(self.scope.find_var(name).get_tensor())

    def set(self, name: str, value: np.ndarray) -> None:
        self.scope.var(name).get_tensor().set(np.array(value, copy=True))

    def param_blocks(self) -> List[np.ndarray]:
        return [self.get(b.param + b.suffix) for b in self.blocks]

    # ---- applying updates ----------------------------------------------------------------
    def apply_grads(self, grads: Sequence[np.ndarray]) -> None:
        """Run the server program once on one gradient per block (in block order)."""
        for b, g in zip(self.blocks, grads):
            self.set(self.job.plan_grad(b), g)
        if self.program.global_block().ops:
            self.exe.run(self.program, scope=self.scope)
        self.updates += 1

    def apply_deltas(self, deltas: Sequence[np.ndarray]) -> None:
        for b, d in zip(self.blocks, deltas):
            name = b.param + b.suffix
            self.set(name, self.get(name) + d)
        self.updates += 1

    def _apply_sync_round(self):
        """All running workers pushed: apply the mean gradient, release the held pulls."""
        ranks = [w for w in self.workers if w in self.pushed]
        mean = []
        for i in range(len(self.blocks)):
            total = np.array(self.pushed[ranks[0]][i], copy=True)
            for w in ranks[1:]:
                total += self.pushed[w][i]
            mean.append(total / total.dtype.type(len(ranks)))
        self.pushed.clear()
        self.apply_grads(mean)
        for w, kind in list(self.held.items()):
            if kind == P.PULL:
                del self.held[w]
                P.send(self.comm, w, P.REPLY, self.param_blocks())

    # ---- the loop ---------------------------------------------------------------------------
    def serve(self) -> int:
        """Answer requests until every worker has stopped; return the number of updates applied."""
        active = list(self.workers)
        while active:
            waiting = [w for w in active if w not in self.held]
            if not waiting:
                raise PreconditionNotMet(f"server {self.index}: every running worker waits for a reply "
                                         f"({self._describe_held()}); the workers' calls do not match")
            for w in waiting:
                kind, arrays = self._recv(w)
                if kind == P.STOP:
                    active.remove(w)
                    self.pushed.pop(w, None)
                    self._check_rounds(active)
                else:
                    self._handle(w, kind, arrays, active)
        logger.info("server %d: every worker stopped after %d updates", self.index, self.updates)
        return self.updates

    def _recv(self, w):
        j = w - self.job.server_num
        try:
            return P.recv(self.comm, self.comm.ranks.index(w))
        except RankFailed as exc:
            failed = exc.rank - self.job.server_num if exc.rank in self.workers else None
            who = f"worker {failed}" if failed is not None else f"rank {exc.rank}"
            raise WorkerFailed(f"server {self.index}: {who} failed ({type(exc.error).__name__}: {exc.error}); "
                               f"run_server stops", worker=failed) from exc
        except ExecutionTimeout as exc:
            raise WorkerFailed(f"server {self.index}: worker {j} (rank {w}) sent nothing within the "
                               f"communicator's timeout; run_server stops ({exc})", worker=j) from exc

    def _handle(self, w, kind, arrays, active):
        if kind == P.PUSH_GRAD and self.job.mode == "sync":
            self.pushed[w] = arrays
            self._check_rounds(active)
        elif kind == P.PUSH_GRAD:
            self.apply_grads(arrays)
        elif kind == P.PUSH_DELTA:
            self.apply_deltas(arrays)
        elif kind == P.PULL:
            if w in self.pushed:   # sync: wait for this step's update
                self.held[w] = P.PULL
            else:
                P.send(self.comm, w, P.REPLY, self.param_blocks())
        elif kind == P.BARRIER:
            self.held[w] = P.BARRIER
            self._check_rounds(active)
        elif kind in (P.SAVE, P.LOAD, P.SHRINK):
            P.send(self.comm, w, P.REPLY, self._table_request(kind, arrays))
        else:
            raise PreconditionNotMet(f"server {self.index}: unknown request {kind} from rank {w}")

    def _check_rounds(self, active):
        if self.job.mode == "sync" and self.pushed and all(w in self.pushed for w in active):
            self._apply_sync_round()
        barrier = [w for w, k in self.held.items() if k == P.BARRIER]
        if barrier and all(self.held.get(w) == P.BARRIER for w in active):
            for w in barrier:
                del self.held[w]
                P.send(self.comm, w, P.REPLY)

    def _table_request(self, kind, arrays):
        """save: every server variable (names first); load: set the named ones; shrink: rows dropped."""
        if kind == P.SAVE:
            names = sorted(self.vars)
            return [P.encode_names(names)] + [self.get(n) for n in names]
        if kind == P.LOAD:
            names = P.decode_names(arrays[0])
            for n, a in zip(names, arrays[1:]):
                self.set(n, a)
            return [np.array(len(names), np.int64)]
        # shrink: Paddle drops sparse-table features below a threshold; dense blocks have none to drop
        return [np.array(0, np.int64)]

    def _describe_held(self):
        return ", ".join(f"worker {w - self.job.server_num}: {P.KIND_NAMES[k]}" for w, k in self.held.items())
