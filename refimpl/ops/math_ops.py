"""Arithmetic ops: mul, elementwise_*, scale, sum, reduce_* (matmul_v2 is in ``linalg_ops``).

Each op mirrors the Paddle op of the same name: the same slots, attrs with
the same defaults, the same grad ops and no-need-buffer slots. Kernels are
NumPy; float32 stays float32 (Python scalars are cast to the array dtype).
A kernel with a keyword-only ``need`` parameter gets one bool per output slot
and skips outputs nobody reads (for example ``x@GRAD`` of a data input).
"""
import functools
import operator

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import align_y, as_float, broadcast_shape, first, grads_like, reduce_to, same_as
from .grad_maker import simple_grad
from .registry import register_op

_prod = functools.partial(functools.reduce, operator.mul)


# ---- mul ---------------------------------------------------------------
def _mul_infer(ins, attrs):
    """Paddle's ``MulInferMeta``: both ranks above their num_col_dims, X's width equal to Y's height."""
    (xs, dt), (ys, _) = first(ins, "X"), first(ins, "Y")
    xk, yk = attrs["x_num_col_dims"], attrs["y_num_col_dims"]
    for slot, shape, k in (("X", xs, xk), ("Y", ys, yk)):
        if len(shape) <= k:
            raise InvalidArgument(f"The input tensor {slot}'s dimensions of MulOp should be larger than "
                                  f"{slot.lower()}_num_col_dims. But received {slot}'s dimensions = {len(shape)}, "
                                  f"{slot}'s shape = {list(shape)}, {slot.lower()}_num_col_dims = {k}.")
    width, height = xs[xk:], ys[:yk]
    if -1 not in width and -1 not in height and _prod(width, 1) != _prod(height, 1):
        raise InvalidArgument(f"First matrix's width must be equal with second matrix's height. But received "
                              f"first matrix's width = {_prod(width, 1)}, first matrix's shape = {list(xs)}, "
                              f"second matrix's height = {_prod(height, 1)}, second matrix's shape = {list(ys)}.")
    return {"Out": (tuple(xs[:xk]) + tuple(ys[yk:]), dt)}


SMALL_MATMUL = 1 << 16  # multiply-adds up to which a 2-D product adds over k in order


def _reduce_in_order(a, b):
    """``a @ b`` with each output's terms added in order k = 0, 1, ...: every product, then NumPy's
    reduction over K of the C-contiguous (M, K, N) products (a non-innermost axis of a contiguous
    array is reduced in order, one rounding per add; were K innermost, as a transposed ``b`` would
    make it, NumPy would sum it pairwise)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return np.add.reduce(a[..., :, :, None] * b[..., None, :, :], axis=-2)


def _einsum_in_order(a, b):
    """The same sums, faster: NumPy's unoptimised einsum loops over k outside a loop over the
    contiguous output row, so with a C-contiguous ``b`` it adds in k order too (checked once
    per process by :func:`_einsum_adds_in_order`)."""
    return _c_einsum("...mk,...kn->...mn", a, np.ascontiguousarray(b))


@functools.lru_cache(maxsize=None)
def _einsum_adds_in_order():
    """Whether this NumPy build's einsum gives the in-order sums bit for bit (float32 and float64,
    contiguous and transposed ``a``, small and odd shapes, batched); if not, ``mm`` keeps the
    reduction (a build whose einsum fused multiply-adds, or blocked the sum, would differ)."""
    rng = np.random.default_rng(0)
    shapes = [((), (1, 4, 2)), ((), (3, 5, 2)), ((), (4, 16, 16)), ((), (16, 4, 16)), ((), (2, 17, 3)),
              ((), (7, 9, 33)), ((), (5, 64, 8)), ((3,), (2, 6, 5)), ((2, 1), (4, 3, 7))]
    for dtype in (np.float32, np.float64):
        for batch, (m, k, n) in shapes:
            a = rng.standard_normal(batch + (m, k)).astype(dtype)
            b = rng.standard_normal(batch[-1:] + (k, n)).astype(dtype)
            want = _reduce_in_order(a, b).tobytes()
            for x in (a, np.ascontiguousarray(a.swapaxes(-1, -2)).swapaxes(-1, -2)):
                if _einsum_in_order(x, b).tobytes() != want:
                    return False
    return True


def mm(a, b):
    """``a @ b`` (batched). A small product adds each output's terms in order k = 0, 1, ... (every product
    and sum rounded), as Paddle's CPU (MKL) kernels do for most small shapes with two or more output
    columns, where BLAS blocks the sum; larger products, and matrix-vector ones, use BLAS."""
    if a.ndim == 2 and b.ndim == 2:  # the common case, spelled out
        m, k = a.shape
        n = b.shape[1]
        if 0 < k and 1 < n and m * k * n <= SMALL_MATMUL and a.dtype == b.dtype:
            if a.dtype in _EINSUM_DTYPES and _einsum_adds_in_order():
                return _c_einsum("mk,kn->mn", a, b if b.flags.c_contiguous else np.ascontiguousarray(b))
            return _small_in_order(a, b)
        return np.matmul(a, b)
    if a.ndim >= 2 and b.ndim >= 2 and 0 < a.shape[-1] and 1 < b.shape[-1] and a.dtype == b.dtype:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        if _prod(batch, 1) * a.shape[-2] * a.shape[-1] * b.shape[-1] <= SMALL_MATMUL:
            return _small_in_order(a, b)
    return np.matmul(a, b)


def _small_in_order(a, b):
    if a.dtype in _EINSUM_DTYPES and _einsum_adds_in_order():
        return _einsum_in_order(a, b)
    return _reduce_in_order(a, b)


_EINSUM_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
try:  # the C function behind np.einsum(..., optimize=False), without its dispatch layers
    from numpy._core.multiarray import c_einsum as _c_einsum
except ImportError:  # NumPy < 2
    _c_einsum = np.einsum


def _flat2(a, ncol):
    return a.reshape(_prod(a.shape[:ncol], 1), -1)


@register_op("mul", ["X", "Y"], ["Out"], {"x_num_col_dims": 1, "y_num_col_dims": 1},
             infer_shape=_mul_infer,
             grad=simple_grad("mul_grad", ["X", "Y", "Out@GRAD"], ["X@GRAD", "Y@GRAD"]))
def mul(X, Y, *, x_num_col_dims, y_num_col_dims):
    if X.ndim == 2 and Y.ndim == 2:
        return mm(X, Y)
    out = mm(_flat2(X, x_num_col_dims), _flat2(Y, y_num_col_dims))
    return out.reshape(X.shape[:x_num_col_dims] + Y.shape[y_num_col_dims:])


@register_op("mul_grad", ["X", "Y", "Out@GRAD"], ["X@GRAD", "Y@GRAD"],
             {"x_num_col_dims": 1, "y_num_col_dims": 1}, infer_shape=grads_like(**{"X@GRAD": "X", "Y@GRAD": "Y"}))
def mul_grad(X, Y, dOut, *, x_num_col_dims, y_num_col_dims, need):
    if X.ndim == 2 and Y.ndim == 2:  # an fc layer's product: no reshapes
        return (mm(dOut, Y.T) if need[0] else None), (mm(X.T, dOut) if need[1] else None)
    x2, y2 = _flat2(X, x_num_col_dims), _flat2(Y, y_num_col_dims)
    d2 = dOut.reshape(x2.shape[0], y2.shape[1])
    dx = mm(d2, y2.T).reshape(X.shape) if need[0] else None
    dy = mm(x2.T, d2).reshape(Y.shape) if need[1] else None
    return dx, dy


# ---- elementwise ---------------------------------------------------------
def _ew_infer(ins, attrs):
    (xs, dt), (ys, _) = first(ins, "X"), first(ins, "Y")
    return {"Out": (broadcast_shape(xs, align_y(ys, len(xs), attrs["axis"])), dt)}


def _y_shape(X, Y, axis):
    """Y's shape aligned to X's rank at ``axis`` (X and Y may be shape-only TensorMeta)."""
    y_ndim, x_ndim = len(Y.shape), len(X.shape)
    if axis != -1 and y_ndim < x_ndim and axis != x_ndim - y_ndim:  # trailing: NumPy's own alignment
        return tuple(align_y(tuple(Y.shape), x_ndim, axis))
    return tuple(Y.shape)


def _y(X, Y, axis):
    shape = _y_shape(X, Y, axis)
    return Y if shape == Y.shape else Y.reshape(shape)


def _register_elementwise(name, fn, grad_fn, grad_inputs, nnb):
    grad = None
    if grad_fn is not None:
        grad = simple_grad(name + "_grad", grad_inputs, ["X@GRAD", "Y@GRAD"])
        register_op(name + "_grad", grad_inputs, ["X@GRAD", "Y@GRAD"], {"axis": -1},
                    infer_shape=grads_like(**{"X@GRAD": "X", "Y@GRAD": "Y"}),
                    no_need_buffer=nnb)(grad_fn)

    @register_op(name, ["X", "Y"], ["Out"], {"axis": -1}, infer_shape=_ew_infer, grad=grad)
    def kernel(X, Y, *, axis):
        try:
            return fn(X, _y(X, Y, axis))
        except ValueError:
            raise InvalidArgument(f"{name}: shapes {list(X.shape)} and {list(Y.shape)} "
                                  f"do not broadcast (axis={axis})") from None
    kernel.__name__ = name
    return kernel


def _add_grad(X, Y, dOut, *, axis, need):
    dx = reduce_to(dOut, X.shape) if need[0] else None
    dy = _as_shape(reduce_to(dOut, _y_shape(X, Y, axis)), Y.shape) if need[1] else None
    return dx, dy


def _as_shape(a, shape):
    return a if a.shape == tuple(shape) else a.reshape(shape)


def _sub_grad(X, Y, dOut, *, axis, need):
    dx = reduce_to(dOut, X.shape) if need[0] else None
    dy = np.negative(reduce_to(dOut, _y_shape(X, Y, axis))).reshape(Y.shape) if need[1] else None
    return dx, dy


def _mul_grad(X, Y, dOut, *, axis, need):
    y = _y(X, Y, axis)
    dx = reduce_to(dOut * y, X.shape) if need[0] else None
    dy = reduce_to(dOut * X, y.shape).reshape(Y.shape) if need[1] else None
    return dx, dy


def _div_grad(X, Y, Out, dOut, *, axis, need):
    y = _y(X, Y, axis)
    dx = reduce_to(dOut / y, X.shape) if need[0] else None
    dy = reduce_to(-dOut * Out / y, y.shape).reshape(Y.shape) if need[1] else None
    return dx, dy


_register_elementwise("elementwise_add", np.add, _add_grad, ["X", "Y", "Out@GRAD"], ["X", "Y"])
_register_elementwise("elementwise_sub", np.subtract, _sub_grad, ["X", "Y", "Out@GRAD"], ["X", "Y"])
_register_elementwise("elementwise_mul", np.multiply, _mul_grad, ["X", "Y", "Out@GRAD"], [])
def _divide(x, y):
    """x / y; integers divide as C++ does (truncating toward zero), as Paddle's kernel."""
    if np.issubdtype(x.dtype, np.integer) and np.issubdtype(y.dtype, np.integer):
        q, r = np.divmod(x, y)
        return np.where((r != 0) & ((x < 0) != (y < 0)), q + 1, q).astype(np.result_type(x, y))
    return np.divide(x, y)


_register_elementwise("elementwise_div", _divide, _div_grad, ["X", "Y", "Out", "Out@GRAD"], [])
_register_elementwise("elementwise_mod", np.mod, None, None, [])
_register_elementwise("elementwise_max", np.maximum, None, None, [])
_register_elementwise("elementwise_min", np.minimum, None, None, [])
def _pow_grad(X, Y, dOut, *, axis, need):
    y = _y(X, Y, axis)
    dx = reduce_to(dOut * y * np.power(X, y - 1), X.shape) if need[0] else None
    dy = reduce_to(dOut * np.power(X, y) * np.log(X), y.shape).reshape(Y.shape) if need[1] else None
    return dx, dy


_register_elementwise("elementwise_pow", np.power, _pow_grad, ["X", "Y", "Out@GRAD"], [])


# ---- scale and sum --------------------------------------------------------
def _scale_grad(g):
    return [g.op("scale",
                 {"X": g.output_grad("Out"), "ScaleTensor": g.input("ScaleTensor"),
                  "BiasTensor": g.input("BiasTensor")},
                 {"Out": g.input_grad("X")},
                 {"scale": g.attrs()["scale"], "bias": 0.0, "bias_after_scale": True})]


@register_op("scale", ["X", "ScaleTensor?", "BiasTensor?"], ["Out"],
             {"scale": 1.0, "bias": 0.0, "bias_after_scale": True},
             infer_shape=same_as("X", "Out"), grad=_scale_grad, inplace={"Out": "X"})
def scale(X, ScaleTensor, BiasTensor, *, scale, bias, bias_after_scale):
    if ScaleTensor is not None:
        scale = ScaleTensor.reshape(-1)[0]
    if BiasTensor is not None:
        bias = BiasTensor.reshape(-1)[0]
    s, b = as_float(scale, X.dtype), as_float(bias, X.dtype)
    if bias_after_scale:
        out = X * s if b == 0 else X * s + b
    else:
        out = (X + b) * s
    return np.asarray(out, dtype=X.dtype)


def _sum_grad(g):
    # Paddle's sum grad: one scale(1.0) per input that needs a gradient
    dout = g.output_grad("Out")
    return [g.op("scale", {"X": dout}, {"Out": [n]}, {"scale": 1.0})
            for n in g.input_grad("X")]


@register_op("sum", ["X*"], ["Out"], {}, infer_shape=same_as("X", "Out"), grad=_sum_grad)
def sum_op(X):
    if len(X) == 1:
        return X[0].copy()
    out = np.add(X[0], X[1])
    for x in X[2:]:
        np.add(out, x, out=out)
    return out


# ---- reductions --------------------------------------------------------------
REDUCE_ATTRS = {"dim": [], "keep_dim": False, "reduce_all": False, "in_dtype": -1, "out_dtype": -1}


def _axes(ndim, dim, reduce_all):
    if reduce_all or not dim or len(dim) == ndim:
        return None
    return tuple(d % ndim for d in dim)


def reduced_shape(shape, axes, keep_dim):
    """The shape after reducing dims ``axes`` (kept as 1 with ``keep_dim``, else dropped)."""
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep_dim or i not in axes)


def _reduce_infer(ins, attrs):
    shape, dt = first(ins, "X")
    axes = _axes(len(shape), attrs["dim"], attrs["reduce_all"])
    axes = set(range(len(shape))) if axes is None else set(axes)
    return {"Out": (reduced_shape(shape, axes, attrs["keep_dim"]), dt)}


def _reduce_grad_value(X, dOut, dim, keep_dim, reduce_all):
    axes = _axes(X.ndim, dim, reduce_all)
    if axes is None:
        return dOut.reshape((1,) * X.ndim), X.size
    if not keep_dim:
        dOut = np.expand_dims(dOut, axes)
    return dOut, _prod((X.shape[a] for a in axes), 1)


def _register_reduce(name, fn, grad_fn):
    register_op(name + "_grad", ["X", "Out@GRAD"], ["X@GRAD"], REDUCE_ATTRS,
                infer_shape=grads_like(**{"X@GRAD": "X"}), no_need_buffer=["X"])(grad_fn)

    @register_op(name, ["X"], ["Out"], REDUCE_ATTRS, infer_shape=_reduce_infer,
                 grad=simple_grad(name + "_grad", ["X", "Out@GRAD"], ["X@GRAD"]))
    def kernel(X, *, dim, keep_dim, reduce_all):
        return np.asarray(fn(X, axis=_axes(X.ndim, dim, reduce_all), keepdims=keep_dim))
    kernel.__name__ = name


def _mean_grad(X, dOut, *, dim, keep_dim, reduce_all):
    g, n = _reduce_grad_value(X, dOut, dim, keep_dim, reduce_all)
    v = g * as_float(1.0 / n if n else 0.0, g.dtype)  # n == 0: X is empty
    out = np.empty(X.shape, v.dtype)
    out[...] = v  # broadcast over the reduced dims
    return out


def _sum_grad_kernel(X, dOut, *, dim, keep_dim, reduce_all):
    g, _ = _reduce_grad_value(X, dOut, dim, keep_dim, reduce_all)
    return np.broadcast_to(g, X.shape).copy()


def eigen_sum_f32(x: np.ndarray) -> np.float32:
    """The float32 sum of all of ``x`` in the order of Eigen's full reduction on Paddle's CPU wheel
    (``reduce_mean`` over all dims): one 8-lane accumulator over the packets in order, lanes folded
    in halves (``predux``), the < 8 trailing values added in order first. Measured bit for bit
    against Paddle 3.3.1 for 5 ... 100003 values."""
    flat = x.reshape(-1)
    vec = flat.size // 8 * 8
    lanes = np.add.reduce(flat[:vec].reshape(-1, 8), axis=0) if vec else np.zeros(8, np.float32)
    tail = np.float32(0)
    for v in flat[vec:]:
        tail = np.float32(tail + v)
    half = lanes[:4] + lanes[4:]
    quarter = half[:2] + half[2:]
    return np.float32(tail + (quarter[0] + quarter[1]))


def _mean(X, axis, keepdims):
    """``np.mean`` without its Python layers for float32/64: the same sum (``np.add.reduce``), then one
    division by the count (NumPy divides in float64 and rounds back, which for a quotient gives the
    same float32 as dividing in float32). A float32 mean of every value sums in Eigen's order, as
    Paddle's CPU kernel (:func:`eigen_sum_f32`)."""
    if X.dtype not in _EINSUM_DTYPES or X.size == 0:
        return np.mean(X, axis=axis, keepdims=keepdims)
    if X.dtype == np.float32 and (axis is None or len(axis) == X.ndim):
        m = np.float32(eigen_sum_f32(X) / np.float32(X.size))
        return np.full((1,) * X.ndim if keepdims else (), m, np.float32)
    n = X.size if axis is None else _prod((X.shape[a] for a in axis), 1)
    return np.add.reduce(X, axis=axis, keepdims=keepdims) / n


_register_reduce("reduce_mean", _mean, _mean_grad)
_register_reduce("reduce_sum", np.sum, _sum_grad_kernel)
