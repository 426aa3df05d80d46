"""Padding ops: pad (constant, any rank) and pad3d (constant / reflect / replicate / circular) (+ grads).

Mirrors Paddle 3.3.1's ``paddle/phi/kernels/cpu/pad_kernel.cc`` / ``pad_grad_kernel.cc`` (through
``funcs::PaddingFunctor``), ``paddle/phi/kernels/cpu/pad3d_kernel.cc`` / ``pad3d_grad_kernel.cc`` and
``PadInferMeta`` / ``Pad3dInferMeta``:

* ``pad``: ``paddings`` holds ``[before_0, after_0, before_1, after_1, ...]``, one pair per dim of X;
  the new cells hold ``pad_value`` cast to X's dtype. ``pad_grad`` (slots ``Out@GRAD`` only, as the
  legacy op) cuts the X-shaped block back out of ``Out@GRAD``.
* ``pad3d``: X is 5-D (``data_format`` "NCDHW" or "NDHWC"); ``paddings`` (or the int tensor
  ``Paddings``, read when the op runs) is ``[left, right, top, bottom, front, back]`` for W, H, D.
  Output cell ``o`` of an axis of input size ``n`` reads input ``i = o - before``: constant mode
  fills ``value`` where ``i`` is outside ``[0, n)``; reflect mirrors without repeating the edge
  (``-i``, ``2(n-1) - i``; each pad must be < n, checked when the op runs, as Paddle does);
  replicate clamps to ``[0, n-1]``; circular wraps ``i mod n``.
* ``pad3d_grad``: every input element sums the ``Out@GRAD`` cells that read it, in row-major order
  of the output's (d, h, w), as Paddle's CPU loops add them; X is no-need-buffer (only its shape).

The NumPy kernels compute one index map per axis (``axis_map``) and gather with it; the grad adds
with ``np.add.at`` over the output positions in row-major order.
"""
from typing import List, Sequence

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import check_choice, first
from .grad_maker import simple_grad
from .registry import register_op

PAD_ATTRS = {"paddings": [], "pad_value": 0.0}
PAD3D_ATTRS = {"paddings": [], "mode": "constant", "value": 0.0, "data_format": "NCDHW"}
PAD3D_MODES = ("constant", "reflect", "replicate", "circular")
PAD3D_FORMATS = ("NCDHW", "NDHWC")


# ---- pad -----------------------------------------------------------------------------------------
def pad_pairs(op: str, rank: int, paddings: Sequence[int]) -> List[List[int]]:
    """[[before, after]] per dim, checked: 2 * rank ints >= 0."""
    p = [int(v) for v in paddings]
    if len(p) != 2 * rank or (p and min(p) < 0):
        raise InvalidArgument(f"{op}: attr paddings must be {2 * rank} ints >= 0 (a before / after pair per "
                              f"dim of the {rank}-D X), got {list(paddings)}")
    return [p[2 * i:2 * i + 2] for i in range(rank)]


def _pad_infer(ins, attrs):
    xs, dt = first(ins, "X")
    pairs = pad_pairs("pad", len(xs), attrs["paddings"])
    return {"Out": (tuple(d if d == -1 else d + a + b for d, (a, b) in zip(xs, pairs)), dt)}


def _pad_grad_infer(ins, attrs):
    gs, dt = first(ins, "Out@GRAD")
    pairs = pad_pairs("pad_grad", len(gs), attrs["paddings"])
    return {"X@GRAD": (tuple(d if d == -1 else d - a - b for d, (a, b) in zip(gs, pairs)), dt)}


@register_op("pad", ["X"], ["Out"], PAD_ATTRS, infer_shape=_pad_infer,
             grad=simple_grad("pad_grad", ["Out@GRAD"], ["X@GRAD"]))
def pad(X, *, paddings, pad_value):
    pairs = pad_pairs("pad", X.ndim, paddings)
    return np.pad(X, pairs, constant_values=np.asarray(pad_value).astype(X.dtype))


@register_op("pad_grad", ["Out@GRAD"], ["X@GRAD"], PAD_ATTRS, infer_shape=_pad_grad_infer)
def pad_grad(dOut, *, paddings, pad_value):
    pairs = pad_pairs("pad_grad", dOut.ndim, paddings)
    return np.ascontiguousarray(dOut[tuple(slice(a, dOut.shape[i] - b) for i, (a, b) in enumerate(pairs))])


# ---- pad3d geometry (shared with the cuda kernels) --------------------------------------------------
def spatial_axes(data_format: str):
    """The (D, H, W) axes of a 5-D tensor in ``data_format``."""
    return (2, 3, 4) if data_format == "NCDHW" else (1, 2, 3)


def pad3d_pads(op: str, paddings, Paddings=None) -> List[int]:
    """[left, right, top, bottom, front, back]: from the Paddings tensor when given, else the attr."""
    if Paddings is not None:
        paddings = np.asarray(Paddings).reshape(-1).tolist()
    p = [int(v) for v in paddings]
    if len(p) != 6 or min(p) < 0:
        raise InvalidArgument(f"{op}: paddings must be 6 ints >= 0 (left, right, top, bottom, front, back), "
                              f"got {list(paddings)}")
    return p


def axis_map(op: str, mode: str, size: int, before: int, after: int, axis: str) -> np.ndarray:
    """For each output index of one axis, the input index it reads (-1: the constant value)."""
    i = np.arange(-before, size + after, dtype=np.int64)
    if mode == "constant":
        return np.where((i >= 0) & (i < size), i, -1)
    if size == 0:
        raise InvalidArgument(f"{op}: the input's {axis} is 0, which {mode} mode cannot pad")
    if mode == "reflect":
        if before >= size or after >= size:
            raise InvalidArgument(f"{op}: in reflect mode the paddings of the {axis} ({before}, {after}) must be "
                                  f"less than the input's {axis} {size}")
        i = np.abs(i)
        return np.where(i >= size, 2 * (size - 1) - i, i)
    if mode == "replicate":
        return np.clip(i, 0, size - 1)
    return i % size  # circular


def pad3d_maps(op: str, shape, pads, mode: str, data_format: str):
    """The three (D, H, W) index maps of a pad3d over an X of ``shape``."""
    check_choice(op, "mode", mode, PAD3D_MODES)
    check_choice(op, "data_format", data_format, PAD3D_FORMATS)
    if len(shape) != 5:
        raise InvalidArgument(f"{op}: X must be 5-D, got shape {list(shape)}")
    d, h, w = (shape[a] for a in spatial_axes(data_format))
    return (axis_map(op, mode, d, pads[4], pads[5], "depth"), axis_map(op, mode, h, pads[2], pads[3], "height"),
            axis_map(op, mode, w, pads[0], pads[1], "width"))


def _pad3d_infer(ins, attrs):
    xs, dt = first(ins, "X")
    op = "pad3d"
    check_choice(op, "mode", attrs["mode"], PAD3D_MODES)
    check_choice(op, "data_format", attrs["data_format"], PAD3D_FORMATS)
    if len(xs) != 5:
        raise InvalidArgument(f"{op}: X must be 5-D, got shape {list(xs)}")
    out = list(xs)
    if ins.get("Paddings"):
        for a in spatial_axes(attrs["data_format"]):
            out[a] = -1
    else:
        p = pad3d_pads(op, attrs["paddings"])
        for a, (b, e) in zip(spatial_axes(attrs["data_format"]), ((p[4], p[5]), (p[2], p[3]), (p[0], p[1]))):
            out[a] = -1 if xs[a] == -1 else xs[a] + b + e
    return {"Out": (tuple(out), dt)}


def _to_ncdhw(a, data_format):
    return a.transpose(0, 4, 1, 2, 3) if data_format == "NDHWC" else a


def _from_ncdhw(a, data_format):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 4, 1) if data_format == "NDHWC" else a)


# ---- pad3d ---------------------------------------------------------------------------------------------
@register_op("pad3d", ["X", "Paddings?"], ["Out"], PAD3D_ATTRS, infer_shape=_pad3d_infer,
             grad=simple_grad("pad3d_grad", ["X", "Paddings", "Out@GRAD"], ["X@GRAD"]))
def pad3d(X, Paddings, *, paddings, mode, value, data_format):
    pads = pad3d_pads("pad3d", paddings, Paddings)
    md, mh, mw = pad3d_maps("pad3d", X.shape, pads, mode, data_format)
    x = _to_ncdhw(X, data_format)
    if mode == "constant":
        out = np.pad(x, ((0, 0), (0, 0), (pads[4], pads[5]), (pads[2], pads[3]), (pads[0], pads[1])),
                     constant_values=np.asarray(value).astype(X.dtype))
    else:
        out = x[:, :, md][:, :, :, mh][:, :, :, :, mw]
    return _from_ncdhw(out, data_format)


@register_op("pad3d_grad", ["X", "Paddings?", "Out@GRAD"], ["X@GRAD"], PAD3D_ATTRS,
             infer_shape=lambda ins, attrs: {"X@GRAD": first(ins, "X")}, no_need_buffer=("X",))
def pad3d_grad(X, Paddings, dOut, *, paddings, mode, value, data_format):
    pads = pad3d_pads("pad3d_grad", paddings, Paddings)
    md, mh, mw = pad3d_maps("pad3d_grad", X.shape, pads, mode, data_format)
    g = _to_ncdhw(dOut, data_format)
    n, c = g.shape[:2]
    d, h, w = (X.shape[a] for a in spatial_axes(data_format))
    if mode == "constant":
        dx = g[:, :, pads[4]:pads[4] + d, pads[2]:pads[2] + h, pads[0]:pads[0] + w]
        return _from_ncdhw(dx, data_format)
    lin = ((md[:, None, None] * h + mh[None, :, None]) * w + mw[None, None, :]).reshape(-1)
    dx = np.zeros((d * h * w, n * c), dtype=dOut.dtype)
    np.add.at(dx, lin, g.reshape(n * c, -1).T)  # one output position after the other, in row-major order
    return _from_ncdhw(dx.T.reshape(n, c, d, h, w), data_format)
