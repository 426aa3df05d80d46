"""Transposed convolutions: conv2d_transpose, depthwise_conv2d_transpose, conv3d_transpose (+ grads).

Mirrors Paddle 3.3.1's ops of the same names: ``paddle/phi/infermeta/binary.cc``
``ConvTransposeInferMeta``, ``paddle/phi/kernels/impl/conv_transpose_kernel_impl.h`` and
``conv_transpose_grad_kernel_impl.h`` (GEMM + col2im per image and group), and
``paddle/phi/kernels/cpu/conv_transpose_kernel.cc`` (depthwise_conv2d_transpose runs the same CPU
kernel as conv2d_transpose).

A transposed conv is the input gradient of a conv: with the filter ``[C_in, C_out / groups, *K]``
read as a conv filter of a conv from C_out to C_in channels, ``Output`` is that conv's input
gradient for ``Output@GRAD = Input`` (:func:`refimpl.ops.conv_ops.conv_data_grad`:
``dcols = W^T @ x``, then col2im), ``Input@GRAD`` is that conv applied to ``Output@GRAD``
(:func:`~refimpl.ops.conv_ops.conv_apply`) and ``Filter@GRAD`` its filter gradient
(:func:`~refimpl.ops.conv_ops.conv_filter_grad`). The order of the sums is the one described in
:mod:`refimpl.ops.conv_ops`.

Geometry: the paddings and dilations are updated from the *input* sizes (``SAME`` / ``VALID``, as
``UpdatePaddingAndDilation``), then per spatial dim
``out = (in - 1) * stride - pad_lo - pad_hi + dilation * (k - 1) + 1``, plus ``output_padding``
when given; a given ``output_size`` replaces it and must lie in ``[out, out + stride)``.
``output_padding`` must be below ``max(stride, dilation)``. ``data_format`` "NHWC" (and "NDHWC")
only changes the layout; ``conv3d_transpose`` stores "NCHW" / "NHWC" for 3-D data, as Paddle's
Python does.

Differences: Paddle checks ``output_size`` and ``output_padding`` only when the op runs; here
``infer_shape`` checks them as soon as the sizes are known (when the program is built). The
dispensable ``Bias`` slot of the 2-D ops is ignored by Paddle's CPU kernel, and here.
"""
from typing import Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import check_choice, first, grads_like
from .conv_ops import (DATA_FORMATS, DATA_FORMATS_3D, conv_apply, conv_data_grad,
                       conv_filter_grad, from_channel_first, is_channel_last, pads_and_dilations, spatial,
                       to_channel_first)
from .grad_maker import simple_grad
from .registry import register_op

__all__ = ["conv_transpose_shapes", "TRANSPOSE_ATTRS", "TRANSPOSE3D_ATTRS"]


def _attrs(nd: int) -> dict:
    return {"strides": [1] * nd, "paddings": [0] * nd, "output_padding": [], "output_size": [],
            "padding_algorithm": "EXPLICIT", "groups": 1, "dilations": [1] * nd, "data_format": "NCHW"}


TRANSPOSE_ATTRS = _attrs(2)
TRANSPOSE3D_ATTRS = _attrs(3)


def _out_sizes(op: str, sizes, ks, strides, pads, dilations, output_size, output_padding):
    """Per spatial dim, ConvTransposeInferMeta's output size (-1 where the input size is unknown)."""
    nd = len(sizes)
    for name, vals in (("output_size", output_size), ("output_padding", output_padding)):
        if vals and len(vals) != nd:
            raise InvalidArgument(f"{op}: attr {name} must be empty or {nd} ints, got {list(vals)}")
    outs = []
    for i, size in enumerate(sizes):
        if size == -1:
            outs.append(int(output_size[i]) if output_size else -1)
            continue
        infer = (size - 1) * strides[i] - pads[2 * i] - pads[2 * i + 1] + dilations[i] * (ks[i] - 1) + 1
        if output_size:
            o = int(output_size[i])
            if not infer <= o < infer + strides[i]:
                raise InvalidArgument(
                    f"{op}: output_size {list(output_size)}: dim {i} is {o}, it must be in [{infer}, "
                    f"{infer + strides[i]}) for input size {size}, filter size {ks[i]}, stride {strides[i]}, "
                    f"paddings {pads[2 * i:2 * i + 2]} and dilation {dilations[i]}")
        elif output_padding:
            o = infer + int(output_padding[i])
            if not 0 <= int(output_padding[i]) < max(strides[i], dilations[i]):
                raise InvalidArgument(f"{op}: output_padding {list(output_padding)}: dim {i} must be >= 0 and "
                                      f"less than max(stride {strides[i]}, dilation {dilations[i]})")
        else:
            o = infer
        if o <= 0:
            raise InvalidArgument(
                f"{op}: the output size is {o} for input size {size}, filter size {ks[i]}, stride {strides[i]}, "
                f"paddings {pads[2 * i:2 * i + 2]} and dilation {dilations[i]}; it must be > 0")
        outs.append(o)
    return tuple(outs)


def conv_transpose_shapes(op: str, x_shape: Sequence[int], w_shape: Sequence[int], attrs: dict, nd: int):
    """Checked (pads, dilations, strides, out sizes) and the output shape of a transposed conv op."""
    fmt = attrs["data_format"]
    check_choice(op, "data_format", fmt, DATA_FORMATS if nd == 2 else DATA_FORMATS_3D)
    if len(x_shape) != nd + 2 or len(w_shape) != nd + 2:
        raise InvalidArgument(f"{op}: Input and Filter must be {nd + 2}-D, got {list(x_shape)} and {list(w_shape)}")
    n, c, *sizes = spatial(x_shape, fmt)
    if c != -1 and c != w_shape[0]:
        raise InvalidArgument(f"{op}: the number of input channels ({c}, Input {list(x_shape)}, data_format "
                              f"{fmt}) must equal the filter's first dim (Filter {list(w_shape)})")
    groups = int(attrs["groups"])
    if groups < 1 or (c != -1 and c % groups):
        raise InvalidArgument(f"{op}: attr groups={groups} must be >= 1 and divide the {c} input channels")
    pads, dil = pads_and_dilations(op, sizes, w_shape[2:], attrs["strides"], attrs["paddings"],
                                   attrs["dilations"], attrs["padding_algorithm"])
    strides = [int(s) for s in attrs["strides"]]
    outs = _out_sizes(op, sizes, w_shape[2:], strides, pads, dil, attrs["output_size"], attrs["output_padding"])
    co = w_shape[1] * groups
    out = (n, *outs, co) if is_channel_last(fmt) else (n, co, *outs)
    return (pads, dil, strides, outs), out


def _infer(op: str, nd: int):
    def infer(ins, attrs):
        xs, dt = first(ins, "Input")
        return {"Output": (conv_transpose_shapes(op, tuple(xs), tuple(first(ins, "Filter")[0]), attrs, nd)[1], dt)}
    return infer


# ---- NumPy kernels ----------------------------------------------------------------------------------
def conv_transpose_forward(op: str, Input: np.ndarray, Filter: np.ndarray, attrs: dict, nd: int) -> np.ndarray:
    (pads, dil, strides, outs), _ = conv_transpose_shapes(op, Input.shape, Filter.shape, attrs, nd)
    g, fmt = int(attrs["groups"]), attrs["data_format"]
    x = to_channel_first(Input, fmt)
    out_shape = (x.shape[0], Filter.shape[1] * g, *outs)
    return from_channel_first(conv_data_grad(x, Filter, g, out_shape, pads, dil, strides), fmt)


def conv_transpose_backward(op: str, Input, Filter, dOut, attrs: dict, need, nd: int) \
        -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    (pads, dil, strides, _), _ = conv_transpose_shapes(op, Input.shape, Filter.shape, attrs, nd)
    g, fmt = int(attrs["groups"]), attrs["data_format"]
    x, d = to_channel_first(Input, fmt), to_channel_first(dOut, fmt)
    dx = dw = None
    if need[0]:
        dx = from_channel_first(conv_apply(d, Filter, g, pads, dil, strides, x.shape[2:]), fmt)
    if need[1]:
        dw = conv_filter_grad(d, x, Filter.shape, g, pads, dil, strides)
    return dx, dw


def _register(op: str, nd: int, bias: bool) -> None:
    grad = op + "_grad"
    attrs = _attrs(nd)
    ins = ["Input", "Filter", "Bias?"] if bias else ["Input", "Filter"]
    grad_ins = [s.rstrip("?") for s in ins] + ["Output@GRAD"]
    outs = ["Input@GRAD", "Filter@GRAD"]

    def kw(strides, paddings, output_padding, output_size, padding_algorithm, groups, dilations, data_format):
        return dict(strides=strides, paddings=paddings, output_padding=output_padding, output_size=output_size,
                    padding_algorithm=padding_algorithm, groups=groups, dilations=dilations,
                    data_format=data_format)

    def forward(Input, Filter, *rest, strides, paddings, output_padding, output_size, padding_algorithm,
                groups, dilations, data_format):
        a = kw(strides, paddings, output_padding, output_size, padding_algorithm, groups, dilations, data_format)
        return conv_transpose_forward(op, Input, Filter, a, nd)

    def backward(Input, Filter, *rest, strides, paddings, output_padding, output_size, padding_algorithm,
                 groups, dilations, data_format, need):
        a = kw(strides, paddings, output_padding, output_size, padding_algorithm, groups, dilations, data_format)
        return conv_transpose_backward(grad, Input, Filter, rest[-1], a, need, nd)

    register_op(op, ins, ["Output"], attrs, infer_shape=_infer(op, nd),
                grad=simple_grad(grad, grad_ins, outs))(forward)
    register_op(grad, [s if s != "Bias" else "Bias?" for s in grad_ins], outs, attrs,
                infer_shape=grads_like(**{"Input@GRAD": "Input", "Filter@GRAD": "Filter"}))(backward)


_register("conv2d_transpose", 2, bias=True)
_register("depthwise_conv2d_transpose", 2, bias=True)  # Python picks it for groups == C_in, one filter each
_register("conv3d_transpose", 3, bias=False)
