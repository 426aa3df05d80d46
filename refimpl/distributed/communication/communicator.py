"""The communicator interface: one object per (rank, group).

Mirrors what Paddle spreads over ``ProcessGroup`` (``all_reduce``,
``broadcast``, ``all_gather`` ... on a group of ranks), the per-ring
communicator contexts (``NCCLCommContext::Get(ring_id)``) that collective
ops look up by their ``ring_id`` attr, and ``paddle.distributed.ReduceOp``
(defined in ``refimpl.core.reduce_op``, below the op kernels, and re-exported here).

A :class:`Communicator` belongs to one rank and one group (ring id). Every
collective must be called by every rank of the group in the same order, as
with NCCL or MPI; ranks, ``root`` and ``peer`` are ranks *within the group*.
Two implementations exist: ``inprocess`` (ranks are threads of one process)
and ``mpi`` (ranks are MPI processes). Differences from Paddle:

* Each collective checks that all ranks passed the same kind of call and the
  same shape and dtype, and raises :class:`InvalidArgument` naming the rank
  that differs (NCCL would hang or corrupt memory).
* ``send`` never blocks (it is buffered), so a schedule cannot deadlock on
  two ranks sending to each other first; ``recv`` blocks up to ``timeout``.
* Results are NumPy arrays; ``out=`` lets a caller reduce into a buffer, as
  Paddle does when an op's input and output are the same variable.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from refimpl.core.errors import InvalidArgument, Unavailable
from refimpl.core.reduce_op import REDUCE_NAMES, ReduceOp  # noqa: F401  (kernels share them from core)
from refimpl.ops.common import gathered_shape  # noqa: F401  (the all_gather shape rule, shared with its op)

_BY_NAME = {v: k for k, v in REDUCE_NAMES.items()}
_NUMPY_REDUCE = {ReduceOp.SUM: np.add, ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum,
                 ReduceOp.PROD: np.multiply, ReduceOp.AVG: np.add}

DEFAULT_TIMEOUT = 30.0  # seconds a rank waits for its peers before giving up

# The exit status of a job refimpl ends (MPI_Abort's code, which mpiexec returns; the launcher's too):
EXIT_FAILED = 1   # a rank raised an exception
EXIT_HUNG = 124   # a rank did not arrive within the timeout (124, as coreutils' ``timeout``), or a deadlock
EXIT_DIED = 125   # a rank's process ended mid-job (os._exit, a signal: the latter named by the launcher)


class RankFailed(Unavailable):
    """Another rank of the job failed, so this one stopped.

    ``rank`` is the rank that failed first and ``error`` its exception.
    """

    def __init__(self, message: str, rank: Optional[int] = None, error: Optional[BaseException] = None,
                 errors: Optional[Dict[int, BaseException]] = None) -> None:
        super().__init__(message)
        self.rank, self.error, self.errors = rank, error, errors or {}


class RankHung(RankFailed):
    """A rank did not arrive where its peers waited for it within the timeout.

    ``rank`` is the rank blamed (the first that never arrived), ``hung`` every
    rank blamed, ``waited`` the ranks that were waiting for them, and
    ``error`` the :class:`~refimpl.core.errors.ExecutionTimeout` of the first
    waiter whose wait ran out. Paddle's collectives report a hang only as a
    watchdog timeout of the waiting rank (``ProcessGroupNCCL``'s
    ``FLAGS_nccl_blocking_wait``); here the victim's timeout is turned into a
    verdict about the rank that did not come.
    """

    def __init__(self, message: str, rank: Optional[int] = None, error: Optional[BaseException] = None,
                 errors: Optional[Dict[int, BaseException]] = None, hung: Sequence[int] = (),
                 waited: Sequence[int] = ()) -> None:
        super().__init__(message, rank, error, errors)
        self.hung, self.waited = list(hung), list(waited)


def exit_code_of(exc: RankFailed) -> int:
    """The job's exit status for ``exc``: EXIT_HUNG for a hang or deadlock, else EXIT_FAILED."""
    return EXIT_HUNG if isinstance(exc, RankHung) else EXIT_FAILED


def reduce_op(op: Union[int, str]) -> int:
    """A ReduceOp value from a ReduceOp int or a name (``"sum"``, ``"avg"`` ...)."""
    if isinstance(op, str) and op.lower() in _BY_NAME:
        return _BY_NAME[op.lower()]
    if isinstance(op, (int, np.integer)) and not isinstance(op, bool) and int(op) in REDUCE_NAMES:
        return int(op)
    raise InvalidArgument(f"unknown reduce op {op!r}; expected one of ReduceOp.SUM/MAX/MIN/PROD/AVG "
                          f"or {sorted(_BY_NAME)}")


def reduce_arrays(arrays: Sequence[np.ndarray], op: int) -> np.ndarray:
    """Reduce ``arrays`` in list order (rank order): the same bits on every rank."""
    op = reduce_op(op)
    ufunc = _NUMPY_REDUCE[op]
    out = np.array(arrays[0], copy=True)
    for a in arrays[1:]:
        ufunc(out, a, out=out)
    if op == ReduceOp.AVG:
        out = finish_avg(out, len(arrays))
    return out


def finish_avg(total: np.ndarray, n: int) -> np.ndarray:
    """``total / n`` in the dtype of ``total`` (integers truncate, as NCCL's avg)."""
    if total.dtype.kind in "fc":
        np.divide(total, total.dtype.type(n), out=total)
        return total
    return (total / n).astype(total.dtype)


def describe(x: Any) -> str:
    """``[2, 3] float32`` for messages."""
    return f"{list(np.shape(x))} {np.asarray(x).dtype}" if x is not None else "nothing"


def meta_of(kind: str, args: Sequence[Any], x: Optional[np.ndarray]) -> Tuple[Any, ...]:
    """What every rank of a collective must agree on: ``(kind, args, shape, dtype name)``."""
    if x is None:
        return (kind, tuple(args), (), "")
    return (kind, tuple(args), tuple(x.shape), x.dtype.name)


def check_same(what: str, metas: Sequence[Tuple[Any, ...]], ranks: Optional[Sequence[int]] = None) -> None:
    """Raise InvalidArgument unless every rank's ``(kind, args, shape, dtype)`` matches the first's.

    ``metas`` is in group order and ``ranks`` are the matching global ranks;
    the message names the first rank that differs and what it passed, next
    to what the group's first rank passed.
    """
    ranks = list(ranks if ranks is not None else range(len(metas)))
    ref, r0 = metas[0], ranks[0]
    for r, m in zip(ranks, metas):
        if m[:2] != ref[:2]:
            raise InvalidArgument(f"{what}: rank {r} called {_call(m)} but rank {r0} called {_call(ref)}; "
                                  f"every rank of a group must make the same collective calls in the same order")
    for r, m in zip(ranks, metas):
        if tuple(m[2]) != tuple(ref[2]) or m[3] != ref[3]:
            raise InvalidArgument(f"{what}: rank {r} passed a tensor of shape {list(m[2])} {m[3]} but rank {r0} "
                                  f"passed {list(ref[2])} {ref[3]}; shapes and dtypes must match across ranks")


def _call(meta):
    """``all_reduce(sum)``, ``broadcast(root=1)`` ... from ``(kind, args, ...)``."""
    kind, args = meta[0], tuple(meta[1])
    names = {"all_reduce": ("op",), "reduce_scatter": ("op",), "reduce": ("root", "op"),
             "broadcast": ("root",)}.get(kind, ())
    parts = [REDUCE_NAMES.get(a, a) if n == "op" else f"{n}={a}" for n, a in zip(names, args)]
    return f"{kind}({', '.join(map(str, parts))})"


def check_root(root: int, nranks: int, what: str) -> None:
    if not 0 <= root < nranks:
        raise InvalidArgument(f"{what}: root {root} is not a rank of the group (it has {nranks} ranks)")


def check_scatter_shape(x: np.ndarray, nranks: int, what: str) -> None:
    if np.ndim(x) == 0 or np.shape(x)[0] % nranks:
        raise InvalidArgument(f"{what}: the first dim of shape {list(np.shape(x))} must be divisible by the "
                              f"number of ranks ({nranks})")


def check_recv(x: np.ndarray, shape: Optional[Sequence[int]], dtype: Any, what: str) -> None:
    """Check a received array against the expected shape (-1 = any) and dtype."""
    if dtype is not None and np.dtype(dtype) != x.dtype:
        raise InvalidArgument(f"{what}: expected dtype {np.dtype(dtype)} but the peer sent {describe(x)}")
    if shape is not None and len(shape) > 0:
        if len(shape) != x.ndim or any(d >= 0 and d != s for d, s in zip(shape, x.shape)):
            raise InvalidArgument(f"{what}: expected shape {list(shape)} but the peer sent {describe(x)}")


class Communicator:
    """One rank's view of one group. Subclasses implement the collectives.

    Attributes: ``ring_id`` (Paddle's ring id / group id), ``rank`` (this
    rank within the group), ``nranks``, ``ranks`` (the global ranks of the
    group, in group order), ``global_rank`` and ``timeout`` (seconds any
    blocking call waits before it fails; ``None`` waits for ever).
    """

    backend = "base"

    def __init__(self, ring_id: int, ranks: Sequence[int], global_rank: int,
                 timeout: Optional[float] = DEFAULT_TIMEOUT) -> None:
        self.ring_id = ring_id
        self.ranks = tuple(ranks)
        self.global_rank = global_rank
        self.rank = self.ranks.index(global_rank)
        self.nranks = len(self.ranks)
        self.timeout = timeout

    def where(self, what: str) -> str:
        return f"rank {self.global_rank}: {what} on ring {self.ring_id}"

    def check_peer(self, peer: int, what: str) -> None:
        if not 0 <= peer < self.nranks or peer == self.rank:
            raise InvalidArgument(f"{self.where(what)}: peer {peer} is not another rank of the group "
                                  f"(ranks 0..{self.nranks - 1}, this is {self.rank})")

    # The interface (every method blocks until this rank's part is done).
    def all_reduce(self, x: np.ndarray, op: int = ReduceOp.SUM,
                   out: Optional[np.ndarray] = None) -> np.ndarray:
        raise NotImplementedError

    def broadcast(self, x: np.ndarray, root: int = 0, out: Optional[np.ndarray] = None) -> np.ndarray:
        raise NotImplementedError

    def reduce(self, x: np.ndarray, root: int = 0, op: int = ReduceOp.SUM,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        """The reduction lands on ``root``; other ranks get ``x`` back unchanged."""
        raise NotImplementedError

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def reduce_scatter(self, x: np.ndarray, op: int = ReduceOp.SUM) -> np.ndarray:
        raise NotImplementedError

    def send(self, x: np.ndarray, peer: int) -> None:
        raise NotImplementedError

    def recv(self, peer: int, shape: Optional[Sequence[int]] = None, dtype: Any = None) -> np.ndarray:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def __repr__(self):
        return (f"{type(self).__name__}(ring_id={self.ring_id}, rank={self.rank}, nranks={self.nranks}, "
                f"ranks={list(self.ranks)})")
