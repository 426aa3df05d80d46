"""Helpers shared by op definitions: shape inference, broadcasting, attr checks and defaults.

Shape inference here plays the part of Paddle's compile-time ``InferShape``:
``infer_shape(ins, attrs)`` gets, for each input slot, a list of
``(shape, dtype)`` pairs (shape a tuple with -1 for unknown dims) and
returns ``{output slot: (shape, dtype)}`` (or a list of pairs for a
duplicable slot). The framework writes the result onto the output vars.
"""
from typing import Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument


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


def check_choice(op: str, attr: str, value: str, choices: Sequence[str]) -> None:
    """A string attr that must be one of ``choices`` (InvalidArgument otherwise)."""
    if value not in choices:
        raise InvalidArgument(f"{op}: attr {attr} must be one of {list(choices)}, got {value!r}")


def check_pair(op: str, attr: str, values: Sequence[int], lo: int = 1) -> Tuple[int, int]:
    """Two ints, each >= ``lo`` (strides, dilations, kernel sizes)."""
    vals = [int(v) for v in values]
    if len(vals) != 2 or min(vals) < lo:
        raise InvalidArgument(f"{op}: attr {attr} must be 2 ints >= {lo}, got {list(values)}")
    return vals[0], vals[1]


def f32(v):
    """A float attr default as Paddle stores it (float32, read back as a Python float)."""
    return float(np.float32(v))


def as_float(value, dtype):
    """A Python scalar attr as a NumPy scalar of ``dtype`` (keeps float32 math in float32)."""
    return np.asarray(value, dtype=dtype)[()]
