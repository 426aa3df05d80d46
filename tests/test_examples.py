"""The real-data examples: ``examples/train_lenet.py`` (scikit-learn's 8x8 digits),
``examples/train_gpt.py`` (the shipped Shakespeare) and ``refimpl demo --model gpt``.

Each script runs for a few steps at tiny sizes in a subprocess; the checks are
that the loss falls, that the printed counts agree with independent formulas
(the data set's documented size, the parameter count of the architecture) and
that ``--plot`` writes a PNG.
"""
import contextlib
import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_digits  # the test extra's; train_lenet.py reads its digits

import refimpl as paddle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
TEXT = os.path.join(EXAMPLES, "data", "tinyshakespeare.txt")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(*argv, timeout=300):
    env = dict(os.environ, MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def _example(name):
    sys.path.insert(0, EXAMPLES)
    try:
        return __import__(name)
    finally:
        sys.path.remove(EXAMPLES)


# ---- LeNet on the digits -------------------------------------------------------------------------
def test_digits_split_is_80_20_of_the_1797_images_and_seeded():
    lenet = _example("train_lenet")
    x_train, y_train, x_test, y_test = lenet.load_digits(seed=0)
    # scikit-learn documents the digits set as 1797 images of 8x8 pixels with values 0..16
    assert len(x_train) + len(x_test) == 1797 and len(x_test) == round(0.2 * 1797)
    assert x_train.shape[1:] == (1, 8, 8) and x_train.dtype == np.float32 and y_train.dtype == np.int64
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    counts = np.bincount(load_digits().target, minlength=10)
    assert np.array_equal(np.bincount(y_train[:, 0], minlength=10) + np.bincount(y_test[:, 0], minlength=10),
                          counts)
    again = lenet.load_digits(seed=0)
    other = lenet.load_digits(seed=1)
    assert np.array_equal(again[3], y_test) and not np.array_equal(other[3], y_test)


def test_lenet_trains_reports_accuracy_and_plots(tmp_path):
    png = tmp_path / "lenet.png"
    out = _run("examples/train_lenet.py", "--epochs", "2", "--width", "4", "--hidden", "16",
               "--plot", str(png))
    w, hidden = 4, 16
    # conv 3x3 weights + bias, batch norm scale, shift, running mean and variance (all Parameters in
    # Paddle's BatchNorm2D), then the linear layers on the 2x2 map left by two 2x2 pools
    n_params = (9 * w + w) + 4 * w + (9 * w * 2 * w + 2 * w) + 4 * 2 * w + (2 * w * 4 * hidden + hidden) + (
        hidden * 10 + 10)
    assert "1438 train / 359 test images, batch 64, 46 steps" in out and f"{n_params} parameters" in out
    epochs = [(float(a), float(b)) for a, b in re.findall(r"epoch +\d+: train loss ([0-9.]+) +test accuracy "
                                                          r"([0-9.]+)", out)]
    assert len(epochs) == 2 and epochs[1][0] < epochs[0][0]
    final = float(re.search(r"^test accuracy ([0-9.]+) \((\d+)/359\) after 46 steps", out, re.M).group(1))
    assert final > 0.5, out  # ten classes: chance is 0.1
    assert re.search(r"^step 46/46 \[={30}\] - loss: [0-9.]+ - ", out, re.M)
    assert png.read_bytes()[:8] == PNG_MAGIC and f"wrote {png}" in out


def test_lenet_max_steps_stops_early():
    out = _run("examples/train_lenet.py", "--epochs", "3", "--max-steps", "5", "--width", "2", "--hidden", "8")
    assert ", 5 steps," in out and "after 5 steps" in out
    assert len(re.findall(r"^epoch ", out, re.M)) == 1


# ---- the GPT on Shakespeare ---------------------------------------------------------------------
def test_the_shipped_text_is_plain_ascii_of_about_100_kb_and_documented():
    raw = open(TEXT, "rb").read()
    assert 60_000 <= len(raw) <= 300_000 and raw.isascii() and raw.endswith(b"\n")
    assert raw.startswith(b"First Citizen:\nBefore we proceed any further, hear me speak.\n")
    readme = open(os.path.join(EXAMPLES, "data", "README.md"), encoding="utf-8").read()
    assert "Coriolanus" in readme and "public domain" in readme and "char-rnn" in readme
    assert f"{len(raw):,} bytes" in readme and f"{len(set(raw))} distinct characters" in readme


def test_gpt_trains_and_prints_samples(tmp_path):
    png = tmp_path / "gpt.png"
    out = _run("examples/train_gpt.py", "--steps", "40", "--dim", "16", "--heads", "2", "--layers", "1",
               "--seq", "16", "--batch-size", "8", "--samples", "2", "--sample-chars", "30", "--plot", str(png))
    first, last = map(float, re.search(r"train loss ([0-9.]+) \(first 10\) -> ([0-9.]+) \(last 10\)", out).groups())
    assert last < first
    v, s, d = 61, 16, 16
    n_params = v * d + s * d + (2 * d + 4 * (d * d + d) + 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d)) + 2 * d
    assert f"vocabulary {v}; 1 layers, dim 16, 2 heads, context 16, {n_params} parameters" in out
    samples = re.findall(r"--- sample \d \(temperature 0.8\) ---\n(MENENIUS:\n.*?)\n(?=--- |wrote )", out, re.S)
    assert len(samples) == 2
    vocab = set(open(TEXT).read())
    for text in samples:
        assert len(text) == len("MENENIUS:\n") + 30 and set(text) <= vocab
    assert png.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("argv, words", [
    (["--samples", "-1"], "--samples >= 0"),
    (["--text", "TEXT_LATIN1"], "is not ASCII text"),
])
def test_gpt_bad_arguments_are_usage_errors(tmp_path, capsys, argv, words):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Caf\u00e9 society\n".encode("latin-1") * 200)
    argv = [str(latin1) if a == "TEXT_LATIN1" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        _example("train_gpt").main(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_gpt_train_prints_to_the_stdout_of_the_call():
    """``train(args)`` (no ``out``) writes to sys.stdout as it is when called, not when imported."""
    gpt = _example("train_gpt")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert gpt.main(["--steps", "2", "--dim", "8", "--heads", "2", "--layers", "1", "--seq", "8",
                         "--batch-size", "2", "--samples", "0"]) == 0
    text = buf.getvalue()
    assert text.startswith("GPT on tinyshakespeare.txt") and re.search(r"^step 2/2 \[={30}\]", text, re.M)


def _tiny_gpt(seq=6, vocab=11):
    from refimpl.demo import build_gpt
    paddle.seed(3)
    main, startup, test, loss, logits = build_gpt(vocab, seq, dim=8, heads=2, layers=1)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    return exe, scope, test, logits


def test_causal_mask_keeps_later_ids_out_of_earlier_logits():
    """What sampling from a right-padded window relies on."""
    exe, scope, test, logits = _tiny_gpt()
    a = np.array([[1, 2, 3, 4, 5, 6]], dtype="int64")
    b = np.array([[1, 2, 3, 0, 9, 7]], dtype="int64")
    la, lb = (exe.run(test, feed={"ids": x, "labels": x}, fetch_list=[logits], scope=scope)[0] for x in (a, b))
    assert la.shape == (1, 6, 11)
    np.testing.assert_allclose(la[0, :3], lb[0, :3], rtol=1e-5, atol=1e-6)
    assert np.abs(la[0, 3:] - lb[0, 3:]).max() > 1e-4


def test_sampling_at_low_temperature_is_the_argmax():
    from refimpl.demo import sample
    exe, scope, test, logits = _tiny_gpt()
    context = [4, 1, 5]
    ids = np.array([context + [0, 0, 0]], dtype="int64")
    (lg,) = exe.run(test, feed={"ids": ids, "labels": ids}, fetch_list=[logits], scope=scope)
    got = sample(exe, test, logits, scope, context, 8, 6, np.random.default_rng(0), temperature=1e-4)
    assert len(got) == 8 and all(0 <= i < 11 for i in got)
    assert got[0] == int(np.argmax(lg[0, 2]))


def test_demo_text_falls_back_to_the_plays_opening():
    from refimpl.demo import read_text
    source, text, chars, data = read_text(os.path.join(ROOT, "no", "such", "file.txt"))
    assert open(TEXT).read().startswith(text) and len(text) > 200
    assert "".join(chars[i] for i in data) == text and chars == sorted(set(text))


# ---- refimpl demo --model gpt ----------------------------------------------------------------
def test_demo_gpt_trains_summarises_and_samples():
    out = _run("-m", "refimpl.cli", "demo", "--model", "gpt", "--steps", "30", "--batch", "4", "--hidden", "16")
    losses = [float(v) for v in re.findall(r"step \d+: ([0-9.]+)", out)]
    assert len(losses) >= 3 and losses[-1] < losses[0]
    assert re.search(r"garbage collection: [1-9]\d* tensors freed per step", out) and "peak" in out
    d, s, v = 16, 32, 61
    block = 2 * d + 4 * (d * d + d) + 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert f"36 parameters, {v * d + s * d + 2 * block + 2 * d} values" in out
    ops = re.search(r"^(\d+) ops: (\d+) forward, (\d+) backward, (\d+) optimize$", out, re.M)
    assert ops and int(ops.group(1)) == sum(int(g) for g in ops.groups()[1:]) and ops.group(4) == "36"
    assert re.search(r"op types: adamw x36, .*lookup_table_v2 x2", out, re.S)
    assert re.search(r"^sample:\nFirst Citizen:\n", out, re.M)


def test_demo_summary_counts_lr_ops_as_lr():
    """exponential_decay's ops carry LRSched (0x10); an op marked LRSched | Optimize (0x12, Paddle's
    ``_lr_schedule_guard(is_with_opt=True)``) is an lr op too, not an optimize op."""
    from refimpl.demo import _role, program_summary
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 2], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 1))
        lr = paddle.optimizer.lr.exponential_decay(0.1, decay_steps=10, decay_rate=0.5)
        paddle.optimizer.SGD(learning_rate=lr).minimize(loss)
    ops = main.global_block().ops
    n_lr = sum(1 for op in ops if int(op.attr("op_role")) & 0x10)
    assert n_lr == 6 and program_summary(main).splitlines()[0].endswith(", 2 optimize, 6 lr")
    ops[0]._set_attr("op_role", 0x12)
    assert _role(ops[0]) == "lr"


# ---- fleet strategies on GPT-mini and LeNet ------------------------------------------------------
ROW = re.compile(r"^(\w+) +(.+?) +final loss +([-0-9.]+) \(one device +([-0-9.]+), diff ([-+0-9.e]+)\)"
                 r".*applied (\[.*?\])  \[(.*)\]$", re.M)


def _strategy_rows(nranks, *options, model="gpt", steps=3):
    """{strategy name: (fleet loss, one-device loss, diff, applied, note)} from the example's compare()."""
    fs, out = _example("fleet_strategies"), io.StringIO()
    for opts in options:
        assert fs.compare(model, opts, nranks, steps, out), out.getvalue()
    rows = {m.group(2): (float(m.group(3)), float(m.group(4)), float(m.group(5)), m.group(6), m.group(7))
            for m in ROW.finditer(out.getvalue())}
    assert len(rows) == len(options), out.getvalue()
    return rows


def test_fleet_strategies_lamb_lars_gradient_merge_match_their_one_device_optimizers():
    """Data parallelism reproduces one device to float32 rounding (an invariant of an all-reduced
    mean gradient), so each of these rows, compared against the optimizer fleet's meta-optimizer
    runs (Lamb, LarsMomentumOptimizer, incubate's GradientMergeOptimizer), differs by ~1e-7 only;
    against plain Adam / Momentum the same runs differ by 1e-1."""
    rows = _strategy_rows(2, {}, {"lamb": True}, {"lars": True}, {"gradient_merge": 2}, {"localsgd": True})
    plain = rows["data parallel"][1]
    for name, applied in (("lamb", "LambOptimizer"), ("lars", "LarsOptimizer"),
                          ("gradient_merge=2", "GradientMergeOptimizer"), ("localsgd", "LocalSGDOptimizer")):
        fleet, one, diff, got, note = rows[name]
        assert abs(diff) < 1e-5 and abs(fleet - one) < 1e-5 and applied in got and note.startswith("exact"), rows
    # the update really changed: LAMB / LARS / gradient merge end elsewhere than plain Momentum
    assert all(abs(rows[n][1] - plain) > 1e-3 for n in ("lamb", "lars", "gradient_merge=2")), rows


def test_fleet_strategies_recompute_keeps_bf16_and_notes_the_inexact_rows():
    """On one rank recompute under bf16 reproduces the bf16 one-device run exactly, and that run is
    really bf16 (its loss differs from float32's); float16 AMP on the NumPy backend says it inserted
    no casts; adaptive LocalSGD and FP16 allreduce say why they are not exact."""
    one = _strategy_rows(1, {}, {"amp": "bf16"}, {"recompute": True, "amp": "bf16"}, {"amp": "fp16"})
    fp32, bf16, rc_bf16 = one["data parallel"], one["amp=bf16"], one["recompute+amp=bf16"]
    assert rc_bf16[1] == bf16[1] and abs(rc_bf16[2]) < 1e-6 and abs(bf16[1] - fp32[1]) > 1e-4, one
    assert "RecomputeOptimizer inside decorate_bf16" in rc_bf16[4], one
    assert "float16 casts: none on the host backend" in one["amp=fp16"][4], one
    two = _strategy_rows(2, {"adaptive_localsgd": True}, {"fp16_allreduce": True})
    assert "not exact by design" in two["adaptive_localsgd"][4], two
    assert "ranks train alone" in two["fp16_allreduce"][4], two


def test_fleet_strategies_command_line_rows():
    """The README's commands: LocalSGD on 2 ranks, and a LeNet row with recompute + bf16."""
    out = _run(os.path.join(EXAMPLES, "fleet_strategies.py"), "--localsgd", "--ranks", "2", "--steps", "2")
    row = re.search(r"gpt +localsgd +final loss +([0-9.]+) \(one device +([0-9.]+), diff ([-+0-9.e]+)\)"
                    r".*peak +([0-9.]+) KiB.*applied \['RawProgramOptimizer', 'LocalSGDOptimizer'\]", out)
    assert row, out
    assert abs(float(row.group(3))) < 1e-5 and float(row.group(4)) > 0
    out = _run(os.path.join(EXAMPLES, "fleet_strategies.py"), "--model", "lenet", "--recompute", "--amp", "bf16",
               "--steps", "2")
    assert re.search(r"lenet +recompute\+amp=bf16 +final loss .*diff [-+]0\.00e\+00\)", out), out


def test_fleet_strategies_under_mpiexec_match_one_device():
    """The README's ``mpiexec -n 2 ... --amp fp16 --lamb``: two MPI ranks give the one-device LAMB run."""
    pytest.importorskip("mpi4py")
    import shutil
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if exe is None:
        pytest.fail("mpi4py is installed but mpiexec is not on PATH (pip install mpich)")
    p = subprocess.run([exe, "-n", "2", sys.executable, os.path.join(EXAMPLES, "fleet_strategies.py"), "--amp", "fp16",
                        "--lamb", "--steps", "2"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, MPLBACKEND="Agg"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    row = re.search(r"amp=fp16\+lamb +final loss .*diff ([-+0-9.e]+)\).*applied \[([^\]]*)\]", p.stdout)
    assert row, p.stdout
    assert abs(float(row.group(1))) < 1e-5
    assert "'AMPOptimizer'" in row.group(2) and "'LambOptimizer'" in row.group(2)
