"""Benchmark: refimpl's NumPy conv2d kernels (forward + backward) vs a hand-written im2col + np.matmul.

The reference is the textbook version, written here independently: pad, gather the windows into
a (N*OH*OW, C*KH*KW) matrix, one ``np.matmul`` for the forward, two for the grads, and col2im by
adding one strided slice per kernel offset. Both run in the same process on the same arrays;
printed per shape: ms per forward + backward for both and the ratio (goal <= 1.3x).

    python benchmarks/conv.py            # LeNet- and ResNet-sized shapes
    python benchmarks/conv.py --quick    # fewer repeats
"""
import argparse
import time

import numpy as np

import refimpl.ops  # noqa: F401  (registers the ops)
from refimpl.ops import get_op_def

SHAPES = {  # name: (N, C, H, W), (C_out, C, KH, KW), stride, padding
    "lenet-conv1": ((64, 1, 28, 28), (6, 1, 5, 5), 1, 2),
    "lenet-conv2": ((64, 6, 14, 14), (16, 6, 5, 5), 1, 0),
    "resnet-3x3": ((32, 64, 28, 28), (64, 64, 3, 3), 1, 1),
    "resnet-down": ((32, 64, 28, 28), (128, 64, 3, 3), 2, 1),
    "resnet-1x1": ((32, 64, 28, 28), (128, 64, 1, 1), 2, 0),
}


def reference_step(x, w, d, s, p):
    """Forward and both grads by im2col + np.matmul (NCHW, groups 1, dilation 1)."""
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - kh) // s + 1, (wd + 2 * p - kw) // s + 1
    cols = np.empty((c, kh, kw, n, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, i, j] = xp[:, :, i:i + s * oh:s, j:j + s * ow:s].transpose(1, 0, 2, 3)
    cols = cols.reshape(c * kh * kw, n * oh * ow)
    out = (w.reshape(co, -1) @ cols).reshape(co, n, oh, ow).transpose(1, 0, 2, 3).copy()
    d2 = d.transpose(1, 0, 2, 3).reshape(co, -1)
    dw = (d2 @ cols.T).reshape(w.shape)
    dcols = (w.reshape(co, -1).T @ d2).reshape(c, kh, kw, n, oh, ow)
    dxp = np.zeros_like(xp)
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i:i + s * oh:s, j:j + s * ow:s] += dcols[:, i, j].transpose(1, 0, 2, 3)
    return out, dxp[:, :, p:p + h, p:p + wd], dw


def refimpl_step(x, w, d, s, p):
    fwd, attrs, _ = get_op_def("conv2d").kernel("numpy")
    bwd, battrs, _ = get_op_def("conv2d_grad").kernel("numpy")
    kw = dict(strides=[s, s], paddings=[p, p], padding_algorithm="EXPLICIT", dilations=[1, 1], groups=1,
              data_format="NCHW")
    out = fwd(x, w, **{a: kw[a] for a in attrs})
    dx, dw = bwd(x, w, d, **{a: kw[a] for a in battrs}, need=(True, True))
    return out, dx, dw


def best_of(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench(name, quick):
    xs, ws, s, p = SHAPES[name]
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs, dtype=np.float32), rng.standard_normal(ws, dtype=np.float32)
    oh, ow = (xs[2] + 2 * p - ws[2]) // s + 1, (xs[3] + 2 * p - ws[3]) // s + 1
    d = rng.standard_normal((xs[0], ws[0], oh, ow), dtype=np.float32)
    got, want = refimpl_step(x, w, d, s, p), reference_step(x, w, d, s, p)
    for g, r in zip(got, want):  # the same numbers, up to BLAS rounding
        np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-3)
    repeats = 2 if quick else 5
    t_ref = best_of(lambda: reference_step(x, w, d, s, p), repeats)
    t_ours = best_of(lambda: refimpl_step(x, w, d, s, p), repeats)
    print(f"{name:12s} x {str(xs):18s} w {str(ws):16s} s{s} p{p}: refimpl {t_ours * 1e3:8.2f} ms  "
          f"im2col+matmul {t_ref * 1e3:8.2f} ms  ratio {t_ours / t_ref:5.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shape", choices=sorted(SHAPES), action="append")
    args = ap.parse_args()
    for name in args.shape or SHAPES:
        bench(name, args.quick)


if __name__ == "__main__":
    main()
