"""benchmarks/models.py: its NumPy references are right, equal refimpl's numbers, and it prints its ratios.

The references are checked on their own first (a direct convolution loop; central differences of
the loss ``sum(y * dy)`` in float64; causality of the attention), then against refimpl's executor
on small shapes, then the script runs ``--quick`` in a subprocess.
"""
import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "models.py")


@pytest.fixture(scope="module")
def bm():
    spec = importlib.util.spec_from_file_location("benchmark_models", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _numeric_grad(f, a, rng, picks=6, h=1e-6):
    """Central differences of the scalar f() w.r.t. a few random entries of a (changed in place)."""
    out = []
    for idx in zip(*(rng.integers(0, n, picks) for n in a.shape)):
        old = a[idx]
        a[idx] = old + h
        up = f()
        a[idx] = old - h
        down = f()
        a[idx] = old
        out.append((idx, (up - down) / (2 * h)))
    return out


def test_conv_reference_is_a_convolution_and_its_gradient(bm):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 2))
    s, p = 2, 1
    g = bm.conv_reference(x, w, dy := rng.standard_normal((2, 4, 4, 4)), s, p)
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    direct = np.zeros_like(g["y"])
    for i in range(4):
        for j in range(4):
            patch = xp[:, :, i * s:i * s + 3, j * s:j * s + 2]
            direct[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    np.testing.assert_allclose(g["y"], direct, rtol=1e-12, atol=1e-12)
    loss = lambda: bm.conv_reference(x, w, dy, s, p)["loss"]      # noqa: E731
    for a, key in ((x, "x@GRAD"), (w, "w@GRAD")):
        for idx, num in _numeric_grad(loss, a, rng):
            assert g[key][idx] == pytest.approx(num, rel=1e-5, abs=1e-7), (key, idx)


def _block_params(rng, d):
    p = {}
    for k, (rows, cols) in {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "fc1": (d, 4 * d),
                            "fc2": (4 * d, d)}.items():
        p[k + "_w"], p[k + "_b"] = rng.standard_normal((rows, cols)) * 0.5, rng.standard_normal(cols) * 0.1
    for k in ("ln1", "ln2"):
        p[k + "_w"], p[k + "_b"] = 1 + rng.standard_normal(d) * 0.1, rng.standard_normal(d) * 0.1
    return p


def test_block_reference_gradients_and_causality(bm):
    rng = np.random.default_rng(1)
    n, s, d, heads = 2, 4, 6, 2
    x, dy = rng.standard_normal((n, s, d)), rng.standard_normal((n, s, d))
    p = _block_params(rng, d)
    g = bm.block_reference(x, p, dy, heads)
    loss = lambda: bm.block_reference(x, p, dy, heads)["loss"]      # noqa: E731
    for key in ["x@GRAD", *p]:
        a = x if key == "x@GRAD" else p[key]
        for idx, num in _numeric_grad(loss, a, rng, picks=3):
            assert g[key][idx] == pytest.approx(num, rel=1e-5, abs=1e-7), (key, idx)
    later = x.copy()
    later[:, 2:] += 1.0                                    # change only positions 2 and 3
    y2 = bm.block_reference(later, p, dy, heads)["y"]
    np.testing.assert_array_equal(y2[:, :2], g["y"][:, :2])   # earlier positions cannot see them
    assert not np.allclose(y2[:, 2:], g["y"][:, 2:])


def test_refimpl_conv_program_computes_the_reference_numbers(bm):
    import refimpl as paddle
    paddle.enable_static()
    ours, ref, _ = bm.conv_case((2, 3, 7, 6), (4, 3, 3, 2), 2, 1)
    got, want = ours(), ref()
    assert set(got) == set(want) == {"y", "loss", "x@GRAD", "w@GRAD"}
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_refimpl_gpt_block_computes_the_reference_numbers(bm):
    import refimpl as paddle
    paddle.enable_static()
    ours, ref, n_ops = bm.block_case({"batch": 2, "seq": 5, "dim": 8, "heads": 2})
    got, want = ours(), ref()
    assert len(want) == 3 + 16 and set(got) == set(want)   # y, loss, dx and the 16 parameters' grads
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
    assert n_ops > 50


def test_script_quick_prints_step_times_and_both_ratios():
    out = subprocess.run([sys.executable, SCRIPT, "--quick"], capture_output=True, text=True, timeout=600,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert re.search(r"^lenet +training step .*: +[\d.]+ ms", text, re.M), text
    assert re.search(r"^gpt +training step .*: +[\d.]+ ms", text, re.M), text
    conv = re.findall(r"^conv2d fwd\+bwd .* ratio +([\d.]+)x", text, re.M)
    block = re.findall(r"^GPT block fwd\+bwd .* ratio +([\d.]+)x", text, re.M)
    assert len(conv) == 2 and len(block) == 1, text
    assert all(float(r) > 0 for r in conv + block)
