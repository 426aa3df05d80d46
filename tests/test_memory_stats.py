"""``Executor.memory_stats()``: live and peak bytes, split by what they hold.

The categories (``refimpl/executor/memory_categories.py``) add up to the totals; their sizes are
checked against independent counts from the program (parameter shapes, Adam's two moments and two
beta powers per parameter, the feed's bytes); recompute lowers the activation high-water mark;
in-process ranks each count their own, and a pipeline's receiving rank counts its ``recv_v2``
buffers as communication.
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.executor.memory_categories import CATEGORIES, classify
from refimpl.viz import category_peaks, format_categories

KEYS = {"live_bytes", "peak_bytes", "live_by_category", "peak_by_category", "max_by_category"}


def _mlp(batch=32, din=16, hid=24, layers=3, opt="adam", recompute=False):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, din], "float32")
        h, hs = x, []
        for _ in range(layers):
            h = paddle.static.nn.fc(h, hid, activation="relu")
            hs.append(h)
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 2)))
        o = paddle.optimizer.Adam(0.01) if opt == "adam" else paddle.optimizer.SGD(0.1)
        if recompute:
            o = paddle.incubate.optimizer.RecomputeOptimizer(o)
            o._set_checkpoints(hs[1::2])
        o.minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.random.default_rng(0).standard_normal((batch, din)).astype("float32")}
    trace = paddle.executor.Trace()
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope, trace=trace)
    return exe.memory_stats(), main, trace


def _param_bytes(main):
    return sum(int(np.prod(p.shape)) * 4 for p in main.all_parameters())


def test_categories_add_up_to_the_totals():
    stats, _, _ = _mlp()
    assert KEYS <= set(stats)
    for key in ("live_by_category", "peak_by_category", "max_by_category"):
        assert list(stats[key]) == list(CATEGORIES)
    assert sum(stats["live_by_category"].values()) == stats["live_bytes"]
    assert sum(stats["peak_by_category"].values()) == stats["peak_bytes"]
    for c in CATEGORIES[:-1]:
        assert stats["max_by_category"][c] >= stats["peak_by_category"][c] >= 0
    assert stats["max_by_category"]["other"] is None


def test_sizes_match_the_program():
    stats, main, _ = _mlp(batch=32, din=16)
    params = _param_bytes(main)
    n_params = len(main.all_parameters())
    live = stats["live_by_category"]
    assert live["parameters"] == params == (16 * 24 + 24 + 2 * (24 * 24 + 24) + 24 * 2 + 2) * 4
    assert live["optimizer_state"] == 2 * params + 2 * n_params * 4   # moment1/2, beta1/2 pow [1]
    assert live["gradients"] == 0                                      # all freed after their update
    # every parameter's gradient exists when the first adam op runs
    assert stats["max_by_category"]["gradients"] >= params
    assert live["activations"] == 4                                    # the fetched 0-D loss
    assert live["other"] == 4                                          # the learning rate
    assert stats["peak_by_category"]["other"] >= 32 * 16 * 4           # the feed during the run
    assert stats["live_by_category"]["communication"] == 0


def test_plain_sgd_has_no_optimizer_state():
    stats, main, _ = _mlp(opt="sgd")
    assert stats["live_by_category"]["optimizer_state"] == 0
    assert stats["live_by_category"]["parameters"] == _param_bytes(main)


def test_recompute_lowers_the_activation_peak():
    """Activations outweigh weights ([1024, 16] per layer, 16x16 weights): with a checkpoint every
    second layer the forward keeps fewer of them."""
    plain, _, _ = _mlp(batch=1024, din=8, hid=16, layers=6)
    rc, main, _ = _mlp(batch=1024, din=8, hid=16, layers=6, recompute=True)
    assert any(".subprog_" in n for op in main.global_block().ops for n in op.output_arg_names)
    assert rc["max_by_category"]["activations"] < plain["max_by_category"]["activations"]
    assert rc["peak_bytes"] < plain["peak_bytes"]
    assert rc["live_by_category"] == plain["live_by_category"]


def test_the_trace_gives_the_same_activation_peak():
    """``viz.category_peaks`` from the alloc/free records; no activation lives before the run."""
    stats, main, trace = _mlp()
    peaks = category_peaks(trace, classify(main))
    assert peaks["activations"] == stats["max_by_category"]["activations"]
    assert peaks["gradients"] == stats["max_by_category"]["gradients"]


def test_the_text_table_lists_every_category():
    stats, _, _ = _mlp()
    text = format_categories(stats)
    for c in CATEGORIES:
        assert c in text
    assert str(stats["peak_bytes"]) in text


def test_the_trace_cli_prints_the_categories(tmp_path, capsys):
    from refimpl.cli import main as cli_main
    assert cli_main(["trace", "--steps", "1", "--json", str(tmp_path / "t.json"), "--png", ""]) == 0
    text = capsys.readouterr().out
    assert "optimizer_state" in text and "activations" in text and "at peak" in text


def test_each_in_process_rank_counts_its_own():
    from refimpl.distributed.communication import context, run_in_process

    def rank_fn():
        rank = context.current().rank
        stats, main, _ = _mlp(batch=16 * (rank + 1))
        return stats, _param_bytes(main)
    (s0, p0), (s1, p1) = run_in_process(2, rank_fn)
    assert s0["live_by_category"]["parameters"] == p0 == s1["live_by_category"]["parameters"] == p1
    # the second rank's batch is twice the first's: its activations peak higher
    assert s1["max_by_category"]["activations"] > s0["max_by_category"]["activations"]


def _pipeline_stats():
    from refimpl.distributed.communication import context, run_in_process
    from refimpl.distributed.pipeline.runner import build_pipeline, initial_values
    from refimpl.executor.plan_executor import PlanExecutor
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        h = paddle.static.data("x", [None, 8], "float64")
        for _ in range(4):
            h = paddle.static.nn.fc(h, 16, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        paddle.optimizer.SGD(0.01).minimize(loss)
    pl = build_pipeline(main, startup, loss, "1F1B", 2, 2, 1, cuts=[6])
    initial = initial_values(pl, 0)
    feed = {"x": np.random.default_rng(0).standard_normal((4, 8))}

    def rank_fn():
        ctx = context.current()
        for ring in pl.rings:
            if ring not in ctx.groups:
                ctx.add_group(ring, range(pl.pp_degree))
        scope = paddle.static.Scope()
        for name, value in initial.items():
            scope.var(name).get_tensor().set(value)
        pe = PlanExecutor(rank=ctx.rank)
        pe.run(pl.plans[ctx.rank], feed=feed, scope=scope)
        return pe.memory_stats()
    return run_in_process(2, rank_fn)


def test_a_pipeline_rank_counts_what_it_receives_as_communication():
    s0, s1 = _pipeline_stats()
    for s in (s0, s1):
        assert KEYS <= set(s)
        assert sum(s["peak_by_category"].values()) == s["peak_bytes"]
        assert s["live_by_category"]["parameters"] > 0
    # rank 1 receives each micro-batch's [2, 16] float64 activation from rank 0 (recv_v2)
    assert s1["max_by_category"]["communication"] >= 2 * 16 * 8
    assert s0["max_by_category"]["communication"] == 0


@pytest.mark.parametrize("name, want", [("fc_0.w_0", "parameters"), ("fc_0.w_0@GRAD", "gradients"),
                                        ("fc_0.w_0_moment1_0", "optimizer_state"),
                                        ("fc_0.tmp_2", "activations"), ("x", "other"),
                                        ("learning_rate_0", "other")])
def test_classify_names(name, want):
    _, main, _ = _mlp()
    assert CATEGORIES[classify(main)[name]] == want


_BOTH_BACKENDS = """
import numpy as np, refimpl as paddle
out = []
for place in (paddle.CPUPlace(), paddle.CUDAPlace(0)):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        h = paddle.static.nn.fc(x, 8, activation="relu")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 2)))
        paddle.optimizer.Adam(0.01).minimize(loss)
    exe, scope = paddle.static.Executor(place), paddle.static.Scope()
    exe.run(startup, scope=scope)
    exe.run(main, feed={"x": np.ones((4, 4), "float32")}, fetch_list=[loss], scope=scope)
    out.append(exe.memory_stats())
assert out[0] == out[1], out
assert out[0]["max_by_category"]["gradients"] > 0
"""


def test_the_cuda_backend_counts_the_same_categories():
    """Under numba's CUDA simulator (its own process: the flag must be set before numba loads)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    res = subprocess.run([sys.executable, "-c", _BOTH_BACKENDS], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


def test_the_chrome_trace_has_a_counter_per_category():
    stats, main, trace = _mlp()
    doc = trace.to_chrome(categories=classify(main))
    counters = [e["args"] for e in doc["traceEvents"] if e["name"] == "live bytes by category"]
    plain = [e["args"]["bytes"] for e in doc["traceEvents"] if e["name"] == "live bytes"]
    assert len(counters) == len(plain) > 0
    assert all(sum(c.values()) == b for c, b in zip(counters, plain))
    assert max(c["activations"] for c in counters) == stats["max_by_category"]["activations"]
    assert "live bytes by category" not in {e["name"] for e in trace.to_chrome()["traceEvents"]}
