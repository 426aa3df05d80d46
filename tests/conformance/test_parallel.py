"""Pipeline, data parallel and gradient merge give the same answers on both backends.

* a 1F1B pipeline on 2 in-process ranks (``refimpl.distributed.pipeline.runner``),
* data parallel on 2 places with fused allreduce (``CompiledProgram``, coalesced
  gradient buffers on the device),
* ``auto_parallel_gradient_merge_pass`` (k = 2, a ``conditional_block`` update),

each trained a few steps on the NumPy and on the CUDA kernels from the same
initial parameters: losses and parameters within rtol 1e-6 (atol 1e-7), and,
where the run is traced, the same alloc/free events and memory stats (for
data parallel, places > 0 get their parameters by ``tensor.set`` on the
host: the zero-byte "alloc" of their first device update is left out).
"""
import contextlib
import os
import sys

import numpy as np

import refimpl as paddle
from refimpl.distributed.passes import auto_parallel_gradient_merge  # noqa: F401  (registers the pass)
from refimpl.distributed.passes import new_pass
from refimpl.distributed.pipeline import runner
from refimpl.executor import Trace
from refimpl.framework import Program, unique_name

from harness import assert_close, gc_events

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import dp_mlp  # noqa: E402
import pipeline_mlp  # noqa: E402


@contextlib.contextmanager
def backend(name):
    paddle.set_backend(name)
    try:
        yield
    finally:
        paddle.set_backend("numpy")


def feeds(rows, din=8, steps=2, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((rows, din)).astype("float32")} for _ in range(steps)]


def assert_same(got, want):
    assert got.keys() == want.keys()
    for k in want:
        assert_close(got[k], want[k], what=k)


# ---- pipeline -------------------------------------------------------------------------------
def _pipeline(name):
    main, startup, loss = pipeline_mlp.build(4, width=8, dtype="float32")
    pl = runner.build_pipeline(main, startup, loss, "1F1B", 2, 2, cuts=pipeline_mlp.even_cuts(main, 2))
    with backend(name):
        return runner.train_in_process(pl, feeds(4), seed=0)


def test_1f1b_pipeline_on_two_ranks():
    (ref_losses, ref_params), (losses, params) = _pipeline("numpy"), _pipeline("cuda")
    assert_close(np.array(losses), np.array(ref_losses), what="losses")
    assert_same(params, ref_params)


# ---- data parallel ---------------------------------------------------------------------------
def _data_parallel(name):
    main, startup, loss = dp_mlp.build(layers=2, width=8)
    with backend(name):
        exe, scope = dp_mlp.init(startup, 0)
        compiled = paddle.static.CompiledProgram(main, dp_mlp.strategy(fuse=True), places=[exe.place] * 2)
        losses, trace = [], Trace()
        for step, f in enumerate(feeds(4)):
            out = exe.run(compiled, feed=f, fetch_list=[loss], scope=scope, trace=trace if step == 0 else None)
            losses.append(np.array(out[0]))
        params = {f"{i}:{p.name}": np.array(s.find_var(p.name).get_tensor())
                  for i, s in enumerate(compiled.local_scopes()) for p in main.all_parameters()}
        compiled.close()
    return losses, params, gc_events(trace, drop_moves=True)


def test_data_parallel_on_two_places():
    (ref_losses, ref_params, ref_gc), (losses, params, gc) = _data_parallel("numpy"), _data_parallel("cuda")
    for g, w in zip(losses, ref_losses):
        assert_close(g, w, what="loss")
    assert_same(params, ref_params)
    assert gc == ref_gc


# ---- gradient merge ---------------------------------------------------------------------------
def _gradient_merge(name):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 8], "float32")
        h = paddle.static.nn.fc(x, 8, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        _, params_grads = paddle.optimizer.Momentum(0.05, momentum=0.9).minimize(loss)
    new_pass("auto_parallel_gradient_merge_pass", {"k_steps": 2, "params_grads": params_grads}).apply(
        [main], [startup])
    with backend(name):
        paddle.seed(0)
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        exe.run(startup, scope=scope)
        losses, trace = [], Trace()
        for step, f in enumerate(feeds(3, steps=4)):
            out, = exe.run(main, feed=f, fetch_list=[loss], scope=scope, trace=trace if step == 1 else None)
            losses.append(out)
        params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
        return losses, params, gc_events(trace), exe.memory_stats()


def test_gradient_merge_pass():
    ref, got = _gradient_merge("numpy"), _gradient_merge("cuda")
    for g, w in zip(got[0], ref[0]):
        assert_close(g, w, what="loss")
    assert_same(got[1], ref[1])
    assert got[2] == ref[2] and got[3] == ref[3]
