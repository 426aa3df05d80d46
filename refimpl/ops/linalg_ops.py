"""Linear-algebra ops: matmul_v2 and bmm (+ grads).

``matmul_v2`` mirrors Paddle's op (``paddle/phi/kernels/impl/matmul_kernel_impl.h``,
``matmul_grad_kernel_impl.h``): batch dims broadcast, ``trans_x`` / ``trans_y`` swap the last two dims,
a 1-D operand is a row (X) or column (Y) whose dim is dropped from Out (it has no transpose: trans_x /
trans_y on a vector are ignored, as in Paddle's ``MatmulInferMeta``). ``check_matmul_shapes`` is the
infer-meta's check, run again by both kernels for shapes unknown at build time. When Y is a matrix and X has
batch dims (and is not transposed), Out and X@GRAD are one 2-D product each, of X's (Out@GRAD's) rows
folded into one matrix: each output is the same dot product as batch by batch (bit for bit for
the small, in-order products; BLAS may round large ones differently in the last bit). Y@GRAD stays a
product per batch, then a sum over the batch: summing all rows in one product instead changes the last
bits, and with those the zoo's 02_gpt_mini no longer gives Paddle's losses bit for bit.

``bmm`` mirrors Paddle's ``bmm`` (``paddle/phi/kernels/impl/bmm_kernel_impl.h``,
``bmm_grad_kernel_impl.h``; shapes as ``BmmInferMeta`` in
``paddle/phi/infermeta/binary.cc``): X ``[B, M, K]`` times Y ``[B, K, N]``, batch by batch, with
no broadcasting; any other shapes are an InvalidArgument naming both (at build time, where the
dims are known). The grads are ``Out@GRAD @ Y^T`` and ``X^T @ Out@GRAD``, multiplied with
``math_ops.mm`` as matmul_v2's are (the same in-order sums for small products).

``bilinear_tensor_product`` mirrors Paddle's legacy op (``BilinearInferMeta`` in
``paddle/phi/infermeta/multiary.cc``, ``paddle/phi/kernels/impl/bilinear_kernel_impl.h`` and
``bilinear_grad_kernel_impl.h``): X ``[N, M]``, Y ``[N, P]``, Weight ``[K, M, P]`` and an optional
Bias ``[1, K]`` give ``Out[i, k] = X[i] @ Weight[k] @ Y[i] + Bias[0, k]``. As in Paddle, each
``X @ Weight[k]`` is a matrix product, then multiplied by Y elementwise and summed over P; the
grads are the same products taken apart (``Bias@GRAD`` is Out@GRAD summed over the batch). Every
sum runs in order (the outer-axis sums of NumPy, ``math_ops.mm``'s small products), as the cuda
kernels add; products above ``math_ops.SMALL_MATMUL`` go to BLAS, which rounds its own way.
"""
import math

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import broadcast_shape, first, grads_like, reduce_to
from .grad_maker import simple_grad
from .math_ops import mm
from .registry import register_op


# ---- matmul_v2 ----------------------------------------------------------------------------
def check_matmul_shapes(xs, ys, trans_x: bool, trans_y: bool) -> tuple:
    """MatmulInferMeta's checks; returns Out's shape (-1, unknown, matches anything).

    A 1-D X (Y) is a row (column) and has no transpose: trans_x (trans_y) swaps the last two dims
    only of an operand with 2+ dims, as Paddle's MatmulInferMeta and kernel do.
    """
    shapes = f"(shapes {list(xs)} and {list(ys)}, trans_x={trans_x}, trans_y={trans_y})"
    xs, ys = list(xs), list(ys)
    if not xs or not ys:
        raise InvalidArgument(f"matmul_v2: X and Y must have at least 1 dim {shapes}")
    x1, y1 = len(xs) == 1, len(ys) == 1
    if trans_x and not x1:
        xs[-1], xs[-2] = xs[-2], xs[-1]
    if trans_y and not y1:
        ys[-1], ys[-2] = ys[-2], ys[-1]
    if x1:
        xs = [1] + xs
    if y1:
        ys = ys + [1]
    if -1 not in (xs[-1], ys[-2]) and xs[-1] != ys[-2]:
        raise InvalidArgument(f"matmul_v2: X's last dim {xs[-1]} differs from Y's second-to-last {ys[-2]} "
                              f"{shapes}")
    try:
        batch = broadcast_shape(xs[:-2], ys[:-2])
    except ValueError:
        raise InvalidArgument(f"matmul_v2: the batch dims of X and Y do not broadcast {shapes}") from None
    out = list(batch) + [xs[-2], ys[-1]]
    if x1:
        out.pop(-2)
    if y1:
        out.pop(-1)
    return tuple(out)


def _matmul_infer(ins, attrs):
    (xs, dt), (ys, _) = first(ins, "X"), first(ins, "Y")
    return {"Out": (check_matmul_shapes(xs, ys, attrs["trans_x"], attrs["trans_y"]), dt)}


def _t(a, flag):
    return a.swapaxes(-1, -2) if flag and a.ndim > 1 else a  # a vector has no transpose (Paddle ignores it)


def _folded(x, y, trans_x):
    """Whether ``x @ y`` is one product of x's rows folded into a matrix (y a matrix, x batched, not transposed)."""
    return y.ndim == 2 and x.ndim >= 3 and not trans_x


def _rows(a):
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


@register_op("matmul_v2", ["X", "Y"], ["Out"], {"trans_x": False, "trans_y": False},
             infer_shape=_matmul_infer,
             grad=simple_grad("matmul_v2_grad", ["X", "Y", "Out@GRAD"], ["X@GRAD", "Y@GRAD"]))
def matmul_v2(X, Y, *, trans_x, trans_y):
    """A vector X (Y) is a one-row (one-column) matrix whose dim is dropped from Out."""
    check_matmul_shapes(X.shape, Y.shape, trans_x, trans_y)
    x = X[None, :] if X.ndim == 1 else _t(X, trans_x)
    y = Y[:, None] if Y.ndim == 1 else _t(Y, trans_y)
    out = mm(_rows(x), y).reshape(x.shape[:-1] + y.shape[-1:]) if _folded(x, y, trans_x) else mm(x, y)
    if X.ndim == 1:
        out = out[..., 0, :]
    if Y.ndim == 1:
        out = out[..., 0]
    return out


@register_op("matmul_v2_grad", ["X", "Y", "Out@GRAD"], ["X@GRAD", "Y@GRAD"],
             {"trans_x": False, "trans_y": False}, infer_shape=grads_like(**{"X@GRAD": "X", "Y@GRAD": "Y"}))
def matmul_v2_grad(X, Y, dOut, *, trans_x, trans_y, need):
    """A 1-D X (Y) is a row (column) whose dim is missing from Out; put it back, then drop it from the grad."""
    x, y, d = X, Y, dOut
    trans_x, trans_y = trans_x and X.ndim > 1, trans_y and Y.ndim > 1
    if y.ndim == 1:
        y, d = y[:, None], d[..., None]
    if x.ndim == 1:
        x, d = x[None, :], d[..., None, :]
    dx = dy = None
    if need[0] and _folded(x, y, trans_x):
        dx = mm(_rows(d), y if trans_y else y.T).reshape(X.shape)
    elif need[0]:
        dx = mm(d, _t(y, not trans_y)) if not trans_x else mm(_t(y, trans_y), _t(d, True))
        dx = reduce_to(dx, x.shape).reshape(X.shape)
    if need[1]:
        dy = mm(_t(x, not trans_x), d) if not trans_y else mm(_t(d, True), _t(x, trans_x))
        dy = reduce_to(dy, y.shape).reshape(Y.shape)
    return dx, dy


# ---- bmm ------------------------------------------------------------------
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


# ---- bilinear_tensor_product ----------------------------------------------------------------
def check_bilinear_shapes(xs, ys, ws, bs=None) -> tuple:
    """BilinearInferMeta's checks; returns Out's shape. -1 (unknown) matches anything."""
    xs, ys, ws = list(xs), list(ys), list(ws)
    shapes = f"(X {xs}, Y {ys}, Weight {ws}" + (f", Bias {list(bs)})" if bs is not None else ")")
    if len(xs) != 2 or len(ys) != 2:
        raise InvalidArgument(f"bilinear_tensor_product: X and Y must be 2-D {shapes}")
    if len(ws) != 3:
        raise InvalidArgument(f"bilinear_tensor_product: Weight must be 3-D [size, X's dim, Y's dim] {shapes}")

    def differ(a, b):
        return -1 not in (a, b) and a != b
    if differ(xs[0], ys[0]):
        raise InvalidArgument(f"bilinear_tensor_product: X and Y must have the same batch size {shapes}")
    if differ(xs[1], ws[1]) or differ(ys[1], ws[2]):
        raise InvalidArgument(f"bilinear_tensor_product: Weight's dims 1 and 2 must be X's and Y's "
                              f"second dims {shapes}")
    if bs is not None and (len(bs) != 2 or differ(bs[0], 1) or differ(bs[1], ws[0])):
        raise InvalidArgument(f"bilinear_tensor_product: Bias must be [1, {ws[0]}] {shapes}")
    return (xs[0] if xs[0] != -1 else ys[0], ws[0])


def _bilinear_infer(ins, attrs):
    (xs, dt), (ys, _), (ws, _) = first(ins, "X"), first(ins, "Y"), first(ins, "Weight")
    b = first(ins, "Bias")
    return {"Out": (check_bilinear_shapes(xs, ys, ws, b[0] if b else None), dt)}


def _bilinear_grad_infer(ins, attrs):
    out = grads_like(**{"X@GRAD": "X", "Y@GRAD": "Y", "Weight@GRAD": "Weight"})(ins, attrs)
    ws, dt = first(ins, "Weight")
    out["Bias@GRAD"] = ((1, ws[0]), dt)
    return out


@register_op("bilinear_tensor_product", ["X", "Y", "Weight", "Bias?"], ["Out"], {},
             infer_shape=_bilinear_infer,
             grad=simple_grad("bilinear_tensor_product_grad", ["X", "Y", "Weight", "Out@GRAD"],
                              ["X@GRAD", "Y@GRAD", "Weight@GRAD", "Bias@GRAD"]))
def bilinear_tensor_product(X, Y, Weight, Bias):
    check_bilinear_shapes(X.shape, Y.shape, Weight.shape, None if Bias is None else Bias.shape)
    left = mm(np.broadcast_to(X, (Weight.shape[0],) + X.shape), Weight)   # [K, N, P]: X @ Weight[k]
    terms = np.ascontiguousarray(np.moveaxis(left * Y, -1, 0))             # [P, K, N]
    out = np.ascontiguousarray(terms.sum(axis=0).T)                        # [N, K], added p = 0, 1, ... in order
    return out + Bias if Bias is not None else out


@register_op("bilinear_tensor_product_grad", ["X", "Y", "Weight", "Out@GRAD"],
             ["X@GRAD", "Y@GRAD", "Weight@GRAD", "Bias@GRAD"], {}, infer_shape=_bilinear_grad_infer)
def bilinear_tensor_product_grad(X, Y, Weight, dOut, *, need):
    check_bilinear_shapes(X.shape, Y.shape, Weight.shape)
    d = dOut.T[:, :, None]                                                # [K, N, 1]
    dyw = d * Y                                                           # [K, N, P]: dOut[:, k] * Y
    dx = mm(dyw, Weight.swapaxes(1, 2)).sum(axis=0) if need[0] else None
    dy = mm(d * X, Weight).sum(axis=0) if need[1] else None
    dw = mm(np.broadcast_to(X.T, (Weight.shape[0],) + X.T.shape), dyw) if need[2] else None
    db = dOut.sum(axis=0, keepdims=True) if need[3] else None
    return dx, dy, dw, db
