"""CUDA kernels for ``refimpl/ops/strided_slice_ops.py``: strided_slice (+ grad).

Mirrors Paddle's GPU ``StridedSliceKernel`` / ``StridedSliceGradKernel``
(``paddle/phi/kernels/gpu/``, Eigen strided slices there) with the NumPy
kernels' bounds and checks: the slice is one strided read of Input
(``ops_manipulation.strided_copy``: the first element's offset, and per dim
the contiguous stride times the slice's step, negative for a reversed dim),
and the grad is the same geometry written into zeros. The Starts / Ends /
Strides tensors are read back to the host for the bounds, as Paddle does.
"""
from refimpl.ops import strided_slice_ops as cpu
from refimpl.ops.registry import register_kernel

from .device import contiguous_strides, dev, flat, launch, padded, to_host
from .ops_creation import full, host_or_none
from .ops_manipulation import scatter_block, strided_copy


def _geometry(shape, axes, starts, ends, strides, tensors):
    """(block shape, offset of its first element, element strides) of the slice of a contiguous ``shape``."""
    host = [host_or_none(t) if k % 2 == 0 else [to_host(x) for x in t or []] for k, t in enumerate(tensors)]
    per_axis = dict(cpu.ss_values(shape, axes, starts, ends, strides, host))  # a repeated axis: the last wins
    st = contiguous_strides(shape)
    block, base, steps = list(shape), 0, list(st)
    for a, sl in per_axis.items():
        block[a] = len(range(sl.start, sl.stop, sl.step))
        base += sl.start * st[a] if block[a] else 0
        steps[a] = st[a] * sl.step
    return tuple(block), base, tuple(steps)


def strided_slice(Input, StartsTensor, StartsTensorList, EndsTensor, EndsTensorList, StridesTensor,
                  StridesTensorList, *, axes, starts, ends, strides, decrease_axis):
    x = dev(Input)
    block, base, steps = _geometry(tuple(x.shape), axes, starts, ends, strides,
                                   (StartsTensor, StartsTensorList, EndsTensor, EndsTensorList, StridesTensor,
                                    StridesTensorList))
    return strided_copy(x, block, steps, base).reshape(cpu.drop_decreased(block, decrease_axis))


def strided_slice_grad(Input, dOut, StartsTensor, StartsTensorList, EndsTensor, EndsTensorList, StridesTensor,
                       StridesTensorList, *, axes, starts, ends, strides, decrease_axis):
    """Input is a shape-only meta (no need buffer)."""
    g = dev(dOut)
    shape = tuple(Input.shape)
    block, base, steps = _geometry(shape, axes, starts, ends, strides,
                                   (StartsTensor, StartsTensorList, EndsTensor, EndsTensorList, StridesTensor,
                                    StridesTensorList))
    dx = full(shape, 0, g.dtype)
    launch(scatter_block, g.size, flat(g), flat(dx), base, padded(block), padded(steps, 0))
    return dx


register_kernel("strided_slice", "cuda", strided_slice)
register_kernel("strided_slice_grad", "cuda", strided_slice_grad)
