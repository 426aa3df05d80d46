"""CUDA kernels for refimpl.ops.model_parallel_ops: the tensor-parallel ops.

Same formulas, checks and order of roundings as the NumPy kernels (``model_parallel_ops``'s
docstring); Paddle's GPU kernels are ``paddle/phi/kernels/gpu/c_embedding_kernel.cu``,
``c_softmax_with_cross_entropy_kernel.cu`` and their ``_grad`` files.

* ``c_identity`` copies on the device; ``c_split`` is a device slice of the last axis;
* ``c_concat`` gathers over the ring (host-staged, or device buffers on an NCCL ring, as
  ``ops_collective`` does) and a device kernel lays the ranks' parts side by side;
  ``mp_allreduce_sum`` is the staged allreduce of ``ops_collective``;
* ``c_embedding`` / ``c_embedding_grad``: one thread per output element / per shard column (the
  grad adds the rows of Out@GRAD in the ids' order, as the NumPy kernel's ``np.add.at``: bit for
  bit, where Paddle's atomicAdd order is unspecified);
* ``c_softmax_with_cross_entropy``: one thread per row for the row max, the picked logit, the
  ``exp`` row sums (NumPy's pairwise order, ``ew.row_sum``) and the loss; the three [N] vectors
  are allreduced between the kernels, as Paddle does. exp and log are rounded once from float64
  (``fmath``), so results differ from NumPy's by ulps (ULP in the conformance check).

Differences: the ids of ``c_embedding`` and the labels of ``c_softmax_with_cross_entropy`` are read
back to the host to be checked (Paddle checks them inside its kernels with PADDLE_ENFORCE).
"""
import numpy as np

from refimpl.core.reduce_op import ReduceOp
from refimpl.ops import model_parallel_ops as cpu
from refimpl.ops.registry import register_kernel

from . import ew
from .device import copy, cuda, dev, empty, flat, kernel_factory, launch, to_device, to_host
from .fmath import exp64, log64
from .ops_collective import _staged
from .ops_creation import full


def _all_reduce(comm, a, op):
    """Allreduce device array ``a`` over ``comm``: device buffers on NCCL, host-staged otherwise."""
    if getattr(comm, "backend", None) == "nccl":
        return comm.all_reduce(a, op)
    return to_device(comm.all_reduce(to_host(a), op))


def _all_gather(comm, a):
    if getattr(comm, "backend", None) == "nccl":
        return comm.all_gather(a)
    return to_device(comm.all_gather(to_host(a)))


# ---- c_identity, c_split, c_concat, mp_allreduce_sum -----------------------------------------
def c_identity(X, *, ring_id):
    cpu.check_ring_id("c_identity", ring_id)
    return copy(dev(X))


@cuda.jit
def _slice_last(x, out, d, w, start):
    """out (R, w) = x (R, d)[:, start:start + w]."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = x[(i // w) * d + start + i % w]


def c_split(X, *, rank, nranks):
    x = dev(X)
    w = cpu.split_width("c_split", tuple(x.shape), nranks, rank)
    out = empty(tuple(x.shape)[:-1] + (w,), x.dtype)
    launch(_slice_last, out.size, flat(x), flat(out), tuple(x.shape)[-1], w, rank * w)
    return out


@cuda.jit
def _side_by_side(g, out, rows, d, n):
    """out (rows, n d): part k of g (n rows x d, stacked) goes to columns [k d, (k + 1) d)."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        r = i // (n * d)
        k = (i % (n * d)) // d
        out[i] = g[(k * rows + r) * d + i % d]


def c_concat(X, *, rank, nranks, ring_id):
    x = dev(X)
    cpu.check_not_scalar("c_concat", x.ndim)
    cpu.check_split_attrs("c_concat", nranks, rank)
    comm = cpu.ring("c_concat", ring_id)
    cpu.check_ring("c_concat", comm, ring_id, nranks, rank)
    g = _all_gather(comm, x)
    shape = tuple(x.shape)
    d = shape[-1]
    rows = x.size // d if d else 0
    out = empty(shape[:-1] + (d * nranks,), x.dtype)
    launch(_side_by_side, out.size, flat(g), flat(out), rows, d, nranks)
    return out


register_kernel("c_identity", "cuda", c_identity)
register_kernel("c_split", "cuda", c_split)
register_kernel("c_concat", "cuda", c_concat)
register_kernel("mp_allreduce_sum", "cuda", _staged(cpu.mp_allreduce_sum))


# ---- c_embedding ------------------------------------------------------------------------------
@cuda.jit
def _embed_shard(ids, w, out, dim, rows, start, zero):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        r = ids[i // dim] - start
        out[i] = w[r * dim + i % dim] if 0 <= r < rows else zero


@cuda.jit
def _embed_shard_grad(ids, d, dw, dim, rows, start):
    """One thread per column: rows of d added into dw in the ids' order."""
    for c in range(cuda.grid(1), dim, cuda.gridsize(1)):
        for i in range(ids.size):
            r = ids[i] - start
            if 0 <= r < rows:
                dw[r * dim + c] += d[i * dim + c]


def _ids(Ids):
    """Ids on the device as int64 (checked on the host, see the module docstring)."""
    host = to_host(Ids)
    return host, to_device(host.astype(np.int64).reshape(-1))


def c_embedding(W, Ids, *, start_index, vocab_size):
    w = dev(W)
    host, ids = _ids(Ids)
    rows, dim = cpu.embedding_plan("c_embedding", tuple(w.shape), host, start_index, vocab_size)
    out = empty(tuple(host.shape) + (dim,), w.dtype)
    launch(_embed_shard, out.size, ids, flat(w), flat(out), dim, rows, start_index, w.dtype.type(0))
    return out


def c_embedding_grad(W, Ids, dOut, *, start_index, vocab_size):
    """W may be a shape-only meta (no need buffer): only W.shape is read."""
    host, ids = _ids(Ids)
    rows, dim = cpu.embedding_plan("c_embedding_grad", tuple(W.shape), host, start_index, vocab_size)
    d = dev(dOut)
    cpu.check_out_grad_shape(tuple(d.shape), host.shape, dim)
    dw = full((rows, dim), 0, d.dtype)
    launch(_embed_shard_grad, dim, ids, flat(d), flat(dw), dim, rows, start_index)
    return dw


register_kernel("c_embedding", "cuda", c_embedding)
register_kernel("c_embedding_grad", "cuda", c_embedding_grad)


# ---- c_softmax_with_cross_entropy ---------------------------------------------------------------
@cuda.jit
def _row_max(x, out, d):
    for r in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        m = x[r * d]
        for j in range(1, d):
            v = x[r * d + j]
            if v > m or v != v:
                m = v
        out[r] = m


@cuda.jit
def _shift_pick(x, m, lab, shifted, picked, d, start, zero):
    """shifted = x - row max; picked = the label's shifted logit where this rank owns it, else 0."""
    for r in range(cuda.grid(1), picked.size, cuda.gridsize(1)):
        for j in range(d):
            shifted[r * d + j] = x[r * d + j] - m[r]
        c = lab[r] - start
        picked[r] = shifted[r * d + c] if 0 <= c < d else zero


@kernel_factory
def _exp_sum(DT):
    @cuda.jit
    def exp_sum(shifted, total, d, zero, scratch):
        """shifted becomes exp(shifted) in place; total = its row sums (NumPy's pairwise order)."""
        for r in range(cuda.grid(1), total.size, cuda.gridsize(1)):
            for j in range(d):
                shifted[r * d + j] = DT(exp64(shifted[r * d + j]))
            total[r] = ew.row_sum(shifted, r, r * d, d, 1, zero, scratch)
    return exp_sum


@kernel_factory
def _finish(DT):
    @cuda.jit
    def finish(e, total, picked, lab, loss, d, ignore, big):
        """loss = log(total) - picked (clamped to +-big, 0 where ignored); e becomes e / total."""
        for r in range(cuda.grid(1), loss.size, cuda.gridsize(1)):
            v = DT(log64(total[r]))
            if not (v - v == 0):  # +-inf or NaN: Paddle's TolerableValue
                v = big if v > 0 else -big
            v = v - picked[r]
            if not (v - v == 0):
                v = big if v > 0 else -big
            loss[r] = DT(0) if lab[r] == ignore else v
            for j in range(d):
                e[r * d + j] = e[r * d + j] / total[r]
    return finish


def c_softmax_with_cross_entropy(Logits, Label, *, ignore_index, ring_id, rank, nranks):
    op = "c_softmax_with_cross_entropy"
    x = dev(Logits)
    lab_host = to_host(Label)
    n, d = cpu.ce_plan(op, tuple(x.shape), lab_host)
    comm = cpu.ring(op, ring_id)
    cpu.check_ring(op, comm, ring_id, nranks, rank)
    lab_host = lab_host.astype(np.int64).reshape(-1)
    cpu.check_labels(op, lab_host, d * nranks, ignore_index)
    lab = to_device(lab_host)
    dt = x.dtype.type
    row_max = empty((n,), x.dtype)
    launch(_row_max, n, flat(x), row_max, d)
    row_max = _all_reduce(comm, row_max, ReduceOp.MAX)
    e, picked = empty(tuple(x.shape), x.dtype), empty((n,), x.dtype)
    launch(_shift_pick, n, flat(x), row_max, lab, flat(e), picked, d, rank * d, dt(0))
    picked = _all_reduce(comm, picked, ReduceOp.SUM)
    total = empty((n,), x.dtype)
    launch(_exp_sum(dt), n, flat(e), total, d, dt(0), ew.scratch_for(n, d, x.dtype))
    total = _all_reduce(comm, total, ReduceOp.SUM)
    loss = empty(tuple(x.shape)[:-1] + (1,), x.dtype)
    launch(_finish(dt), n, flat(e), total, picked, lab, flat(loss), d, ignore_index, dt(cpu.TOLERABLE))
    return e, loss


@cuda.jit
def _ce_grad(s, lab, dl, out, d, start, ignore, zero, one):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        r = i // d
        c = lab[r]
        if c == ignore:
            out[i] = zero
        elif i % d + start == c:
            out[i] = (s[i] - one) * dl[r]
        else:
            out[i] = s[i] * dl[r]


def c_softmax_with_cross_entropy_grad(Softmax, Label, dLoss, *, ignore_index, rank):
    s = dev(Softmax)
    lab_host = to_host(Label)
    n, d = cpu.ce_plan("c_softmax_with_cross_entropy_grad", tuple(s.shape), lab_host)
    lab = to_device(lab_host.astype(np.int64).reshape(-1))
    out = empty(tuple(s.shape), s.dtype)
    dt = s.dtype.type
    launch(_ce_grad, out.size, flat(s), lab, flat(dev(dLoss)), flat(out), d, rank * d, ignore_index, dt(0), dt(1))
    return out


register_kernel("c_softmax_with_cross_entropy", "cuda", c_softmax_with_cross_entropy)
register_kernel("c_softmax_with_cross_entropy_grad", "cuda", c_softmax_with_cross_entropy_grad)
