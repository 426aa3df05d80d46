"""Convolution and flattening ops: conv2d, depthwise_conv2d, conv3d, flatten_contiguous_range (+ grads).

Mirrors Paddle 3.3.1's ops of the same names: ``paddle/phi/kernels/cpu/conv_kernel.cc`` /
``conv_grad_kernel.cc`` (both through ``paddle/phi/kernels/impl/conv_kernel_impl.h``:
im2col + one GEMM per group), ``paddle/phi/kernels/cpu/depthwise_conv_kernel.cc`` (the same
im2col path on CPU), ``paddle/phi/infermeta/binary.cc`` ``ConvInferMeta`` and
``paddle/phi/kernels/funcs/padding.h`` (``UpdatePaddingAndDilation``), and
``paddle/phi/kernels/flatten_kernel.cc`` with ``FlattenWithXShapeInferMeta``. ``pool2d`` lives
in :mod:`refimpl.ops.pool_ops`.

Conv geometry: ``paddings`` of 2 are (h, w) used on both sides, of 4 (top, bottom, left,
right); ``padding_algorithm`` "SAME" pads ``max((ceil(in/s) - 1) * s + k - in, 0)`` split
floor-half on top/left, the rest on bottom/right, and sets the dilations to 1; "VALID" pads
nothing. Out = ``(in + p0 + p1 - (d * (k - 1) + 1)) // s + 1``. The filter is always
``[C_out, C_in / groups, KH, KW]``; ``data_format`` "NHWC" only changes the input / output layout
(the kernels transpose to NCHW and back). conv3d is the same over (D, H, W): paddings of 3 or 6,
filter ``[C_out, C_in / groups, KD, KH, KW]``, "NCDHW" / "NDHWC" (Paddle's 3-D kernels only ask
whether the format is channel-last, so "NCHW" / "NHWC" are accepted too). The helpers below work
over any number of spatial dims; :mod:`refimpl.ops.conv_transpose_ops` reuses them (a transposed
conv is the input gradient of a conv).

Order of the sums (float32 results depend on it):

* forward: per group, ``Out[g] = W[g] (C_out/g, K) @ cols[g] (K, N*OH*OW)`` with
  ``K = (c, kh, kw)`` flattened row-major, through :func:`gemm`: for K <= 256 (and small enough
  products) a float32 sum over k in order, product and sum each rounded, which is what Paddle's CPU
  GEMM computes there (Paddle runs one GEMM per image and group; checked bit for bit), else BLAS,
  which picks its own order (the numbers may then differ from Paddle's in the last bits).
* ``Filter@GRAD[g] = dOut[g] @ cols[g]^T``: a :func:`gemm` over (n, oh, ow) (Paddle: a GEMM per image,
  accumulated image by image).
* ``Input@GRAD``: ``dcols[g] = W[g]^T @ dOut[g]`` (a :func:`gemm` over C_out/g), then col2im as a loop over
  the kernel offsets (kh, kw) in row-major order, each adding one strided slice of ``dcols``
  into the padded input gradient: every input element sums its contributions in (kh, kw) order,
  as Paddle's ``Col2ImFunctor`` does.

flatten_contiguous_range: ``Out`` is a NumPy view of ``X`` (Paddle shares the buffer too) and
``XShape`` a zero-size array shaped ``[0] + X.shape``; the grad reads only ``XShape`` and
``Out@GRAD``.
"""
import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import check_choice, first, grads_like
from .grad_maker import simple_grad
from .manipulation_ops import from_xshape, xshape_grad, xshape_of
from .registry import register_op

CONV_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "EXPLICIT", "dilations": [1, 1],
              "groups": 1, "data_format": "NCHW"}
# conv3d's proto orders groups before dilations
CONV3D_ATTRS = {"strides": [1, 1, 1], "paddings": [0, 0, 0], "padding_algorithm": "EXPLICIT", "groups": 1,
                "dilations": [1, 1, 1], "data_format": "NCDHW"}
PADDING_ALGORITHMS = ("EXPLICIT", "SAME", "VALID")
DATA_FORMATS = ("NCHW", "NHWC", "AnyLayout")
DATA_FORMATS_3D = ("NCDHW", "NDHWC", "NCHW", "NHWC", "AnyLayout")  # the 3-D kernels read only "channel last"


# ---- geometry shared with pool_ops, conv_transpose_ops and the cuda kernels ---------------------
def explicit_pads(op: str, paddings: Sequence[int], nd: int = 2) -> List[int]:
    """[lo0, hi0, lo1, hi1, ...] from ``nd`` paddings (both sides) or ``2 * nd`` (lo, hi per dim)."""
    p = [int(v) for v in paddings]
    if len(p) == nd:
        p = [v for v in p for _ in range(2)]
    if len(p) != 2 * nd or min(p) < 0:
        raise InvalidArgument(f"{op}: attr paddings must be {nd} or {2 * nd} ints >= 0, got {list(paddings)}")
    return p


def same_pads(size: int, k: int, s: int) -> Tuple[int, int]:
    """Paddle's "SAME": the output is ceil(size / s); the extra cell (if odd) goes bottom / right."""
    total = max((-(-size // s) - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def is_channel_last(data_format: str) -> bool:
    return data_format in ("NHWC", "NDHWC")


def spatial(shape: Sequence[int], data_format: str) -> Tuple[int, ...]:
    """``(N, C, *spatial dims)`` of a shape in ``data_format``."""
    if is_channel_last(data_format):
        return (shape[0], shape[-1], *shape[1:-1])
    return tuple(shape)


def check_ints(op: str, attr: str, values: Sequence[int], nd: int, lo: int = 1) -> Tuple[int, ...]:
    """``nd`` ints, each >= ``lo`` (strides, dilations)."""
    vals = tuple(int(v) for v in values)
    if len(vals) != nd or min(vals) < lo:
        raise InvalidArgument(f"{op}: attr {attr} must be {nd} ints >= {lo}, got {list(values)}")
    return vals


def pads_and_dilations(op: str, sizes: Sequence[int], ks: Sequence[int], strides, paddings, dilations,
                       padding_algorithm: str):
    """Paddle's ``UpdatePaddingAndDilation``: (pads [lo0, hi0, ...], dilations) after "SAME" / "VALID"."""
    nd = len(sizes)
    check_choice(op, "padding_algorithm", padding_algorithm, PADDING_ALGORITHMS)
    strides = check_ints(op, "strides", strides, nd)
    dilations = check_ints(op, "dilations", dilations, nd)
    pads = explicit_pads(op, paddings, nd)
    if padding_algorithm == "SAME":
        pads = [p for i in range(nd) for p in same_pads(sizes[i], ks[i], strides[i])]
        dilations = (1,) * nd
    elif padding_algorithm == "VALID":
        pads = [0] * (2 * nd)
    return pads, dilations


def conv_geometry(op: str, sizes: Sequence[int], ks: Sequence[int], strides, paddings, dilations,
                  padding_algorithm: str):
    """(pads, dilations, out sizes) as ConvInferMeta computes them; unknown (-1) sizes stay -1."""
    pads, dilations = pads_and_dilations(op, sizes, ks, strides, paddings, dilations, padding_algorithm)
    out = []
    for i, size in enumerate(sizes):
        if size == -1:
            out.append(-1)
            continue
        o = (size + pads[2 * i] + pads[2 * i + 1] - (dilations[i] * (ks[i] - 1) + 1)) // int(strides[i]) + 1
        if o <= 0:
            raise InvalidArgument(
                f"{op}: the output size is {o} for input size {size}, filter size {ks[i]}, paddings "
                f"{pads[2 * i:2 * i + 2]}, stride {strides[i]} and dilation {dilations[i]}; it must be > 0")
        out.append(o)
    return pads, dilations, tuple(out)


def conv_shapes(op: str, x_shape, w_shape, attrs, nd: int = 2):
    """Checked ``(N, C, *sizes)``, (pads, dilations, out sizes) and the output shape of a conv op."""
    check_choice(op, "data_format", attrs["data_format"], DATA_FORMATS if nd == 2 else DATA_FORMATS_3D)
    if len(x_shape) != nd + 2 or len(w_shape) != nd + 2:
        raise InvalidArgument(f"{op}: Input and Filter must be {nd + 2}-D, got {list(x_shape)} and {list(w_shape)}")
    n, c, *sizes = spatial(x_shape, attrs["data_format"])
    groups = int(attrs["groups"])
    if groups < 1 or w_shape[0] % groups:
        raise InvalidArgument(f"{op}: attr groups={groups} must be >= 1 and divide the {w_shape[0]} "
                              f"output channels of Filter {list(w_shape)}")
    if c != -1 and c != w_shape[1] * groups:
        raise InvalidArgument(f"{op}: Input has {c} channels, Filter {list(w_shape)} with groups={groups} "
                              f"expects {w_shape[1] * groups}")
    geo = conv_geometry(op, sizes, w_shape[2:], attrs["strides"], attrs["paddings"], attrs["dilations"],
                        attrs["padding_algorithm"])
    outs = geo[2]
    out = (n, *outs, w_shape[0]) if is_channel_last(attrs["data_format"]) else (n, w_shape[0], *outs)
    return (n, c, *sizes), geo, out


def _conv_infer(op, nd):
    def infer(ins, attrs):
        xs, dt = first(ins, "Input")
        return {"Output": (conv_shapes(op, tuple(xs), tuple(first(ins, "Filter")[0]), attrs, nd)[2], dt)}
    return infer


# ---- im2col / col2im over N spatial dims ------------------------------------------------------------
def _windows(xp: np.ndarray, ks, dilations, strides, outs) -> np.ndarray:
    """A ``(N, C, *K, *O)`` strided view of the padded channel-first input (no copy)."""
    sp = xp.strides[2:]
    shape = (*xp.shape[:2], *ks, *outs)
    st = (*xp.strides[:2], *(s * d for s, d in zip(sp, dilations)), *(s * t for s, t in zip(sp, strides)))
    return np.lib.stride_tricks.as_strided(xp, shape, st, writeable=False)


def _pad(x: np.ndarray, pads) -> np.ndarray:
    if not any(pads):
        return x
    return np.pad(x, [(0, 0), (0, 0)] + [(pads[2 * i], pads[2 * i + 1]) for i in range(x.ndim - 2)])


def im2col(x: np.ndarray, ks, pads, dilations, strides, outs, groups: int) -> np.ndarray:
    """(G, C/G * prod(K), N * prod(O)): one copy of the windows, k = ``(c, *kernel offset)`` row-major."""
    nd = len(ks)
    win = _windows(_pad(x, pads), ks, dilations, strides, outs)
    order = (1, *range(2, 2 + nd), 0, *range(2 + nd, 2 + 2 * nd))
    cols = win.transpose(order).reshape(x.shape[1] * math.prod(ks), x.shape[0] * math.prod(outs))
    return cols.reshape(groups, -1, cols.shape[1])


def col2im(dcols: np.ndarray, x_shape, ks, pads, dilations, strides, outs) -> np.ndarray:
    """The input gradient ``(N, C, *sizes)`` from dcols ``(C, *K, N, *O)``: one strided add per kernel offset,
    the offsets in row-major order (Paddle's ``Col2ImFunctor`` order)."""
    n, c, *sizes = x_shape
    nd = len(sizes)
    dxp = np.zeros((n, c, *(sizes[i] + pads[2 * i] + pads[2 * i + 1] for i in range(nd))), dcols.dtype)
    order = (1, 0, *range(2, 2 + nd))
    for k in np.ndindex(*ks):
        dst = tuple(slice(k[i] * dilations[i], k[i] * dilations[i] + strides[i] * (outs[i] - 1) + 1, strides[i])
                    for i in range(nd))
        dxp[(slice(None), slice(None)) + dst] += dcols[(slice(None),) + k].transpose(order)
    return dxp[(slice(None), slice(None)) + tuple(slice(pads[2 * i], pads[2 * i] + sizes[i]) for i in range(nd))]


def to_channel_first(a: np.ndarray, data_format: str) -> np.ndarray:
    return a.transpose(0, a.ndim - 1, *range(1, a.ndim - 1)) if is_channel_last(data_format) else a


def from_channel_first(a: np.ndarray, data_format: str) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, *range(2, a.ndim), 1) if is_channel_last(data_format) else a)


# ---- the conv kernels (also the transposed conv's, with Input and Output swapped) -----------------
# Measured on Paddle 3.3.1's CPU wheel: its conv GEMM sums in order (bit for bit) for K = 2 ... 64, 80 and
# 128, not for K = 72, 75, 81, 100, 144, 150 (a blocked order); an in-order loop costs 3-10x BLAS, so it
# is kept to the verified K and to small products (tests, tutorials, conformance cases).
IN_ORDER_MAX_K, IN_ORDER_MAX_WORK = 64, 1 << 22


def gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a (G, M, K) @ b (G, K, N)``. Up to K = 64 and 2**22 multiply-adds the sum over k runs in
    order, each product and each sum rounded (no FMA), as Paddle's CPU GEMM does there (bit for bit)
    and the cuda matmul does; beyond, BLAS (within float32 rounding of Paddle's)."""
    g, m, k = a.shape
    if k == 0 or k > IN_ORDER_MAX_K or g * m * k * b.shape[2] > IN_ORDER_MAX_WORK:
        return np.matmul(a, b)
    out = a[:, :, 0, None] * b[:, None, 0, :]
    for i in range(1, k):
        out += a[:, :, i, None] * b[:, None, i, :]
    return out


def conv_apply(x: np.ndarray, w: np.ndarray, groups: int, pads, dil, strides, outs) -> np.ndarray:
    """Channel-first conv of x ``(N, C, *S)`` with w ``(Co, C/G, *K)`` into ``(N, Co, *outs)``."""
    co = w.shape[0]
    cols = im2col(x, w.shape[2:], pads, dil, strides, outs, groups)
    out = gemm(w.reshape(groups, co // groups, -1), cols)               # (G, Co/G, N * prod(O))
    return np.moveaxis(out.reshape(co, x.shape[0], *outs), 0, 1)


def conv_data_grad(d: np.ndarray, w: np.ndarray, groups: int, x_shape, pads, dil, strides) -> np.ndarray:
    """Channel-first input gradient of a conv: d ``(N, Co, *O)`` with w ``(Co, C/G, *K)`` into x_shape."""
    co, ks, outs = w.shape[0], w.shape[2:], d.shape[2:]
    d = np.moveaxis(d, 1, 0).reshape(groups, co // groups, -1)
    dcols = gemm(w.reshape(groups, co // groups, -1).transpose(0, 2, 1), d)
    dcols = dcols.reshape(x_shape[1], *ks, x_shape[0], *outs)
    return col2im(dcols, x_shape, ks, pads, dil, strides, outs)


def conv_filter_grad(x: np.ndarray, d: np.ndarray, w_shape, groups: int, pads, dil, strides) -> np.ndarray:
    """Channel-first filter gradient of a conv of x ``(N, C, *S)``, d ``(N, Co, *O)`` the output gradient."""
    co, outs = w_shape[0], d.shape[2:]
    cols = im2col(x, w_shape[2:], pads, dil, strides, outs, groups)
    d = np.moveaxis(d, 1, 0).reshape(groups, co // groups, -1)
    return gemm(d, cols.transpose(0, 2, 1)).reshape(w_shape)


def _setup(op, Input, Filter, attrs, nd):
    _, (pads, dil, outs), _ = conv_shapes(op, Input.shape, Filter.shape, attrs, nd)
    return pads, dil, [int(s) for s in attrs["strides"]], outs


def conv_forward(op: str, Input: np.ndarray, Filter: np.ndarray, attrs: dict, nd: int = 2) -> np.ndarray:
    pads, dil, strides, outs = _setup(op, Input, Filter, attrs, nd)
    x = to_channel_first(Input, attrs["data_format"])
    out = conv_apply(x, Filter, int(attrs["groups"]), pads, dil, strides, outs)
    return from_channel_first(out, attrs["data_format"])


def conv_backward(op: str, Input, Filter, dOut, attrs: dict, need, nd: int = 2) -> Tuple[Optional[np.ndarray], ...]:
    pads, dil, strides, _ = _setup(op, Input, Filter, attrs, nd)
    g, fmt = int(attrs["groups"]), attrs["data_format"]
    x, d = to_channel_first(Input, fmt), to_channel_first(dOut, fmt)
    dx = dw = None
    if need[0]:
        dx = from_channel_first(conv_data_grad(d, Filter, g, x.shape, pads, dil, strides), fmt)
    if need[1]:
        dw = conv_filter_grad(x, d, Filter.shape, g, pads, dil, strides)
    return dx, dw


# ---- conv2d / depthwise_conv2d / conv3d -------------------------------------------------------------
def _register_conv(op: str, attrs: dict, nd: int) -> None:
    grad = op + "_grad"

    @register_op(op, ["Input", "Filter"], ["Output"], attrs, infer_shape=_conv_infer(op, nd),
                 grad=simple_grad(grad, ["Input", "Filter", "Output@GRAD"], ["Input@GRAD", "Filter@GRAD"]))
    def forward(Input, Filter, *, strides, paddings, padding_algorithm, dilations, groups, data_format):
        a = dict(strides=strides, paddings=paddings, padding_algorithm=padding_algorithm, dilations=dilations,
                 groups=groups, data_format=data_format)
        return conv_forward(op, Input, Filter, a, nd)

    @register_op(grad, ["Input", "Filter", "Output@GRAD"], ["Input@GRAD", "Filter@GRAD"], attrs,
                 infer_shape=grads_like(**{"Input@GRAD": "Input", "Filter@GRAD": "Filter"}))
    def backward(Input, Filter, dOutput, *, strides, paddings, padding_algorithm, dilations, groups,
                 data_format, need):
        a = dict(strides=strides, paddings=paddings, padding_algorithm=padding_algorithm, dilations=dilations,
                 groups=groups, data_format=data_format)
        return conv_backward(grad, Input, Filter, dOutput, a, need, nd)


_register_conv("conv2d", CONV_ATTRS, 2)
_register_conv("depthwise_conv2d", CONV_ATTRS, 2)  # Python sets groups = C_in; the CPU kernel is conv2d's
_register_conv("conv3d", CONV3D_ATTRS, 3)


# ---- flatten_contiguous_range ------------------------------------------------------------------------
def flatten_shape(op: str, shape: Sequence[int], start_axis: int, stop_axis: int) -> Tuple[int, ...]:
    """Paddle's FlattenInferMeta: dims start..stop (negative from the end) become one (-1 if unknown)."""
    nd = len(shape)
    if nd == 0:
        return (1,)
    start, stop = int(start_axis), int(stop_axis)
    if not (-nd <= start < nd and -nd <= stop < nd):
        raise InvalidArgument(f"{op}: start_axis {start_axis} / stop_axis {stop_axis} out of range for "
                              f"a {nd}-D X {list(shape)}")
    start, stop = start % nd, stop % nd
    if start > stop:
        raise InvalidArgument(f"{op}: start_axis {start_axis} must not come after stop_axis {stop_axis}")
    mid = shape[start:stop + 1]
    size = -1 if -1 in mid else int(np.prod(mid, dtype=np.int64))
    return tuple(shape[:start]) + (size,) + tuple(shape[stop + 1:])


def _flatten_infer(ins, attrs):
    xs, dt = first(ins, "X")
    out = flatten_shape("flatten_contiguous_range", tuple(xs), attrs["start_axis"], attrs["stop_axis"])
    return {"Out": (out, dt), "XShape": ((0,) + tuple(xs), dt)}


@register_op("flatten_contiguous_range", ["X"], ["Out", "XShape"], {"start_axis": 1, "stop_axis": 1},
             infer_shape=_flatten_infer, inplace={"Out": "X"},
             grad=simple_grad("flatten_contiguous_range_grad", ["XShape", "Out@GRAD"], ["X@GRAD"]))
def flatten_contiguous_range(X, *, start_axis, stop_axis, need):
    out = X.reshape(flatten_shape("flatten_contiguous_range", X.shape, start_axis, stop_axis))
    return out, (xshape_of(X) if need[1] else None)


@register_op("flatten_contiguous_range_grad", ["XShape", "Out@GRAD"], ["X@GRAD"],
             {"start_axis": 1, "stop_axis": 1}, infer_shape=from_xshape, inplace={"X@GRAD": "Out@GRAD"})
def flatten_contiguous_range_grad(XShape, dOut):
    return xshape_grad(XShape, dOut)
