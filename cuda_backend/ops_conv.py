"""CUDA kernels for the ops of ``refimpl/ops/conv_ops.py``: conv2d, depthwise_conv2d, conv3d, flatten (+ grads).

Mirrors Paddle's GPU conv kernels (``paddle/phi/kernels/gpu/conv_kernel.cu`` when cuDNN is off,
``paddle/phi/kernels/impl/conv_kernel_impl.h``: im2col + a GEMM per group) with the NumPy
kernel's layout: an im2col kernel writes ``cols`` (G, C/G*prod(K), N*prod(O)) (zeros in the
padding), the tiled matmul of ``ops_matmul.bmm`` multiplies per group, and a strided copy puts the
result in channel-first order. The grads: ``Filter@GRAD = dOut @ cols^T`` and ``dcols = W^T @ dOut``
through ``bmm``, then a col2im kernel that gathers, for every input element, its contributions in
(kd, kh, kw) row-major order (the NumPy kernel's order). The kernels are written for three spatial
dims; a 2-D conv is a 3-D one with depth 1. The matmul sums over k in order, NumPy's BLAS does
not: results agree within rounding (kernel_check's CLOSE), not bit for bit. Channel-last data is
transposed to channel-first and back. Paddle's depthwise GPU kernel is a direct kernel; here it
shares conv2d's path. ``cuda_backend/ops_conv_transpose.py`` reuses :func:`conv_apply`,
:func:`conv_data_grad` and :func:`conv_filter_grad`.

flatten_contiguous_range: ``Out`` is a view of X's device buffer, ``XShape`` a zero-size device
array, as reshape2 here.
"""
import math

from refimpl.ops.conv_ops import conv_shapes, flatten_shape, is_channel_last
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, empty, flat, launch
from .ops_manipulation import from_xshape, transpose, xshape_of
from .ops_matmul import bmm


@cuda.jit
def _im2col(x, cols, C, D, H, W, KD, KH, KW, OD, OH, OW, NL, sd, sh, sw, pd, pt, pl, dd, dh, dw, zero):
    """cols[(c, kd, kh, kw), (n, od, oh, ow)] = padded x[n, c, od*sd - pd + kd*dd, oh*sh - pt + kh*dh, ...]."""
    for i in range(cuda.grid(1), cols.size, cuda.gridsize(1)):
        row, col = i // NL, i % NL
        c, kd, kh, kw = row // (KD * KH * KW), row // (KH * KW) % KD, row // KW % KH, row % KW
        n, od, oh, ow = col // (OD * OH * OW), col // (OH * OW) % OD, col // OW % OH, col % OW
        d, h, w = od * sd - pd + kd * dd, oh * sh - pt + kh * dh, ow * sw - pl + kw * dw
        inside = 0 <= d < D and 0 <= h < H and 0 <= w < W
        cols[i] = x[(((n * C + c) * D + d) * H + h) * W + w] if inside else zero


@cuda.jit
def _col2im(dcols, dx, C, D, H, W, KD, KH, KW, OD, OH, OW, NL, sd, sh, sw, pd, pt, pl, dd, dh, dw, zero):
    """dx[n, c, d, h, w] = the sum over (kd, kh, kw), in row-major order, of the dcols entries reading it."""
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        n, c = i // (C * D * H * W), i // (D * H * W) % C
        d, h, w = i // (H * W) % D, i // W % H, i % W
        acc = zero
        for kd in range(KD):
            dd_ = d + pd - kd * dd
            if dd_ < 0 or dd_ % sd != 0 or dd_ // sd >= OD:
                continue
            for kh in range(KH):
                hh = h + pt - kh * dh
                if hh < 0 or hh % sh != 0 or hh // sh >= OH:
                    continue
                for kw in range(KW):
                    ww = w + pl - kw * dw
                    if ww < 0 or ww % sw != 0 or ww // sw >= OW:
                        continue
                    row = ((c * KD + kd) * KH + kh) * KW + kw
                    acc += dcols[row * NL + ((n * OD + dd_ // sd) * OH + hh // sh) * OW + ww // sw]
        dx[i] = acc


class Geo:
    """One conv's geometry as the kernels' scalar arguments: a conv of x (N, C, *sizes) with filter
    (Co, C/G, *ks) into (N, Co, *outs); 2-D geometries get a leading depth of 1."""

    def __init__(self, n, c, sizes, ks, pads, dil, strides, outs, groups, co):
        lead = 3 - len(sizes)
        self.n, self.c, self.g, self.co = n, c, int(groups), co
        self.sizes = (1,) * lead + tuple(sizes)
        self.ks = (1,) * lead + tuple(ks)
        self.outs = (1,) * lead + tuple(outs)
        self.s = (1,) * lead + tuple(int(v) for v in strides)
        self.d = (1,) * lead + tuple(dil)
        self.lo = (0,) * lead + tuple(pads[0::2])
        self.nl = n * math.prod(self.outs)
        self.k = c // self.g * math.prod(self.ks)
        self.x_shape = (n, c, *sizes)
        self.out_shape = (n, co, *outs)

    def args(self, zero):
        return (self.c, *self.sizes, *self.ks, *self.outs, self.nl, *self.s, *self.lo, *self.d, zero)


def to_channel_first(a, fmt):
    a = dev(a)
    nd = len(a.shape)
    return transpose(a, [0, nd - 1, *range(1, nd - 1)]) if is_channel_last(fmt) else a


def from_channel_first(a, fmt):
    nd = len(a.shape)
    return transpose(a, [0, *range(2, nd), 1]) if is_channel_last(fmt) else a


to_nchw, from_nchw = to_channel_first, from_channel_first   # (ops_pool's names)


def _im2col_of(x, geo):
    cols = empty((geo.g, geo.k, geo.nl), x.dtype)
    launch(_im2col, cols.size, flat(x), flat(cols), *geo.args(x.dtype.type(0)))
    return cols


def _by_group(d, geo):
    """(N, Co, *O) -> (G, Co/G, N*prod(O))."""
    d = transpose(d.reshape((geo.n, geo.co, geo.nl // geo.n)), [1, 0, 2])
    return d.reshape((geo.g, geo.co // geo.g, geo.nl))


def conv_apply(x, w, geo):
    """Channel-first conv of x (N, C, *S) with w (Co, C/G, *K) into (N, Co, *O)."""
    out = bmm(dev(w).reshape((geo.g, geo.co // geo.g, geo.k)), _im2col_of(x, geo))    # (G, Co/G, N*prod(O))
    out = transpose(out.reshape((geo.co, geo.n, geo.nl // geo.n)), [1, 0, 2])
    return out.reshape(geo.out_shape)


def conv_data_grad(d, w, geo):
    """Channel-first input gradient (N, C, *S) of a conv, from d (N, Co, *O)."""
    dcols = bmm(dev(w).reshape((geo.g, geo.co // geo.g, geo.k)), _by_group(d, geo), trans_a=True)
    dx = empty(geo.x_shape, d.dtype)
    launch(_col2im, dx.size, flat(dcols), flat(dx), *geo.args(d.dtype.type(0)))
    return dx


def conv_filter_grad(x, d, w_shape, geo):
    """Filter gradient of a conv of x (N, C, *S), d (N, Co, *O) the output gradient."""
    return bmm(_by_group(d, geo), _im2col_of(x, geo), trans_b=True).reshape(tuple(w_shape))


def _geo(op, Input, Filter, attrs, nd):
    (n, c, *sizes), (pads, dil, outs), _ = conv_shapes(op, tuple(Input.shape), tuple(Filter.shape), attrs, nd)
    return Geo(n, c, sizes, Filter.shape[2:], pads, dil, attrs["strides"], outs, attrs["groups"], Filter.shape[0])


def conv_forward(op, Input, Filter, attrs, nd=2):
    fmt = attrs["data_format"]
    geo = _geo(op, Input, Filter, attrs, nd)
    return from_channel_first(conv_apply(to_channel_first(Input, fmt), Filter, geo), fmt)


def conv_backward(op, Input, Filter, dOut, attrs, need, nd=2):
    fmt = attrs["data_format"]
    geo = _geo(op, Input, Filter, attrs, nd)
    x, d = to_channel_first(Input, fmt), to_channel_first(dOut, fmt)
    dx = from_channel_first(conv_data_grad(d, Filter, geo), fmt) if need[0] else None
    dw = conv_filter_grad(x, d, Filter.shape, geo) if need[1] else None
    return dx, dw


def _attrs(strides, paddings, padding_algorithm, dilations, groups, data_format):
    return {"strides": strides, "paddings": paddings, "padding_algorithm": padding_algorithm,
            "dilations": dilations, "groups": groups, "data_format": data_format}


def _register(op, nd):
    grad = op + "_grad"

    def forward(Input, Filter, *, strides, paddings, padding_algorithm, dilations, groups, data_format):
        return conv_forward(op, Input, Filter,
                            _attrs(strides, paddings, padding_algorithm, dilations, groups, data_format), nd)

    def backward(Input, Filter, dOutput, *, strides, paddings, padding_algorithm, dilations, groups,
                 data_format, need):
        return conv_backward(grad, Input, Filter, dOutput,
                             _attrs(strides, paddings, padding_algorithm, dilations, groups, data_format), need, nd)

    register_kernel(op, "cuda", forward)
    register_kernel(grad, "cuda", backward)


_register("conv2d", 2)
_register("depthwise_conv2d", 2)
_register("conv3d", 3)


# ---- flatten_contiguous_range ----------------------------------------------------------------------
def flatten_contiguous_range(X, *, start_axis, stop_axis, need):
    X = dev(X)
    out = X.reshape(flatten_shape("flatten_contiguous_range", tuple(X.shape), start_axis, stop_axis))
    return out, (xshape_of(X) if need[1] else None)


register_kernel("flatten_contiguous_range", "cuda", flatten_contiguous_range)
register_kernel("flatten_contiguous_range_grad", "cuda", from_xshape)
