"""CUDA kernels for refimpl.ops.dgc_ops: dgc, dgc_momentum, dgc_clip_by_norm, dgc_sparse_reduce.

Same formulas and rounding as the NumPy kernels (``dgc_ops``'s docstring).
``current_step`` and ``nranks`` are read back to the host (Paddle's kernels
read them on the host too). The top-k of ``dgc`` is chosen on the host from a
copy of ``|V|`` with the NumPy kernel's rule (``dgc_top_k``: ties to the lower
index), so both backends send the same entries; a device kernel then writes
EncodeGrad and masks U and V. dgc_momentum reuses the momentum and sgd kernels
of ``ops_optimizer``; dgc_clip_by_norm the clip_by_norm kernel of ``ops_reduce``.
dgc_sparse_reduce adds the ranks' parts in one thread, rank after rank (two
ranks' indices may meet: one thread keeps the NumPy kernel's order).
"""
import numpy as np

from refimpl.core.errors import InvalidArgument
from refimpl.ops.dgc_ops import dgc_k, dgc_nranks, dgc_step, dgc_top_k, sparse_parts
from refimpl.ops.registry import register_kernel

from .device import copy, cuda, dev, empty, flat, kernel_factory, launch, launch_config, scalar_of, to_device, to_host
from .ops_optimizer import momentum, sgd
from .ops_reduce import clip_by_norm


@kernel_factory
def _scale_grad(DT):
    """out = nranks g (+ coeff sign(p) for regular_type 1, + coeff p for 2)."""
    @cuda.jit
    def scale(g, p, n, coeff, regular_type, out):
        for i in range(cuda.grid(1), g.size, cuda.gridsize(1)):
            v = g[i] * n
            if regular_type == 1:
                s = DT(1) if p[i] > 0 else (DT(-1) if p[i] < 0 else DT(0))
                v = v + coeff * s
            elif regular_type == 2:
                v = v + coeff * p[i]
            out[i] = v
    return scale


@kernel_factory
def _correct(DT):
    """Momentum correction: u = m u + g, v += u (Nesterov: u = m (u + g), v = (v + u) + g)."""
    @cuda.jit
    def correct(u, v, g, m, nesterov):
        for i in range(cuda.grid(1), u.size, cuda.gridsize(1)):
            if nesterov:
                ui = (u[i] + g[i]) * m
                u[i] = ui
                v[i] = (v[i] + ui) + g[i]
            else:
                ui = u[i] * m + g[i]
                u[i] = ui
                v[i] = v[i] + ui
    return correct


@kernel_factory
def _encode(DT):
    """EncodeGrad from the chosen indices (int32 bit patterns, then values); U, V zeroed there; g zeroed."""
    @cuda.jit
    def encode(idx, bits, u, v, g, out):
        k = idx.size
        for j in range(cuda.grid(1), k, cuda.gridsize(1)):
            i = idx[j]
            out[j] = bits[j]
            out[k + j] = v[i]
            u[i] = DT(0)
            v[i] = DT(0)
    return encode


@kernel_factory
def _fill(DT):
    @cuda.jit
    def fill(a, value):
        for i in range(cuda.grid(1), a.size, cuda.gridsize(1)):
            a[i] = value
    return fill


def _zeros(shape, dtype):
    a = empty(shape, dtype)
    launch(_fill(np.dtype(dtype).type), a.size, flat(a), np.dtype(dtype).type(0))
    return a


def dgc(U, V, Grad, Param, current_step, nranks, *, m, use_nesterov, sparsity, rampup_begin_step, rampup_step,
        regular_coeff, regular_type):
    n = dgc_nranks("dgc", scalar_of(nranks))
    if regular_type not in (0, 1, 2):
        raise InvalidArgument(f"dgc: regular_type must be 0 (none), 1 (L1Decay) or 2 (L2Decay), got {regular_type}")
    if regular_type and Param is None:
        raise InvalidArgument(f"dgc: regular_type {regular_type} needs the Param input")
    grad = dev(Grad)
    dt = grad.dtype.type
    g = empty(grad.shape, grad.dtype)
    p = flat(dev(Param)) if Param is not None else flat(grad)
    launch(_scale_grad(dt), g.size, flat(grad), p, dt(n), dt(np.float32(regular_coeff)), int(regular_type), flat(g))
    u, v = dev(U), dev(V)
    step = scalar_of(current_step)
    if dgc_step("dgc", step) < int(np.float32(rampup_begin_step)):
        return u, v, None, g, None, None
    if u.shape != grad.shape or v.shape != grad.shape:
        raise InvalidArgument(f"dgc: U {list(u.shape)} and V {list(v.shape)} must be shaped like Grad "
                              f"{list(grad.shape)}")
    k = dgc_k(grad.size, float(np.float32(step)), sparsity, rampup_begin_step, rampup_step)
    launch(_correct(dt), u.size, flat(u), flat(v), flat(g), dt(np.float32(m)), bool(use_nesterov))
    idx = dgc_top_k(v.copy_to_host(), k).astype(np.int64)
    encoded = empty((2 * k,), grad.dtype)
    if k:
        launch(_encode(dt), k, to_device(idx), to_device(idx.astype(np.int32).view(np.float32)), flat(u), flat(v),
               flat(g), encoded)
    launch(_fill(dt), g.size, flat(g), dt(0))
    return u, v, encoded, g, to_device(np.array([k], grad.dtype)), _zeros((2 * k * n,), grad.dtype)


@kernel_factory
def _times(DT):
    @cuda.jit
    def times(g, s, out):
        for i in range(cuda.grid(1), g.size, cuda.gridsize(1)):
            out[i] = g[i] * s
    return times


def dgc_momentum(Param, Grad, Velocity, LearningRate, MasterParam, current_step, nranks, *, mu, use_nesterov,
                 regularization_method, regularization_coeff, multi_precision, rescale_grad, rampup_begin_step):
    if int(np.float32(rampup_begin_step)) < 0:
        return dev(Param), dev(Velocity), dev(MasterParam), dev(Grad)
    n = dgc_nranks("dgc_momentum", scalar_of(nranks))
    grad = dev(Grad)
    g = empty(grad.shape, grad.dtype)
    launch(_times(grad.dtype.type), g.size, flat(grad), grad.dtype.type(np.float32(1.0 / n)), flat(g))
    if dgc_step("dgc_momentum", scalar_of(current_step)) < int(np.float32(rampup_begin_step)):
        p, v, master = momentum(Param, g, Velocity, LearningRate, None, mu=mu, use_nesterov=use_nesterov,
                                regularization_method=regularization_method,
                                regularization_coeff=regularization_coeff, multi_precision=False,
                                rescale_grad=rescale_grad)
        return p, v, master, g
    p, master = sgd(Param, LearningRate, g, MasterParam if multi_precision else None, multi_precision=multi_precision)
    return p, dev(Velocity), master, g


def dgc_clip_by_norm(X, current_step, *, max_norm, rampup_begin_step):
    begin = int(np.float32(rampup_begin_step))
    if begin < 0 or dgc_step("dgc_clip_by_norm", scalar_of(current_step)) < begin:
        return dev(X)
    return clip_by_norm(X, max_norm=max_norm)


@kernel_factory
def _scatter_add(DT):
    """out[idx[j]] += vals[j] for j = 0, 1, ... in one thread (the parts in rank order)."""
    @cuda.jit
    def scatter(idx, vals, out):
        if cuda.grid(1) == 0:
            for j in range(idx.size):
                out[idx[j]] = out[idx[j]] + DT(vals[j])
    return scatter


def dgc_sparse_reduce(GatherBuff, k, Grad):
    grad = dev(Grad)
    k, parts = sparse_parts("dgc_sparse_reduce", GatherBuff.size, scalar_of(k), grad.size)
    if parts == 0:
        return grad
    gathered = to_host(GatherBuff).reshape(-1).astype(np.float32, copy=False).reshape(parts, 2 * k)
    idx = gathered[:, :k].copy().view(np.int32).reshape(-1)
    if idx.min() < 0 or idx.max() >= grad.size:
        raise InvalidArgument(f"dgc_sparse_reduce: an index leaves [0, {grad.size})")
    out = copy(grad)
    launch_config(_scatter_add(grad.dtype.type), 1, 1, to_device(idx.astype(np.int64)),
                  to_device(np.ascontiguousarray(gathered[:, k:]).reshape(-1)), flat(out))
    return out


register_kernel("dgc", "cuda", dgc)
register_kernel("dgc_momentum", "cuda", dgc_momentum)
register_kernel("dgc_clip_by_norm", "cuda", dgc_clip_by_norm)
register_kernel("dgc_sparse_reduce", "cuda", dgc_sparse_reduce)
