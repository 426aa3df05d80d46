"""NCCL rings over MPI ranks: the ``MPICommunicator`` whose collectives on device buffers run on NCCL.

Paddle's GPU collectives run on NCCL communicators made per ring
(``paddle/fluid/platform/collective_helper.cc``, ``NCCLCommContext``); here an
MPI ring (``mpi.MPIWorld.new_communicator``) gets one too when the process's
backend is "cuda" and every rank of the ring can use NCCL
(:func:`select_nccl`). Host arrays, dtypes NCCL lacks, and ``send``/``recv``
keep the MPI path of :class:`mpi.MPICommunicator`.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .communicator import ReduceOp, check_root, check_scatter_shape, reduce_op
from .mpi import MPICommunicator, MPIWorld


# ---- NCCL on device buffers (the cuda backend) --------------------------------------------
def select_nccl(world: MPIWorld, sub: Any, ring_id: int, rank: int, ranks: Optional[Sequence[int]] = None) -> Any:
    """The NCCL communicator for a group (``cuda_backend.nccl.create``), or None to stay on MPI.

    Only when the process's backend is "cuda" (``refimpl.set_backend`` /
    ``REFIMPL_BACKEND``, set before the rings are made) and
    ``cuda_backend.nccl.nccl_usable()`` holds on *every* rank of the group:
    the ranks agree (a MIN all-reduce) before anyone starts the collective
    NCCL bootstrap, and again after it, so they never take different paths.
    ``create`` itself falls back to host staging when NCCL refuses (e.g. two
    ranks on one GPU); then the MPI communicator is kept. ``ranks``: the
    group's world ranks, those the monitor watches while the ranks agree.
    """
    from refimpl.executor.backend import get_backend
    if get_backend() != "cuda":
        return None
    try:
        from cuda_backend import nccl
    except ImportError:
        return None
    what = f"rank {rank}: choosing NCCL for ring {ring_id}"

    def everyone(ok):
        return all_agree(world, sub, ok, what, ranks)

    if not everyone(nccl.nccl_usable()):
        return None
    comm = nccl.create(sub)
    if not everyone(getattr(comm, "backend", None) == "nccl"):
        comm.close()
        return None
    return comm


def all_agree(world: MPIWorld, comm: Any, ok: bool, what: str, ranks: Optional[Sequence[int]] = None) -> bool:
    """Whether ``ok`` holds on every rank of ``comm`` (world ranks ``ranks``, default all): a MIN all-reduce
    of one int32 under the monitor."""
    flag = np.array([int(bool(ok))], np.int32)
    world.blocking(what, comm.Allreduce, world.MPI.IN_PLACE, flag, world.MPI.MIN, ranks=ranks)
    return bool(flag[0])


class NcclRingCommunicator(MPICommunicator):
    """An MPI ring communicator whose collectives on device arrays run on NCCL.

    Device arrays (numba, as the cuda backend's tensors) go to ``self.nccl``
    (a ``cuda_backend.nccl.NcclComm``) on the kernels' stream and come back as
    device arrays; host arrays, dtypes NCCL lacks, and ``send``/``recv`` (kept
    buffered and non-blocking, with their shape headers, as every refimpl
    communicator's) take the inherited MPI path. The small MPI header check
    still runs first, so a mismatched call raises instead of hanging in NCCL.
    """

    backend = "nccl"

    def __init__(self, world: MPIWorld, ring_id: int, ranks: Sequence[int], global_rank: int, comm: Any,
                 nccl: Any) -> None:
        super().__init__(world, ring_id, ranks, global_rank, comm)
        self.nccl = nccl

    @staticmethod
    def _on_device(x):
        from cuda_backend.device import is_device
        from cuda_backend.nccl import _NCCL_TYPE
        return x is not None and is_device(x) and x.dtype in _NCCL_TYPE

    @staticmethod
    def _into_device(out, res):
        if out is None or out is res:
            return res
        out.copy_to_device(res)
        return out

    def all_reduce(self, x: np.ndarray, op: int = ReduceOp.SUM,
                   out: Optional[np.ndarray] = None) -> np.ndarray:
        if not self._on_device(x):
            return super().all_reduce(x, op, out)
        op = reduce_op(op)
        self._check("all_reduce", (op,), x)
        return self._into_device(out, self.nccl.all_reduce(x, op))

    def broadcast(self, x: np.ndarray, root: int = 0, out: Optional[np.ndarray] = None) -> np.ndarray:
        if not self._on_device(x):
            return super().broadcast(x, root, out)
        check_root(root, self.nranks, self.where("broadcast"))
        self._check("broadcast", (root,), x)
        return self._into_device(out, self.nccl.broadcast(x, root))

    def reduce(self, x: np.ndarray, root: int = 0, op: int = ReduceOp.SUM,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        if not self._on_device(x):
            return super().reduce(x, root, op, out)
        check_root(root, self.nranks, self.where("reduce"))
        op = reduce_op(op)
        self._check("reduce", (root, op), x)
        res = self.nccl.all_reduce(x, op)  # (the binding has no ncclReduce; non-roots keep x)
        return self._into_device(out, res if self.rank == root else x)

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        if not self._on_device(x):
            return super().all_gather(x)
        self._check("all_gather", (), x)
        return self.nccl.all_gather(x)

    def reduce_scatter(self, x: np.ndarray, op: int = ReduceOp.SUM) -> np.ndarray:
        if not self._on_device(x):
            return super().reduce_scatter(x, op)
        op = reduce_op(op)
        check_scatter_shape(x, self.nranks, self.where("reduce_scatter"))
        self._check("reduce_scatter", (op,), x)
        return self.nccl.reduce_scatter(x, op)

    def send(self, x: Any, peer: int, channel: int = 0) -> None:
        from cuda_backend.device import is_device
        if is_device(x):
            x = x.copy_to_host()
        super().send(x, peer, channel)
