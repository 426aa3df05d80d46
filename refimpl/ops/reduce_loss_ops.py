"""``log_softmax``, ``one_hot_v2`` and ``sigmoid_cross_entropy_with_logits`` (+ grads): the second
half of the reduce family (``reduce_ops.py`` holds the rest and the shared checks).

Mirrors Paddle 3.3.1's ops of the same names (slots from ``paddle/phi/ops/yaml/ops.yaml`` /
``backward.yaml`` through ``op_compat.yaml``) and their CPU kernels
``paddle/phi/kernels/cpu/log_softmax_kernel.cc`` / ``log_softmax_grad_kernel.cc``,
``one_hot_kernel.cc``, ``sigmoid_cross_entropy_with_logits_kernel.cc`` / ``_grad_kernel.cc``,
formula for formula in the input's type. Differences: the row sums are NumPy's (pairwise along a
contiguous axis, in order otherwise) where Paddle's Eigen sums block their own way.
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


@register_op("sigmoid_cross_entropy_with_logits_grad", ["X", "Label", "pos_weight?", "Out@GRAD"], ["X@GRAD"],
             SCE_ATTRS, infer_shape=grads_like(**{"X@GRAD": "X"}), inplace={"X@GRAD": "Out@GRAD"})
def sigmoid_cross_entropy_with_logits_grad(X, Label, pos_weight, dOut, *, normalize, ignore_index):
    """Paddle's CPU grad, formula for formula (with pos_weight it is not the derivative of the
    forward where x < 0 and pos_weight != 1; Paddle's kernel computes it so)."""
    t = X.dtype.type
    if pos_weight is None:
        e = np.exp(-np.abs(X))
        up = -e * np.where(X >= 0, t(1), t(-1))
        diff = (np.where(X > 0, t(1), t(0)) - Label) + up / (t(1) + e)
    else:
        mx = np.where(X < 0, -X, t(0))
        term1 = np.where(X < 0, t(-1), t(0))
        d1, d2 = np.exp(-mx), np.exp(-X - mx)
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
    """max(x, 0) - x * label + log(1 + exp(-abs(x))) * pos_weight; 0 where int(label) == ignore_index;
    divided by the count of non-ignored labels when ``normalize``."""
    if X.shape != Label.shape:
        raise InvalidArgument(f"sigmoid_cross_entropy_with_logits: X {list(X.shape)} and Label "
                              f"{list(Label.shape)} differ in shape")
    t = X.dtype.type
    term3 = np.log(t(1) + np.exp(-np.abs(X)))
    if pos_weight is not None:
        term3 = term3 * pos_weight
    out = (np.where(X > 0, X, t(0)) - X * Label) + term3
    out = np.where(Label.astype(np.int32) == ignore_index, t(0), out)
    return out / _sce_norm(Label, ignore_index) if normalize else out
