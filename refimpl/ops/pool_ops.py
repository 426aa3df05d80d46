"""2-D pooling: pool2d and pool2d_grad (max and avg).

Mirrors Paddle 3.3.1's ``paddle/phi/kernels/cpu/pool_kernel.cc`` / ``pool_grad_kernel.cc`` (through
``paddle/phi/kernels/impl/pool_kernel_impl.h``, ``funcs/pooling.cc`` ``Pool2dFunctor``,
``Pool2dGradFunctor``, ``MaxPool2dGradFunctor``) and ``PoolInferMeta`` with ``funcs::UpdatePadding``:

* ``global_pooling``: the window is the whole input, paddings 0; ``adaptive``: the output is
  ``ksize`` and window ``i`` spans ``[floor(i*H/OH), ceil((i+1)*H/OH))``, paddings 0;
  ``padding_algorithm`` "SAME" / "VALID" as for conv (without dilation).
* Out = ``(H - k + p_top + p_bottom) // s + 1`` (``+ s - 1`` before the division with ``ceil_mode``).
  As in Paddle, the kernels then use only the top / left paddings: window ``o`` starts at
  ``o*s - p_top`` and ends at ``min(start + k, H + p_top)``, both clipped to the input.
* max: ``acc = acc > x ? acc : x`` from ``-FLT_MAX`` over the window in row-major order (Paddle's
  ``MaxPool``, NaN handling included); avg: the sum in row-major order, divided by the clipped
  window's size (``exclusive`` or ``adaptive``) or by ``(end - start)`` before clipping to the
  input (not exclusive).
* max grad: the whole ``Out@GRAD`` goes to the first element of the window (row-major) equal to
  ``Out``; avg grad: every element of the window gets ``float32(1 / size) * dOut``. Each input
  element adds its contributions in the order of the outputs (row-major), as Paddle's loops do.

The NumPy kernels loop over the kernel offsets (kh, kw) and handle all windows of an offset
with one strided slice (or one gather for adaptive windows). NHWC is transposed to NCHW and
back. Difference: Paddle's grad of an adaptive *max* pool uses the non-adaptive windows
(``MaxPool2dGradFunctor`` has no adaptive mode); here it uses the forward's adaptive windows,
the true gradient.
"""
from typing import Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import check_choice, check_pair, first, same_as
from .conv_ops import DATA_FORMATS, PADDING_ALGORITHMS, explicit_pads, same_pads, spatial
from .grad_maker import simple_grad
from .registry import register_op

POOL_ATTRS = {"pooling_type": "max", "ksize": [], "global_pooling": False, "strides": [1, 1],
              "paddings": [0, 0], "exclusive": True, "adaptive": False, "ceil_mode": False,
              "data_format": "NCHW", "padding_algorithm": "EXPLICIT", "use_cudnn": False}
FLT_MAX = float(np.finfo(np.float32).max)


class PoolPlan:
    """Per spatial axis: the output size and, per output index, the window start and end.

    ``lo``/``hi``: the window clipped to the input; ``start``: the unclipped start (the offset of
    kernel cell 0); ``size``: the divisor of an avg pool. ``shared_starts``: adaptive windows of
    which two share a start (a grad scatter must then accumulate repeated indices).
    """

    def __init__(self, op, hw, attrs):
        check_choice(op, "pooling_type", attrs["pooling_type"], ("max", "avg"))
        check_choice(op, "padding_algorithm", attrs["padding_algorithm"], PADDING_ALGORITHMS)
        self.adaptive = bool(attrs["adaptive"])
        if attrs["global_pooling"]:
            k, self.adaptive = tuple(hw), False
        else:
            k = check_pair(op, "ksize", attrs["ksize"])
        s = check_pair(op, "strides", attrs["strides"])
        pads = explicit_pads(op, attrs["paddings"])
        if attrs["global_pooling"] or self.adaptive or attrs["padding_algorithm"] == "VALID":
            pads = [0, 0, 0, 0]
        elif attrs["padding_algorithm"] == "SAME":
            pads = [*same_pads(hw[0], k[0], s[0]), *same_pads(hw[1], k[1], s[1])]
        self.k, self.s, self.pads = k, s, pads
        self.out = tuple(self._out_size(op, i, hw[i], attrs["ceil_mode"]) for i in range(2))
        self.axes = [self._windows(i, hw[i], attrs["exclusive"]) for i in range(2)] if -1 not in hw else None
        self.shared_starts = bool(self.adaptive and self.axes is not None
                                  and ((np.diff(self.axes[0][1]) == 0).any() | (np.diff(self.axes[1][1]) == 0).any()))

    def _out_size(self, op, i, size, ceil_mode):
        if self.adaptive:
            return self.k[i]
        if size == -1:
            return -1
        span = size - self.k[i] + self.pads[2 * i] + self.pads[2 * i + 1] + (self.s[i] - 1 if ceil_mode else 0)
        out = span // self.s[i] + 1
        if out <= 0:
            raise InvalidArgument(f"{op}: the output size is {out} for input size {size}, ksize {self.k[i]}, "
                                  f"paddings {self.pads[2 * i:2 * i + 2]}, stride {self.s[i]}; it must be > 0")
        return out

    def _windows(self, i, size, exclusive):
        o = np.arange(self.out[i])
        if self.adaptive:
            lo, hi = o * size // self.out[i], -(-(o + 1) * size // self.out[i])
            return lo, lo, hi, hi - lo
        start = o * self.s[i] - self.pads[2 * i]
        end = np.minimum(start + self.k[i], size + self.pads[2 * i])
        lo, hi = np.maximum(start, 0), np.minimum(end, size)
        return start, lo, hi, (hi - lo) if exclusive else (end - start)

    def window_counts(self):
        """Kernel cells per axis to visit (the largest window for adaptive pools)."""
        if self.adaptive:
            return tuple(int((a[2] - a[1]).max()) for a in self.axes)
        return self.k

    def cells(self, i, j):
        """Input indices (clipped) and validity, per axis, of kernel cell (i, j) of every window."""
        res = []
        for axis, off in ((0, i), (1, j)):
            start, lo, hi, _ = self.axes[axis]
            idx = start + off
            res.append((np.clip(idx, 0, None), (idx >= lo) & (idx < hi)))
        return res


def _pool_infer(ins, attrs):
    xs, dt = first(ins, "X")
    op = "pool2d"
    check_choice(op, "data_format", attrs["data_format"], DATA_FORMATS)
    if len(xs) != 4:
        raise InvalidArgument(f"{op}: X must be 4-D, got shape {list(xs)}")
    n, c, h, w = spatial(xs, attrs["data_format"])
    oh, ow = PoolPlan(op, (h, w), attrs).out
    return {"Out": ((n, oh, ow, c) if attrs["data_format"] == "NHWC" else (n, c, oh, ow), dt)}


def _attrs(**kw):
    return kw


def _nchw(x, fmt):
    if x.ndim != 4:
        raise InvalidArgument(f"pool2d: X must be 4-D, got shape {list(x.shape)}")
    return x.transpose(0, 3, 1, 2) if fmt == "NHWC" else x


def _back(a, fmt):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1) if fmt == "NHWC" else a)


def _cell_values(x, plan, i, j):
    """The input values under kernel cell (i, j) of every window, and where the cell is in the window."""
    (hi_, hv), (wi_, wv) = plan.cells(i, j)
    h, w = x.shape[2:]
    vals = x[:, :, np.minimum(hi_, h - 1)][:, :, :, np.minimum(wi_, w - 1)]
    return vals, hv[:, None] & wv[None, :]


def pool_forward(x: np.ndarray, plan: PoolPlan, pooling_type: str) -> np.ndarray:
    """NCHW pooling, cell by cell in row-major order (each window's elements in Paddle's order)."""
    dt = x.dtype.type
    fill = dt(-FLT_MAX) if pooling_type == "max" else dt(0)
    acc = np.full(x.shape[:2] + plan.out, fill, x.dtype)
    kh, kw = plan.window_counts()
    for i in range(kh):
        for j in range(kw):
            v, inside = _cell_values(x, plan, i, j)
            if pooling_type == "max":
                acc = np.where(inside & ~(acc > v), v, acc)
            else:
                acc = acc + np.where(inside, v, fill)
    if pooling_type == "avg":
        size = plan.axes[0][3][:, None] * plan.axes[1][3][None, :]
        acc = acc / size.astype(x.dtype)
    return acc


@register_op("pool2d", ["X"], ["Out"], POOL_ATTRS, infer_shape=_pool_infer,
             grad=simple_grad("pool2d_grad", ["X", "Out", "Out@GRAD"], ["X@GRAD"]))
def pool2d(X, *, pooling_type, ksize, global_pooling, strides, paddings, exclusive, adaptive, ceil_mode,
           data_format, padding_algorithm):
    attrs = _attrs(pooling_type=pooling_type, ksize=ksize, global_pooling=global_pooling, strides=strides,
                   paddings=paddings, exclusive=exclusive, adaptive=adaptive, ceil_mode=ceil_mode,
                   data_format=data_format, padding_algorithm=padding_algorithm)
    check_choice("pool2d", "data_format", data_format, DATA_FORMATS)
    x = _nchw(X, data_format)
    return _back(pool_forward(x, PoolPlan("pool2d", x.shape[2:], attrs), pooling_type), data_format)


def _scatter(dx, plan, i, j, vals):
    """dx[cell (i, j) of every window] += vals, where the cell is inside the window."""
    (hi_, hv), (wi_, wv) = plan.cells(i, j)
    mask = hv[:, None] & wv[None, :]
    if not mask.any():
        return
    rows, cols = np.nonzero(mask)
    upd = vals[:, :, rows, cols]
    h_idx, w_idx = hi_[rows], wi_[cols]
    if plan.shared_starts:
        np.add.at(dx, (slice(None), slice(None), h_idx, w_idx), upd)  # windows sharing a start
    else:
        dx[:, :, h_idx, w_idx] += upd


def pool_backward(x, out, dout, plan: PoolPlan, pooling_type: str) -> np.ndarray:
    """NCHW input gradient; cells visited last to first, so each element adds in output order."""
    dx = np.zeros_like(x)
    kh, kw = plan.window_counts()
    cells = [(i, j) for i in range(kh) for j in range(kw)]
    if pooling_type == "avg":
        size = plan.axes[0][3][:, None] * plan.axes[1][3][None, :]
        scale = (np.float32(1) / size.astype(np.float32)).astype(x.dtype)
        g = scale * dout  # the same contribution for every cell
        contrib = {c: g for c in cells}
    else:
        found = np.zeros(dout.shape, bool)
        contrib = {}
        for c in cells:  # the first cell equal to Out takes the gradient
            v, inside = _cell_values(x, plan, *c)
            hit = (v == out) & inside & ~found
            found |= hit
            contrib[c] = np.where(hit, dout, x.dtype.type(0))
    for c in reversed(cells):
        _scatter(dx, plan, *c, contrib[c])
    return dx


@register_op("pool2d_grad", ["X", "Out", "Out@GRAD"], ["X@GRAD"], POOL_ATTRS, infer_shape=same_as("X", "X@GRAD"))
def pool2d_grad(X, Out, dOut, *, pooling_type, ksize, global_pooling, strides, paddings, exclusive, adaptive,
                ceil_mode, data_format, padding_algorithm):
    attrs = _attrs(pooling_type=pooling_type, ksize=ksize, global_pooling=global_pooling, strides=strides,
                   paddings=paddings, exclusive=exclusive, adaptive=adaptive, ceil_mode=ceil_mode,
                   data_format=data_format, padding_algorithm=padding_algorithm)
    check_choice("pool2d_grad", "data_format", data_format, DATA_FORMATS)
    x = _nchw(X, data_format)
    plan = PoolPlan("pool2d_grad", x.shape[2:], attrs)
    dx = pool_backward(x, _nchw(Out, data_format), _nchw(dOut, data_format), plan, pooling_type)
    return _back(dx, data_format)


def pool_plan(op: str, hw: Tuple[int, int], attrs: dict) -> PoolPlan:
    """The windows of a pool op over an (H, W) input (used by the cuda kernels)."""
    return PoolPlan(op, hw, attrs)
