"""The strided_slice op (+ grad).

Mirrors Paddle's ``strided_slice`` (``paddle/fluid/operators/strided_slice_op.cc`` for the legacy slots,
``paddle/phi/kernels/funcs/strided_slice.h`` and ``StridedSliceRawInferMeta`` in
``paddle/phi/infermeta/unary.cc`` for the bounds, ``strided_slice_kernel.cc`` /
``strided_slice_grad_kernel.cc``). Semantics:

* ``axes`` must lie in ``[0, rank)`` (Paddle's Python layer, not the op, turns a negative axis
  into a positive one) and no stride may be 0: an InvalidArgument at build time, as Paddle's
  infer-meta raises.
* each (start, end, stride) is read as Python's ``slice(start, end, stride)`` on its dim: a
  negative start / end counts from the end, then both are clamped into the dim (``[0, dim]``
  going forwards, ``[-1, dim - 1]`` going backwards); an empty range gives a 0-size dim, never an
  error. That is Paddle 3.3.1 on every combination of starts / ends in -7..7 and +-2**31 with
  strides +-1..3 on a dim of 5 (Out, X@GRAD and the static shape). Paddle 2.6.2's kernel differed:
  an end of -1 with a negative stride ran to the front (its ``x[::-1]`` wrote ends=[-1], where
  3.3.1's writes -2**31) and a range empty the wrong way round raised InvalidArgument. Later entries
  of a repeated axis replace earlier ones.
* ``decrease_axis`` dims (each 1 after slicing) are dropped from Out.
* StartsTensor / EndsTensor / StridesTensor (1-D int tensors) or their ``*TensorList`` forms
  (one 1-element tensor per entry) override the attrs at run time; the static shape of a dim
  they cover is then -1.
* the grad writes Out@GRAD into zeros of Input's shape at the sliced positions; it reads only
  Input's shape (Input is a no-need-buffer slot, as in Paddle).
"""
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import first
from .grad_maker import simple_grad
from .registry import register_op
from .shape_ops import Dims, int_values

SS_TENSORS = ["StartsTensor?", "StartsTensorList*?", "EndsTensor?", "EndsTensorList*?", "StridesTensor?",
              "StridesTensorList*?"]
_SS_ATTRS = {"axes": [], "starts": [], "ends": [], "strides": [], "infer_flags": [], "decrease_axis": []}
Bound = Tuple[int, Optional[slice]]  # (axis, the slice on it; None when the dim is unknown)


def check_axes_strides(rank: int, axes: Sequence[int], strides: Sequence[int],
                       op: str = "strided_slice") -> None:
    """Paddle's infer-meta checks: every axis in [0, rank), no stride 0."""
    for i, a in enumerate(axes):
        if not 0 <= a < rank:
            raise InvalidArgument(f"{op}: axes[{i}] must be in [0, {rank}) for Input of rank {rank}, got {a}")
    for i, s in enumerate(strides):
        if s == 0:
            raise InvalidArgument(f"{op}: strides[{i}] must not be 0, got strides {list(strides)}")


def strided_bounds(shape: Dims, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                   strides: Sequence[int], op: str = "strided_slice") -> List[Bound]:
    """[(axis, slice)] with each slice normalised to the dim (Python's ``slice.indices`` rules)."""
    if not len(axes) == len(starts) == len(ends) == len(strides):
        raise InvalidArgument(f"{op}: axes {list(axes)}, starts {list(starts)}, ends {list(ends)} and "
                              f"strides {list(strides)} differ in length")
    check_axes_strides(len(shape), axes, strides, op)
    out = []
    for a, s, e, st in zip(axes, starts, ends, strides):
        dim = shape[a]
        out.append((a, None if dim == -1 else slice(*slice(int(s), int(e), int(st)).indices(dim))))
    return out


def sliced_shape(shape: Dims, bounds: Sequence[Bound]) -> List[int]:
    out = list(shape)
    for a, sl in bounds:
        out[a] = -1 if sl is None else len(range(sl.start, sl.stop, sl.step))
    return out


def drop_decreased(shape: Dims, decrease_axis: Sequence[int], op: str = "strided_slice") -> Tuple[int, ...]:
    """The shape without the decrease_axis dims; each must be 1 (or unknown at build time)."""
    for a in decrease_axis:
        if not 0 <= a < len(shape):
            raise InvalidArgument(f"{op}: decrease_axis value {a} is out of range for rank {len(shape)}")
        if shape[a] not in (1, -1):
            raise InvalidArgument(f"{op}: decrease_axis {a} has size {shape[a]} after slicing, not 1")
    return tuple(d for i, d in enumerate(shape) if i not in set(decrease_axis))


def _ss_infer(ins, attrs):
    xs, dt = first(ins, "Input")
    n = len(attrs["axes"])
    runtime = [bool(ins.get("StartsTensor") or ins.get("StartsTensorList")),
               bool(ins.get("EndsTensor") or ins.get("EndsTensorList")),
               bool(ins.get("StridesTensor") or ins.get("StridesTensorList"))]
    starts, ends, strides = ([0] * n if rt else attrs[k] for rt, k in zip(runtime, ("starts", "ends", "strides")))
    if runtime[2]:
        strides = [1] * n
    shape = sliced_shape(xs, strided_bounds(xs, attrs["axes"], starts, ends, strides))
    if any(runtime):
        for a in attrs["axes"]:
            shape[a] = -1
    return {"Out": (drop_decreased(shape, attrs["decrease_axis"]), dt)}


def ss_values(shape: Dims, axes, starts, ends, strides, tensors: Sequence[Any]) -> List[Bound]:
    """The run-time bounds: (StartsTensor, StartsTensorList, EndsTensor, ...) override the attrs; they
    must hold integers (a float tensor would be truncated)."""
    vals = [starts, ends, strides]
    for k in range(3):
        t, ts = tensors[2 * k], tensors[2 * k + 1]
        slot = SS_TENSORS[2 * k].rstrip("*?")
        if t is not None:
            _check_int("strided_slice", slot, t)
        for i, x in enumerate(ts or ()):
            _check_int("strided_slice", f"{slot}List[{i}]", x)
        if t is not None or ts:
            vals[k] = int_values(t, ts)
    return strided_bounds(tuple(shape), axes, *vals)


def _check_int(op: str, slot: str, tensor: Any) -> None:
    dt = np.dtype(tensor.dtype)
    if not np.issubdtype(dt, np.integer):
        raise InvalidArgument(f"{op}: input {slot} must be an int32 or int64 tensor, got {dt}")


def ss_index(ndim: int, bounds: Sequence[Bound]) -> Tuple[slice, ...]:
    """NumPy's index for the bounds: a stop of -1 (past index 0 going backwards) is ``None`` there,
    and an empty range is ``0:0`` (``slice.indices`` may give it a start of -1, which NumPy would
    read as the last index)."""
    idx = [slice(None)] * ndim
    for a, sl in bounds:
        if len(range(sl.start, sl.stop, sl.step)) == 0:
            idx[a] = slice(0, 0)
        else:
            idx[a] = slice(sl.start, None if sl.stop < 0 else sl.stop, sl.step)
    return tuple(idx)


@register_op("strided_slice", ["Input"] + SS_TENSORS, ["Out"], dict(_SS_ATTRS), infer_shape=_ss_infer,
             grad=simple_grad("strided_slice_grad", ["Input", "Out@GRAD"] + [s.rstrip("*?") for s in SS_TENSORS],
                              ["Input@GRAD"]))
def strided_slice(Input, StartsTensor, StartsTensorList, EndsTensor, EndsTensorList, StridesTensor,
                  StridesTensorList, *, axes, starts, ends, strides, decrease_axis):
    bounds = ss_values(Input.shape, axes, starts, ends, strides, (StartsTensor, StartsTensorList, EndsTensor,
                                                                 EndsTensorList, StridesTensor, StridesTensorList))
    out = np.array(Input[ss_index(Input.ndim, bounds)])  # a copy: Paddle's kernel writes a new tensor
    return out.reshape(drop_decreased(out.shape, decrease_axis))


@register_op("strided_slice_grad", ["Input", "Out@GRAD"] + SS_TENSORS, ["Input@GRAD"], dict(_SS_ATTRS),
             infer_shape=lambda ins, attrs: {"Input@GRAD": first(ins, "Input")}, no_need_buffer=["Input"])
def strided_slice_grad(Input, dOut, StartsTensor, StartsTensorList, EndsTensor, EndsTensorList, StridesTensor,
                       StridesTensorList, *, axes, starts, ends, strides, decrease_axis):
    """Input is a shape-only meta: zeros of its shape with Out@GRAD at the sliced positions."""
    bounds = ss_values(Input.shape, axes, starts, ends, strides, (StartsTensor, StartsTensorList, EndsTensor,
                                                                 EndsTensorList, StridesTensor, StridesTensorList))
    dx = np.zeros(Input.shape, dtype=dOut.dtype)
    part = dx[ss_index(len(Input.shape), bounds)]
    part[...] = dOut.reshape(part.shape)
    return dx
