"""Shape ops of the indexing family: squeeze2, unsqueeze2, stack, expand_v2, tile (+ grads), shape.

Each mirrors the Paddle op of the same name (``paddle/phi/kernels/cpu/``
``squeeze_kernel.cc``, ``unsqueeze_kernel.cc``, ``stack_kernel.cc``,
``expand_kernel.cc`` / ``expand_grad_kernel.cc``, ``tile_kernel.cc`` / ``tile_grad_kernel.cc``; shapes as
``paddle/phi/infermeta/unary.cc`` and ``funcs/unsqueeze.h`` compute them),
with the legacy slots of ``op_compat.yaml``. ``squeeze2`` / ``unsqueeze2``
have an ``XShape`` output (var shape ``[0] + X.shape``, here a zero-size
array, as for ``reshape2``) and their grads read only ``XShape`` and
``Out@GRAD``; their ``Out`` is a view of ``X`` (Paddle shares the buffer).
``squeeze2`` drops the named dims that are 1 (every 1 when ``axes`` is
empty) and keeps the others, as Paddle does; ``unsqueeze2`` inserts a 1 per
axis in order, a negative axis counting from the end of the shape built so
far. ``expand_v2``'s grad sums Out@GRAD back over the expanded dims in
NumPy's order (``common.reduce_to``), Paddle's Eigen sum adds in its own;
``tile_grad`` likewise adds the tiles in row-major order (pairwise when X
has one element). ``shape`` gives Input's dims as an int32 vector and reads only Input's shape
(``shape_kernel.cc``; Input is a no-need-buffer slot, as in Paddle).
"""
from typing import Any, List, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import first, reduce_to
from .grad_maker import simple_grad
from .manipulation_ops import from_xshape, xshape_grad, xshape_of
from .registry import EMPTY_VAR_NAME, register_op


Dims = Sequence[int]  # a static shape (-1 for an unknown dim)


def norm_axes(axes: Sequence[int], rank: int, op: str, attr: str = "axes") -> List[int]:
    """Axes in ``[-rank, rank)`` made non-negative; anything else is an InvalidArgument."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise InvalidArgument(f"{op}: {attr} value {a} is out of range for a tensor of rank {rank}")
        out.append(a % rank)
    return out


def int_values(tensor: Any, tensors: Sequence[Any]) -> List[int]:
    """The ints of a 1-D int tensor, else of a list of 1-element tensors (an attr's run-time override)."""
    if tensor is not None:
        return [int(v) for v in np.asarray(tensor).reshape(-1)]
    return [int(np.asarray(t).reshape(-1)[0]) for t in tensors]




# ---- squeeze2 ----------------------------------------------------------------------------
def squeeze_shape(shape: Dims, axes: Sequence[int], build: bool = False) -> Tuple[int, ...]:
    """Paddle's GetOutputSqueezeShape (at build time an unknown dim named in axes is squeezed)."""
    if not axes:
        return tuple(d for d in shape if d != 1)
    drop = {a for a in norm_axes(axes, len(shape), "squeeze2") if shape[a] == 1 or (build and shape[a] == -1)}
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def _squeeze_infer(ins, attrs):
    xs, dt = first(ins, "X")
    return {"Out": (squeeze_shape(tuple(xs), attrs["axes"], build=True), dt), "XShape": ((0,) + tuple(xs), dt)}


@register_op("squeeze2", ["X"], ["Out", "XShape"], {"axes": []}, infer_shape=_squeeze_infer,
             inplace={"Out": "X"}, grad=simple_grad("squeeze2_grad", ["XShape", "Out@GRAD"], ["X@GRAD"]))
def squeeze2(X, *, axes, need):
    return X.reshape(squeeze_shape(X.shape, axes)), (xshape_of(X) if need[1] else None)


@register_op("squeeze2_grad", ["XShape", "Out@GRAD"], ["X@GRAD"], {"axes": []}, infer_shape=from_xshape,
             inplace={"X@GRAD": "Out@GRAD"})
def squeeze2_grad(XShape, dOut):
    return xshape_grad(XShape, dOut)


# ---- unsqueeze2 ------------------------------------------------------------------------------
def unsqueeze_shape(shape: Dims, axes: Sequence[int]) -> Tuple[int, ...]:
    """Paddle's GetUnsqueezeShape: insert a 1 per axis, in order, into the shape built so far."""
    out = list(shape)
    for a in axes:
        cur = a + len(out) + 1 if a < 0 else a
        if not 0 <= cur <= len(out):
            raise InvalidArgument(f"unsqueeze2: axes value {a} is out of range for a result of rank "
                                  f"{len(out) + 1}")
        out.insert(cur, 1)
    return tuple(out)


def _unsqueeze_infer(ins, attrs):
    xs, dt = first(ins, "X")
    xs = tuple(xs)
    if ins.get("AxesTensor") or ins.get("AxesTensorList"):
        n = first(ins, "AxesTensor")[0][0] if ins.get("AxesTensor") else len(ins["AxesTensorList"])
        out = (-1,) * (len(xs) + max(n, 0))
    else:
        out = unsqueeze_shape(xs, attrs["axes"])
    return {"Out": (out, dt), "XShape": ((0,) + xs, dt)}


@register_op("unsqueeze2", ["X", "AxesTensor?", "AxesTensorList*?"], ["Out", "XShape"], {"axes": []},
             infer_shape=_unsqueeze_infer, inplace={"Out": "X"},
             grad=simple_grad("unsqueeze2_grad", ["XShape", "Out@GRAD", "AxesTensor", "AxesTensorList"],
                              ["X@GRAD"]))
def unsqueeze2(X, AxesTensor, AxesTensorList, *, axes, need):
    if AxesTensor is not None or AxesTensorList:
        axes = int_values(AxesTensor, AxesTensorList)
    return X.reshape(unsqueeze_shape(X.shape, axes)), (xshape_of(X) if need[1] else None)


@register_op("unsqueeze2_grad", ["XShape", "Out@GRAD", "AxesTensor?", "AxesTensorList*?"], ["X@GRAD"],
             {"axes": []}, infer_shape=from_xshape, inplace={"X@GRAD": "Out@GRAD"})
def unsqueeze2_grad(XShape, dOut, AxesTensor, AxesTensorList):
    return xshape_grad(XShape, dOut)


# ---- stack ---------------------------------------------------------------------------------------
def stack_axis(axis: int, rank: int) -> int:
    """The position of the new dim: ``axis`` in ``[-(rank + 1), rank]``."""
    if not -(rank + 1) <= axis <= rank:
        raise InvalidArgument(f"stack: axis {axis} is out of range for inputs of rank {rank}")
    return axis % (rank + 1)


def _stack_infer(ins, attrs):
    shapes = [tuple(s) for s, _ in ins["X"]]
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or any(a != b and -1 not in (a, b) for a, b in zip(s, shapes[0])):
            raise InvalidArgument(f"stack: input shapes {[list(v) for v in shapes]} differ")
    a = stack_axis(attrs["axis"], len(shapes[0]))
    return {"Y": (shapes[0][:a] + (len(shapes),) + shapes[0][a:], ins["X"][0][1])}


def _stack_grad_maker(g):
    names = [n + "@GRAD" for n in g.input("X")]
    if all(n in g.no_grad_set for n in names):
        return []
    outs = [EMPTY_VAR_NAME if n in g.no_grad_set else n for n in names]
    return [g.op("stack_grad", {"X": g.input("X"), "Y@GRAD": g.output_grad("Y")}, {"X@GRAD": outs})]


@register_op("stack", ["X*"], ["Y"], {"axis": 0}, infer_shape=_stack_infer, grad=_stack_grad_maker)
def stack(X, *, axis):
    if any(x.shape != X[0].shape for x in X):
        raise InvalidArgument(f"stack: input shapes {[list(x.shape) for x in X]} differ")
    return np.stack(X, axis=stack_axis(axis, X[0].ndim))


@register_op("stack_grad", ["X*", "Y@GRAD"], ["X@GRAD*"], {"axis": 0},
             infer_shape=lambda ins, attrs: {"X@GRAD": list(ins["X"])}, no_need_buffer=["X"])
def stack_grad(X, dY, *, axis):
    a = stack_axis(axis, dY.ndim - 1)
    return [np.ascontiguousarray(np.take(dY, i, axis=a)) for i in range(dY.shape[a])]


# ---- expand_v2 --------------------------------------------------------------------------------------
def expand_shape(xshape: Dims, shape: Sequence[int]) -> Tuple[int, ...]:
    """Paddle's ExpandInferMeta: -1 keeps X's dim; X's dims must be 1 or equal the target."""
    xshape, shape = tuple(xshape), [int(s) for s in shape]
    if len(shape) < len(xshape):
        raise InvalidArgument(f"expand_v2: shape {shape} has fewer dims than X {list(xshape)}")
    lead = len(shape) - len(xshape)
    out = []
    for i, s in enumerate(shape):
        x = xshape[i - lead] if i >= lead else None
        if x is None and s <= 0:
            raise InvalidArgument(f"expand_v2: shape value {s} for a new leading dim must be positive")
        if s == -1:
            out.append(x)
        elif s <= 0:
            raise InvalidArgument(f"expand_v2: shape value {s} must be positive or -1")
        elif x in (None, 1, -1, s):
            out.append(s)
        else:
            raise InvalidArgument(f"expand_v2: X's dim {i - lead} is {x}, which cannot expand to {s} "
                                  f"(shape {shape})")
    return tuple(out)


def _expand_infer(ins, attrs):
    xs, dt = first(ins, "X")
    if ins.get("Shape"):
        return {"Out": ((-1,) * first(ins, "Shape")[0][0], dt)}
    if ins.get("expand_shapes_tensor"):
        return {"Out": ((-1,) * len(ins["expand_shapes_tensor"]), dt)}
    return {"Out": (expand_shape(xs, attrs["shape"]), dt)}


def target_shape(X: Any, Shape: Any, expand_shapes_tensor: Any, shape: Sequence[int]) -> Tuple[int, ...]:
    if Shape is not None or expand_shapes_tensor:
        shape = int_values(Shape, expand_shapes_tensor)
    return expand_shape(X.shape, shape)


@register_op("expand_v2", ["X", "Shape?", "expand_shapes_tensor*?"], ["Out"], {"shape": []},
             infer_shape=_expand_infer,
             grad=simple_grad("expand_v2_grad", ["X", "Out@GRAD", "Shape", "expand_shapes_tensor"], ["X@GRAD"]))
def expand_v2(X, Shape, expand_shapes_tensor, *, shape):
    return np.ascontiguousarray(np.broadcast_to(X, target_shape(X, Shape, expand_shapes_tensor, shape)))


@register_op("expand_v2_grad", ["X", "Out@GRAD", "Shape?", "expand_shapes_tensor*?"], ["X@GRAD"],
             {"shape": []}, infer_shape=lambda ins, attrs: {"X@GRAD": first(ins, "X")}, no_need_buffer=["X"])
def expand_v2_grad(X, dOut, Shape, expand_shapes_tensor, *, shape):
    return reduce_to(dOut, X.shape)


# ---- tile --------------------------------------------------------------------------------------------------
def tile_dims(xshape: Dims, repeat_times: Sequence[int]) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """X's shape and the repeats, both left-padded with 1s to one rank (Paddle's TileInferMeta)."""
    reps = [int(r) for r in repeat_times]
    if any(r <= 0 for r in reps):
        raise InvalidArgument(f"tile: every repeat_times value must be positive, got {reps}")
    n = max(len(xshape), len(reps))
    if n > 6:
        raise InvalidArgument(f"tile: the rank of the result ({n}) must not exceed 6")
    return (1,) * (n - len(xshape)) + tuple(xshape), (1,) * (n - len(reps)) + tuple(reps)


def _tile_infer(ins, attrs):
    xs, dt = first(ins, "X")
    if ins.get("RepeatTimes") or ins.get("repeat_times_tensor"):
        n = first(ins, "RepeatTimes")[0][0] if ins.get("RepeatTimes") else len(ins["repeat_times_tensor"])
        return {"Out": ((-1,) * max(len(xs), n), dt)}
    x, r = tile_dims(tuple(xs), attrs["repeat_times"])
    return {"Out": (tuple(-1 if a == -1 else a * b for a, b in zip(x, r)), dt)}


@register_op("tile", ["X", "RepeatTimes?", "repeat_times_tensor*?"], ["Out"], {"repeat_times": []},
             infer_shape=_tile_infer,
             grad=simple_grad("tile_grad", ["X", "Out@GRAD", "RepeatTimes", "repeat_times_tensor"], ["X@GRAD"]))
def tile(X, RepeatTimes, repeat_times_tensor, *, repeat_times):
    if RepeatTimes is not None or repeat_times_tensor:
        repeat_times = int_values(RepeatTimes, repeat_times_tensor)
    _, reps = tile_dims(X.shape, repeat_times)
    return np.tile(X, reps)


def tiles_first(dOut: np.ndarray, x: Tuple[int, ...], r: Tuple[int, ...]) -> np.ndarray:
    """Out@GRAD as a (number of tiles, X's size) array, tiles in row-major order (a copy)."""
    n = len(x)
    inter = dOut.reshape(tuple(v for pair in zip(r, x) for v in pair))
    perm = tuple(range(0, 2 * n, 2)) + tuple(range(1, 2 * n, 2))
    return np.ascontiguousarray(inter.transpose(perm)).reshape(int(np.prod(r)), int(np.prod(x)))


@register_op("tile_grad", ["X", "Out@GRAD", "RepeatTimes?", "repeat_times_tensor*?"], ["X@GRAD"],
             {"repeat_times": []}, infer_shape=lambda ins, attrs: {"X@GRAD": first(ins, "X")},
             no_need_buffer=["X"])
def tile_grad(X, dOut, RepeatTimes, repeat_times_tensor, *, repeat_times):
    """The sum over the tiles: NumPy adds the tiles in row-major order (pairwise when X has one element)."""
    if RepeatTimes is not None or repeat_times_tensor:
        repeat_times = int_values(RepeatTimes, repeat_times_tensor)
    x, r = tile_dims(tuple(X.shape), repeat_times)
    t = tiles_first(dOut, x, r)
    summed = np.add.reduce(t.reshape(-1) if t.shape[1] == 1 else t, axis=0)
    return np.asarray(summed, dtype=dOut.dtype).reshape(X.shape)


# ---- shape ------------------------------------------------------------------------------------------
@register_op("shape", ["Input"], ["Out"], {}, no_need_buffer=["Input"],
             infer_shape=lambda ins, attrs: {"Out": ((len(first(ins, "Input")[0]),), "int32")})
def shape(Input):
    """Input's dims as a 1-D int32 tensor; Input may be a shape-only meta (no need buffer)."""
    return np.array(Input.shape, dtype=np.int32)


# ---- size, share_data, memcpy (what Variable.size / detach / cpu append) ---------------------------------
@register_op("size", ["Input"], ["Out"], {}, no_need_buffer=["Input"],
             infer_shape=lambda ins, attrs: {"Out": ((), "int64")})
def size(Input):
    """The number of elements of Input as a 0-D int64 tensor (``paddle/phi/kernels/size_kernel.h``)."""
    return np.array(int(np.prod(Input.shape, dtype=np.int64)), dtype=np.int64)


@register_op("share_data", ["X"], ["Out"], {}, infer_shape=lambda ins, attrs: {"Out": first(ins, "X")})
def share_data(X):
    """Out is X's buffer, as Paddle's ``ShareDataKernel`` shares the allocation (no gradient)."""
    return X


@register_op("memcpy", ["X"], ["Out"], {"dst_place_type": 0}, infer_shape=lambda ins, attrs: {"Out": first(ins, "X")})
def memcpy(X, *, dst_place_type):
    """A copy of X on the place ``dst_place_type`` names (0 CPU, 1 GPU ...); on the NumPy backend every
    place is the host, so it is a plain copy (``paddle/fluid/operators/memcpy_op.cc``)."""
    check_place_type("memcpy", dst_place_type)
    return np.array(X, copy=True)


def check_place_type(op: str, dst_place_type: int) -> None:
    """``dst_place_type`` must name one of Paddle's place types (0 CPU, 1 GPU, ... 6)."""
    if dst_place_type not in (0, 1, 2, 3, 4, 5, 6):
        raise InvalidArgument(f"{op}: dst_place_type {dst_place_type} is not a place type (0 CPU, 1 GPU, ...)")
