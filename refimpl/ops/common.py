"""Helpers shared by op definitions: shape inference and broadcasting.

Shape inference here plays the part of Paddle's compile-time ``InferShape``:
``infer_shape(ins, attrs)`` gets, for each input slot, a list of
``(shape, dtype)`` pairs (shape a tuple with -1 for unknown dims) and
returns ``{output slot: (shape, dtype)}`` (or a list of pairs for a
duplicable slot). The framework writes the result onto the output vars.
"""
import numpy as np


def first(ins, slot):
    """The (shape, dtype) of the first var in ``slot`` (None if the slot is empty)."""
    v = ins.get(slot) or [None]
    return v[0]


def same_as(in_slot, *out_slots, dtype=None):
    """infer_shape: every output slot gets the shape (and dtype) of ``in_slot``."""
    def infer(ins, attrs):
        shape, dt = first(ins, in_slot)
        return {o: (shape, dtype or dt) for o in out_slots}
    return infer


def grads_like(**pairs):
    """infer_shape for grad ops: ``X@GRAD`` is shaped like input ``X``."""
    def infer(ins, attrs):
        out = {}
        for gslot, src in pairs.items():
            if ins.get(src):
                out[gslot] = first(ins, src)
        return out
    return infer


def broadcast_shape(a, b):
    """NumPy broadcasting of two static shapes; -1 stays unknown."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif x == -1 or y == -1:
            out.append(max(x, y))
        else:
            raise ValueError(f"shapes {list(a)} and {list(b)} do not broadcast")
    return tuple(out)


def align_y(y_shape, x_ndim, axis):
    """Paddle's elementwise ``axis``: Y's dims start at X's dim ``axis``.

    Returns the shape to view Y with so that NumPy broadcasting does the
    rest (axis == -1 is trailing alignment, NumPy's own rule).
    """
    y_ndim = len(y_shape)
    if axis == -1 or y_ndim >= x_ndim:
        return tuple(y_shape)
    if axis < 0:
        axis = x_ndim - y_ndim
    return (1,) * axis + tuple(y_shape) + (1,) * (x_ndim - axis - y_ndim)


def reduce_to(grad, shape):
    """Sum ``grad`` down to ``shape`` (undoing broadcasting); no copy when equal."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape)
                                       if d == 1 and grad.shape[i + lead] != 1)
    out = np.add.reduce(grad, axis=axes)  # ndarray.sum's own sum, without its Python layer
    return out if out.shape == shape else out.reshape(shape)


def gathered_shape(shape, nranks):
    """Paddle's all_gather: concatenate on dim 0 (stack a 0-D tensor)."""
    shape = tuple(shape)
    return (nranks,) if not shape else (shape[0] * nranks,) + shape[1:]


def as_float(value, dtype):
    """A Python scalar attr as a NumPy scalar of ``dtype`` (keeps float32 math in float32)."""
    return np.asarray(value, dtype=dtype)[()]
