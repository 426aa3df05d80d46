"""CUDA kernels for mul, matmul_v2 and their grads: a tiled shared-memory matmul.

Mirrors Paddle's ``MatmulKernel`` / ``MulKernel`` (cuBLAS there): batched
``op(A) @ op(B)`` with NumPy's batch broadcasting, transposes read through
strides (no copies), and the grads as the NumPy kernels build them
(``d @ y^T``, ``x^T @ d``, then summed over broadcast batch dims). Each
block computes a 64 x 64 output tile (16 x 16 threads, 4 x 4 outputs each,
held in registers) from slices of A and B staged in shared memory; blocks
stride over the output tiles. The sum over
k runs in order (k = 0, 1, ...) in the output dtype, so results are
deterministic; they differ from NumPy's BLAS in the last bits (BLAS blocks
and fuses differently). matmul_v2 checks its shapes with the NumPy kernel's
``check_matmul_shapes``.
"""
import numpy as np

from refimpl.ops.linalg_ops import check_matmul_shapes
from refimpl.ops.registry import register_kernel

from . import ew
from .device import MAXD, contiguous_strides, cuda, dev, empty, flat, launch_config, padded, simulated

T = 2 if simulated() else 16  # threads per block side (T x T threads)
R = 2 if simulated() else 4   # outputs per thread side: a block computes a (T*R) x (T*R) tile
BK = T                        # k elements staged per step
SIDE = T * R                  # (a named constant: shared array shapes must be compile-time constants)
MAX_TILE_BLOCKS = 1024


@cuda.jit
def _bmm(a, b, c, M, N, K, a_si, a_sk, b_sk, b_sj, bshape, a_bst, b_bst, zero):
    """c[t, i, j] = sum_k a[t, i, k] * b[t, k, j]; a, b read through strides, c contiguous.

    Thread (ty, tx) owns the R x R outputs at rows ty + T*r, cols tx + T*q of its block's
    tile and keeps them in registers; each k step stages a (T*R) x BK slice of a and a
    BK x (T*R) slice of b in shared memory. Every output still adds its products in
    order, k = 0, 1, ..., so the result does not depend on T, R or BK.
    """
    sa = cuda.shared.array((SIDE, BK), a.dtype)
    sb = cuda.shared.array((BK, SIDE), b.dtype)
    acc = cuda.local.array((R, R), c.dtype)
    av = cuda.local.array(R, a.dtype)
    bv = cuda.local.array(R, b.dtype)
    ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
    side = SIDE
    tiles_m, tiles_n = (M + side - 1) // side, (N + side - 1) // side
    nbatch = c.size // (M * N)
    for tile in range(cuda.blockIdx.x, nbatch * tiles_m * tiles_n, cuda.gridDim.x):
        t = tile // (tiles_m * tiles_n)
        i0 = (tile // tiles_n) % tiles_m * side
        j0 = tile % tiles_n * side
        a0 = ew.offset(t, bshape, a_bst)
        b0 = ew.offset(t, bshape, b_bst)
        for r in range(R):
            for q in range(R):
                acc[r, q] = zero
        for k0 in range(0, K, BK):
            for r in range(R):  # stage: thread (ty, tx) loads rows ty + T*r of a's slice, col tx
                i, ka = i0 + ty + T * r, k0 + tx
                sa[ty + T * r, tx] = a[a0 + i * a_si + ka * a_sk] if (i < M and ka < K) else zero
                j, kb = j0 + tx + T * r, k0 + ty
                sb[ty, tx + T * r] = b[b0 + kb * b_sk + j * b_sj] if (kb < K and j < N) else zero
            cuda.syncthreads()
            for kk in range(min(BK, K - k0)):
                for r in range(R):
                    av[r] = sa[ty + T * r, kk]
                    bv[r] = sb[kk, tx + T * r]
                for r in range(R):
                    for q in range(R):
                        acc[r, q] += av[r] * bv[q]
            cuda.syncthreads()
        for r in range(R):
            i = i0 + ty + T * r
            for q in range(R):
                j = j0 + tx + T * q
                if i < M and j < N:
                    c[(t * M + i) * N + j] = acc[r, q]


def bmm(A, B, trans_a=False, trans_b=False):
    """``op(A) @ op(B)`` for device arrays of rank >= 2 (batch dims broadcast)."""
    A, B = dev(A), dev(B)
    ash, bsh = tuple(A.shape), tuple(B.shape)
    M, K = (ash[-1], ash[-2]) if trans_a else (ash[-2], ash[-1])
    K2, N = (bsh[-1], bsh[-2]) if trans_b else (bsh[-2], bsh[-1])
    if K != K2:
        raise ValueError(f"matmul: inner dims differ ({list(ash)} x {list(bsh)})")
    batch = tuple(np.broadcast_shapes(ash[:-2], bsh[:-2]))
    out = empty(batch + (M, N), A.dtype)
    if out.size == 0:
        return out
    ast, bst = contiguous_strides(ash), contiguous_strides(bsh)
    a_si, a_sk = (ast[-1], ast[-2]) if trans_a else (ast[-2], ast[-1])
    b_sk, b_sj = (bst[-1], bst[-2]) if trans_b else (bst[-2], bst[-1])
    a_bst = _batch_strides(ash, ast, batch)
    b_bst = _batch_strides(bsh, bst, batch)
    tiles = out.size // (M * N) * -(-M // SIDE) * -(-N // SIDE)
    blocks = 1 if simulated() else min(tiles, MAX_TILE_BLOCKS)
    if K == 0:
        return ew.run1(f_zero, out)
    launch_config(_bmm, blocks, (T, T), flat(A), flat(B), flat(out), M, N, K, a_si, a_sk, b_sk, b_sj,
                  padded(batch or (1,)), a_bst, b_bst, A.dtype.type(0))
    return out


@ew.functor(1)
def f_zero(DT):  # a named def: compile_check finds a functor by its maker's name
    return lambda x, a, b: DT(0)


def _batch_strides(shape, strides, batch):
    """MAXD strides of ``shape``'s batch dims read broadcast to ``batch`` (0 where broadcast)."""
    lead = len(batch) - (len(shape) - 2)
    st = [0] * lead + [0 if d == 1 and batch[lead + i] != 1 else strides[i] for i, d in enumerate(shape[:-2])]
    return (0,) * (MAXD - len(st)) + tuple(st) if batch else (0,) * MAXD


# ---- mul -------------------------------------------------------------------------------------
def _prod(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def _flat2(a, ncol):
    return dev(a).reshape((_prod(a.shape[:ncol]), _prod(a.shape[ncol:])))


def mul(X, Y, *, x_num_col_dims, y_num_col_dims):
    out = bmm(_flat2(X, x_num_col_dims), _flat2(Y, y_num_col_dims))
    shape = tuple(X.shape[:x_num_col_dims]) + tuple(Y.shape[y_num_col_dims:])
    return out if tuple(out.shape) == shape else out.reshape(shape)


def mul_grad(X, Y, dOut, *, x_num_col_dims, y_num_col_dims, need):
    x2, y2 = _flat2(X, x_num_col_dims), _flat2(Y, y_num_col_dims)
    d2 = dev(dOut).reshape((x2.shape[0], y2.shape[1]))
    dx = bmm(d2, y2, trans_b=True).reshape(tuple(X.shape)) if need[0] else None
    dy = bmm(x2, d2, trans_a=True).reshape(tuple(Y.shape)) if need[1] else None
    return dx, dy


# ---- matmul_v2 ----------------------------------------------------------------------------
def matmul_v2(X, Y, *, trans_x, trans_y):
    X, Y = dev(X), dev(Y)
    check_matmul_shapes(tuple(X.shape), tuple(Y.shape), trans_x, trans_y)
    x1, y1 = len(X.shape) == 1, len(Y.shape) == 1
    x = X.reshape((1, X.shape[0])) if x1 else X
    y = Y.reshape((Y.shape[0], 1)) if y1 else Y
    out = bmm(x, y, trans_x and not x1, trans_y and not y1)
    shape = tuple(out.shape)
    if x1:
        shape = shape[:-2] + shape[-1:]
    if y1:
        shape = shape[:-1]
    return out if shape == tuple(out.shape) else out.reshape(shape)


def matmul_v2_grad(X, Y, dOut, *, trans_x, trans_y, need):
    x, y, d = dev(X), dev(Y), dev(dOut)
    trans_x, trans_y = trans_x and len(X.shape) > 1, trans_y and len(Y.shape) > 1  # a vector has no transpose
    if len(x.shape) == 1:
        x, d = x.reshape((1, x.shape[0])), d.reshape(tuple(d.shape[:-1]) + (1,) + tuple(d.shape[-1:]))
    if len(y.shape) == 1:
        y, d = y.reshape((y.shape[0], 1)), d.reshape(tuple(d.shape) + (1,))
    dx = dy = None
    if need[0]:
        dx = bmm(d, y, False, not trans_y) if not trans_x else bmm(y, d, trans_y, True)
        dx = _back(dx, tuple(x.shape), tuple(X.shape))
    if need[1]:
        dy = bmm(x, d, not trans_x, False) if not trans_y else bmm(d, x, True, trans_x)
        dy = _back(dy, tuple(y.shape), tuple(Y.shape))
    return dx, dy


def _back(g, shape, final):
    g = ew.reduce_to(g, shape)
    return g if tuple(g.shape) == final else g.reshape(final)


register_kernel("mul", "cuda", mul)
register_kernel("mul_grad", "cuda", mul_grad)
register_kernel("matmul_v2", "cuda", matmul_v2)
register_kernel("matmul_v2_grad", "cuda", matmul_v2_grad)
