"""CUDA kernels for refimpl.ops.partial_p2p_ops: partial_send, partial_recv, partial_allgather.

Mirrors Paddle's ``paddle/phi/kernels/gpu/partial_send_kernel.cu``, ``partial_recv_kernel.cu`` and
``partial_allgather_kernel.cu``: the slice moved is a view of the device tensor
(Paddle's ``GetPartialTensor``), with the checks of the NumPy kernels (``partial_p2p_ops``).

* ``partial_send``: a device view of slice ``id`` of flattened X goes to the ring's ``send``
  (refimpl's send/recv are buffered host messages on every communicator, NCCL rings included,
  so the view is copied to the host: only the slice crosses, not the whole tensor);
* ``partial_recv``: Out is a device tensor of ``out_shape`` filled with zeros, and a kernel copies
  the received slice to its offset (one thread per element, grid-stride);
* ``partial_allgather``: the view of this rank's slice is all-gathered over the ring (device
  buffers on an NCCL ring, host-staged otherwise, as ``ops_model_parallel`` does) and the
  gathered flat buffer is shaped as X.

Differences from Paddle: as in the NumPy kernels (zeros where partial_recv receives nothing, a
slice that does not match is an error naming the op).
"""
import numpy as np

from refimpl.core.dtypes import to_numpy_dtype
from refimpl.ops import partial_p2p_ops as cpu
from refimpl.ops.model_parallel_ops import ring
from refimpl.ops.registry import register_kernel

from .device import BFLOAT16, cuda, dev, flat, launch, to_device, to_host
from .ops_creation import full
from .ops_model_parallel import _all_gather


def partial_send(X, *, ring_id, peer, num, id):
    cpu.check_p2p_attrs("partial_send", ring_id, peer, num, id)
    x = flat(dev(X))
    off, size = cpu.slice_plan("partial_send", x.size, num, id)
    comm = cpu.checked_peer("partial_send", ring_id, peer)
    cpu.send_part(comm, to_host(x[off:off + size]), peer)
    return ()


@cuda.jit
def _copy_at(src, dst, offset):
    """dst[offset:offset + src.size] = src."""
    for i in range(cuda.grid(1), src.size, cuda.gridsize(1)):
        dst[offset + i] = src[i]


def partial_recv(*, ring_id, peer, dtype, out_shape, num, id):
    cpu.check_p2p_attrs("partial_recv", ring_id, peer, num, id)
    shape = cpu.check_out_shape("partial_recv", out_shape, num)
    dt = to_numpy_dtype(dtype)
    out = full(shape, 0, np.uint16 if dt == BFLOAT16 else dt)  # (the device holds bfloat16 as its bits)
    off, size = cpu.slice_plan("partial_recv", out.size, num, id, what="output")
    part = cpu.recv_part(cpu.checked_peer("partial_recv", ring_id, peer), peer, size, dt)
    launch(_copy_at, size, to_device(np.ascontiguousarray(part)), flat(out), off)
    return out


def partial_allgather(X, *, nranks, rank, ring_id):
    x = dev(X)
    comm = ring("partial_allgather", ring_id)
    off, size = cpu.gather_plan("partial_allgather", comm, ring_id, x.size, nranks, rank)
    gathered = _all_gather(comm, flat(x)[off:off + size])
    return gathered.reshape(tuple(x.shape))


register_kernel("partial_send", "cuda", partial_send)
register_kernel("partial_recv", "cuda", partial_recv)
register_kernel("partial_allgather", "cuda", partial_allgather)
