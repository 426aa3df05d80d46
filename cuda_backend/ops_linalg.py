"""CUDA kernels for ``refimpl/ops/linalg_ops.py``: bmm and bilinear_tensor_product (+ grads).

Mirrors Paddle's GPU ``BmmKernel`` / ``BmmGradKernel`` (batched cuBLAS
GEMMs there) through the tiled matmul of ``ops_matmul.bmm``: transposes are
read through strides, and each output adds its products in order k = 0, 1,
..., as the NumPy kernel's small products do. The shape checks are the NumPy
kernel's.

bilinear_tensor_product mirrors Paddle's GPU ``BilinearKernel`` / ``BilinearGradKernel`` (the
same GEMM-then-row-sum there): one thread per output element adds its terms in order, in the
output dtype, as the NumPy kernel does for small products (bit for bit); for large ones the NumPy
kernel uses BLAS and the two agree to rounding (see kernel_check's CLOSE).
"""
import numpy as np

from refimpl.ops import linalg_ops as cpu
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, empty, flat, launch
from .ops_matmul import bmm as tiled_bmm


def bmm(X, Y):
    x, y = dev(X), dev(Y)
    cpu.check_bmm_shapes(tuple(x.shape), tuple(y.shape))
    return tiled_bmm(x, y)


def bmm_grad(X, Y, dOut, *, need):
    x, y, d = dev(X), dev(Y), dev(dOut)
    dx = tiled_bmm(d, y, trans_b=True) if need[0] else None
    dy = tiled_bmm(x, d, trans_a=True) if need[1] else None
    return dx, dy


@cuda.jit
def _bilinear(x, y, w, bias, out, M, P, K, has_bias, zero):
    """out[i, k] = sum_p (sum_m x[i, m] w[k, m, p]) y[i, p] (+ bias[k])."""
    for t in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        i, k = t // K, t % K
        acc = zero
        for p in range(P):
            left = zero
            for m in range(M):
                left += x[i * M + m] * w[(k * M + m) * P + p]
            acc += left * y[i * P + p]
        out[t] = acc + bias[k] if has_bias else acc


@cuda.jit
def _bilinear_dxy(d, other, w, g, N, M, P, K, for_x, zero):
    """for_x: g[i, m] = sum_k d[i, k] sum_p w[k, m, p] other[i, p]; else g[i, p] = sum_k d[i, k] sum_m other[i, m] w[k, m, p]."""
    width = M if for_x else P
    inner = P if for_x else M
    for t in range(cuda.grid(1), g.size, cuda.gridsize(1)):
        i, j = t // width, t % width
        acc = zero
        for k in range(K):
            s = zero
            for q in range(inner):
                wv = w[(k * M + j) * P + q] if for_x else w[(k * M + q) * P + j]
                s += d[i * K + k] * other[i * inner + q] * wv
            acc += s
        g[t] = acc


@cuda.jit
def _bilinear_dw(x, y, d, g, N, M, P, K, zero):
    """g[k, m, p] = sum_i x[i, m] d[i, k] y[i, p]."""
    for t in range(cuda.grid(1), g.size, cuda.gridsize(1)):
        k, m, p = t // (M * P), (t // P) % M, t % P
        acc = zero
        for i in range(N):
            acc += x[i * M + m] * (d[i * K + k] * y[i * P + p])
        g[t] = acc


@cuda.jit
def _bilinear_db(d, g, N, K, zero):
    for k in range(cuda.grid(1), K, cuda.gridsize(1)):
        acc = zero
        for i in range(N):
            acc += d[i * K + k]
        g[k] = acc


def bilinear_tensor_product(X, Y, Weight, Bias):
    x, y, w, b = dev(X), dev(Y), dev(Weight), dev(Bias)
    cpu.check_bilinear_shapes(tuple(x.shape), tuple(y.shape), tuple(w.shape), None if b is None else tuple(b.shape))
    (n, m), p, k = x.shape, y.shape[1], w.shape[0]
    out = empty((n, k), x.dtype)
    zero = np.dtype(x.dtype).type(0)
    launch(_bilinear, n * k, flat(x), flat(y), flat(w), flat(b) if b is not None else flat(w), flat(out),
           m, p, k, b is not None, zero)
    return out


def bilinear_tensor_product_grad(X, Y, Weight, dOut, *, need):
    x, y, w, d = dev(X), dev(Y), dev(Weight), dev(dOut)
    cpu.check_bilinear_shapes(tuple(x.shape), tuple(y.shape), tuple(w.shape))
    (n, m), p, k = x.shape, y.shape[1], w.shape[0]
    zero = np.dtype(x.dtype).type(0)
    dx = dy = dw = db = None
    if need[0]:
        dx = empty((n, m), x.dtype)
        launch(_bilinear_dxy, n * m, flat(d), flat(y), flat(w), flat(dx), n, m, p, k, True, zero)
    if need[1]:
        dy = empty((n, p), x.dtype)
        launch(_bilinear_dxy, n * p, flat(d), flat(x), flat(w), flat(dy), n, m, p, k, False, zero)
    if need[2]:
        dw = empty((k, m, p), x.dtype)
        launch(_bilinear_dw, k * m * p, flat(x), flat(y), flat(d), flat(dw), n, m, p, k, zero)
    if need[3]:
        db = empty((1, k), x.dtype)
        launch(_bilinear_db, k, flat(d), flat(db), n, k, zero)
    return dx, dy, dw, db


register_kernel("bmm", "cuda", bmm)
register_kernel("bmm_grad", "cuda", bmm_grad)
register_kernel("bilinear_tensor_product", "cuda", bilinear_tensor_product)
register_kernel("bilinear_tensor_product_grad", "cuda", bilinear_tensor_product_grad)
