"""NCCL over mpi4py: collectives on device buffers, bootstrapped with MPI.

Mirrors Paddle's ``ProcessGroupNCCL`` / ``NCCLCommContext``: rank 0 makes
the ``ncclUniqueId``, MPI broadcasts it, every rank calls
``ncclCommInitRank``; then ``all_reduce``, ``broadcast``, ``all_gather``,
``reduce_scatter``, ``send`` / ``recv`` run on device arrays, on numba's
default stream (so they are ordered with the kernels). The library is
``libnccl.so.2`` from the ``nvidia-nccl-cu12`` wheel, bound with ctypes.

Where NCCL cannot run (no GPU, numba's simulator, no libnccl), :func:`create`
returns :class:`HostStagedComm`: the same interface, staging each buffer
through host memory and MPI. Results are new device arrays (the refimpl
communicators' style); ``all_gather`` concatenates on dim 0.

    mpiexec -n 2 python -m cuda_backend.nccl      # self-test: prints "nccl self-test OK"
"""
import ctypes
import importlib.util
import os

import numpy as np

from refimpl.core.errors import Unavailable

from .device import available, cuda, dev, empty, simulated, to_device, to_host

SUM, MAX, MIN, PROD, AVG = 0, 1, 2, 3, 4  # refimpl's (= Paddle's) ReduceOp values
_NCCL_OP = {SUM: 0, PROD: 1, MAX: 2, MIN: 3, AVG: 4}
_NCCL_TYPE = {np.dtype("int8"): 0, np.dtype("uint8"): 1, np.dtype("int32"): 2, np.dtype("uint32"): 3,
              np.dtype("int64"): 4, np.dtype("uint64"): 5, np.dtype("float16"): 6, np.dtype("float32"): 7,
              np.dtype("float64"): 8}


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def find_libnccl():
    """Path of libnccl.so.2 from the nvidia-nccl-cu12 wheel (or the system's), or None."""
    spec = importlib.util.find_spec("nvidia.nccl") if importlib.util.find_spec("nvidia") else None
    for d in (spec.submodule_search_locations if spec else []):
        path = os.path.join(d, "lib", "libnccl.so.2")
        if os.path.exists(path):
            return path
    import ctypes.util
    return ctypes.util.find_library("nccl")


def _mpi(comm):
    if comm is not None:
        return comm
    from mpi4py import MPI
    return MPI.COMM_WORLD


def broadcast_unique_id(mpi_comm, uid, root=0):
    """Rank ``root``'s ``NcclUniqueId`` on every rank: its 128 raw bytes in one ``Bcast`` of a uint8 buffer.

    All 128 bytes travel, zeros included (the id holds a socket address,
    whose bytes are often zero), and nothing is pickled.
    """
    buf = np.frombuffer(bytearray(uid), np.uint8).copy()  # the structure's raw bytes, not a C string
    mpi_comm.Bcast(buf, root=root)
    return NcclUniqueId.from_buffer_copy(buf.tobytes())


def _ptr(a):
    return ctypes.c_void_p(a.__cuda_array_interface__["data"][0] if a.size else 0)


class NcclComm:
    """One NCCL communicator over the ranks of an MPI communicator."""

    backend = "nccl"

    def __init__(self, mpi_comm=None, lib_path=None):
        self.mpi = _mpi(mpi_comm)
        self.rank, self.nranks = self.mpi.Get_rank(), self.mpi.Get_size()
        self.lib = ctypes.CDLL(lib_path or find_libnccl())
        self.lib.ncclGetErrorString.restype = ctypes.c_char_p
        uid = NcclUniqueId()
        if self.rank == 0:
            self._check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        uid = broadcast_unique_id(self.mpi, uid)
        self.comm = ctypes.c_void_p()
        cuda.select_device(self.rank % len(cuda.gpus))  # ranks share GPUs round robin
        cuda.current_context()  # NCCL joins the context numba made current
        self._check(self.lib.ncclCommInitRank(ctypes.byref(self.comm), self.nranks, uid, self.rank),
                    "ncclCommInitRank")

    def _check(self, code, what):
        if code != 0:
            msg = self.lib.ncclGetErrorString(code).decode()
            raise Unavailable(f"{what} failed on rank {self.rank}: NCCL error {code}: {msg}")

    def _call(self, name, *args):
        self._check(getattr(self.lib, name)(*args, self.comm, ctypes.c_void_p(0)), name)

    def all_reduce(self, x, op=SUM):
        x = dev(x)
        out = empty(x.shape, x.dtype)
        self._call("ncclAllReduce", _ptr(x), _ptr(out), ctypes.c_size_t(x.size), _NCCL_TYPE[x.dtype],
                   _NCCL_OP[op])
        return out

    def broadcast(self, x, root=0):
        x = dev(x)
        out = empty(x.shape, x.dtype)
        self._call("ncclBroadcast", _ptr(x), _ptr(out), ctypes.c_size_t(x.size), _NCCL_TYPE[x.dtype], root)
        return out

    def all_gather(self, x):
        x = dev(x)
        shape = (self.nranks,) if not x.shape else (x.shape[0] * self.nranks,) + tuple(x.shape[1:])
        out = empty(shape, x.dtype)
        self._call("ncclAllGather", _ptr(x), _ptr(out), ctypes.c_size_t(x.size), _NCCL_TYPE[x.dtype])
        return out

    def reduce_scatter(self, x, op=SUM):
        x = dev(x)
        out = empty((x.shape[0] // self.nranks,) + tuple(x.shape[1:]), x.dtype)
        self._call("ncclReduceScatter", _ptr(x), _ptr(out), ctypes.c_size_t(out.size), _NCCL_TYPE[x.dtype],
                   _NCCL_OP[op])
        return out

    def send(self, x, peer):
        x = dev(x)
        self._call("ncclSend", _ptr(x), ctypes.c_size_t(x.size), _NCCL_TYPE[x.dtype], peer)

    def recv(self, peer, shape, dtype):
        out = empty(tuple(shape), dtype)
        self._call("ncclRecv", _ptr(out), ctypes.c_size_t(out.size), _NCCL_TYPE[np.dtype(dtype)], peer)
        return out

    def barrier(self):
        cuda.synchronize()
        self.mpi.Barrier()

    def close(self):
        if self.comm:
            self.lib.ncclCommDestroy(self.comm)
            self.comm = ctypes.c_void_p()


class HostStagedComm:
    """The NcclComm interface where NCCL cannot run: device -> host -> MPI -> host -> device."""

    backend = "mpi-staged"

    def __init__(self, mpi_comm=None):
        self.mpi = _mpi(mpi_comm)
        self.rank, self.nranks = self.mpi.Get_rank(), self.mpi.Get_size()

    def _reduce(self, x, op):
        from mpi4py import MPI
        mpi_op = {SUM: MPI.SUM, MAX: MPI.MAX, MIN: MPI.MIN, PROD: MPI.PROD, AVG: MPI.SUM}[op]
        out = np.empty_like(x)
        self.mpi.Allreduce(np.ascontiguousarray(x), out, op=mpi_op)
        if op == AVG:
            out = (out / x.dtype.type(self.nranks)).astype(x.dtype)
        return out

    def all_reduce(self, x, op=SUM):
        return to_device(self._reduce(to_host(x), op))

    def broadcast(self, x, root=0):
        h = np.ascontiguousarray(to_host(x))
        self.mpi.Bcast(h, root=root)
        return to_device(h)

    def all_gather(self, x):
        h = np.ascontiguousarray(to_host(x))
        out = np.empty((self.nranks,) + h.shape, h.dtype)
        self.mpi.Allgather(h, out)
        return to_device(out.reshape((self.nranks,) if not h.shape else (-1,) + h.shape[1:]))

    def reduce_scatter(self, x, op=SUM):
        total = self._reduce(to_host(x), op)
        n = total.shape[0] // self.nranks
        return to_device(np.ascontiguousarray(total[self.rank * n:(self.rank + 1) * n]))

    def send(self, x, peer):
        self.mpi.Send(np.ascontiguousarray(to_host(x)), dest=peer)

    def recv(self, peer, shape, dtype):
        out = np.empty(tuple(shape), dtype)
        self.mpi.Recv(out, source=peer)
        return to_device(out)

    def barrier(self):
        self.mpi.Barrier()

    def close(self):
        pass


def nccl_usable():
    return available() and not simulated() and find_libnccl() is not None


def create(mpi_comm=None):
    """NCCL where it can run, else the host-staged MPI communicator (same interface).

    NCCL refuses two ranks on one GPU ("duplicate GPU"); then, too, the
    ranks fall back to host staging, with a warning.
    """
    if not nccl_usable():
        return HostStagedComm(mpi_comm)
    try:
        return NcclComm(mpi_comm)
    except Unavailable as exc:
        import warnings
        warnings.warn(f"NCCL unavailable ({exc}); staging collectives through host memory and MPI")
        return HostStagedComm(mpi_comm)


def self_test(comm=None):
    """Every collective once against the NumPy answer; raises AssertionError on a mismatch."""
    c = comm or create()
    r, n = c.rank, c.nranks
    x = np.arange(6, dtype="float32").reshape(3, 2) + r
    want = sum(np.arange(6, dtype="float32").reshape(3, 2) + i for i in range(n))
    assert np.array_equal(to_host(c.all_reduce(to_device(x))), want)
    assert np.array_equal(to_host(c.all_reduce(to_device(x), MAX)), x - r + (n - 1))
    assert np.array_equal(to_host(c.broadcast(to_device(x), root=0)), x - r)
    gathered = to_host(c.all_gather(to_device(x)))
    assert np.array_equal(gathered, np.concatenate([x - r + i for i in range(n)]))
    rs = to_host(c.reduce_scatter(to_device(np.tile(x, (n, 1)))))
    assert np.array_equal(rs, want)
    if n >= 2:
        if r == 0:
            c.send(to_device(x * 10), peer=1)
        elif r == 1:
            assert np.array_equal(to_host(c.recv(0, x.shape, x.dtype)), (x - 1) * 10)
    c.barrier()
    return c.backend


if __name__ == "__main__":
    from . import require
    require()
    kind = self_test()
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"nccl self-test OK ({kind}, {MPI.COMM_WORLD.Get_size()} ranks)", flush=True)
