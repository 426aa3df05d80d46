"""CUDA kernels for the ops of ``refimpl/ops/conv_ops.py``: conv2d, depthwise_conv2d, flatten (+ grads).

Mirrors Paddle's GPU conv kernels (``paddle/phi/kernels/gpu/conv_kernel.cu`` when cuDNN is off,
``paddle/phi/kernels/impl/conv_kernel_impl.h``: im2col + a GEMM per group) with the NumPy
kernel's layout: an im2col kernel writes ``cols`` (G, C/G*KH*KW, N*OH*OW) (zeros in the padding),
the tiled matmul of ``ops_matmul.bmm`` multiplies per group, and a strided copy puts the result in
NCHW order. The grads: ``Filter@GRAD = dOut @ cols^T`` and ``dcols = W^T @ dOut`` through ``bmm``,
then a col2im kernel that gathers, for every input element, its contributions in (kh, kw) order
(the NumPy kernel's order). The matmul sums over k in order, NumPy's BLAS does not: results agree
within rounding (kernel_check's CLOSE), not bit for bit. NHWC is transposed to NCHW and back.
Paddle's depthwise GPU kernel is a direct kernel; here it shares conv2d's path.

flatten_contiguous_range: ``Out`` is a view of X's device buffer, ``XShape`` a zero-size device
array, as reshape2 here.
"""
from refimpl.ops.conv_ops import conv_shapes, flatten_shape
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, empty, flat, launch
from .ops_manipulation import from_xshape, transpose, xshape_of
from .ops_matmul import bmm


@cuda.jit
def _im2col(x, cols, C, H, W, KH, KW, OH, OW, NL, sh, sw, pt, pl, dh, dw, zero):
    """cols[(c, kh, kw), (n, oh, ow)] = padded x[n, c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw]."""
    for i in range(cuda.grid(1), cols.size, cuda.gridsize(1)):
        row, col = i // NL, i % NL
        c, kh, kw = row // (KH * KW), row // KW % KH, row % KW
        n, oh, ow = col // (OH * OW), col // OW % OH, col % OW
        h, w = oh * sh - pt + kh * dh, ow * sw - pl + kw * dw
        inside = 0 <= h < H and 0 <= w < W
        cols[i] = x[((n * C + c) * H + h) * W + w] if inside else zero


@cuda.jit
def _col2im(dcols, dx, C, H, W, KH, KW, OH, OW, NL, sh, sw, pt, pl, dh, dw, zero):
    """dx[n, c, h, w] = the sum over (kh, kw), in row-major order, of the dcols entries reading it."""
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        n, c, h, w = i // (C * H * W), i // (H * W) % C, i // W % H, i % W
        acc = zero
        for kh in range(KH):
            hh = h + pt - kh * dh
            if hh < 0 or hh % sh != 0 or hh // sh >= OH:
                continue
            for kw in range(KW):
                ww = w + pl - kw * dw
                if ww < 0 or ww % sw != 0 or ww // sw >= OW:
                    continue
                row = (c * KH + kh) * KW + kw
                acc += dcols[row * NL + (n * OH + hh // sh) * OW + ww // sw]
        dx[i] = acc


class _Geo:
    """The conv geometry of one call, as the kernels' scalar arguments."""

    def __init__(self, op, x, w, attrs):
        (self.n, self.c, self.h, self.w), (pads, dil, (self.oh, self.ow)), _ = \
            conv_shapes(op, tuple(x.shape), tuple(w.shape), attrs)
        self.pads, self.dil = pads, dil
        self.s = [int(v) for v in attrs["strides"]]
        self.g, self.co, self.kh, self.kw = int(attrs["groups"]), w.shape[0], w.shape[2], w.shape[3]
        self.nl = self.n * self.oh * self.ow
        self.k = self.c // self.g * self.kh * self.kw

    def args(self, zero):
        return (self.c, self.h, self.w, self.kh, self.kw, self.oh, self.ow, self.nl, self.s[0], self.s[1],
                self.pads[0], self.pads[2], self.dil[0], self.dil[1], zero)


def to_nchw(a, fmt):
    return transpose(a, [0, 3, 1, 2]) if fmt == "NHWC" else dev(a)


def from_nchw(a, fmt):
    return transpose(a, [0, 2, 3, 1]) if fmt == "NHWC" else a


def _im2col_of(x, geo):
    cols = empty((geo.g, geo.k, geo.nl), x.dtype)
    launch(_im2col, cols.size, flat(x), flat(cols), *geo.args(x.dtype.type(0)))
    return cols


def conv_forward(op, Input, Filter, attrs):
    fmt = attrs["data_format"]
    x, w = to_nchw(Input, fmt), dev(Filter)
    geo = _Geo(op, Input, Filter, attrs)
    out = bmm(w.reshape((geo.g, geo.co // geo.g, geo.k)), _im2col_of(x, geo))     # (G, Co/G, N*OH*OW)
    out = transpose(out.reshape((geo.co, geo.n, geo.oh * geo.ow)), [1, 0, 2])
    return from_nchw(out.reshape((geo.n, geo.co, geo.oh, geo.ow)), fmt)


def conv_backward(op, Input, Filter, dOut, attrs, need):
    fmt = attrs["data_format"]
    x, w = to_nchw(Input, fmt), dev(Filter)
    geo = _Geo(op, Input, Filter, attrs)
    d = to_nchw(dOut, fmt).reshape((geo.n, geo.co, geo.oh * geo.ow))
    d = transpose(d, [1, 0, 2]).reshape((geo.g, geo.co // geo.g, geo.nl))
    dx = dw = None
    if need[0]:
        dcols = bmm(w.reshape((geo.g, geo.co // geo.g, geo.k)), d, trans_a=True)   # (G, K, N*OH*OW)
        dxn = empty((geo.n, geo.c, geo.h, geo.w), x.dtype)
        launch(_col2im, dxn.size, flat(dcols), flat(dxn), *geo.args(x.dtype.type(0)))
        dx = from_nchw(dxn, fmt)
    if need[1]:
        dw = bmm(d, _im2col_of(x, geo), trans_b=True).reshape(tuple(Filter.shape))
    return dx, dw


def _attrs(strides, paddings, padding_algorithm, dilations, groups, data_format):
    return {"strides": strides, "paddings": paddings, "padding_algorithm": padding_algorithm,
            "dilations": dilations, "groups": groups, "data_format": data_format}


def _register(op):
    grad = op + "_grad"

    def forward(Input, Filter, *, strides, paddings, padding_algorithm, dilations, groups, data_format):
        return conv_forward(op, Input, Filter,
                            _attrs(strides, paddings, padding_algorithm, dilations, groups, data_format))

    def backward(Input, Filter, dOutput, *, strides, paddings, padding_algorithm, dilations, groups,
                 data_format, need):
        return conv_backward(grad, Input, Filter, dOutput,
                             _attrs(strides, paddings, padding_algorithm, dilations, groups, data_format), need)

    register_kernel(op, "cuda", forward)
    register_kernel(grad, "cuda", backward)


_register("conv2d")
_register("depthwise_conv2d")


# ---- flatten_contiguous_range ----------------------------------------------------------------------
def flatten_contiguous_range(X, *, start_axis, stop_axis, need):
    X = dev(X)
    out = X.reshape(flatten_shape("flatten_contiguous_range", tuple(X.shape), start_axis, stop_axis))
    return out, (xshape_of(X) if need[1] else None)


register_kernel("flatten_contiguous_range", "cuda", flatten_contiguous_range)
register_kernel("flatten_contiguous_range_grad", "cuda", from_xshape)
