"""``log_softmax``, ``one_hot_v2`` and ``sigmoid_cross_entropy_with_logits`` (+ grads): the second
half of the reduce family (``reduce_ops.py`` holds the rest and the shared checks).

Mirrors Paddle 3.3.1's ops of the same names (slots from ``paddle/phi/ops/yaml/ops.yaml`` /
``backward.yaml`` through ``op_compat.yaml``) and their CPU kernels
``paddle/phi/kernels/cpu/log_softmax_kernel.cc`` / ``log_softmax_grad_kernel.cc``,
``one_hot_kernel.cc``, ``sigmoid_cross_entropy_with_logits_kernel.cc`` / ``_grad_kernel.cc``,
formula for formula in the input's type. Differences: the row sums are NumPy's (pairwise along a
contiguous axis, in order otherwise) where Paddle's Eigen sums block their own way; exp / log are
NumPy's in the input's type (a float32 result may be an ulp off Paddle's glibc expf / logf), except
on sigmoid_cross_entropy_with_logits' pos_weight path, which rounds them from float64 and so gives
Paddle 3.3.1's float32 bits.
"""
import numpy as np

from refimpl.core.dtypes import VARTYPE_TO_NAME, to_numpy_dtype
from refimpl.core.errors import InvalidArgument

from .common import first, grads_like
from .grad_maker import simple_grad
from .reduce_ops import check_axis
from .registry import register_op


# ---- log_softmax ------------------------------------------------------------------------------
def _axis_infer(op):
    def infer(ins, attrs):
        shape, dt = first(ins, "X")
        check_axis(op, "axis", attrs["axis"], len(shape))
        return {"Out": (tuple(shape), dt)}
    return infer


@register_op("log_softmax_grad", ["Out", "Out@GRAD"], ["X@GRAD"], {"axis": -1},
             infer_shape=grads_like(**{"X@GRAD": "Out"}))
def log_softmax_grad(Out, dOut, *, axis):
    """dx = dout - exp(out) * sum(dout) along the axis (Paddle's LogSoftmaxGradFunctor)."""
    ax = check_axis("log_softmax_grad", "axis", axis, Out.ndim)
    if Out.ndim == 0:
        return np.zeros_like(dOut)
    return dOut - np.exp(Out) * np.add.reduce(dOut, axis=ax, keepdims=True)


@register_op("log_softmax", ["X"], ["Out"], {"axis": -1}, infer_shape=_axis_infer("log_softmax"),
             grad=simple_grad("log_softmax_grad", ["Out", "Out@GRAD"], ["X@GRAD"]))
def log_softmax(X, *, axis):
    """(x - max) - log(sum(exp(x - max))) along the axis (Paddle's LogSoftmaxFunctor; a 0-D x gives 0)."""
    ax = check_axis("log_softmax", "axis", axis, X.ndim)
    if X.ndim == 0:
        return np.zeros_like(X)
    shifted = X - np.max(X, axis=ax, keepdims=True)
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.add.reduce(np.exp(shifted), axis=ax, keepdims=True))


# ---- one_hot_v2 ---------------------------------------------------------------------------------
ONE_HOT_ATTRS = {"depth": -1, "dtype": 5, "allow_out_of_range": False}


def _one_hot_infer(ins, attrs):
    shape, _ = first(ins, "X")
    depth = -1 if ins.get("depth_tensor") else attrs["depth"]
    if not ins.get("depth_tensor") and depth < 1:
        raise InvalidArgument(f"one_hot_v2: attr depth={depth} must be at least 1")
    return {"Out": (tuple(shape) + (depth,), VARTYPE_TO_NAME[attrs["dtype"]])}


@register_op("one_hot_v2", ["X", "depth_tensor?"], ["Out"], ONE_HOT_ATTRS, infer_shape=_one_hot_infer)
def one_hot_v2(X, depth_tensor, *, depth, dtype, allow_out_of_range):
    """Out[..., k] = (X[...] == k) for k < depth; a label outside [0, depth) is InvalidArgument at
    run time, as in Paddle's kernel (an all-zero row when allow_out_of_range)."""
    if depth_tensor is not None:
        depth = int(np.asarray(depth_tensor).reshape(-1)[0])
    if depth < 1:
        raise InvalidArgument(f"one_hot_v2: depth={depth} must be at least 1")
    if X.size and not allow_out_of_range and (X.min() < 0 or X.max() >= depth):
        bad = X.max() if X.max() >= depth else X.min()
        raise InvalidArgument(f"one_hot_v2: X holds label {bad}, outside [0, depth={depth})")
    return (X[..., None] == np.arange(depth)).astype(to_numpy_dtype(dtype))


# ---- sigmoid_cross_entropy_with_logits -----------------------------------------------------------
SCE_ATTRS = {"normalize": False, "ignore_index": -100}


def _sce_norm(Label, ignore_index):
    """Paddle's normalizer: the count of labels more than 1e-6 away from ignore_index."""
    t = Label.dtype.type
    return t(np.count_nonzero(np.abs(Label - t(ignore_index)) > t(1e-6)))


def _exp(a: np.ndarray) -> np.ndarray:
    """exp in float64 rounded once to a's type: for float32 this is the correctly rounded expf of
    glibc that Paddle's CPU kernel calls (NumPy's own float32 exp may be an ulp off)."""
    return np.exp(a.astype(np.float64)).astype(a.dtype)


def _log(a: np.ndarray) -> np.ndarray:
    """log in float64 rounded once to a's type (see ``_exp``)."""
    return np.log(a.astype(np.float64)).astype(a.dtype)


@register_op("sigmoid_cross_entropy_with_logits_grad", ["X", "Label", "pos_weight?", "Out@GRAD"], ["X@GRAD"],
             SCE_ATTRS, infer_shape=grads_like(**{"X@GRAD": "X"}), inplace={"X@GRAD": "Out@GRAD"})
def sigmoid_cross_entropy_with_logits_grad(X, Label, pos_weight, dOut, *, normalize, ignore_index):
    """Paddle's CPU grad, formula for formula: the forward's derivative. With pos_weight (m = max(-x, 0)):
    pw * ((exp(-m) * -dm + exp(-x - m) * (-1 - dm)) / (exp(-m) + exp(-x - m)) + dm) + (1 - label),
    dm = -1 where x < 0, else 0."""
    t = X.dtype.type
    with np.errstate(over="ignore", invalid="ignore"):
        if pos_weight is None:
            e = np.exp(-np.abs(X))
            up = -e * np.where(X >= 0, t(1), t(-1))
            diff = (np.where(X > 0, t(1), t(0)) - Label) + up / (t(1) + e)
        else:
            mx = np.where(X < 0, -X, t(0))
            term1 = np.where(X < 0, t(-1), t(0))
            d1, d2 = _exp(-mx), _exp(-X - mx)
            term2 = d1 * -term1 + d2 * (t(-1) - term1)
            diff = pos_weight * (term2 / (d1 + d2) + term1) + (t(1) - Label)
    dx = np.where(Label.astype(np.int32) == ignore_index, t(0), dOut * diff)
    return dx / _sce_norm(Label, ignore_index) if normalize else dx


def _sce_infer(ins, attrs):
    (xs, dt), (ls, _) = first(ins, "X"), first(ins, "Label")
    if len(xs) != len(ls) or any(a != b and a >= 0 and b >= 0 for a, b in zip(xs, ls)):
        raise InvalidArgument(f"sigmoid_cross_entropy_with_logits: X {list(xs)} and Label {list(ls)} differ in shape")
    return {"Out": (tuple(xs), dt)}


@register_op("sigmoid_cross_entropy_with_logits", ["X", "Label", "pos_weight?"], ["Out"], SCE_ATTRS,
             infer_shape=_sce_infer, inplace={"Out": "X"},
             grad=simple_grad("sigmoid_cross_entropy_with_logits_grad", ["X", "Label", "pos_weight", "Out@GRAD"],
                              ["X@GRAD"]))
def sigmoid_cross_entropy_with_logits(X, Label, pos_weight, *, normalize, ignore_index):
    """max(x, 0) - x * label + log(1 + exp(-abs(x))); with pos_weight (m = max(-x, 0))
    (1 - label) * x + pos_weight * (log(exp(-m) + exp(-x - m)) + m), i.e. pos_weight scales the whole
    softplus(-x). 0 where int(label) == ignore_index; divided by the count of non-ignored labels when
    ``normalize``. Paddle 3.3.1's CPU kernel; 2.6.2's scaled only log(1 + exp(-abs(x))) by pos_weight
    (a forward whose derivative its grad was not)."""
    if X.shape != Label.shape:
        raise InvalidArgument(f"sigmoid_cross_entropy_with_logits: X {list(X.shape)} and Label "
                              f"{list(Label.shape)} differ in shape")
    t = X.dtype.type
    with np.errstate(over="ignore"):
        if pos_weight is None:
            out = (np.where(X > 0, X, t(0)) - X * Label) + np.log(t(1) + np.exp(-np.abs(X)))
        else:
            mx = np.where(X < 0, -X, t(0))
            out = (t(1) - Label) * X + pos_weight * (_log(_exp(-mx) + _exp(-X - mx)) + mx)
    out = np.where(Label.astype(np.int32) == ignore_index, t(0), out)
    return out / _sce_norm(Label, ignore_index) if normalize else out
