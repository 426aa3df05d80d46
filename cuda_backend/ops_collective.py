"""CUDA kernels for refimpl.ops.collective_ops: collectives staged through host memory.

Mirrors Paddle's GPU collective kernels as far as results go: each kernel
copies its input to the host, calls the NumPy kernel (which calls the rank's
communicator: in-process, MPI, or NCCL where it runs) and copies the result
back. Paddle's NCCL kernels work on device buffers directly; the staging
keeps one communicator interface for every backend (``cuda_backend.nccl``
gives the device-buffer path for a real GPU). ``coalesce_tensor`` builds
one device buffer with the outputs as views into it, and an in-place
collective on such a view writes its result back into the buffer, as on the
CPU, so the other views see it. ``c_gen_nccl_id`` / ``c_comm_init`` run on
the host (they only consult the rank context); ``depend`` is an identity.
"""
import inspect
import weakref

import numpy as np

from refimpl.core import comm_context
from refimpl.core.errors import PreconditionNotMet
from refimpl.ops import collective_ops as cpu
from refimpl.ops.registry import has_op, register_kernel

from .device import cuda, dev, flat, launch, to_device, to_host
from .ops_creation import full

_fused_views = {}  # id -> weakref of the device buffers (and views into them) coalesce_tensor made


def _add_fused(view):
    key = id(view)
    _fused_views[key] = weakref.ref(view, lambda _, k=key: _fused_views.pop(k, None))


def _is_fused(a):
    ref = _fused_views.get(id(a))
    return ref is not None and ref() is a


def write_into_fused(old, new):
    """``refimpl.ops.fused_buffers.write_into_fused`` for device arrays: copy ``new`` into ``old``, a view
    of a device buffer ``coalesce_tensor`` made; returns whether it did (PreconditionNotMet if it cannot fit)."""
    if not (_is_fused(old) and new is not None and hasattr(new, "copy_to_device")):
        return False
    if tuple(new.shape) != tuple(old.shape) or new.dtype != old.dtype:
        raise PreconditionNotMet(f"a value of shape {list(new.shape)} {new.dtype} does not fit its place in the "
                                 f"coalesce_tensor buffer ({list(old.shape)} {old.dtype})")
    old.copy_to_device(new)
    return True


def outside_fused(a):
    """``refimpl.ops.fused_buffers.outside_fused`` for device arrays: a copy of a registered view of a fused
    device buffer. (A view a kernel derives from one is not registered, so it is not seen here.)"""
    if _is_fused(a):
        out = cuda.device_array(a.shape, dtype=a.dtype)
        out.copy_to_device(a)
        return out
    return a


def _nccl_ring(ring_id):
    """True when this rank's communicator for ``ring_id`` moves device buffers itself (NCCL)."""
    comm = comm_context.current().comms.get(ring_id)
    return getattr(comm, "backend", None) == "nccl"


def _staged(fn):
    """A cuda kernel that runs NumPy kernel ``fn`` on a host copy of its input (same signature).

    On a ring served by NCCL the device buffer goes to the communicator as it is.
    """
    def kernel(X, **kw):
        if _nccl_ring(kw.get("ring_id", 0)):
            return fn(X, **kw)
        res = fn(to_host(X), **kw)
        out = to_device(res)
        if _is_fused(X) and tuple(out.shape) == tuple(X.shape) and out.dtype == X.dtype:
            X.copy_to_device(out)  # in place into the fused buffer (see the module docstring)
            return X
        return out
    kernel.__signature__ = inspect.signature(fn)
    kernel.__name__ = fn.__name__
    return kernel


for _t in ("c_allreduce_sum", "c_allreduce_max", "c_allreduce_min", "c_allreduce_prod", "c_allreduce_avg",
           "c_broadcast", "c_allgather", "c_reducescatter", "c_reduce_sum", "all_reduce", "broadcast",
           "all_gather", "reduce_scatter", "reduce"):
    register_kernel(_t, "cuda", _staged(cpu.get_op_def(_t).kernel("numpy")[0]))


def send_v2(X, *, ring_id, peer):
    cpu.send_v2(to_host(X), ring_id=ring_id, peer=peer)
    return ()


def recv_v2(*, ring_id, peer, dtype, out_shape, dynamic_shape):
    return to_device(cpu.recv_v2(ring_id=ring_id, peer=peer, dtype=dtype, out_shape=out_shape,
                                 dynamic_shape=dynamic_shape))


def barrier(X, *, ring_id):
    cpu.barrier(None, ring_id=ring_id)
    return X


register_kernel("send_v2", "cuda", send_v2)
register_kernel("recv_v2", "cuda", recv_v2)
register_kernel("barrier", "cuda", barrier)
register_kernel("c_sync_calc_stream", "cuda", lambda X: X)
register_kernel("c_sync_comm_stream", "cuda", lambda X, *, ring_id: list(X))


# ---- coalesce_tensor --------------------------------------------------------------------------
@cuda.jit
def _copy(src, dst):
    for i in range(cuda.grid(1), src.size, cuda.gridsize(1)):
        dst[i] = src[i]


def coalesce_tensor(Input, *, dtype, copy_data, set_constant, constant, use_align, align_size,
                    user_defined_size_of_dtype, concated_shapes, concated_ranks):
    """One device buffer for ``Input``; ``Output[i]`` are views into it (the CPU kernel's layout)."""
    np_dtype, shapes, offsets, total = cpu.coalesce_plan(Input, dtype, use_align, align_size,
                                                         user_defined_size_of_dtype, concated_shapes,
                                                         concated_ranks)
    fused = full((total,), constant if set_constant else 0, np_dtype)
    _add_fused(fused)
    outs = []
    for o, shape in zip(offsets, shapes):
        n = int(np.prod(shape, dtype=np.int64))
        view = fused[o:o + n].reshape(tuple(shape))
        _add_fused(view)
        outs.append(view)
    if copy_data:
        for i, (dst, a) in enumerate(zip(outs, Input)):
            if a is None:
                raise PreconditionNotMet(f"coalesce_tensor: copy_data is set but Input[{i}] holds no value")
            launch(_copy, dst.size, flat(dev(a)), flat(dst))
    return outs, fused


register_kernel("coalesce_tensor", "cuda", coalesce_tensor)


# ---- parameter-server ops: host-side by nature ---------------------------------------------
def _host_any(a):
    return [_host_any(v) for v in a] if isinstance(a, list) else (None if a is None else to_host(a))


def _device_any(a):
    if isinstance(a, (list, tuple)):
        return type(a)(_device_any(v) for v in a)
    return None if a is None else to_device(a)


def host_staged(fn):
    """A cuda kernel running NumPy kernel ``fn`` on host copies of every input, outputs copied back."""
    def kernel(*args, **kw):
        return _device_any(fn(*[_host_any(a) for a in args], **kw))
    kernel.__signature__ = inspect.signature(fn)
    kernel.__name__ = fn.__name__
    return kernel


for _t in ("ps_send", "ps_recv", "ps_geo"):
    if has_op(_t):
        register_kernel(_t, "cuda", host_staged(cpu.get_op_def(_t).kernel("numpy")[0]))


# ---- the startup ops of fleet's collective programs and depend: host-side / identity ------------------
for _t in ("c_gen_nccl_id", "c_comm_init"):
    register_kernel(_t, "cuda", host_staged(cpu.get_op_def(_t).kernel("numpy")[0]))


def depend(X, Dep):
    return X


register_kernel("depend", "cuda", depend)
