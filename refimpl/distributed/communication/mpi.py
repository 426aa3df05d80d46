"""MPI ranks: the communicator interface over mpi4py, one process per rank.

Plays the part of Paddle's multi-process collective backends (Gloo on CPU,
NCCL on GPU, started by ``paddle.distributed.launch``): here ``mpiexec -n P
python train.py`` starts the processes, ``MPI.COMM_WORLD`` (duplicated) is
the world group, ring 0, and each further group is a sub-communicator made
with ``Split``. Differences from Paddle, and how it works:

* Arrays travel through mpi4py's buffer methods (``Allreduce``, ``Bcast``,
  ``Allgather``, ``Reduce_scatter_block``, ``Isend``/``Recv``), never
  pickled. dtypes MPI cannot reduce (float16, bool, complex) are gathered
  and reduced in rank order with NumPy instead.
* Each collective first exchanges a small int64 header (call kind, root/op,
  dtype, shape) so a mismatch raises ``InvalidArgument`` naming the rank on
  every rank instead of hanging; ``check_meta=False`` skips it.
* ``send`` is buffered as in the in-process backend: ``Isend`` of a header
  and the data; the requests are completed later (``flush``, at exit).
* **A failing rank ends the job, and the message names it.** An uncaught
  exception prints ``rank R failed: ...`` with its traceback and calls
  ``MPI_Abort(EXIT_FAILED)``, so ``mpiexec`` stops every rank. A monitor
  thread per rank (``mpi_monitor.Monitor``) watches this rank's blocking calls:
  when one waits longer than ``timeout`` seconds (``set_timeout``; None =
  for ever) it asks the other ranks of the call what they are doing, over a
  control communicator of its own, and aborts with ``EXIT_HUNG`` naming the
  ranks that are not waiting (``rank 1 hung: ...; rank(s) [0, 2, 3]
  waited``), or a deadlock; when a rank of the call on this host has ended
  (``os._exit``) it aborts within a second with ``EXIT_DIED`` naming it.
  A rank killed by a signal makes Hydra kill the job within milliseconds,
  with a status that depends on a race (the signal number, or 255); only
  ``refimpl.distributed.launch``, outside the job, names that rank (and exits
  with ``EXIT_DIED``).
  All this needs ``mpiexec -disable-auto-cleanup``
  (``refimpl.distributed.launch`` passes it): by default Hydra (the
  ``mpich`` wheel's ``mpiexec``) kills every rank as soon as one process
  dies, before anyone can say which rank it was, and returns the status of
  whichever process it saw first. Paddle's launcher only reports the
  failing process's exit code; the blame is refimpl's.
* Control messages (host names, agreement on NCCL) travel as buffers too:
  fixed-size int arrays, or UTF-8 bytes after their lengths
  (:func:`allgather_text`); nothing in the communication layers is pickled.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable, Optional, Sequence

import numpy as np

from refimpl.core.errors import InvalidArgument

from .communicator import (DEFAULT_TIMEOUT, EXIT_FAILED, Communicator, ReduceOp, check_recv, check_root, check_same,
                           check_scatter_shape, finish_avg, gathered_shape, reduce_arrays, reduce_op)
from .context import RankContext, set_process_context
from .mpi_monitor import Monitor

MAX_DIMS = 8
_KINDS = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "barrier"]
_TAG_META = 7000  # send/recv use tags 7000 + 2 * channel (header) and the next (data)
_MPI_REDUCIBLE = set("bBhHiIlLqQfd")  # integer and float32/64 typecodes MPI reduces natively

def _header(kind, args, x):
    """int64[5 + MAX_DIMS]: kind, two args, dtype typecode, ndim, dims."""
    h = np.zeros(5 + MAX_DIMS, np.int64)
    args = tuple(args) + (0, 0)
    h[0], h[1], h[2] = _KINDS.index(kind) if kind in _KINDS else -1, args[0], args[1]
    if x is not None:
        if x.ndim > MAX_DIMS:
            raise InvalidArgument(f"the MPI communicator handles tensors of at most {MAX_DIMS} dims, "
                                  f"got shape {list(x.shape)}")
        h[3], h[4] = ord(x.dtype.char), x.ndim
        h[5:5 + x.ndim] = x.shape
    return h


def _unheader(h, nargs):
    kind = _KINDS[h[0]] if 0 <= h[0] < len(_KINDS) else "send"
    dtype = np.dtype(chr(h[3])).name if h[3] else ""
    return (kind, tuple(int(a) for a in h[1:1 + nargs]), tuple(int(d) for d in h[5:5 + h[4]]), dtype)


class MPIWorld:
    """This process's rank in an MPI job, and the maker of its communicators."""

    backend = "mpi"

    def __init__(self, comm: Any = None, timeout: Optional[float] = DEFAULT_TIMEOUT, check_meta: bool = True,
                 abort_on_error: bool = True) -> None:
        from mpi4py import MPI
        self.MPI = MPI
        self.world_comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.nranks = self.world_comm.Get_rank(), self.world_comm.Get_size()
        self.timeout, self.check_meta = timeout, check_meta
        self.comms = []
        self.watchdog = Monitor(self)
        self.watchdog.connect()
        if abort_on_error:
            sys.excepthook = self._excepthook
        atexit.register(self._at_exit)

    def context(self) -> RankContext:
        return RankContext(self.rank, self.nranks, self)

    def set_timeout(self, seconds: Optional[float]) -> None:
        """Seconds any blocking call may wait before the job is aborted (None: no limit)."""
        self.timeout = seconds

    def new_communicator(self, ring_id: int, ranks: Sequence[int], rank: int) -> Optional[Communicator]:
        """Collective over the whole world, as Paddle's ``new_group``: every rank must call it."""
        ranks = tuple(int(r) for r in ranks)
        if not ranks or len(set(ranks)) != len(ranks) or not all(0 <= r < self.nranks for r in ranks):
            raise InvalidArgument(f"group ranks {list(ranks)} must be distinct ranks of 0..{self.nranks - 1}")
        member = rank in ranks
        if ranks == tuple(range(self.nranks)):
            sub = self.blocking(f"rank {rank}: creating ring {ring_id}", self.world_comm.Dup)
        else:
            color = 0 if member else self.MPI.UNDEFINED
            key = ranks.index(rank) if member else 0
            sub = self.blocking(f"rank {rank}: creating ring {ring_id}", self.world_comm.Split, color, key)
        if not member:
            return None
        # NCCL hook: with the cuda backend, and NCCL usable on every rank of the group, the
        # ring's communicator also holds an NCCL communicator, so device buffers move on the GPU
        # (see NcclRingCommunicator); otherwise (numpy backend, no GPU, the simulator, two ranks
        # on one GPU) the plain MPI communicator stages device buffers through host memory.
        from .mpi_nccl import NcclRingCommunicator, select_nccl  # (mpi_nccl builds on this module)
        nccl = select_nccl(self, sub, ring_id, rank, ranks)
        if nccl is not None:
            comm: MPICommunicator = NcclRingCommunicator(self, ring_id, ranks, rank, sub, nccl)
            self.comms.append(comm)
            return comm
        comm = MPICommunicator(self, ring_id, ranks, rank, sub)
        self.comms.append(comm)
        return comm

    def blocking(self, what: str, fn: Callable[..., Any], *args: Any, ranks: Optional[Sequence[int]] = None) -> Any:
        """Call a blocking MPI function under the monitor; ``ranks``: the world ranks it waits for (all)."""
        self.watchdog.arm(what, range(self.nranks) if ranks is None else ranks)
        try:
            return fn(*args)
        finally:
            self.watchdog.disarm()

    def flush(self) -> None:
        """Complete every buffered send (called at exit)."""
        for c in self.comms:
            c.flush()

    def _at_exit(self):
        self.flush()
        self.watchdog.stop()  # before mpi4py finalizes MPI: the monitor makes MPI calls

    def abort(self, message: str, code: int = EXIT_FAILED) -> None:
        """Print ``refimpl: MESSAGE; aborting all ranks`` and end the job with exit status ``code``."""
        sys.stderr.write(f"refimpl: {message}; aborting all ranks\n")
        sys.stderr.flush()
        time.sleep(0.5)  # let mpiexec forward the message before MPI_Abort tears the job down
        self.world_comm.Abort(code)

    def _excepthook(self, exc_type, exc, tb):
        sys.stderr.write(f"refimpl: rank {self.rank} failed: {exc_type.__name__}: {exc}\n")
        traceback.print_exception(exc_type, exc, tb, file=sys.stderr)
        self.abort(f"rank {self.rank} failed", EXIT_FAILED)


class MPICommunicator(Communicator):
    """One MPI rank's communicator for one group (an mpi4py intracommunicator)."""

    backend = "mpi"

    def __init__(self, world: MPIWorld, ring_id: int, ranks: Sequence[int], global_rank: int,
                 comm: Any) -> None:
        super().__init__(ring_id, ranks, global_rank, world.timeout)
        self.world, self.comm, self.MPI = world, comm, world.MPI
        self.ops = {ReduceOp.SUM: world.MPI.SUM, ReduceOp.MAX: world.MPI.MAX, ReduceOp.MIN: world.MPI.MIN,
                    ReduceOp.PROD: world.MPI.PROD, ReduceOp.AVG: world.MPI.SUM}
        self.sends = []  # (requests, buffers) of buffered sends not known complete
        self.lock = threading.Lock()  # sends may come from several threads (hybrid ranks)
        self.calls = 0
        self.headers = {}  # (kind, args, shape, typecode) -> header, built once
        self.table = np.empty((self.nranks, 5 + MAX_DIMS), np.int64)

    def _call(self, what, fn, *args):
        return self.world.blocking(self.where(what), fn, *args, ranks=self.ranks)

    def _check(self, kind, args, x):
        """Every rank agrees on the call, shape and dtype (one small Allgather), else InvalidArgument."""
        self.calls += 1
        if not self.world.check_meta:
            return
        key = (kind, args) if x is None else (kind, args, x.shape, x.dtype.char)
        h = self.headers.get(key)
        if h is None:
            h = self.headers[key] = _header(kind, args, x)
            if len(self.headers) > 1024:
                self.headers.clear()
        table = self.table
        self._call(kind, self.comm.Allgather, h, table)
        if not (table[1:] == table[0]).all():
            what = f"rank {self.global_rank}: {kind} on ring {self.ring_id} (call #{self.calls})"
            check_same(what, [_unheader(row, len(args)) for row in table], self.ranks)

    def _gather(self, x):
        table = np.empty((self.nranks,) + x.shape, x.dtype)
        self._call("all_gather", self.comm.Allgather, x, table)
        return table

    # ---- the interface --------------------------------------------------
    def all_reduce(self, x: np.ndarray, op: int = ReduceOp.SUM,
                   out: Optional[np.ndarray] = None) -> np.ndarray:
        op = reduce_op(op)
        inplace = out is not None and out is x and _contiguous(x)
        x = _c_order(x)
        self._check("all_reduce", (op,), x)
        if x.dtype.char not in _MPI_REDUCIBLE:
            return _into(out, reduce_arrays(list(self._gather(x)), op))
        if inplace:
            self._call("all_reduce", self.comm.Allreduce, self.MPI.IN_PLACE, x, self.ops[op])
            res = x
        else:
            res = out if out is not None and _contiguous(out) else np.empty(x.shape, x.dtype)
            self._call("all_reduce", self.comm.Allreduce, x, res, self.ops[op])
        if op == ReduceOp.AVG:
            res = finish_avg(res, self.nranks)
        return _into(out, res)

    def broadcast(self, x: np.ndarray, root: int = 0, out: Optional[np.ndarray] = None) -> np.ndarray:
        check_root(root, self.nranks, self.where("broadcast"))
        x = _c_order(x)
        self._check("broadcast", (root,), x)
        buf = x if self.rank == root else np.empty(x.shape, x.dtype)
        self._call("broadcast", self.comm.Bcast, buf, root)
        return _into(out, buf)

    def reduce(self, x: np.ndarray, root: int = 0, op: int = ReduceOp.SUM,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        check_root(root, self.nranks, self.where("reduce"))
        op = reduce_op(op)
        x = _c_order(x)
        self._check("reduce", (root, op), x)
        if x.dtype.char not in _MPI_REDUCIBLE:
            table = self._gather(x)
            return _into(out, reduce_arrays(list(table), op) if self.rank == root else x)
        res: Any = np.empty(x.shape, x.dtype) if self.rank == root else None
        self._call("reduce", self.comm.Reduce, x, res, self.ops[op], root)
        if self.rank != root:
            return _into(out, x)
        return _into(out, finish_avg(res, self.nranks) if op == ReduceOp.AVG else res)

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        x = _c_order(x)
        self._check("all_gather", (), x)
        return self._gather(x).reshape(gathered_shape(x.shape, self.nranks))

    def reduce_scatter(self, x: np.ndarray, op: int = ReduceOp.SUM) -> np.ndarray:
        op = reduce_op(op)
        x = _c_order(x)
        check_scatter_shape(x, self.nranks, self.where("reduce_scatter"))
        self._check("reduce_scatter", (op,), x)
        if x.dtype.char not in _MPI_REDUCIBLE:
            return np.split(reduce_arrays(list(self._gather(x)), op), self.nranks)[self.rank]
        res = np.empty((x.shape[0] // self.nranks,) + x.shape[1:], x.dtype)
        self._call("reduce_scatter", self.comm.Reduce_scatter_block, x, res, self.ops[op])
        return finish_avg(res, self.nranks) if op == ReduceOp.AVG else res

    def barrier(self) -> None:
        self._check("barrier", (), None)
        self._call("barrier", self.comm.Barrier)

    def send(self, x: np.ndarray, peer: int, channel: int = 0) -> None:
        """Buffered send; ``channel`` keeps apart streams between the same two processes."""
        self.check_peer(peer, "send")
        x = _c_order(x)
        h = _header("send", (), x)
        tag = _TAG_META + 2 * channel
        reqs = [self.comm.Isend(h, peer, tag), self.comm.Isend(x, peer, tag + 1)]
        with self.lock:
            self.sends.append((reqs, (h, x)))
        self._reap()

    def recv(self, peer: int, shape: Optional[Sequence[int]] = None, dtype: Any = None, channel: int = 0,
             what: Optional[str] = None) -> np.ndarray:
        self.check_peer(peer, "recv")
        what = what or f"recv from peer {peer}"
        tag = _TAG_META + 2 * channel
        h = np.empty(5 + MAX_DIMS, np.int64)
        where, src = self.where(what), [self.ranks[peer]]  # the monitor asks only the peer what it does
        self.world.blocking(where, self.comm.Recv, h, peer, tag, ranks=src)
        _, _, got_shape, got_dtype = _unheader(h, 0)
        a = np.empty(got_shape, got_dtype)
        self.world.blocking(where, self.comm.Recv, a, peer, tag + 1, ranks=src)
        check_recv(a, shape, dtype, self.where(what))
        self._reap()
        return a

    def _reap(self):
        with self.lock:
            if self.sends:
                self.sends = [s for s in self.sends if not self.MPI.Request.Testall(s[0])]

    def flush(self) -> None:
        """Wait until every buffered send has been received."""
        with self.lock:
            sends, self.sends = self.sends, []
        for reqs, _ in sends:
            self._call("flushing sends", self.MPI.Request.Waitall, reqs)


def _c_order(x: Any) -> np.ndarray:
    """``x`` as a C-contiguous array of its own shape (``np.ascontiguousarray`` makes a 0-d array 1-d)."""
    return np.ascontiguousarray(x).reshape(np.shape(x))


def _contiguous(a):
    return isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable


def _into(out, res):
    if out is None or out is res:
        return res
    np.copyto(out, res)
    return out


_world = None
_ctx = None


def init_mpi(timeout: Optional[float] = None, check_meta: bool = True,
             abort_on_error: bool = True) -> RankContext:
    """Join the MPI job (once per process) and make its rank context the process's; return it.

    ``timeout``: seconds a blocking call may wait before the job is aborted
    (default: ``$REFIMPL_COMM_TIMEOUT``, which ``refimpl.distributed.launch
    --timeout`` sets, else 30; a later call with a timeout changes it).
    """
    global _world, _ctx
    if _world is None:
        if timeout is None:
            timeout = float(os.environ.get("REFIMPL_COMM_TIMEOUT", DEFAULT_TIMEOUT))
        _world = MPIWorld(timeout=timeout, check_meta=check_meta,
                          abort_on_error=abort_on_error)
        _ctx = _world.context()
        # RankContext.comms is a dict; core's RankContextLike declares it a (settable) Mapping
        set_process_context(_ctx)  # type: ignore[arg-type]
    else:
        if timeout is not None:
            _world.timeout = timeout
        _world.check_meta = check_meta
    return _ctx
