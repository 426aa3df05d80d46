"""Run by test_nccl_select.py under ``mpiexec -n 2`` (with the CUDA simulator): which communicator a ring gets.

1. cuda backend, NCCL not usable (the simulator): ring 0 keeps the plain MPI
   communicator, and a program with collective ops on device tensors runs
   through it (host staging) with the right answer.
2. ``cuda_backend.nccl.nccl_usable`` patched to True and ``create`` to a
   stand-in NCCL communicator: a new ring gets the NCCL ring communicator,
   device arrays go to the NCCL object (counted) and come back on the
   device, host arrays still take MPI.
3. NCCL usable on rank 0 only: the ranks agree to stay on MPI.
Prints "nccl-select OK" on rank 0.
"""
import numpy as np

import refimpl as paddle
import refimpl.distributed as dist
from refimpl.distributed.communication import current
from refimpl.distributed.communication.mpi import MPICommunicator
from refimpl.distributed.communication.mpi_nccl import NcclRingCommunicator

import cuda_backend
from cuda_backend import nccl
from cuda_backend.device import is_device, to_host

paddle.enable_static()
paddle.set_backend("cuda")
dist.init_parallel_env()
ctx = current()
rank = ctx.rank

# 1. the fallback: no NCCL under the simulator
assert not nccl.nccl_usable()
ring0 = ctx.comm(0)
assert type(ring0) is MPICommunicator, type(ring0)
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [2, 3], "float32")
    blk = main.global_block()
    y = blk.create_var(name="y", shape=[2, 3], dtype="float32")
    blk.append_op(type="all_reduce", inputs={"x": [x]}, outputs={"out": [y]},
                  attrs={"ring_id": 0, "reduce_type": 0})
exe = paddle.static.Executor(paddle.CUDAPlace(0))
feed = np.arange(6, dtype="float32").reshape(2, 3) + rank
out, = exe.run(main, feed={"x": feed}, fetch_list=["y"])
want = sum(np.arange(6, dtype="float32").reshape(2, 3) + r for r in range(ctx.world_size))
assert np.array_equal(out, want), out


# 2. NCCL selected when it can run (stand-in NCCL: the host-staged comm, counted)
class FakeNccl(nccl.HostStagedComm):
    backend = "nccl"

    def __init__(self, mpi_comm):
        super().__init__(mpi_comm)
        self.calls = []

    def all_reduce(self, x, op=nccl.SUM):
        assert is_device(x)
        self.calls.append("all_reduce")
        return super().all_reduce(x, op)

    def all_gather(self, x):
        self.calls.append("all_gather")
        return super().all_gather(x)


real_usable, real_create = nccl.nccl_usable, nccl.create
nccl.nccl_usable = lambda: True
nccl.create = FakeNccl
ring1 = ctx.add_group(1, range(ctx.world_size))
assert isinstance(ring1, NcclRingCommunicator) and ring1.backend == "nccl", type(ring1)
dev = cuda_backend.to_device(feed)
res = ring1.all_reduce(dev)
assert is_device(res) and np.array_equal(to_host(res), want)
g = ring1.all_gather(dev)
assert is_device(g) and to_host(g).shape == (2 * ctx.world_size, 3)
host = ring1.all_reduce(feed)  # host arrays stay on MPI
assert isinstance(host, np.ndarray) and np.array_equal(host, want)
assert ring1.nccl.calls == ["all_reduce", "all_gather"], ring1.nccl.calls

# 3. every rank must be able to: rank 1 cannot, so nobody takes NCCL
nccl.nccl_usable = lambda: rank == 0
ring2 = ctx.add_group(2, range(ctx.world_size))
assert type(ring2) is MPICommunicator, type(ring2)

# the numpy backend never considers NCCL
nccl.nccl_usable = lambda: True
paddle.set_backend("numpy")
ring3 = ctx.add_group(3, range(ctx.world_size))
assert type(ring3) is MPICommunicator, type(ring3)
nccl.nccl_usable, nccl.create = real_usable, real_create

ring0.barrier()
if rank == 0:
    print("nccl-select OK", flush=True)
