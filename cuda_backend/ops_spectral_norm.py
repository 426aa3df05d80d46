"""CUDA kernels for ``refimpl/ops/spectral_norm_ops.py``: spectral_norm and spectral_norm_grad.

Mirrors Paddle's GPU kernels (``paddle/phi/kernels/gpu/spectral_norm_kernel.cu``, the shared
``paddle/phi/kernels/impl/spectral_norm_kernel_impl.h``): the weight permuted to (h, w), the power
iteration on copies of U and V, sigma, and ``W / sigma`` (the grad with Paddle's own formula, see the
op module). Each matrix-vector product is one thread per output value adding its dot product in
order; a norm, sigma and the grad's total are one thread adding in order (the vectors are weight-
sized, small). The NumPy kernel's products are BLAS gemv calls (as Paddle's are), whose order of
additions is not reproduced here: the two backends agree to rounding (the conformance check allows
1e-6 relative), not bit for bit.
"""
import numpy as np

from refimpl.ops.registry import register_kernel
from refimpl.ops.spectral_norm_ops import check_spectral_norm

from .device import copy, cuda, dev, empty, flat, launch
from .fmath import sqrt64
from .ops_manipulation import transpose


@cuda.jit
def _matvec(W, x, out, h, w, transposed, zero):
    """out = W x (out has h values) or Wᵀ x (w values), W an (h, w) row-major matrix."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        acc = zero
        if transposed:
            for k in range(h):
                acc += W[k * w + i] * x[k]
        else:
            for k in range(w):
                acc += W[i * w + k] * x[k]
        out[i] = acc


@cuda.jit
def _norm(v, out, zero):
    """out[0] = sqrt(sum(v * v)) (the root in float64, rounded once)."""
    if cuda.grid(1) == 0:
        acc = zero
        for k in range(v.size):
            acc += v[k] * v[k]
        out[0] = sqrt64(acc)


@cuda.jit
def _divide_by_norm(v, norm, eps):
    for i in range(cuda.grid(1), v.size, cuda.gridsize(1)):
        v[i] = v[i] / (norm[0] + eps)


@cuda.jit
def _dot(a, b, out, zero):
    if cuda.grid(1) == 0:
        acc = zero
        for k in range(a.size):
            acc += a[k] * b[k]
        out[0] = acc


@cuda.jit
def _divide(W, sigma, out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = W[i] / sigma[0]


@cuda.jit
def _total(a, out, zero):
    if cuda.grid(1) == 0:
        acc = zero
        for k in range(a.size):
            acc += a[k]
        out[0] = acc


@cuda.jit
def _grad(dO, u, v, total, sigma, dW, w, one):
    for i in range(cuda.grid(1), dW.size, cuda.gridsize(1)):
        dW[i] = dO[i] * (one - u[i // w] * v[i % w] * total[0]) / sigma[0]


def _to_matrix(a, dim):
    a = dev(a)
    if dim == 0:
        return flat(a)
    r = len(a.shape)
    return flat(transpose(a, [dim] + [i for i in range(r) if i != dim]))


def _from_matrix(m, shape, dim):
    shape = tuple(shape)
    moved = (shape[dim],) + tuple(d for i, d in enumerate(shape) if i != dim)
    m = m.reshape(moved)
    if dim == 0:
        return m
    r = len(shape)
    return transpose(m, [i + 1 if i < dim else (0 if i == dim else i) for i in range(r)])


def _sigma(W, U, V, h, w, power_iters, eps, dt):
    """u, v after the power iteration (copies) and sigma, as 1-element device arrays."""
    zero = dt.type(0)
    u, v = copy(flat(dev(U))), copy(flat(dev(V)))
    norm = empty((1,), dt)
    for _ in range(power_iters):
        launch(_matvec, w, W, u, v, h, w, True, zero)
        launch(_norm, 1, v, norm, zero)
        launch(_divide_by_norm, w, v, norm, dt.type(eps))
        launch(_matvec, h, W, v, u, h, w, False, zero)
        launch(_norm, 1, u, norm, zero)
        launch(_divide_by_norm, h, u, norm, dt.type(eps))
    wv, sigma = empty((h,), dt), empty((1,), dt)
    launch(_matvec, h, W, v, wv, h, w, False, zero)
    launch(_dot, 1, u, wv, sigma, zero)
    return u, v, sigma


def _hw(shape, dim):
    h = shape[dim]
    return h, (int(np.prod(shape, dtype=np.int64)) // h if h else 0)


def spectral_norm(Weight, U, V, *, dim, power_iters, eps):
    x = dev(Weight)
    check_spectral_norm("spectral_norm", x.shape, U.shape, V.shape, dim, power_iters)
    h, w = _hw(tuple(x.shape), dim)
    W = _to_matrix(x, dim)
    _, _, sigma = _sigma(W, U, V, h, w, power_iters, eps, x.dtype)
    out = empty((h * w,), x.dtype)
    launch(_divide, out.size, W, sigma, out)
    return _from_matrix(out, x.shape, dim)


def spectral_norm_grad(Weight, U, V, dOut, *, dim, power_iters, eps):
    x = dev(Weight)
    check_spectral_norm("spectral_norm_grad", x.shape, U.shape, V.shape, dim, power_iters)
    dt = x.dtype
    h, w = _hw(tuple(x.shape), dim)
    W, dO = _to_matrix(x, dim), _to_matrix(dOut, dim)
    u, v, sigma = _sigma(W, U, V, h, w, power_iters, eps, dt)
    normed, total = empty((h * w,), dt), empty((1,), dt)
    launch(_divide, normed.size, W, sigma, normed)
    launch(_total, 1, normed, total, dt.type(0))
    dW = empty((h * w,), dt)
    launch(_grad, dW.size, dO, u, v, total, sigma, dW, w, dt.type(1))
    return _from_matrix(dW, x.shape, dim)


register_kernel("spectral_norm", "cuda", spectral_norm)
register_kernel("spectral_norm_grad", "cuda", spectral_norm_grad)
