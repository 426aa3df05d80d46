"""The user-facing entry points run: ``refimpl demo`` and the benchmark script."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_trains_and_reports_gc():
    out = subprocess.run([sys.executable, "-m", "refimpl.cli", "demo", "--steps", "60", "--quiet-program"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    losses = [float(v) for v in re.findall(r"step \d+: ([0-9.]+)", out)]
    assert len(losses) >= 3 and losses[-1] < losses[0]
    assert re.search(r"garbage collection: \d+ tensors freed per step", out)
    assert "peak" in out


def test_demo_prints_the_program():
    from refimpl.demo import run_demo
    import io
    buf = io.StringIO()
    assert run_demo(steps=2, batch=4, hidden=8, show_program=True, out=buf) == 0
    text = buf.getvalue()
    assert "mul(inputs={X=['x'], Y=['fc_0.w_0']}" in text and "momentum(" in text


def test_benchmark_script_runs_and_prints_ratios():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "mlp_step.py"), "--quick", "tiny"],
                         capture_output=True, text=True, check=True).stdout
    assert re.search(r"tiny .* ratio +[0-9.]+ .* us/op", out)


def test_pipeline_benchmark_runs():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "pipeline.py"), "--quick"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    assert re.search(r"ratio +[0-9.]+", out) and "rank 3:" in out


def test_schedule_command_prints_grid_and_bubble():
    out = subprocess.run([sys.executable, "-m", "refimpl.cli", "schedule", "1F1B", "--stages", "4",
                          "--micro-batches", "8"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "rank 3 |" in out and re.search(r"bubble ratio: 0\.2727", out)


def test_strategies_benchmark_runs_and_prints_ratios():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "strategies.py"), "--quick"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    assert re.search(r"data parallel +step +[0-9.]+ ms .*\(the baseline\)", out)
    assert re.search(r"localsgd +step +[0-9.]+ ms +ratio +[0-9.]+x +peak/rank +[0-9.]+ KiB +ratio", out)
    assert all(re.search(rf"^{re.escape(name)} ", out, re.M) for name in ("recompute", "lamb", "fp16_allreduce"))
    # every strategy row: a time with its ratio to the baseline run side by side with it, or 'not available'
    names = ["recompute", r"amp=fp16", r"amp=bf16", r"recompute\+amp=bf16", "lamb", "lars", "dgc", "localsgd",
             "adaptive_localsgd", "fp16_allreduce", "gradient_merge=2"]
    assert all(re.search(rf"^{n} +(step +[0-9.]+ ms +ratio +[0-9.]+x |not available)", out, re.M) for n in names), out
    assert "best mean of 2 steps" in out
