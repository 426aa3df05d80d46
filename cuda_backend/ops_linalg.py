"""CUDA kernels for ``refimpl/ops/linalg_ops.py``: bmm (+ grad).

Mirrors Paddle's GPU ``BmmKernel`` / ``BmmGradKernel`` (batched cuBLAS
GEMMs there) through the tiled matmul of ``ops_matmul.bmm``: transposes are
read through strides, and each output adds its products in order k = 0, 1,
..., as the NumPy kernel's small products do. The shape checks are the NumPy
kernel's.
"""
from refimpl.ops import linalg_ops as cpu
from refimpl.ops.registry import register_kernel

from .device import dev
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


register_kernel("bmm", "cuda", bmm)
register_kernel("bmm_grad", "cuda", bmm_grad)
