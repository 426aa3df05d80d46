"""Fuzzing the executor's eager deletion with hypothesis (issue 8, part 4).

Random programs — DAGs of elementwise/activation/matmul ops over a pool of
vars, with random fan-out so vars are read many times, then mean, backward
and SGD — are run with GC on and off. Under the event trace no op reads a
variable after it was freed (and not rewritten), both runs give identical
loss and parameters, and the peak with GC on never exceeds the peak with it
off. (Random schedule configurations are fuzzed by test_pipeline_joblists.py
and test_simulator.py.)
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refimpl as paddle
from refimpl.core.scope import Scope
from refimpl.executor import Trace
from refimpl.executor.gc_plan import no_need_buffer_inputs
from refimpl.framework import Program, unique_name

UNARY = ["relu", "tanh", "sigmoid", "square", "scale"]
BINARY = ["add", "multiply", "subtract"]
W = 4

step = st.tuples(st.sampled_from(UNARY + BINARY + ["matmul"]), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6))


def build(steps):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, W], "float32")
        w = paddle.static.create_parameter([W, W], "float32", name="w")
        pool = [x, paddle.matmul(x, w)]
        for kind, a, b in steps:
            u, v = pool[a % len(pool)], pool[b % len(pool)]
            if kind == "scale":
                out = paddle.scale(u, 0.5, 0.1)
            elif kind in UNARY:
                out = getattr(paddle, kind)(u) if hasattr(paddle, kind) else getattr(paddle.nn.functional, kind)(u)
            elif kind == "matmul":
                out = paddle.matmul(u, w)
            else:
                out = getattr(paddle, kind)(u, v)
            pool.append(out)
        loss = paddle.mean(pool[-1] + pool[1])  # the loss always depends on the parameter
        paddle.optimizer.SGD(0.01).minimize(loss)
    return main, startup, loss


def run(main, startup, loss, gc):
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0 if gc else -1.0})
    try:
        paddle.seed(3)
        scope, exe, trace = Scope(), paddle.static.Executor(), Trace()
        exe.run(startup, scope=scope)
        x = np.linspace(-1, 1, 3 * W, dtype="float32").reshape(3, W)
        out = exe.run(main, feed={"x": x}, fetch_list=[loss], scope=scope, trace=trace)[0]
        return out, np.array(scope.find_var("w").get_tensor()).copy(), trace, exe.memory_stats()["peak_bytes"]
    finally:
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})


def freed_reads(main, trace):
    """(op index, var) pairs where an op read the data of a var freed earlier and not rewritten."""
    ops = main.global_block().ops
    freed, bad = set(), []
    for e in trace:
        if e.kind == "op" and e.block == 0:
            op = ops[e.op]
            nnb = no_need_buffer_inputs(op)  # read for their shape only: freeing the data is fine
            bad += [(e.op, n) for n in op.input_arg_names if n in freed and n not in nnb]
            freed -= set(op.output_arg_names)
        elif e.kind == "free" and e.block == 0:
            freed.add(e.var)
    return bad


@settings(max_examples=40, deadline=None)
@given(st.lists(step, min_size=1, max_size=12))
def test_random_programs_gc_is_safe_and_never_worse(steps):
    main, startup, loss = build(steps)
    on = run(main, startup, loss, gc=True)
    off = run(main, startup, loss, gc=False)
    assert freed_reads(main, on[2]) == []
    np.testing.assert_array_equal(on[0], off[0])
    np.testing.assert_array_equal(on[1], off[1])
    assert on[3] <= off[3]
    assert on[2].of_kind("free") and not off[2].of_kind("free")


def test_the_fuzzer_builds_programs_with_fan_out():
    main, _, _ = build([("add", 0, 0), ("multiply", 2, 2), ("relu", 2, 0), ("matmul", 3, 0)])
    reads = [n for op in main.global_block().ops for n in op.input_arg_names]
    assert max(reads.count(n) for n in set(reads)) >= 3
