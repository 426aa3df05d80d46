"""CUDA kernels for ``refimpl/ops/pad_ops.py``: pad, pad_grad, pad3d, pad3d_grad.

Mirrors Paddle's GPU ``PadFunctor`` and ``Pad3D*NCDHW`` kernels (``paddle/phi/kernels/gpu/pad3d_kernel.cu``,
``pad3d_grad_kernel.cu``): one thread per output element for the forwards, which copies the input
element it reads (or the pad value); one thread per input element for the grads. The per-axis index
maps of pad3d come from the NumPy kernel's ``pad3d_maps``, copied to the device as small int arrays.
Paddle's GPU pad3d grad adds with atomics (any order); here each input element gathers the output
cells that read it in row-major (d, h, w) order, the order of the NumPy kernel and of Paddle's CPU
loops, so both backends agree bit for bit. NDHWC is transposed to NCDHW and back.
"""
import numpy as np

from refimpl.ops.pad_ops import pad3d_maps, pad3d_pads, pad_pairs, spatial_axes
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, empty, flat, launch, to_device, to_host
from .ops_manipulation import transpose


@cuda.jit
def _pad(x, out, rank, in_shape, out_shape, before, value):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        rest, src, stride, inside = i, 0, 1, True
        for k in range(rank - 1, -1, -1):
            j = rest % out_shape[k] - before[k]
            rest //= out_shape[k]
            if j < 0 or j >= in_shape[k]:
                inside = False
            src += j * stride
            stride *= in_shape[k]
        out[i] = x[src] if inside else value


@cuda.jit
def _pad_grad(dout, dx, rank, in_shape, out_shape, before):
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        rest, src, stride = i, 0, 1
        for k in range(rank - 1, -1, -1):
            src += (rest % in_shape[k] + before[k]) * stride
            rest //= in_shape[k]
            stride *= out_shape[k]
        dx[i] = dout[src]


@cuda.jit
def _pad3d(x, out, D, H, W, OD, OH, OW, md, mh, mw, value):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        nc, od, oh, ow = i // (OD * OH * OW), i // (OH * OW) % OD, i // OW % OH, i % OW
        d, h, w = md[od], mh[oh], mw[ow]
        out[i] = value if d < 0 or h < 0 or w < 0 else x[((nc * D + d) * H + h) * W + w]


@cuda.jit
def _pad3d_grad(dout, dx, D, H, W, OD, OH, OW, md, mh, mw, zero, front, top, left):
    """dx[nc, d, h, w] = the sum of the output cells that read it, in row-major (od, oh, ow) order;
    constant mode (``front >= 0``) copies its one cell, as Paddle does (so -0.0 stays -0.0)."""
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        nc, d, h, w = i // (D * H * W), i // (H * W) % D, i // W % H, i % W
        if front >= 0:
            dx[i] = dout[((nc * OD + d + front) * OH + h + top) * OW + w + left]
            continue
        acc = zero
        for od in range(OD):
            if md[od] != d:
                continue
            for oh in range(OH):
                if mh[oh] != h:
                    continue
                for ow in range(OW):
                    if mw[ow] == w:
                        acc += dout[((nc * OD + od) * OH + oh) * OW + ow]
        dx[i] = acc


def _ints(values):
    return to_device(np.asarray(values, dtype=np.int64).reshape(-1))


def _geometry(rank, in_shape, out_shape, pairs):
    return (max(rank, 1), _ints(in_shape or [1]), _ints(out_shape or [1]), _ints([p[0] for p in pairs] or [0]))


def pad(X, *, paddings, pad_value):
    x = dev(X)
    pairs = pad_pairs("pad", x.ndim, paddings)
    out_shape = tuple(d + a + b for d, (a, b) in zip(x.shape, pairs))
    out = empty(out_shape, x.dtype)
    launch(_pad, out.size, flat(x), flat(out), *_geometry(x.ndim, x.shape, out_shape, pairs),
           np.asarray(pad_value).astype(x.dtype)[()])
    return out


def pad_grad(dOut, *, paddings, pad_value):
    g = dev(dOut)
    pairs = pad_pairs("pad_grad", g.ndim, paddings)
    in_shape = tuple(d - a - b for d, (a, b) in zip(g.shape, pairs))
    dx = empty(in_shape, g.dtype)
    launch(_pad_grad, dx.size, flat(g), flat(dx), *_geometry(g.ndim, in_shape, g.shape, pairs))
    return dx


def _to_ncdhw(a, fmt):
    return transpose(a, [0, 4, 1, 2, 3]) if fmt == "NDHWC" else dev(a)


def _from_ncdhw(a, fmt):
    return transpose(a, [0, 2, 3, 4, 1]) if fmt == "NDHWC" else a


def _setup(op, shape, Paddings, paddings, mode, data_format):
    pads = pad3d_pads(op, paddings, None if Paddings is None else to_host(Paddings))
    maps = pad3d_maps(op, tuple(shape), pads, mode, data_format)
    n, c = shape[0], shape[1] if data_format == "NCDHW" else shape[4]
    dhw = tuple(shape[a] for a in spatial_axes(data_format))
    return n, c, dhw, tuple(len(m) for m in maps), [to_device(m) for m in maps]


def pad3d(X, Paddings, *, paddings, mode, value, data_format):
    n, c, (d, h, w), (od, oh, ow), maps = _setup("pad3d", X.shape, Paddings, paddings, mode, data_format)
    x = _to_ncdhw(X, data_format)
    out = empty((n, c, od, oh, ow), x.dtype)
    launch(_pad3d, out.size, flat(x), flat(out), d, h, w, od, oh, ow, *maps, np.asarray(value).astype(x.dtype)[()])
    return _from_ncdhw(out, data_format)


def pad3d_grad(X, Paddings, dOut, *, paddings, mode, value, data_format):
    n, c, (d, h, w), (od, oh, ow), maps = _setup("pad3d_grad", X.shape, Paddings, paddings, mode, data_format)
    g = _to_ncdhw(dOut, data_format)
    dx = empty((n, c, d, h, w), g.dtype)
    p = pad3d_pads("pad3d_grad", paddings, None if Paddings is None else to_host(Paddings))
    const = (p[4], p[2], p[0]) if mode == "constant" else (-1, 0, 0)
    launch(_pad3d_grad, dx.size, flat(g), flat(dx), d, h, w, od, oh, ow, *maps, g.dtype.type(0), *const)
    return _from_ncdhw(dx, data_format)


register_kernel("pad", "cuda", pad)
register_kernel("pad_grad", "cuda", pad_grad)
register_kernel("pad3d", "cuda", pad3d)
register_kernel("pad3d_grad", "cuda", pad3d_grad)
