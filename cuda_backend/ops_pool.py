"""CUDA kernels for ``refimpl/ops/pool_ops.py``: pool2d and pool2d_grad (max and avg).

Mirrors Paddle's GPU ``KernelPool2D`` / ``KernelPool2DGrad`` / ``KernelMaxPool2DGrad``
(``paddle/phi/kernels/funcs/pooling.cu``): one thread per output element for the forward, one
per input element for the grad, which gathers the outputs whose window holds it. The windows
(start, clipped ends, avg divisors) come from the same ``PoolPlan`` as the NumPy kernel, copied to
the device as small index arrays. Each output visits its window in row-major order and each input
element adds its contributions in output order, the NumPy kernel's (and Paddle's CPU) order, so
both backends agree bit for bit. NHWC is transposed to NCHW and back.
"""
import numpy as np

from refimpl.ops.conv_ops import check_choice, DATA_FORMATS
from refimpl.ops.pool_ops import FLT_MAX, pool_plan
from refimpl.ops.registry import register_kernel

from .device import cuda, empty, flat, launch, to_device
from .ops_conv import from_nchw, to_nchw


@cuda.jit
def _pool(x, out, H, W, OH, OW, hlo, hhi, wlo, whi, size, is_max, init):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        nc, oh, ow = i // (OH * OW), i // OW % OH, i % OW
        acc = init
        for h in range(hlo[oh], hhi[oh]):
            for w in range(wlo[ow], whi[ow]):
                v = x[(nc * H + h) * W + w]
                if is_max:
                    acc = acc if acc > v else v
                else:
                    acc += v
        out[i] = acc if is_max else acc / size[oh * OW + ow]


@cuda.jit
def _pool_grad(x, out, dout, dx, H, W, OH, OW, hlo, hhi, wlo, whi, scale, is_max, zero):
    """dx[n, c, h, w] = the sum, over the windows holding (h, w) in output order, of their share."""
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        nc, h, w = i // (H * W), i // W % H, i % W
        acc = zero
        for oh in range(OH):
            if h < hlo[oh] or h >= hhi[oh]:
                continue
            for ow in range(OW):
                if w < wlo[ow] or w >= whi[ow]:
                    continue
                o = (nc * OH + oh) * OW + ow
                if not is_max:
                    acc += scale[oh * OW + ow] * dout[o]
                    continue
                first = -1  # the first element of the window equal to Out takes the gradient
                for h2 in range(hlo[oh], hhi[oh]):
                    for w2 in range(wlo[ow], whi[ow]):
                        if first < 0 and x[(nc * H + h2) * W + w2] == out[o]:
                            first = h2 * W + w2
                if first == h * W + w:
                    acc += dout[o]
        dx[i] = acc


def _attrs(pooling_type, ksize, global_pooling, strides, paddings, exclusive, adaptive, ceil_mode,
           data_format, padding_algorithm):
    return {"pooling_type": pooling_type, "ksize": ksize, "global_pooling": global_pooling, "strides": strides,
            "paddings": paddings, "exclusive": exclusive, "adaptive": adaptive, "ceil_mode": ceil_mode,
            "data_format": data_format, "padding_algorithm": padding_algorithm}


def _setup(op, X, attrs):
    check_choice(op, "data_format", attrs["data_format"], DATA_FORMATS)
    fmt = attrs["data_format"]
    x = to_nchw(X, fmt)
    n, c, h, w = x.shape
    plan = pool_plan(op, (h, w), attrs)
    (_, hlo, hhi, hsize), (_, wlo, whi, wsize) = plan.axes
    idx = [to_device(np.ascontiguousarray(a, dtype=np.int64)) for a in (hlo, hhi, wlo, whi)]
    size = (hsize[:, None] * wsize[None, :]).reshape(-1)
    return x, plan, idx, size


def pool2d(X, *, pooling_type, ksize, global_pooling, strides, paddings, exclusive, adaptive, ceil_mode,
           data_format, padding_algorithm):
    attrs = _attrs(pooling_type, ksize, global_pooling, strides, paddings, exclusive, adaptive, ceil_mode,
                   data_format, padding_algorithm)
    x, plan, idx, size = _setup("pool2d", X, attrs)
    n, c, h, w = x.shape
    out = empty((n, c) + plan.out, x.dtype)
    is_max = pooling_type == "max"
    init = x.dtype.type(-FLT_MAX if is_max else 0)
    launch(_pool, out.size, flat(x), flat(out), h, w, plan.out[0], plan.out[1], *idx,
           to_device(size.astype(x.dtype)), is_max, init)
    return from_nchw(out, data_format)


def pool2d_grad(X, Out, dOut, *, pooling_type, ksize, global_pooling, strides, paddings, exclusive, adaptive,
                ceil_mode, data_format, padding_algorithm):
    attrs = _attrs(pooling_type, ksize, global_pooling, strides, paddings, exclusive, adaptive, ceil_mode,
                   data_format, padding_algorithm)
    x, plan, idx, size = _setup("pool2d_grad", X, attrs)
    fmt = data_format
    out, dout = to_nchw(Out, fmt), to_nchw(dOut, fmt)
    n, c, h, w = x.shape
    scale = (np.float32(1) / size.astype(np.float32)).astype(x.dtype)   # Paddle: float 1 / size, cast to T
    dx = empty(tuple(x.shape), x.dtype)
    launch(_pool_grad, dx.size, flat(x), flat(out), flat(dout), flat(dx), h, w, plan.out[0], plan.out[1], *idx,
           to_device(scale), pooling_type == "max", x.dtype.type(0))
    return from_nchw(dx, fmt)


register_kernel("pool2d", "cuda", pool2d)
register_kernel("pool2d_grad", "cuda", pool2d_grad)
