"""CUDA kernels for ``refimpl/ops/prelu_ops.py``: prelu and prelu_grad.

Mirrors Paddle's GPU ``PReluKernel`` / ``PReluGradKernel`` (``paddle/phi/kernels/gpu/prelu_kernel.cu``,
``prelu_grad_kernel.cu``): one thread per element finds its alpha from its flat index and the mode.
Paddle's GPU grad reduces d_alpha with block reductions; here one thread per alpha adds the
elements that share it in memory order from zero, the order of the NumPy kernel (Paddle's CPU loop),
so both backends agree bit for bit.
"""
from refimpl.ops.prelu_ops import check_prelu
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, empty, flat, launch

@cuda.jit(device=True)
def _alpha_index(i, inner, c):
    """The alpha of flat element i: elements come in runs of ``inner`` sharing one of ``c`` alphas in turn
    (all: inner = numel, c = 1; channel NCHW: inner = H*W; channel NHWC: inner = 1; element: inner = 1,
    c = numel / N)."""
    return (i // inner) % c


@cuda.jit
def _prelu(x, alpha, out, inner, c, zero):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        v = x[i]
        out[i] = v if v > zero else alpha[_alpha_index(i, inner, c)] * v


@cuda.jit
def _prelu_dx(x, alpha, dout, dx, inner, c, zero):
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        dx[i] = dout[i] if x[i] > zero else alpha[_alpha_index(i, inner, c)] * dout[i]


@cuda.jit
def _prelu_dalpha(x, dout, da, inner, c, zero):
    """d_alpha[a] = sum of x * dout over the non-positive x of alpha a, in memory order from zero."""
    outer = x.size // (inner * c)
    for a in range(cuda.grid(1), da.size, cuda.gridsize(1)):
        acc = zero
        for o in range(outer):
            for k in range(inner):
                i = (o * c + a) * inner + k
                acc += zero if x[i] > zero else x[i] * dout[i]
        da[a] = acc


def _geometry(shape, mode, data_format):
    """(inner, c) for ``_alpha_index``."""
    shape = tuple(shape)
    size = 1
    for d in shape:
        size *= d
    if mode == "channel":
        if data_format == "NCHW":
            return max(size // (shape[0] * shape[1]), 1) if shape[0] * shape[1] else 1, shape[1]
        return 1, shape[-1]
    if mode == "element":
        return 1, max(size // shape[0], 1) if shape[0] else 1
    return max(size, 1), 1


def prelu(X, Alpha, *, data_format, mode):
    x, a = dev(X), dev(Alpha)
    check_prelu("prelu", x.shape, a.shape, mode, data_format)
    out = empty(x.shape, x.dtype)
    launch(_prelu, out.size, flat(x), flat(a), flat(out), *_geometry(x.shape, mode, data_format), x.dtype.type(0))
    return out


def prelu_grad(X, Alpha, dOut, *, data_format, mode, need):
    x, a, g = dev(X), dev(Alpha), dev(dOut)
    check_prelu("prelu_grad", x.shape, a.shape, mode, data_format)
    geo = _geometry(x.shape, mode, data_format)
    dx = da = None
    if need[0]:
        dx = empty(x.shape, x.dtype)
        launch(_prelu_dx, dx.size, flat(x), flat(a), flat(g), flat(dx), *geo, x.dtype.type(0))
    if need[1]:
        da = empty(a.shape, x.dtype)
        launch(_prelu_dalpha, da.size, flat(x), flat(g), flat(da), *geo, x.dtype.type(0))
    return dx, da


register_kernel("prelu", "cuda", prelu)
register_kernel("prelu_grad", "cuda", prelu_grad)
