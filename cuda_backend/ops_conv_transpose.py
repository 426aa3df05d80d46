"""CUDA kernels for the ops of ``refimpl/ops/conv_transpose_ops.py``: conv2d_transpose,
depthwise_conv2d_transpose, conv3d_transpose (+ grads).

As in the NumPy kernels, a transposed conv is a conv's input gradient: with the filter
``[C_in, C_out / groups, *K]`` read as the filter of a conv from C_out to C_in channels, the
forward is that conv's data gradient (``bmm`` of ``W^T`` with the input, then the col2im kernel of
``ops_conv``), ``Input@GRAD`` the conv itself (im2col + ``bmm``) and ``Filter@GRAD`` its filter
gradient. So the sums run in the NumPy kernels' order except inside the matmuls (in order over k
here, BLAS's order there): results agree within rounding (kernel_check's CLOSE). Paddle's GPU
kernels (``paddle/phi/kernels/gpu/conv_transpose_kernel.cu`` without cuDNN) take the same
GEMM + col2im path; its depthwise one is a direct kernel, here it shares the general path.
"""
from refimpl.ops.conv_ops import is_channel_last
from refimpl.ops.conv_transpose_ops import conv_transpose_shapes
from refimpl.ops.registry import register_kernel

from .ops_conv import Geo, conv_apply, conv_data_grad, conv_filter_grad, from_channel_first, to_channel_first


def _geo(op, Input, Filter, attrs, nd):
    """The geometry of the conv whose input gradient this transposed conv is."""
    (pads, dil, strides, outs), _ = conv_transpose_shapes(op, tuple(Input.shape), tuple(Filter.shape), attrs, nd)
    sizes = tuple(Input.shape[1:-1]) if is_channel_last(attrs["data_format"]) else tuple(Input.shape[2:])
    n, c_out = Input.shape[0], Filter.shape[1] * int(attrs["groups"])
    return Geo(n, c_out, outs, Filter.shape[2:], pads, dil, strides, sizes, attrs["groups"], Filter.shape[0])


def forward_kernel(op, Input, Filter, attrs, nd):
    fmt = attrs["data_format"]
    geo = _geo(op, Input, Filter, attrs, nd)
    return from_channel_first(conv_data_grad(to_channel_first(Input, fmt), Filter, geo), fmt)


def backward_kernel(op, Input, Filter, dOut, attrs, need, nd):
    fmt = attrs["data_format"]
    geo = _geo(op, Input, Filter, attrs, nd)
    x, d = to_channel_first(Input, fmt), to_channel_first(dOut, fmt)
    dx = from_channel_first(conv_apply(d, Filter, geo), fmt) if need[0] else None
    dw = conv_filter_grad(d, x, Filter.shape, geo) if need[1] else None
    return dx, dw


def _register(op, nd):
    grad = op + "_grad"

    def forward(Input, Filter, *rest, strides, paddings, output_padding, output_size, padding_algorithm, groups,
                dilations, data_format):
        attrs = dict(strides=strides, paddings=paddings, output_padding=output_padding, output_size=output_size,
                     padding_algorithm=padding_algorithm, groups=groups, dilations=dilations, data_format=data_format)
        return forward_kernel(op, Input, Filter, attrs, nd)

    def backward(Input, Filter, *rest, strides, paddings, output_padding, output_size, padding_algorithm, groups,
                 dilations, data_format, need):
        attrs = dict(strides=strides, paddings=paddings, output_padding=output_padding, output_size=output_size,
                     padding_algorithm=padding_algorithm, groups=groups, dilations=dilations, data_format=data_format)
        return backward_kernel(grad, Input, Filter, rest[-1], attrs, need, nd)

    register_kernel(op, "cuda", forward)
    register_kernel(grad, "cuda", backward)


_register("conv2d_transpose", 2)
_register("depthwise_conv2d_transpose", 2)
_register("conv3d_transpose", 3)
