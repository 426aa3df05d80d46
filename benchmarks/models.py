"""Benchmark: two real models on refimpl's executor, and their two heaviest parts against NumPy.

Printed, all measured in one run:

* the training-step time of LeNet (``static.nn.conv2d``, ``batch_norm``, pooling, ``fc``; Momentum,
  the layers of the model zoo's lenet) and of a GPT (``refimpl.demo``'s ``nn.Layer`` blocks with causal
  attention and the exact GELU; AdamW);
* conv2d forward + backward through the executor vs an im2col + ``np.matmul`` reference written
  below (goal <= 1.3x);
* one GPT block (layer norm, q/k/v/o projections, causal softmax attention, GELU MLP, two
  residuals) forward + backward through the executor vs the same block hand-written in NumPy
  below (goal <= 1.5x).

The executor runs a program whose loss is ``sum(y * dy)`` for a fed ``dy``, so that the gradients
it computes are those of ``y`` against ``dy``; the references compute that loss and the same
gradients, from the same parameter values, and every run first asserts that both give the same
numbers (equal work). Times are the best of ``repeats`` interleaved runs.

    python benchmarks/models.py            # all parts, full repeats
    python benchmarks/models.py --quick    # fewer repeats, the small conv shapes only
"""
import argparse
import math
import os
import time

import numpy as np

import refimpl as paddle
import refimpl.nn.functional as F
from refimpl.demo import TransformerBlock, gpt_model

try:  # the erf a NumPy author reaches for (SciPy is not a dependency: without it, refimpl's own)
    from scipy.special import erf as _erf
    ERF = "scipy.special.erf"
except ImportError:  # pragma: no cover
    from refimpl.ops.activation_ops import erf as _erf
    ERF = "refimpl's erf (no SciPy)"

CONV_SHAPES = {  # name: (N, C, H, W), (C_out, C, KH, KW), stride, padding
    "lenet-conv1": ((64, 1, 28, 28), (6, 1, 5, 5), 1, 2),
    "lenet-conv2": ((64, 6, 14, 14), (16, 6, 5, 5), 1, 0),
    "resnet-3x3": ((32, 64, 28, 28), (64, 64, 3, 3), 1, 1),
}
QUICK_CONV = ("lenet-conv1", "lenet-conv2")
BLOCK = {"batch": 16, "seq": 64, "dim": 128, "heads": 4}
LENET = {"batch": 64, "channels": 1, "hw": 28, "f1": 6, "f2": 16, "hid": 120, "classes": 10}
GPT = {"batch": 16, "seq": 64, "dim": 128, "heads": 4, "layers": 2, "vocab": 96}


# ---- the NumPy references --------------------------------------------------------------
def conv_reference(x, w, dy, stride, pad):
    """conv2d (NCHW, groups 1, dilation 1) and the grads of sum(y * dy), by im2col + np.matmul.

    The columns are laid out (C*KH*KW, N*OH*OW), one strided copy per kernel offset (the fastest
    of the layouts tried: one row per output pixel, or per-image column blocks, are 1.2-1.9x slower);
    col2im adds the column gradients back one kernel offset at a time.
    """
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    window = lambda i, j: (slice(None), slice(None), slice(i, i + stride * oh, stride),   # noqa: E731
                           slice(j, j + stride * ow, stride))
    cols = np.empty((c, kh, kw, n, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, i, j] = xp[window(i, j)].transpose(1, 0, 2, 3)
    cols = cols.reshape(c * kh * kw, n * oh * ow)
    wmat = w.reshape(co, -1)
    y = np.matmul(wmat, cols).reshape(co, n, oh, ow).transpose(1, 0, 2, 3)
    loss = np.sum(y * dy)
    dy = dy * np.float32(1.0)                     # d loss / d y, as the executor's mul grad makes it
    d2 = dy.transpose(1, 0, 2, 3).reshape(co, -1)
    dw = np.matmul(d2, cols.T).reshape(w.shape)
    dcols = np.matmul(wmat.T, d2).reshape(c, kh, kw, n, oh, ow)
    dxp = np.zeros_like(xp)
    for i in range(kh):
        for j in range(kw):
            dxp[window(i, j)] += dcols[:, i, j].transpose(1, 0, 2, 3)
    return {"y": y, "loss": loss, "x@GRAD": dxp[:, :, pad:pad + h, pad:pad + wd], "w@GRAD": dw}


def _ln(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + np.float32(eps))
    xhat = xc * rstd
    return xhat * g + b, (xhat, rstd, g)


def _ln_grad(dy, cache):
    xhat, rstd, g = cache
    rows = (-1, dy.shape[-1])
    dg, db = (dy * xhat).reshape(rows).sum(0), dy.reshape(rows).sum(0)
    gx = dy * g
    dx = rstd * (gx - gx.mean(-1, keepdims=True) - xhat * (gx * xhat).mean(-1, keepdims=True))
    return dx, dg, db


def _linear_grad(x, w, dy):
    d2 = dy.reshape(-1, dy.shape[-1])
    return np.matmul(dy, w.T), np.matmul(x.reshape(-1, x.shape[-1]).T, d2), d2.sum(0)


def _gelu_cdf(f):
    """Phi(f) = (1 + erf(f / sqrt 2)) / 2, the exact GELU's gate (nn.GELU's default, approximate=False)."""
    e = _erf(f * np.float32(1 / math.sqrt(2))).astype(f.dtype, copy=False)
    return np.float32(0.5) * (np.float32(1.0) + e)


def block_reference(x, p, dy, heads):
    """A GPT block's output and the grads of sum(y * dy) w.r.t. x and every parameter.

    ``p`` maps ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b,
    fc2_w, fc2_b to arrays. y = x2 + MLP(LN2(x2)), x2 = x + Attn(LN1(x)), attention causal.
    """
    n, s, d = x.shape
    dh = d // heads
    split = lambda t: t.reshape(n, s, heads, dh).transpose(0, 2, 1, 3)     # noqa: E731
    merge = lambda t: t.transpose(0, 2, 1, 3).reshape(n, s, d)             # noqa: E731
    causal = np.tril(np.ones((s, s), np.float32)) > 0.5
    h1, ln1 = _ln(x, p["ln1_w"], p["ln1_b"])
    q, k, v = (split(np.matmul(h1, p[f"{t}_w"]) + p[f"{t}_b"]) for t in "qkv")
    sc = np.matmul(q, k.transpose(0, 1, 3, 2)) * np.float32(1.0 / math.sqrt(dh))
    sc = np.where(causal, sc, np.float32(-1e9))
    e = np.exp(sc - sc.max(-1, keepdims=True))
    pr = e / e.sum(-1, keepdims=True)
    att = merge(np.matmul(pr, v))
    x2 = x + np.matmul(att, p["o_w"]) + p["o_b"]
    h2, ln2 = _ln(x2, p["ln2_w"], p["ln2_b"])
    f = np.matmul(h2, p["fc1_w"]) + p["fc1_b"]
    gl = f * _gelu_cdf(f)
    y = x2 + np.matmul(gl, p["fc2_w"]) + p["fc2_b"]
    g = {"y": y, "loss": np.sum(y * dy)}
    dy = dy * np.float32(1.0)
    # backward, last op first
    dgl, g["fc2_w"], g["fc2_b"] = _linear_grad(gl, p["fc2_w"], dy)
    # from f alone, as gelu_grad (which reads only X) must
    df = dgl * (_gelu_cdf(f) + f * np.exp(np.float32(-0.5) * f * f) * np.float32(1 / math.sqrt(2 * math.pi)))
    dh2, g["fc1_w"], g["fc1_b"] = _linear_grad(h2, p["fc1_w"], df)
    dx2_ln, g["ln2_w"], g["ln2_b"] = _ln_grad(dh2, ln2)
    dx2 = dy + dx2_ln
    datt, g["o_w"], g["o_b"] = _linear_grad(att, p["o_w"], dx2)
    datt = split(datt)
    dpr, dv = np.matmul(datt, v.transpose(0, 1, 3, 2)), np.matmul(pr.transpose(0, 1, 3, 2), datt)
    dsc = pr * (dpr - (dpr * pr).sum(-1, keepdims=True))
    dsc = np.where(causal, dsc, np.float32(0)) * np.float32(1.0 / math.sqrt(dh))
    dq, dk = np.matmul(dsc, k), np.matmul(dsc.transpose(0, 1, 3, 2), q)
    dh1 = 0
    for t, dt in zip("qkv", (dq, dk, dv)):
        dht, g[f"{t}_w"], g[f"{t}_b"] = _linear_grad(h1, p[f"{t}_w"], merge(dt))
        dh1 = dh1 + dht
    dx_ln, g["ln1_w"], g["ln1_b"] = _ln_grad(dh1, ln1)
    g["x@GRAD"] = dx2 + dx_ln
    return g


# ---- the models, with Paddle's API (the GPT is refimpl demo's, with the exact GELU) ----------------
def build_lenet(cfg):
    """The zoo's lenet: conv-bn-relu-maxpool, conv-relu-bn-avgpool, flatten, fc-relu, fc; Momentum."""
    x = paddle.static.data("img", [None, cfg["channels"], cfg["hw"], cfg["hw"]], "float32")
    lab = paddle.static.data("label", [None, 1], "int64")
    h = paddle.static.nn.conv2d(x, num_filters=cfg["f1"], filter_size=3, padding=1)
    h = paddle.static.nn.batch_norm(h, act="relu")
    h = F.max_pool2d(h, kernel_size=2, stride=2)
    h = paddle.static.nn.conv2d(h, num_filters=cfg["f2"], filter_size=3, padding=1, act="relu")
    h = F.avg_pool2d(paddle.static.nn.batch_norm(h), kernel_size=2, stride=2)
    h = paddle.static.nn.fc(paddle.flatten(h, start_axis=1), cfg["hid"], activation="relu")
    logits = paddle.static.nn.fc(h, cfg["classes"])
    loss = paddle.mean(F.cross_entropy(logits, lab))
    paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    return loss


def build_gpt(cfg):
    ids = paddle.static.data("ids", [None, cfg["seq"]], "int64")
    labels = paddle.static.data("labels", [None, cfg["seq"]], "int64")
    logits = gpt_model(cfg["vocab"], cfg["seq"], cfg["dim"], cfg["heads"], cfg["layers"],
                       gelu_approximate=False)(ids)
    loss = F.cross_entropy(paddle.reshape(logits, [-1, cfg["vocab"]]), paddle.reshape(labels, [-1, 1]))
    paddle.optimizer.AdamW(learning_rate=1e-3, weight_decay=0.01).minimize(loss)
    return loss


# ---- running them ------------------------------------------------------------------------
class Runner:
    """A built program, its startup run once in a scope of its own, and ``step(feed, fetch)``."""

    def __init__(self, build, seed=0):
        self.main, self.startup = paddle.static.Program(), paddle.static.Program()
        paddle.seed(seed)
        with paddle.static.program_guard(self.main, self.startup), paddle.utils.unique_name.guard():
            self.out = build()
        self.scope, self.exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
        self.exe.run(self.startup, scope=self.scope)

    def value(self, name):
        return np.array(self.scope.find_var(name).get_tensor())

    def step(self, feed, fetch):
        return self.exe.run(self.main, feed=feed, fetch_list=fetch, scope=self.scope)


def grad_runner(x_shape, y_of_x):
    """A program computing y = y_of_x(x) and, by append_backward, the grads of sum(y * dy)."""
    def build():
        x = paddle.static.data("x", list(x_shape), "float32")
        x.stop_gradient = False
        y, params = y_of_x(x)
        dy = paddle.static.data("dy", list(y.shape), "float32")
        loss = paddle.sum(y * dy)
        paddle.static.append_backward(loss)
        return y, loss, params
    return Runner(build)


def best_of(fns, repeats):
    """Best time of each function over ``repeats`` interleaved rounds (drift hits all alike)."""
    best = {k: float("inf") for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def assert_same(got, want, what):
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-3, atol=2e-3, err_msg=f"{what}: {k}")
    return max(float(np.max(np.abs(got[k] - want[k]))) for k in want)


def conv_case(xs, ws, s, p):
    """The executor's conv2d program and the reference on one shape: (run_refimpl, run_reference, ops)."""

    def y_of_x(x):
        w = paddle.static.create_parameter(list(ws), "float32", name="w")
        return F.conv2d(x, w, stride=s, padding=p), {"w": w}
    r = grad_runner(xs, y_of_x)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs, dtype=np.float32)
    y_shape = (xs[0], ws[0], (xs[2] + 2 * p - ws[2]) // s + 1, (xs[3] + 2 * p - ws[3]) // s + 1)
    dy = rng.standard_normal(y_shape, dtype=np.float32)
    w = r.value("w")
    fetch = [r.out[0], r.out[1], "x@GRAD", "w@GRAD"]

    def ours():
        return dict(zip(["y", "loss", "x@GRAD", "w@GRAD"], r.step({"x": x, "dy": dy}, fetch)))
    return ours, lambda: conv_reference(x, w, dy, s, p), len(r.main.global_block().ops)


BLOCK_PARAMS = {  # reference name: the block's layer attribute path to the parameter
    "ln1_w": "ln1.weight", "ln1_b": "ln1.bias", "ln2_w": "ln2.weight", "ln2_b": "ln2.bias",
    **{f"{t}_{k}": f"attn.{t}.{'weight' if k == 'w' else 'bias'}" for t in "qkvo" for k in "wb"},
    **{f"{t}_{k}": f"{t}.{'weight' if k == 'w' else 'bias'}" for t in ("fc1", "fc2") for k in "wb"},
}


def _attr(layer, path):
    for part in path.split("."):
        layer = layer[int(part)] if part.isdigit() else getattr(layer, part)
    return layer


def block_case(cfg):
    """The executor's GPT-block program and the NumPy block on one input: (run_refimpl, run_reference, ops)."""
    n, s, d, heads = cfg["batch"], cfg["seq"], cfg["dim"], cfg["heads"]
    def y_of_x(x):
        block = TransformerBlock(d, heads, s, gelu_approximate=False)
        return block(x), {k: _attr(block, path) for k, path in BLOCK_PARAMS.items()}
    r = grad_runner((n, s, d), y_of_x)
    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((2, n, s, d), dtype=np.float32)
    params = r.out[2]
    for k in ("ln1_b", "ln2_b", "q_b", "k_b", "v_b", "o_b", "fc1_b", "fc2_b"):   # zero biases test less
        r.scope.find_var(params[k].name).get_tensor().set(rng.standard_normal(params[k].shape).astype("float32") * 0.1)
    values = {k: r.value(v.name) for k, v in params.items()}
    names = ["y", "loss", "x@GRAD", *params]
    fetch = [r.out[0], r.out[1], "x@GRAD", *(v.name + "@GRAD" for v in params.values())]

    def ours():
        return dict(zip(names, r.step({"x": x, "dy": dy}, fetch)))
    return ours, lambda: block_reference(x, values, dy, heads), len(r.main.global_block().ops)


def bench_conv(name, repeats):
    xs, ws, s, p = CONV_SHAPES[name]
    ours, ref, n_ops = conv_case(xs, ws, s, p)
    diff = assert_same(ours(), ref(), f"conv2d {name}")
    t = best_of({"ours": ours, "ref": ref}, repeats)
    print(f"conv2d fwd+bwd {name:12s} x {str(xs):17s} w {str(ws):15s}: refimpl {t['ours'] * 1e3:8.2f} ms "
          f"({n_ops} ops)  im2col+matmul {t['ref'] * 1e3:8.2f} ms  ratio {t['ours'] / t['ref']:5.2f}x  "
          f"(goal <= 1.3x; max |diff| {diff:.1e})")
    return t["ours"] / t["ref"]


def bench_block(cfg, repeats):
    ours, ref, n_ops = block_case(cfg)
    diff = assert_same(ours(), ref(), "GPT block")
    t = best_of({"ours": ours, "ref": ref}, repeats)
    shape = (cfg["batch"], cfg["seq"], cfg["dim"])
    print(f"GPT block fwd+bwd x {shape} heads {cfg['heads']}: refimpl {t['ours'] * 1e3:8.2f} ms ({n_ops} ops)  "
          f"numpy ({ERF}) {t['ref'] * 1e3:8.2f} ms  ratio {t['ours'] / t['ref']:5.2f}x  (goal <= 1.5x; "
          f"max |diff| {diff:.1e})")
    return t["ours"] / t["ref"]


def bench_step(name, cfg, repeats):
    rng = np.random.default_rng(2)
    if name == "lenet":
        r = Runner(lambda: build_lenet(cfg))
        feed = {"img": rng.standard_normal((cfg["batch"], cfg["channels"], cfg["hw"], cfg["hw"]), dtype=np.float32),
                "label": rng.integers(0, cfg["classes"], (cfg["batch"], 1))}
        what = f"batch {cfg['batch']}, {cfg['channels']}x{cfg['hw']}x{cfg['hw']}"
    else:
        r = Runner(lambda: build_gpt(cfg))
        feed = {k: rng.integers(0, cfg["vocab"], (cfg["batch"], cfg["seq"])) for k in ("ids", "labels")}
        what = f"batch {cfg['batch']}, seq {cfg['seq']}, dim {cfg['dim']}, {cfg['layers']} blocks"
    loss = r.out
    r.step(feed, [loss])
    t = best_of({"step": lambda: r.step(feed, [loss])}, repeats)["step"]
    print(f"{name:6s} training step ({what}): {t * 1e3:8.2f} ms  ({len(r.main.global_block().ops)} ops)")
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, the small conv shapes only")
    args = ap.parse_args()
    paddle.enable_static()
    print(f"NumPy {np.__version__}, {os.cpu_count()} CPUs; the NumPy block's erf: {ERF}")
    repeats = 2 if args.quick else 5
    bench_step("lenet", LENET, repeats)
    bench_step("gpt", GPT, repeats)
    for name in QUICK_CONV if args.quick else CONV_SHAPES:
        bench_conv(name, repeats)
    bench_block(BLOCK, repeats)


if __name__ == "__main__":
    main()
