"""Comparison, logical and counter ops: equal, not_equal, less_than, less_equal, greater_than,
greater_equal, logical_and, logical_or, logical_xor, logical_not, is_empty, increment.

Each mirrors the Paddle op of the same name (``paddle/phi/kernels/cpu/compare_kernel.cc``).
The comparisons broadcast like the elementwise ops (``axis`` aligns a lower-rank Y with X's
dim ``axis``; -1 is trailing alignment) and output bool; ``force_cpu`` is
accepted and has no effect. The logical ops (``logical_kernel.cc``) read any
dtype as "non-zero is true", broadcast X and Y with NumPy's rule (they have
no ``axis``) and output bool; ``is_empty`` is a 0-D bool, true when X has no
element. ``increment`` adds
``step`` to a one-element tensor and keeps its dtype (Paddle requires exactly
one element, and so does this). The comparisons and logical_not have no
gradient; increment's "grad" is, as in Paddle, the inverse increment
(``Out -> X`` with ``-step``), emitted whatever the no-grad set.
"""
import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import align_y, broadcast_shape, first
from .registry import register_op


def _bool_infer(name):
    """Out's static shape: X and Y broadcast (Y aligned at ``axis`` for a comparison), bool."""
    def infer(ins, attrs):
        (xs, _), (ys, _) = first(ins, "X"), first(ins, "Y")
        try:
            return {"Out": (broadcast_shape(xs, align_y(ys, len(xs), attrs.get("axis", -1))), "bool")}
        except ValueError:
            raise InvalidArgument(f"{name}: the shapes of X {list(xs)} and Y {list(ys)} do not broadcast"
                                  f"{_axis_text(attrs.get('axis'))}") from None
    return infer


def _axis_text(axis):
    return "" if axis is None else f" (axis={axis})"


def _bool_op(name, fn, X, Y, axis=None):
    X, Y = np.asarray(X), np.asarray(Y)
    if axis not in (None, -1) and Y.ndim < X.ndim:
        Y = Y.reshape(align_y(Y.shape, X.ndim, axis))
    try:
        return fn(X, Y)
    except ValueError:
        raise InvalidArgument(f"{name}: the shapes of X {list(X.shape)} and Y {list(Y.shape)} do not broadcast"
                              f"{_axis_text(axis)}") from None


def _register_bool_op(name, fn, attrs):
    """A broadcasting X, Y -> bool op: a comparison (attrs ``axis``, ``force_cpu``) or a logical op."""
    if "axis" in attrs:
        def kernel(X, Y, *, axis):
            return _bool_op(name, fn, X, Y, axis)
    else:
        def kernel(X, Y):
            return _bool_op(name, fn, X, Y)
    kernel.__name__ = name
    return register_op(name, ["X", "Y"], ["Out"], dict(attrs), infer_shape=_bool_infer(name))(kernel)


_COMPARE_ATTRS = {"axis": -1, "force_cpu": False}
equal = _register_bool_op("equal", np.equal, _COMPARE_ATTRS)
less_than = _register_bool_op("less_than", np.less, _COMPARE_ATTRS)
not_equal = _register_bool_op("not_equal", np.not_equal, _COMPARE_ATTRS)
less_equal = _register_bool_op("less_equal", np.less_equal, _COMPARE_ATTRS)
greater_than = _register_bool_op("greater_than", np.greater, _COMPARE_ATTRS)
greater_equal = _register_bool_op("greater_equal", np.greater_equal, _COMPARE_ATTRS)
logical_and = _register_bool_op("logical_and", np.logical_and, {})
logical_or = _register_bool_op("logical_or", np.logical_or, {})
logical_xor = _register_bool_op("logical_xor", np.logical_xor, {})


@register_op("is_empty", ["X"], ["Out"], {}, infer_shape=lambda ins, attrs: {"Out": ((), "bool")})
def is_empty(X):
    return np.array(np.asarray(X).size == 0)


@register_op("logical_not", ["X"], ["Out"], {},
             infer_shape=lambda ins, attrs: {"Out": (tuple(first(ins, "X")[0]), "bool")},
             inplace={"Out": "X"})
def logical_not(X):
    return np.logical_not(X)


def _increment_grad_maker(g):
    return [g.op("increment", {"X": g.output("Out")}, {"Out": g.input("X")},
                 g.attrs(step=-g.attrs()["step"]))]


@register_op("increment", ["X"], ["Out"], {"step": 1.0},
             infer_shape=lambda ins, attrs: {"Out": first(ins, "X")}, grad=_increment_grad_maker)
def increment(X, *, step):
    X = np.asarray(X)
    if X.size != 1:
        raise InvalidArgument(f"increment: X must have exactly one element, got shape {list(X.shape)}")
    return X + X.dtype.type(step)
