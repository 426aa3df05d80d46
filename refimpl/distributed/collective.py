"""The ``paddle.distributed`` collective API: init, ranks, groups, collectives.

Mirrors ``paddle/distributed/collective.py`` and
``paddle/distributed/communication/*.py``: ``init_parallel_env``,
``get_rank``, ``get_world_size``, ``new_group`` (returning a ``Group`` with
``id`` = ring id, ``rank``, ``ranks``, ``nranks``), ``all_reduce``,
``broadcast``, ``reduce``, ``all_gather``, ``reduce_scatter``, ``send``,
``recv``, ``barrier`` and ``ReduceOp``. As in Paddle, ``src``/``dst`` are
global ranks and ring ids of new groups start at 10.

Each collective works in two ways, as Paddle's does in static and dynamic
mode:

* on a static ``Variable`` it appends the collective op to the program
  (``c_allreduce_sum`` ..., ``c_broadcast``, ``c_allgather``,
  ``c_reducescatter``, ``c_reduce_sum``, ``send_v2``, ``recv_v2``,
  ``barrier``), to run later on every rank;
* on a NumPy array or a ``DenseTensor`` it runs now, through the current
  rank's communicator, in place where Paddle works in place.

Difference: there are no async tasks; every call completes before it
returns (``sync_op`` is accepted and recorded in ``use_calc_stream``).
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

import numpy as np

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.core.tensor import DenseTensor
from refimpl.framework.variable import Variable

from .communication import ReduceOp, context, reduce_op
from .communication.communicator import REDUCE_NAMES

_FIRST_NEW_RING = 10  # Paddle: len(group map) + max(nrings, 9), the world group being ring 0


class Group:
    """A group of ranks: ``paddle.distributed.collective.Group``."""

    def __init__(self, rank_in_group: int, id: int, ranks: Sequence[int], name: Optional[str] = None) -> None:
        self.rank, self.id, self.ranks = rank_in_group, id, list(ranks)
        self.nranks = len(self.ranks)
        self.name = name or f"_default_pg{id}"

    @property
    def world_size(self) -> int:
        return self.nranks

    def is_member(self) -> bool:
        return self.rank >= 0

    def get_group_rank(self, rank: int) -> int:
        """The rank within this group of global ``rank`` (-1 if it is not a member)."""
        return self.ranks.index(rank) if rank in self.ranks else -1

    def __repr__(self):
        return (f"rank: {self.rank}, nranks: {self.nranks}, id: {self.id}, ranks: {', '.join(map(str, self.ranks))}"
                f"; name: {self.name}")


def _launched_by_mpiexec():
    return any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"))


def init_parallel_env(backend: Optional[str] = None, timeout: Optional[float] = None) -> Group:
    """Set up this rank's communication; return the world group.

    Inside ``run_in_process`` / ``run_hybrid`` the thread's rank is already
    set; else under ``mpiexec`` (or with ``backend="mpi"``) this joins the
    MPI job; otherwise it is the single rank 0 of 1. ``timeout`` (seconds)
    bounds waits.
    """
    if backend not in (None, "mpi", "inprocess", "gloo", "nccl"):
        raise InvalidArgument(f"init_parallel_env: unknown backend {backend!r}")
    if not context.has_thread_context() and (backend == "mpi" or (backend is None and _launched_by_mpiexec())):
        from .communication import init_mpi
        ctx = init_mpi(timeout=timeout)
    else:
        ctx = context.current()
        if timeout is not None:
            for c in ctx.comms.values():
                c.timeout = timeout
            ctx.world.timeout = timeout
    return _get_group(None)


def get_rank(group: Optional[Group] = None) -> int:
    """This rank: global, or within ``group`` (-1 if not a member)."""
    return context.current().rank if group is None else group.rank


def get_world_size(group: Optional[Group] = None) -> int:
    return context.current().world_size if group is None else group.nranks


def get_backend(group: Optional[Group] = None) -> str:
    return context.current().backend


def new_group(ranks: Optional[Sequence[int]] = None, backend: Optional[str] = None,
              timeout: Optional[float] = None) -> Group:
    """Create a group on every rank (every rank must call it, in the same order)."""
    ctx = context.current()
    ranks = sorted(range(ctx.world_size) if ranks is None else ranks)
    ring_id = max(_FIRST_NEW_RING - 1, max(ctx.groups)) + 1
    comm = ctx.add_group(ring_id, ranks)
    if comm is not None and timeout is not None:
        comm.timeout = timeout
    return _get_group(ring_id)


def _get_group(group):
    ctx = context.current()
    ring_id = 0 if group is None else group.id if isinstance(group, Group) else int(group)
    if ring_id not in ctx.groups:
        raise InvalidArgument(f"rank {ctx.rank}: group {ring_id} does not exist; create it with new_group")
    ranks = ctx.groups[ring_id]
    return Group(ranks.index(ctx.rank) if ctx.rank in ranks else -1, ring_id, ranks)


def _in_group(group, rank, what):
    g = _get_group(group)
    r = g.get_group_rank(rank)
    if r < 0:
        raise InvalidArgument(f"{what}: rank {rank} is not in the group {g.ranks}")
    return g, r


# ---- running now or appending an op ------------------------------------------
def _now(tensor, fn):
    """Run ``fn(array) -> array`` on an ndarray (in place) or a DenseTensor; return the tensor."""
    if isinstance(tensor, DenseTensor):
        tensor._array = fn(np.asarray(tensor._array))
        return tensor
    if isinstance(tensor, np.ndarray):
        res = fn(tensor)
        if res is not tensor:
            np.copyto(tensor, res)
        return tensor
    raise InvalidArgument(f"expected a static Variable, a NumPy array or a DenseTensor, got {type(tensor).__name__}")


def _append(op_type, inputs, outputs, attrs):
    from refimpl.static.layer_helper import LayerHelper
    return LayerHelper(op_type).append_op(type=op_type, inputs=inputs, outputs=outputs, attrs=attrs)


def all_reduce(tensor: Any, op: Any = ReduceOp.SUM, group: Optional[Group] = None,
               sync_op: bool = True) -> Any:
    """Reduce ``tensor`` over the group; every rank gets the result, in place."""
    op, g = reduce_op(op), _get_group(group)
    if isinstance(tensor, Variable):
        return _append(f"c_allreduce_{REDUCE_NAMES[op]}", {"X": [tensor]}, {"Out": [tensor]},
                       {"ring_id": g.id, "use_calc_stream": sync_op})
    comm = context.current().comm(g.id)
    return _now(tensor, lambda a: comm.all_reduce(a, op, out=a if a.flags.writeable else None))


def broadcast(tensor: Any, src: int, group: Optional[Group] = None, sync_op: bool = True) -> Any:
    """Copy ``tensor`` of global rank ``src`` to every rank of the group, in place."""
    g, root = _in_group(group, src, "broadcast")
    if isinstance(tensor, Variable):
        return _append("c_broadcast", {"X": [tensor]}, {"Out": [tensor]},
                       {"ring_id": g.id, "root": root, "use_calc_stream": sync_op})
    comm = context.current().comm(g.id)
    return _now(tensor, lambda a: comm.broadcast(a, root))


def reduce(tensor: Any, dst: int, op: Any = ReduceOp.SUM, group: Optional[Group] = None,
           sync_op: bool = True) -> Any:
    """Reduce onto global rank ``dst`` (static mode: sum only, ``c_reduce_sum``)."""
    g, root = _in_group(group, dst, "reduce")
    op = reduce_op(op)
    if isinstance(tensor, Variable):
        if op != ReduceOp.SUM:
            raise InvalidArgument(f"reduce: static programs support only ReduceOp.SUM (c_reduce_sum), got {op}")
        return _append("c_reduce_sum", {"X": [tensor]}, {"Out": [tensor]},
                       {"ring_id": g.id, "root_id": root, "use_calc_stream": sync_op})
    comm = context.current().comm(g.id)
    return _now(tensor, lambda a: comm.reduce(a, root, op))


def all_gather(tensor_list: List[Any], tensor: Any, group: Optional[Group] = None,
               sync_op: bool = True) -> None:
    """Fill ``tensor_list`` with every rank's ``tensor``, in rank order."""
    g = _get_group(group)
    if isinstance(tensor, Variable):
        from refimpl.static.layer_helper import LayerHelper
        out = LayerHelper("c_allgather").create_variable_for_type_inference(tensor.dtype)
        _append("c_allgather", {"X": [tensor]}, {"Out": [out]},
                {"ring_id": g.id, "nranks": g.nranks, "use_calc_stream": sync_op})
        from refimpl.tensor.manipulation import split
        tensor_list.clear()
        tensor_list.extend(split(out, g.nranks, 0))
        return None
    arr = tensor._array if isinstance(tensor, DenseTensor) else np.asarray(tensor)
    whole = context.current().comm(g.id).all_gather(arr)
    parts = list(whole) if arr.ndim == 0 else np.split(whole, g.nranks)
    tensor_list.clear()
    tensor_list.extend(parts)
    return None


def reduce_scatter(tensor: Any, tensor_list: Sequence[Any], op: Any = ReduceOp.SUM,
                   group: Optional[Group] = None, sync_op: bool = True) -> Any:
    """Reduce the concatenation of ``tensor_list`` and give rank i its i-th part in ``tensor``."""
    g, op = _get_group(group), reduce_op(op)
    if isinstance(tensor, Variable):
        if op != ReduceOp.SUM:
            raise InvalidArgument(f"reduce_scatter: static programs support only ReduceOp.SUM, got {op}")
        src = tensor_list
        if isinstance(tensor_list, (list, tuple)):
            from refimpl.tensor.manipulation import concat
            src = concat(list(tensor_list), 0)
        return _append("c_reducescatter", {"X": [src]}, {"Out": [tensor]},
                       {"ring_id": g.id, "nranks": g.nranks, "use_calc_stream": sync_op})
    parts = tensor_list if not isinstance(tensor_list, (list, tuple)) else np.concatenate(
        [np.asarray(t) for t in tensor_list])
    res = context.current().comm(g.id).reduce_scatter(np.asarray(parts), op)
    return _now(tensor, lambda a: res)


def send(tensor: Any, dst: int = 0, group: Optional[Group] = None, sync_op: bool = True) -> Any:
    g, peer = _in_group(group, dst, "send")
    if isinstance(tensor, Variable):
        return _append("send_v2", {"X": [tensor]}, {},
                       {"ring_id": g.id, "peer": peer, "use_calc_stream": sync_op})
    arr = tensor._array if isinstance(tensor, DenseTensor) else np.asarray(tensor)
    context.current().comm(g.id).send(arr, peer)
    context.record("send", None, arr.nbytes, peer, g.id)
    return None


def recv(tensor: Any, src: int = 0, group: Optional[Group] = None, sync_op: bool = True) -> Any:
    g, peer = _in_group(group, src, "recv")
    if isinstance(tensor, Variable):
        return _append("recv_v2", {}, {"Out": [tensor]},
                       {"ring_id": g.id, "peer": peer, "out_shape": list(tensor.shape or []),
                        "dtype": to_vartype(tensor.dtype), "use_calc_stream": sync_op})
    comm = context.current().comm(g.id)
    if isinstance(tensor, DenseTensor):
        tensor._array = comm.recv(peer)
        got = tensor._array
    else:
        got = comm.recv(peer, tensor.shape, tensor.dtype)
        np.copyto(tensor, got)
    context.record("recv", None, got.nbytes, peer, g.id)
    return tensor


def barrier(group: Optional[Group] = None) -> Any:
    g = _get_group(group)
    context.current().comm(g.id).barrier()


__all__ = ["ReduceOp", "Group", "init_parallel_env", "get_rank", "get_world_size", "get_backend", "new_group",
           "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send", "recv",
           "barrier"]
