"""Convolution and flattening ops: conv2d, depthwise_conv2d, flatten_contiguous_range (+ grads).

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
(the kernels transpose to NCHW and back).

Order of the sums (float32 results depend on it):

* forward: per group, ``Out[g] = W[g] (C_out/g, K) @ cols[g] (K, N*OH*OW)`` with
  ``K = (c, kh, kw)`` flattened row-major; one ``np.matmul`` over the group axis, so BLAS picks
  the order over K, as Paddle's MKL / OpenBLAS GEMM does (Paddle runs one GEMM per image and
  group; the numbers may differ from Paddle's in the last bits).
* ``Filter@GRAD[g] = dOut[g] @ cols[g]^T``: a BLAS sum over (n, oh, ow) (Paddle: a GEMM per image,
  accumulated image by image).
* ``Input@GRAD``: ``dcols[g] = W[g]^T @ dOut[g]`` (BLAS over C_out/g), then col2im as a loop over
  the KH * KW kernel offsets in row-major order, each adding one strided slice of ``dcols``
  into the padded input gradient: every input element sums its contributions in (kh, kw) order,
  as Paddle's ``Col2ImFunctor`` does.

flatten_contiguous_range: ``Out`` is a NumPy view of ``X`` (Paddle shares the buffer too) and
``XShape`` a zero-size array shaped ``[0] + X.shape``; the grad reads only ``XShape`` and
``Out@GRAD``.
"""
from typing import List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import check_choice, check_pair, first, grads_like
from .grad_maker import simple_grad
from .manipulation_ops import from_xshape, xshape_grad, xshape_of
from .registry import register_op

CONV_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "EXPLICIT", "dilations": [1, 1],
              "groups": 1, "data_format": "NCHW"}
PADDING_ALGORITHMS = ("EXPLICIT", "SAME", "VALID")
DATA_FORMATS = ("NCHW", "NHWC", "AnyLayout")


# ---- geometry shared with pool_ops and the cuda kernels -------------------------------------
def explicit_pads(op: str, paddings: Sequence[int]) -> List[int]:
    """[top, bottom, left, right] from 2 (h, w) or 4 paddings."""
    p = [int(v) for v in paddings]
    if len(p) == 2:
        p = [p[0], p[0], p[1], p[1]]
    if len(p) != 4 or min(p) < 0:
        raise InvalidArgument(f"{op}: attr paddings must be 2 or 4 ints >= 0, got {list(paddings)}")
    return p


def same_pads(size: int, k: int, s: int) -> Tuple[int, int]:
    """Paddle's "SAME": the output is ceil(size / s); the extra cell (if odd) goes bottom / right."""
    total = max((-(-size // s) - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def spatial(shape: Sequence[int], data_format: str) -> Tuple[int, int, int, int]:
    """(N, C, H, W) of a 4-D shape in ``data_format``."""
    n, a, b, c = shape
    return (n, c, a, b) if data_format == "NHWC" else (n, a, b, c)


def conv_geometry(op: str, hw: Sequence[int], khw: Sequence[int], strides, paddings, dilations,
                  padding_algorithm: str):
    """(pads [t, b, l, r], dilations, out (OH, OW)) as ConvInferMeta computes them."""
    check_choice(op, "padding_algorithm", padding_algorithm, PADDING_ALGORITHMS)
    strides = check_pair(op, "strides", strides)
    dilations = check_pair(op, "dilations", dilations)
    pads = explicit_pads(op, paddings)
    if padding_algorithm == "SAME":
        pads = [*same_pads(hw[0], khw[0], strides[0]), *same_pads(hw[1], khw[1], strides[1])]
        dilations = (1, 1)
    elif padding_algorithm == "VALID":
        pads = [0, 0, 0, 0]
    out = []
    for i in range(2):
        if hw[i] == -1:
            out.append(-1)
            continue
        size = (hw[i] + pads[2 * i] + pads[2 * i + 1] - (dilations[i] * (khw[i] - 1) + 1)) // strides[i] + 1
        if size <= 0:
            raise InvalidArgument(
                f"{op}: the output size is {size} for input size {hw[i]}, filter size {khw[i]}, paddings "
                f"{pads[2 * i:2 * i + 2]}, stride {strides[i]} and dilation {dilations[i]}; it must be > 0")
        out.append(size)
    return pads, dilations, (out[0], out[1])


def conv_shapes(op: str, x_shape, w_shape, attrs):
    """Checked (N, C, H, W), (pads, dilations, (OH, OW)) and the output shape of a conv op."""
    check_choice(op, "data_format", attrs["data_format"], DATA_FORMATS)
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise InvalidArgument(f"{op}: Input and Filter must be 4-D, got {list(x_shape)} and {list(w_shape)}")
    n, c, h, w = spatial(x_shape, attrs["data_format"])
    groups = int(attrs["groups"])
    if groups < 1 or w_shape[0] % groups:
        raise InvalidArgument(f"{op}: attr groups={groups} must be >= 1 and divide the {w_shape[0]} "
                              f"output channels of Filter {list(w_shape)}")
    if c != -1 and c != w_shape[1] * groups:
        raise InvalidArgument(f"{op}: Input has {c} channels, Filter {list(w_shape)} with groups={groups} "
                              f"expects {w_shape[1] * groups}")
    geo = conv_geometry(op, (h, w), w_shape[2:], attrs["strides"], attrs["paddings"], attrs["dilations"],
                        attrs["padding_algorithm"])
    oh, ow = geo[2]
    out = (n, oh, ow, w_shape[0]) if attrs["data_format"] == "NHWC" else (n, w_shape[0], oh, ow)
    return (n, c, h, w), geo, out


def _conv_infer(op):
    def infer(ins, attrs):
        xs, dt = first(ins, "Input")
        return {"Output": (conv_shapes(op, tuple(xs), tuple(first(ins, "Filter")[0]), attrs)[2], dt)}
    return infer


# ---- the NumPy conv kernel ----------------------------------------------------------------------
def _windows(xp: np.ndarray, khw, dilations, strides, ohw) -> np.ndarray:
    """A (N, C, KH, KW, OH, OW) strided view of the padded NCHW input (no copy)."""
    n, c = xp.shape[:2]
    s0, s1, s2, s3 = xp.strides
    shape = (n, c, khw[0], khw[1], ohw[0], ohw[1])
    st = (s0, s1, s2 * dilations[0], s3 * dilations[1], s2 * strides[0], s3 * strides[1])
    return np.lib.stride_tricks.as_strided(xp, shape, st, writeable=False)


def _pad(x: np.ndarray, pads) -> np.ndarray:
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])))


def im2col(x: np.ndarray, khw, pads, dilations, strides, ohw, groups: int) -> np.ndarray:
    """(G, C/G * KH * KW, N * OH * OW): one copy of the windows, k = (c, kh, kw) row-major."""
    win = _windows(_pad(x, pads), khw, dilations, strides, ohw)
    n, c = x.shape[:2]
    cols = win.transpose(1, 2, 3, 0, 4, 5).reshape(c * khw[0] * khw[1], n * ohw[0] * ohw[1])
    return cols.reshape(groups, -1, cols.shape[1])


def _nchw(a: np.ndarray, data_format: str) -> np.ndarray:
    return a.transpose(0, 3, 1, 2) if data_format == "NHWC" else a


def _from_nchw(a: np.ndarray, data_format: str) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1) if data_format == "NHWC" else a)


def _conv_setup(op, Input, Filter, attrs):
    _, (pads, dil, ohw), _ = conv_shapes(op, Input.shape, Filter.shape, attrs)
    strides = [int(s) for s in attrs["strides"]]
    return pads, dil, strides, ohw


def conv_forward(op: str, Input: np.ndarray, Filter: np.ndarray, attrs: dict) -> np.ndarray:
    pads, dil, strides, ohw = _conv_setup(op, Input, Filter, attrs)
    g, co = int(attrs["groups"]), Filter.shape[0]
    x = _nchw(Input, attrs["data_format"])
    cols = im2col(x, Filter.shape[2:], pads, dil, strides, ohw, g)
    out = np.matmul(Filter.reshape(g, co // g, -1), cols)          # (G, Co/G, N*OH*OW)
    out = out.reshape(co, x.shape[0], ohw[0], ohw[1]).transpose(1, 0, 2, 3)
    return _from_nchw(out, attrs["data_format"])


def col2im(dcols: np.ndarray, x_shape, khw, pads, dilations, strides, ohw) -> np.ndarray:
    """The input gradient (N, C, H, W) from dcols (C, KH, KW, N, OH, OW): one strided add per offset."""
    n, c, h, w = x_shape
    dxp = np.zeros((n, c, h + pads[0] + pads[1], w + pads[2] + pads[3]), dcols.dtype)
    for kh in range(khw[0]):
        for kw in range(khw[1]):
            h0, w0 = kh * dilations[0], kw * dilations[1]
            dxp[:, :, h0:h0 + strides[0] * (ohw[0] - 1) + 1:strides[0],
                w0:w0 + strides[1] * (ohw[1] - 1) + 1:strides[1]] += dcols[:, kh, kw].transpose(1, 0, 2, 3)
    return dxp[:, :, pads[0]:pads[0] + h, pads[2]:pads[2] + w]


def conv_backward(op: str, Input, Filter, dOut, attrs: dict, need) -> Tuple[Optional[np.ndarray], ...]:
    pads, dil, strides, ohw = _conv_setup(op, Input, Filter, attrs)
    g, co, khw = int(attrs["groups"]), Filter.shape[0], Filter.shape[2:]
    fmt = attrs["data_format"]
    x = _nchw(Input, fmt)
    d = _nchw(dOut, fmt).transpose(1, 0, 2, 3).reshape(g, co // g, -1)   # (G, Co/G, N*OH*OW)
    dx = dw = None
    if need[0]:
        dcols = np.matmul(Filter.reshape(g, co // g, -1).transpose(0, 2, 1), d)
        dcols = dcols.reshape(x.shape[1], khw[0], khw[1], x.shape[0], ohw[0], ohw[1])
        dx = _from_nchw(col2im(dcols, x.shape, khw, pads, dil, strides, ohw), fmt)
    if need[1]:
        cols = im2col(x, khw, pads, dil, strides, ohw, g)
        dw = np.matmul(d, cols.transpose(0, 2, 1)).reshape(Filter.shape)
    return dx, dw


def _conv_attrs(data_format, dilations, groups, padding_algorithm, paddings, strides):
    return {"data_format": data_format, "dilations": dilations, "groups": groups,
            "padding_algorithm": padding_algorithm, "paddings": paddings, "strides": strides}


# ---- conv2d / depthwise_conv2d --------------------------------------------------------------------
def _register_conv(op: str) -> None:
    grad = op + "_grad"

    @register_op(op, ["Input", "Filter"], ["Output"], CONV_ATTRS, infer_shape=_conv_infer(op),
                 grad=simple_grad(grad, ["Input", "Filter", "Output@GRAD"], ["Input@GRAD", "Filter@GRAD"]))
    def forward(Input, Filter, *, strides, paddings, padding_algorithm, dilations, groups, data_format):
        attrs = _conv_attrs(data_format, dilations, groups, padding_algorithm, paddings, strides)
        return conv_forward(op, Input, Filter, attrs)

    @register_op(grad, ["Input", "Filter", "Output@GRAD"], ["Input@GRAD", "Filter@GRAD"], CONV_ATTRS,
                 infer_shape=grads_like(**{"Input@GRAD": "Input", "Filter@GRAD": "Filter"}))
    def backward(Input, Filter, dOutput, *, strides, paddings, padding_algorithm, dilations, groups,
                 data_format, need):
        attrs = _conv_attrs(data_format, dilations, groups, padding_algorithm, paddings, strides)
        return conv_backward(grad, Input, Filter, dOutput, attrs, need)


_register_conv("conv2d")
_register_conv("depthwise_conv2d")  # Python sets groups = C_in; the CPU kernel is conv2d's


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
