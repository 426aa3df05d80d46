"""Regression tests for a review of the AMP / recompute / memory-accounting work.

Each test names the behaviour it pins: host bfloat16 arrays on the CUDA backend, the cost of
preparing a program with no low-precision var, the dtype check of a bfloat16 persistable,
``RecomputeOptimizer``'s argument check, the lazily copied peak split, ``check_finite_and_unscale``
without warnings, ``relu`` at NaN as Paddle 3.3.1, and bfloat16 fetches of a plan.
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.executor import memory_categories
from refimpl.executor.plan_executor import fetch_stacked
from refimpl.ops import low_precision
from refimpl.ops.amp_ops import check_finite_and_unscale


def _bits(values):
    """float32 values (exact in bfloat16) as their bfloat16 bit patterns."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


# ---- 1. host bfloat16 arrays on the CUDA backend ------------------------------------------------
_HOST_BF16_ON_CUDA = """
import numpy as np, refimpl as paddle
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    w = paddle.static.create_global_var([3], 0.0, "bfloat16", persistable=True, name="w")
    z = paddle.cast(w, "float32")
    s = paddle.scale(w, 2.0)
place = paddle.CUDAPlace(0)
exe = paddle.static.Executor(place)
exe.run(startup)
# tensor.set keeps a host ml_dtypes.bfloat16 array: the kernels must read it as bfloat16
paddle.static.global_scope().find_var("w").get_tensor().set(np.array([16256, 16320, 49152], np.uint16), place)
zv, sv = exe.run(main, fetch_list=[z, s])
assert zv.tolist() == [1.0, 1.5, -2.0], zv
assert sv.tolist() == [16384, 16448, 49280], sv  # bfloat16 bits of 2.0, 3.0, -4.0

# a pure-bf16 fc after amp_init, its parameters set from the host: the same losses on both backends
losses = []
for place in (paddle.CPUPlace(), paddle.CUDAPlace(0)):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [2, 4], "float32")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(x, 3)))
        opt = paddle.static.amp.bf16.decorate_bf16(paddle.optimizer.SGD(0.1), use_pure_bf16=True,
                                                   use_bf16_guard=False)
        opt.minimize(loss)
    exe, scope = paddle.static.Executor(place), paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        opt.amp_init(place)
        rng = np.random.RandomState(0)
        for p in sorted(q.name for q in main.global_block().all_parameters()):
            t = scope.find_var(p).get_tensor()
            v = rng.rand(*np.array(t).shape).astype(np.float32) - 0.5
            t.set((v.view(np.uint32) >> 16).astype(np.uint16), place)
        xb = (np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4).view(np.uint32) >> 16).astype(np.uint16)
        losses.append([np.asarray(exe.run(main, feed={"x": xb}, fetch_list=[loss])[0]).tolist()
                       for _ in range(2)])
assert losses[0] == losses[1], losses
"""


def test_host_bfloat16_arrays_are_bfloat16_on_the_cuda_backend():
    """Under numba's CUDA simulator (its own process: the flag must be set before numba loads)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    res = subprocess.run([sys.executable, "-c", _HOST_BF16_ON_CUDA], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]


# ---- 2. preparing a float32 program does no per-op low-precision lookups ------------------------
def _nested_float32(depth):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [2], "float32")
        out = paddle.scale(x, 2.0)
        for _ in range(depth):
            main._create_block()
            out = paddle.scale(out, 2.0)
        for _ in range(depth):
            main._rollback()
    return main


def test_a_program_without_low_precision_vars_skips_the_per_op_lookup(monkeypatch):
    main = _nested_float32(3)
    assert not low_precision.program_has_low_precision(main)
    calls = []
    real = low_precision._declared
    monkeypatch.setattr(low_precision, "_declared", lambda b, n: calls.append(n) or real(b, n))
    exe = paddle.static.Executor(paddle.CPUPlace())
    out = exe.run(main, feed={"x": np.array([1.0, -2.0], np.float32)}, fetch_list=["scale_0.tmp_0"])
    assert out[0].tolist() == [2.0, -4.0]
    assert calls == []


def test_program_has_low_precision_sees_every_block():
    main = _nested_float32(2)
    assert not low_precision.program_has_low_precision(main)
    main.block(2).create_var(name="h", shape=[2], dtype="bfloat16")
    assert low_precision.program_has_low_precision(main)


def test_classify_looks_each_var_up_once(monkeypatch):
    main = _nested_float32(4)
    from refimpl.framework.block import Block
    calls = []
    real = Block._find_var_recursive
    monkeypatch.setattr(Block, "_find_var_recursive", lambda self, n: calls.append(n) or real(self, n))
    cats = memory_categories.classify(main)
    assert calls == []
    assert memory_categories.CATEGORIES[cats["x"]] == "other"
    assert memory_categories.CATEGORIES[cats["scale_4.tmp_0"]] == "activations"


# ---- 3. a bfloat16 persistable holding float32 --------------------------------------------------
def test_a_bfloat16_parameter_holding_float32_is_refused():
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [2, 4], "float32")
        y = paddle.static.nn.fc(x, 3)
        opt = paddle.static.amp.bf16.decorate_bf16(paddle.optimizer.SGD(0.1), use_pure_bf16=True,
                                                   use_bf16_guard=False)
        opt.minimize(paddle.mean(paddle.square(y)))
    exe, scope = paddle.static.Executor(paddle.CPUPlace()), paddle.static.Scope()
    exe.run(startup, scope=scope)  # no amp_init: the parameters stay float32
    # Paddle 3.3.1 refuses too: "The type of data we are trying to retrieve (bfloat16) does not match
    # the type of data (float32) ... [operator < mul > error]"
    with pytest.raises(InvalidArgument, match=r"fc_0\.[wb]_0.*float32.*bfloat16.*read by block 0 op"):
        exe.run(main, feed={"x": _bits(np.ones((2, 4)))}, fetch_list=[y], scope=scope)
    opt.amp_init(paddle.CPUPlace(), scope=scope)  # now bfloat16: it runs
    out = exe.run(main, feed={"x": _bits(np.ones((2, 4)))}, fetch_list=[y], scope=scope)[0]
    assert out.dtype == np.uint16 and out.shape == (2, 3)


# ---- 4. RecomputeOptimizer's argument ----------------------------------------------------------
@pytest.mark.parametrize("bad", [None, "sgd"])
def test_recompute_optimizer_wants_an_optimizer(bad):
    # Paddle 3.3.1 raises AttributeError ("'NoneType' object has no attribute '_learning_rate'")
    for kind in (InvalidArgument, AttributeError):
        with pytest.raises(kind, match=r"optimizer.*" + repr(bad).replace("'", ".")):
            paddle.incubate.optimizer.RecomputeOptimizer(bad)


# ---- 5. the peak's split, copied lazily ---------------------------------------------------------
def test_the_peak_split_is_the_trace_split_at_the_peak():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 8], "float32")
        h = paddle.static.nn.fc(paddle.static.nn.fc(x, 16, activation="relu"), 16, activation="relu")
        paddle.optimizer.Adam(0.01).minimize(paddle.mean(paddle.square(paddle.static.nn.fc(h, 2))))
    exe, scope = paddle.static.Executor(paddle.CPUPlace()), paddle.static.Scope()
    exe.run(startup, scope=scope)
    trace = paddle.executor.Trace()
    feed = {"x": np.ones((16, 8), np.float32)}
    exe.run(main, feed=feed, scope=scope)
    exe.run(main, feed=feed, scope=scope, trace=trace)
    stats = exe.memory_stats()
    cats = memory_categories.classify(main)
    names = memory_categories.CATEGORIES
    # the trace counts from 0: add what the scope held when the run started (after the first run,
    # the persistables: parameters, Adam's state, the learning rate; and the feed)
    start = dict.fromkeys(names, 0)
    for n in scope.local_var_names():
        a = scope.find_var(n).get_tensor()._array
        if a is not None:
            start[names[cats.get(n, memory_categories.OTHER)]] += a.nbytes
    start["other"] += feed["x"].nbytes  # fed before the run starts counting
    doc = trace.to_chrome(categories=cats)
    splits = [e["args"] for e in doc["traceEvents"] if e["name"] == "live bytes by category"]
    totals = [sum(s.values()) for s in splits]
    assert max(totals) + sum(start.values()) == stats["peak_bytes"]
    first = splits[totals.index(max(totals))]  # the split when the total first reached its peak
    assert {c: first[c] + start[c] for c in names[:-1]} == {c: stats["peak_by_category"][c] for c in names[:-1]}
    assert stats["peak_by_category"]["activations"] > 0 and stats["peak_by_category"]["parameters"] > 0


# ---- 6. check_finite_and_unscale on an overflow step -------------------------------------------
def test_check_finite_and_unscale_overflow_warns_nothing():
    xs = [np.array([1.0, np.inf, 2.0], np.float32), np.array([3.0, 4.0], np.float32)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs, found = check_finite_and_unscale(xs, np.array([2.0], np.float32))
    assert found.tolist() == [True]
    assert np.isnan(outs[0][1]) and outs[0][[0, 2]].tolist() == [0.0, 0.0] and outs[1].tolist() == [0.0, 0.0]


# ---- 7. relu at NaN ------------------------------------------------------------------------------
def _relu_and_grad(x, dy):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        xv = paddle.static.data("x", [5], "float32")
        xv.stop_gradient = False
        y = paddle.nn.functional.relu(xv)
        dyv = paddle.static.data("dy", [5], "float32")
        g = paddle.static.gradients([y], [xv], target_gradients=[dyv])
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    return exe.run(main, feed={"x": np.array(x, np.float32), "dy": np.array(dy, np.float32)},
                   fetch_list=[y, g[0]])


def test_relu_at_nan_is_paddles():
    # Paddle 3.3.1 and 2.6.2 (CPU, legacy IR): relu(x) then its grad, fetched
    y, g = _relu_and_grad([np.nan, -0.0, 1, -1, 0], [2, 3, np.nan, np.nan, 5])
    assert y.tolist() == [0.0, 0.0, 1.0, 0.0, 0.0] and not np.signbit(y).any()
    assert g[[0, 1, 4]].tolist() == [0.0, 0.0, 0.0] and np.isnan(g[[2, 3]]).all()
    y, g = _relu_and_grad([np.nan, -0.0, 1, -1, 0], [2, 3, -1, -4, -5])
    assert g.tolist() == [0.0, 0.0, -1.0, 0.0, 0.0]
    assert np.signbit(g).tolist() == [False, False, True, True, True]


# ---- 8. a plan's bfloat16 fetch ----------------------------------------------------------------
def test_fetch_stacked_gives_bfloat16_as_uint16_bits():
    scopes = []
    for k in range(2):
        s = paddle.static.Scope()
        s.var("h").get_tensor().set(_bits([1.0 + k, -2.0]))
        scopes.append(s)
    out = fetch_stacked("h", scopes)
    assert out.dtype == np.uint16
    assert out.tolist() == [[16256, 49152], [16384, 49152]]
