"""Reductions, clipping and pointwise math of real models (+ grads).

``squared_l2_norm``, ``clip_by_norm``, ``clip``, ``abs``, ``sign``, ``reduce_max`` / ``reduce_min`` / ``reduce_prod``,
``reduce_any``,
``arg_max``, ``cumsum``, ``top_k_v2``; ``log_softmax``, ``one_hot_v2`` and
``sigmoid_cross_entropy_with_logits`` are in ``reduce_loss_ops.py``.

Mirrors Paddle 3.3.1's ops of the same names: slots from ``paddle/phi/ops/yaml/ops.yaml`` /
``backward.yaml`` through ``op_compat.yaml`` (a Scalar attr's tensor slot, ``Min`` / ``Max`` of
``clip``, comes after the tensor inputs, as Paddle's op-maker generator adds it), CPU kernels
``paddle/phi/kernels/cpu/`` and ``paddle/phi/kernels/impl/`` (``clip_kernel_impl.h``,
``clip_grad_kernel_impl.h``, ``clip_by_norm_kernel_impl.h``, ``abs_grad_kernel_impl.h``,
``reduce_grad_functions.h``' max/min grad). Differences: the sums of ``squared_l2_norm`` and
``clip_by_norm`` are NumPy's pairwise sum of the flattened squares (Paddle's Eigen sum blocks
the sum its own way: results agree to float32 rounding); ``reduce_max`` / ``reduce_min``
propagate NaN as NumPy does.
"""
import numpy as np

from refimpl.core.dtypes import VARTYPE_TO_NAME
from refimpl.core.errors import InvalidArgument

from .common import first, grads_like, same_as
from .grad_maker import simple_grad
from .math_ops import REDUCE_ATTRS, reduced_shape
from .registry import register_op


# ---- shared checks ----------------------------------------------------------------
def check_axis(op: str, attr: str, axis: int, ndim: int) -> int:
    """``axis`` in ``[-ndim, ndim)`` (a 0-D tensor takes -1 and 0) as a non-negative dim."""
    rank = max(ndim, 1)
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{op}: attr {attr}={axis} is out of range [{-rank}, {rank}) "
                              f"for an input of rank {ndim}")
    return axis % rank


def reduce_axes(op: str, ndim: int, dim, reduce_all: bool):
    """The reduced dims as a sorted tuple (all of them for reduce_all / empty dim), checked."""
    if reduce_all or not dim:
        return tuple(range(ndim))
    return tuple(sorted({check_axis(op, "dim", d, ndim) for d in dim}))


# ---- squared_l2_norm ----------------------------------------------------------------
def squared_l2_value(X):
    """sum(x * x) over every element: NumPy's pairwise sum of the flattened squares."""
    x = np.ascontiguousarray(X).reshape(-1)
    return np.add.reduce(x * x)


@register_op("squared_l2_norm_grad", ["X", "Out@GRAD"], ["X@GRAD"], {},
             infer_shape=grads_like(**{"X@GRAD": "X"}))
def squared_l2_norm_grad(X, dOut):
    if dOut.size != 1:
        raise InvalidArgument(f"squared_l2_norm_grad: Out@GRAD must hold one element, got shape {list(dOut.shape)}")
    return X * dOut.reshape(-1)[0] * X.dtype.type(2)


@register_op("squared_l2_norm", ["X"], ["Out"], {}, infer_shape=lambda ins, attrs: {"Out": ((1,), first(ins, "X")[1])},
             grad=simple_grad("squared_l2_norm_grad", ["X", "Out@GRAD"], ["X@GRAD"]))
def squared_l2_norm(X):
    return np.asarray(squared_l2_value(X), X.dtype).reshape(1)


# ---- clip_by_norm -------------------------------------------------------------------
def clip_by_norm_scale(sq_sum, max_norm, dtype):
    """Paddle's scaling, in the array's type: 1 when norm <= max_norm, else max_norm / (norm + eps),
    eps = 1e-6 only when the norm is <= 1e-30."""
    t = np.dtype(dtype).type
    norm = np.sqrt(t(sq_sum))
    keep = t(norm <= t(max_norm))
    eps = t(norm <= t(1e-30)) * t(1e-6)
    with np.errstate(divide="ignore", invalid="ignore"):
        return keep + (t(1) - keep) * t(max_norm) / (norm + eps)


@register_op("clip_by_norm", ["X"], ["Out"], {"max_norm": 0.0}, infer_shape=same_as("X", "Out"))
def clip_by_norm(X, *, max_norm):
    return X * clip_by_norm_scale(squared_l2_value(X), max_norm, X.dtype)


# ---- clip -----------------------------------------------------------------------------
def clip_bounds(Min, Max, min, max, dtype, op="clip"):
    """(min, max) in the array's type; a Min / Max tensor overrides the attr. min > max is InvalidArgument."""
    t = np.dtype(dtype).type
    lo = t(np.asarray(Min).reshape(-1)[0]) if Min is not None else t(min)
    hi = t(np.asarray(Max).reshape(-1)[0]) if Max is not None else t(max)
    if lo > hi:
        raise InvalidArgument(f"{op}: max should be greater than or equal to min, got min={lo}, max={hi}")
    return lo, hi


def _clip_infer(ins, attrs):
    if not ins.get("Min") and not ins.get("Max") and attrs["min"] > attrs["max"]:
        raise InvalidArgument(f"clip: max should be greater than or equal to min, "
                              f"got min={attrs['min']}, max={attrs['max']}")
    return same_as("X", "Out")(ins, attrs)


@register_op("clip_grad", ["X", "Out@GRAD", "Min?", "Max?"], ["X@GRAD"], {"min": 0.0, "max": 0.0},
             infer_shape=grads_like(**{"X@GRAD": "X"}), inplace={"X@GRAD": "Out@GRAD"})
def clip_grad(X, dOut, Min, Max, *, min, max):
    lo, hi = clip_bounds(Min, Max, min, max, X.dtype, "clip_grad")
    return np.where((X >= lo) & (X <= hi), dOut, dOut.dtype.type(0))


@register_op("clip", ["X", "Min?", "Max?"], ["Out"], {"min": 0.0, "max": 0.0}, infer_shape=_clip_infer,
             inplace={"Out": "X"}, grad=simple_grad("clip_grad", ["X", "Out@GRAD", "Min", "Max"], ["X@GRAD"]))
def clip(X, Min, Max, *, min, max):
    lo, hi = clip_bounds(Min, Max, min, max, X.dtype)
    return np.where(X < lo, lo, np.where(X > hi, hi, X)).astype(X.dtype, copy=False)  # NaN stays


# ---- abs, sign ----------------------------------------------------------------------------
@register_op("abs_grad", ["X", "Out@GRAD"], ["X@GRAD"], {}, infer_shape=grads_like(**{"X@GRAD": "X"}))
def abs_grad(X, dOut):
    """dout * x / abs(x), and 0 where x == 0 (NaN where x is NaN)."""
    with np.errstate(invalid="ignore"):
        return np.where(X == 0, dOut.dtype.type(0), dOut * (X / np.abs(X))).astype(dOut.dtype, copy=False)


@register_op("abs", ["X"], ["Out"], {}, infer_shape=same_as("X", "Out"),
             grad=simple_grad("abs_grad", ["X", "Out@GRAD"], ["X@GRAD"]))
def abs_op(X):
    return np.abs(X)


def _sign_grad(g):
    """backward.yaml's sign_grad invokes scale(out_grad, 0.0): a zero gradient."""
    return [g.op("scale", {"X": g.output_grad("Out")}, {"Out": g.input_grad("X")},
                 {"scale": 0.0, "bias": 0.0, "bias_after_scale": True})]


@register_op("sign", ["X"], ["Out"], {}, infer_shape=same_as("X", "Out"), grad=_sign_grad)
def sign(X):
    """-1, 0 or 1 (0 for both zeros, NaN for NaN), as Paddle's ``sign`` kernel."""
    return np.sign(X)


# ---- reduce_max, reduce_min ---------------------------------------------------------------
def _minmax_infer(name):
    def infer(ins, attrs):
        shape, dt = first(ins, "X")
        axes = reduce_axes(name, len(shape), attrs["dim"], attrs["reduce_all"])
        return {"Out": (reduced_shape(shape, axes, attrs["keep_dim"]), dt)}
    return infer


def _register_minmax(name, fn):
    def grad(X, Out, dOut, *, dim, keep_dim, reduce_all):
        """Paddle's max/min grad: dout goes to every position equal to the result (dout * (x == out))."""
        axes = reduce_axes(name, X.ndim, dim, reduce_all)
        out, d = Out.reshape(reduced_shape(X.shape, axes, True)), dOut.reshape(reduced_shape(X.shape, axes, True))
        return d * (X == out).astype(dOut.dtype)

    def kernel(X, *, dim, keep_dim, reduce_all):
        axes = reduce_axes(name, X.ndim, dim, reduce_all)
        if any(X.shape[a] == 0 for a in axes):
            raise InvalidArgument(f"{name}: cannot reduce over an empty dim of X (shape {list(X.shape)}, dim {dim})")
        return np.asarray(fn(X, axis=axes, keepdims=keep_dim))
    grad.__name__, kernel.__name__ = name + "_grad", name
    register_op(name + "_grad", ["X", "Out", "Out@GRAD"], ["X@GRAD"], REDUCE_ATTRS,
                infer_shape=grads_like(**{"X@GRAD": "X"}))(grad)
    register_op(name, ["X"], ["Out"], REDUCE_ATTRS, infer_shape=_minmax_infer(name),
                grad=simple_grad(name + "_grad", ["X", "Out", "Out@GRAD"], ["X@GRAD"]))(kernel)


_register_minmax("reduce_max", np.max)
_register_minmax("reduce_min", np.min)


# ---- reduce_any -----------------------------------------------------------------------------
def _any_infer(ins, attrs):
    shape, _ = first(ins, "X")
    axes = reduce_axes("reduce_any", len(shape), attrs["dim"], attrs["reduce_all"])
    return {"Out": (reduced_shape(shape, axes, attrs["keep_dim"]), "bool")}


@register_op("reduce_any", ["X", "AxisTensor?", "AxisTensorList*?"], ["Out"], REDUCE_ATTRS, infer_shape=_any_infer)
def reduce_any(X, AxisTensor, AxisTensorList, *, dim, keep_dim, reduce_all):
    """Whether any element over the reduced dims is nonzero (bool); the AMP decorator ORs overflow flags
    with it. The dims come from ``dim`` only."""
    if AxisTensor is not None or AxisTensorList:
        raise InvalidArgument("reduce_any: dims given as tensors (AxisTensor / AxisTensorList) are not supported; "
                              "use the dim attr")
    return np.asarray(np.any(X, axis=reduce_axes("reduce_any", X.ndim, dim, reduce_all), keepdims=keep_dim))


# ---- reduce_prod ----------------------------------------------------------------------------
@register_op("reduce_prod_grad", ["X", "Out", "Out@GRAD"], ["X@GRAD"], REDUCE_ATTRS,
             infer_shape=grads_like(**{"X@GRAD": "X"}))
def reduce_prod_grad(X, Out, dOut, *, dim, keep_dim, reduce_all):
    """Paddle's ProdGradFunctor: dout * out / x (inf or NaN where x == 0, as Paddle's kernel)."""
    kept = reduced_shape(X.shape, reduce_axes("reduce_prod_grad", X.ndim, dim, reduce_all), True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return dOut.reshape(kept) * Out.reshape(kept) / X


@register_op("reduce_prod", ["X"], ["Out"], REDUCE_ATTRS, infer_shape=_minmax_infer("reduce_prod"),
             grad=simple_grad("reduce_prod_grad", ["X", "Out", "Out@GRAD"], ["X@GRAD"]))
def reduce_prod(X, *, dim, keep_dim, reduce_all):
    """The product over the reduced dims (1 for an empty one)."""
    axes = reduce_axes("reduce_prod", X.ndim, dim, reduce_all)
    return np.asarray(np.multiply.reduce(X, axis=axes, keepdims=keep_dim))


# ---- arg_max -------------------------------------------------------------------------------
ARG_DTYPES = {2: np.int32, 3: np.int64}


def _arg_max_shape(op, shape, attrs):
    if attrs["dtype"] not in ARG_DTYPES:
        raise InvalidArgument(f"{op}: attr dtype={attrs['dtype']} must be 2 (int32) or 3 (int64)")
    if attrs["flatten"]:
        return (1,) * len(shape) if attrs["keepdims"] else ()
    axis = check_axis(op, "axis", attrs["axis"], len(shape))
    return reduced_shape(shape, (axis,), attrs["keepdims"])


def _arg_max_infer(ins, attrs):
    shape, _ = first(ins, "X")
    return {"Out": (_arg_max_shape("arg_max", shape, attrs), VARTYPE_TO_NAME[attrs["dtype"]])}


@register_op("arg_max", ["X"], ["Out"], {"axis": -1, "keepdims": False, "flatten": False, "dtype": 3},
             infer_shape=_arg_max_infer)
def arg_max(X, *, axis, keepdims, flatten, dtype):
    """The index of the first largest element (the first NaN, if any) along ``axis``."""
    attrs = {"axis": axis, "keepdims": keepdims, "flatten": flatten, "dtype": dtype}
    shape = _arg_max_shape("arg_max", X.shape, attrs)
    x = X.reshape(-1) if flatten else X
    ax = 0 if flatten else check_axis("arg_max", "axis", axis, X.ndim)
    if x.ndim and x.shape[ax] == 0:
        raise InvalidArgument(f"arg_max: X has no element along axis {axis} (shape {list(X.shape)})")
    return np.argmax(x, axis=ax if x.ndim else None).astype(ARG_DTYPES[dtype]).reshape(shape)


# ---- cumsum --------------------------------------------------------------------------------
CUMSUM_ATTRS = {"axis": -1, "flatten": False, "exclusive": False, "reverse": False}


def _cumsum_infer(ins, attrs):
    shape, dt = first(ins, "X")
    if attrs["flatten"]:
        n = int(np.prod(shape)) if all(d >= 0 for d in shape) else -1
        return {"Out": ((n,), dt)}
    check_axis("cumsum", "axis", attrs["axis"], len(shape))
    return {"Out": (tuple(shape), dt)}


def cumsum_values(X, axis, flatten, exclusive, reverse):
    """Paddle's cumsum: added in order along the axis (from the end when ``reverse``); ``exclusive``
    starts at 0 and leaves the last element out."""
    x = X.reshape(-1) if flatten else X
    ax = 0 if flatten else check_axis("cumsum", "axis", axis, X.ndim)
    if x.ndim == 0:
        x = x.reshape(1)
    if reverse:
        x = np.flip(x, ax)
    out = np.add.accumulate(x, axis=ax, dtype=x.dtype)
    if exclusive:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=ax)), np.delete(out, -1, axis=ax)], axis=ax)
    if reverse:
        out = np.flip(out, ax)
    out = np.ascontiguousarray(out)
    return out if flatten else out.reshape(X.shape)


@register_op("cumsum_grad", ["X", "Out@GRAD"], ["X@GRAD"], CUMSUM_ATTRS, infer_shape=grads_like(**{"X@GRAD": "X"}))
def cumsum_grad(X, dOut, *, axis, flatten, exclusive, reverse):
    """The cumsum of dout the other way round, shaped like X (Paddle's CumsumGradKernel)."""
    return cumsum_values(dOut, axis, flatten, exclusive, not reverse).reshape(X.shape)


@register_op("cumsum", ["X"], ["Out"], CUMSUM_ATTRS, infer_shape=_cumsum_infer,
             grad=simple_grad("cumsum_grad", ["X", "Out@GRAD"], ["X@GRAD"]))
def cumsum(X, *, axis, flatten, exclusive, reverse):
    return cumsum_values(X, axis, flatten, exclusive, reverse)



# ---- top_k_v2 --------------------------------------------------------------------------------------
TOPK_ATTRS = {"k": 1, "axis": -1, "largest": True, "sorted": True}


def _top_k_infer(ins, attrs):
    shape, dt = first(ins, "X")
    axis = check_axis("top_k_v2", "axis", attrs["axis"], len(shape))
    k = -1 if ins.get("K") else attrs["k"]
    if shape and not ins.get("K") and (k < 1 or 0 <= shape[axis] < k):
        raise InvalidArgument(f"top_k_v2: attr k={k} must be in [1, {shape[axis]}] (X's dim {axis})")
    out = tuple(k if i == axis else d for i, d in enumerate(shape))
    return {"Out": (out, dt), "Indices": (out, "int64")}


def top_k_k(X, K, k: int, axis: int) -> tuple:
    """(k, axis) checked against X (a K tensor overrides the attr)."""
    if K is not None:
        k = int(np.asarray(K).reshape(-1)[0])
    axis = check_axis("top_k_v2", "axis", axis, X.ndim)
    n = X.shape[axis] if X.ndim else 1
    if not 1 <= k <= n:
        raise InvalidArgument(f"top_k_v2: k={k} must be in [1, {n}] (X's dim {axis})")
    return k, axis


@register_op("top_k_v2_grad", ["X", "Indices", "Out@GRAD"], ["X@GRAD"], TOPK_ATTRS,
             infer_shape=grads_like(**{"X@GRAD": "X"}), no_need_buffer=["X"])
def top_k_v2_grad(X, Indices, dOut, *, axis):
    """Zeros, with each of dout's values put back where its index says."""
    ax = check_axis("top_k_v2_grad", "axis", axis, len(X.shape))
    dx = np.zeros(X.shape, dOut.dtype)
    if len(X.shape) == 0:
        return dOut.reshape(()).copy()
    np.put_along_axis(dx, Indices, dOut, axis=ax)
    return dx


@register_op("top_k_v2", ["X", "K?"], ["Out", "Indices"], TOPK_ATTRS, infer_shape=_top_k_infer,
             grad=simple_grad("top_k_v2_grad", ["X", "Indices", "Out@GRAD"], ["X@GRAD"]))
def top_k_v2(X, K, *, k, axis, largest, sorted):
    """The k largest (smallest) along the axis, in order; among equal values the lower index first
    (``sorted=False`` gives the same order here)."""
    k, ax = top_k_k(X, K, k, axis)
    if X.ndim == 0:
        return X.copy(), np.zeros((), np.int64)
    idx = np.argsort(-X if largest else X, axis=ax, kind="stable")
    idx = np.take(idx, np.arange(k), axis=ax)
    return np.take_along_axis(X, idx, axis=ax), idx.astype(np.int64)
