"""The communicator interface: one object per (rank, group).

Mirrors what Paddle spreads over ``ProcessGroup`` (``all_reduce``,
``broadcast``, ``all_gather`` ... on a group of ranks), the per-ring
communicator contexts (``NCCLCommContext::Get(ring_id)``) that collective
ops look up by their ``ring_id`` attr, and ``paddle.distributed.ReduceOp``.

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
import numpy as np

from refimpl.core.errors import InvalidArgument, Unavailable


class ReduceOp:
    """``paddle.distributed.ReduceOp``: the reduction of a collective (same values)."""

    SUM = 0
    MAX = 1
    MIN = 2
    PROD = 3
    AVG = 4


REDUCE_NAMES = {ReduceOp.SUM: "sum", ReduceOp.MAX: "max", ReduceOp.MIN: "min",
                ReduceOp.PROD: "prod", ReduceOp.AVG: "avg"}
_BY_NAME = {v: k for k, v in REDUCE_NAMES.items()}
_NUMPY_REDUCE = {ReduceOp.SUM: np.add, ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum,
                 ReduceOp.PROD: np.multiply, ReduceOp.AVG: np.add}

DEFAULT_TIMEOUT = 30.0  # seconds a rank waits for its peers before giving up


class RankFailed(Unavailable):
    """Another rank of the job failed, so this one stopped.

    ``rank`` is the rank that failed first and ``error`` its exception.
    """

    def __init__(self, message, rank=None, error=None, errors=None):
        super().__init__(message)
        self.rank, self.error, self.errors = rank, error, errors or {}


def reduce_op(op):
    """A ReduceOp value from a ReduceOp int or a name (``"sum"``, ``"avg"`` ...)."""
    if isinstance(op, str) and op.lower() in _BY_NAME:
        return _BY_NAME[op.lower()]
    if isinstance(op, (int, np.integer)) and not isinstance(op, bool) and int(op) in REDUCE_NAMES:
        return int(op)
    raise InvalidArgument(f"unknown reduce op {op!r}; expected one of ReduceOp.SUM/MAX/MIN/PROD/AVG "
                          f"or {sorted(_BY_NAME)}")


def reduce_arrays(arrays, op):
    """Reduce ``arrays`` in list order (rank order): the same bits on every rank."""
    op = reduce_op(op)
    ufunc = _NUMPY_REDUCE[op]
    out = np.array(arrays[0], copy=True)
    for a in arrays[1:]:
        ufunc(out, a, out=out)
    if op == ReduceOp.AVG:
        out = finish_avg(out, len(arrays))
    return out


def finish_avg(total, n):
    """``total / n`` in the dtype of ``total`` (integers truncate, as NCCL's avg)."""
    if total.dtype.kind in "fc":
        np.divide(total, total.dtype.type(n), out=total)
        return total
    return (total / n).astype(total.dtype)


def describe(x):
    """``[2, 3] float32`` for messages."""
    return f"{list(np.shape(x))} {np.asarray(x).dtype}" if x is not None else "nothing"


def meta_of(kind, args, x):
    """What every rank of a collective must agree on: ``(kind, args, shape, dtype name)``."""
    if x is None:
        return (kind, tuple(args), (), "")
    return (kind, tuple(args), tuple(x.shape), x.dtype.name)


def check_same(what, metas, ranks=None):
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


def check_root(root, nranks, what):
    if not 0 <= root < nranks:
        raise InvalidArgument(f"{what}: root {root} is not a rank of the group (it has {nranks} ranks)")


def check_scatter_shape(x, nranks, what):
    if np.ndim(x) == 0 or np.shape(x)[0] % nranks:
        raise InvalidArgument(f"{what}: the first dim of shape {list(np.shape(x))} must be divisible by the "
                              f"number of ranks ({nranks})")


def gathered_shape(shape, nranks):
    """Paddle's all_gather: concatenate on dim 0 (stack a 0-D tensor)."""
    shape = tuple(shape)
    return (nranks,) if not shape else (shape[0] * nranks,) + shape[1:]


def check_recv(x, shape, dtype, what):
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

    def __init__(self, ring_id, ranks, global_rank, timeout=DEFAULT_TIMEOUT):
        self.ring_id = ring_id
        self.ranks = tuple(ranks)
        self.global_rank = global_rank
        self.rank = self.ranks.index(global_rank)
        self.nranks = len(self.ranks)
        self.timeout = timeout

    def where(self, what):
        return f"rank {self.global_rank}: {what} on ring {self.ring_id}"

    def check_peer(self, peer, what):
        if not 0 <= peer < self.nranks or peer == self.rank:
            raise InvalidArgument(f"{self.where(what)}: peer {peer} is not another rank of the group "
                                  f"(ranks 0..{self.nranks - 1}, this is {self.rank})")

    # The interface (every method blocks until this rank's part is done).
    def all_reduce(self, x, op=ReduceOp.SUM, out=None):
        raise NotImplementedError

    def broadcast(self, x, root=0, out=None):
        raise NotImplementedError

    def reduce(self, x, root=0, op=ReduceOp.SUM, out=None):
        """The reduction lands on ``root``; other ranks get ``x`` back unchanged."""
        raise NotImplementedError

    def all_gather(self, x):
        raise NotImplementedError

    def reduce_scatter(self, x, op=ReduceOp.SUM):
        raise NotImplementedError

    def send(self, x, peer):
        raise NotImplementedError

    def recv(self, peer, shape=None, dtype=None):
        raise NotImplementedError

    def barrier(self):
        raise NotImplementedError

    def __repr__(self):
        return (f"{type(self).__name__}(ring_id={self.ring_id}, rank={self.rank}, nranks={self.nranks}, "
                f"ranks={list(self.ranks)})")
