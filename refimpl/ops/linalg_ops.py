"""Linear-algebra ops: bmm (+ grad).

Mirrors Paddle's ``bmm`` (``paddle/phi/kernels/impl/bmm_kernel_impl.h``,
``bmm_grad_kernel_impl.h``; shapes as ``BmmInferMeta`` in
``paddle/phi/infermeta/binary.cc``): X ``[B, M, K]`` times Y ``[B, K, N]``, batch by batch, with
no broadcasting; any other shapes are an InvalidArgument naming both (at build time, where the
dims are known). The grads are ``Out@GRAD @ Y^T`` and ``X^T @ Out@GRAD``, multiplied with
``math_ops.mm`` as matmul_v2's are (the same in-order sums for small products).
"""
import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import first, grads_like
from .grad_maker import simple_grad
from .math_ops import mm
from .registry import register_op


def check_bmm_shapes(xs, ys) -> None:
    """BmmInferMeta's checks; -1 (unknown) matches anything."""
    xs, ys = list(xs), list(ys)
    if len(xs) != 3 or len(ys) != 3:
        raise InvalidArgument(f"bmm: X and Y must be 3-D, got X {xs} and Y {ys}")
    if -1 not in (xs[0], ys[0]) and xs[0] != ys[0]:
        raise InvalidArgument(f"bmm: the batch dims of X {xs} and Y {ys} differ")
    if -1 not in (xs[2], ys[1]) and xs[2] != ys[1]:
        raise InvalidArgument(f"bmm: X's last dim must equal Y's middle dim, got X {xs} and Y {ys}")


def _bmm_infer(ins, attrs):
    (xs, dt), (ys, _) = first(ins, "X"), first(ins, "Y")
    check_bmm_shapes(xs, ys)
    return {"Out": ((xs[0] if xs[0] != -1 else ys[0], xs[1], ys[2]), dt)}


@register_op("bmm", ["X", "Y"], ["Out"], {}, infer_shape=_bmm_infer,
             grad=simple_grad("bmm_grad", ["X", "Y", "Out@GRAD"], ["X@GRAD", "Y@GRAD"]))
def bmm(X, Y):
    check_bmm_shapes(X.shape, Y.shape)
    return mm(X, Y)


@register_op("bmm_grad", ["X", "Y", "Out@GRAD"], ["X@GRAD", "Y@GRAD"], {},
             infer_shape=grads_like(**{"X@GRAD": "X", "Y@GRAD": "Y"}))
def bmm_grad(X, Y, dOut, *, need):
    dx = mm(dOut, np.swapaxes(Y, 1, 2)) if need[0] else None
    dy = mm(np.swapaxes(X, 1, 2), dOut) if need[1] else None
    return dx, dy
