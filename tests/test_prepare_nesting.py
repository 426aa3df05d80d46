"""Nested conditional_blocks: each block is prepared once, deep nesting works, cycles are refused."""
import importlib.util
import os
from collections import Counter

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import InvalidArgument
from refimpl.executor import Trace
from refimpl.executor import prepared as prepared_module
from refimpl.framework import Program, unique_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("prepare_nesting",
                                               os.path.join(ROOT, "benchmarks", "prepare_nesting.py"))
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
# ``depth`` conditional_blocks, each inside the last, ``refs`` per level running the next block: every
# level computes a temporary its GC plan frees; the innermost writes ``out = 3 * x`` (a persistable
# of block 0), so the fetched ``out`` says the innermost level ran. The benchmark times the same programs.
nested = _bench.nested


@pytest.fixture(autouse=True)
def _gc_default():
    yield
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})


def run(main, trace=None):
    x = np.array([1.0, -2.0], dtype="float32")
    exe = paddle.static.Executor(paddle.CPUPlace())
    got, = exe.run(main, feed={"x": x, "p": np.array([True])}, fetch_list=["out"], scope=paddle.static.Scope(),
                   trace=trace)
    np.testing.assert_array_equal(got, 3 * x)
    return exe


@pytest.fixture
def plans(monkeypatch):
    """Counts the GC plans made, per block index (one per prepared block)."""
    counts = Counter()
    real = prepared_module.block_eager_deletion_vars

    def counting(block, skip_vars=()):
        counts[block.idx] += 1
        return real(block, skip_vars)
    monkeypatch.setattr(prepared_module, "block_eager_deletion_vars", counting)
    return counts


def test_each_block_is_prepared_once(plans):
    depth = 12
    for refs in (1, 2):  # two conditional_blocks of one block running the same sub-block share it
        plans.clear()
        run(nested(depth, refs))
        assert plans == Counter({b: 1 for b in range(depth + 1)}), refs


def test_deep_nesting_prepares_and_runs(plans):
    depth = 400
    run(nested(depth))
    assert len(plans) == depth + 1 and set(plans.values()) == {1}


def test_deep_nesting_runs_traced_and_frees_each_levels_temporary():
    depth = 300
    trace = Trace()
    run(nested(depth), trace=trace)
    assert sum(1 for e in trace.of_kind("op") if e.op_type == "conditional_block") == depth
    freed = {(e.block, e.var) for e in trace.of_kind("free") if e.block > 0}
    assert {b for b, _ in freed} == set(range(1, depth + 1))  # every level's own scale output, in its block
    assert len(freed) == depth


def _retarget(main, block_idx, to_idx):
    op = next(op for op in main.block(block_idx).ops if op.type == "conditional_block")
    op._set_attr("sub_block", main.block(to_idx))


@pytest.mark.parametrize("block_idx, to_idx, which", [(0, 0, "itself"), (2, 2, "itself"),
                                                      (3, 1, "block 1, which encloses it")])
def test_a_block_nested_in_itself_is_refused(block_idx, to_idx, which):
    main = nested(5)
    _retarget(main, block_idx, to_idx)
    with pytest.raises(InvalidArgument, match=rf"block {block_idx} op \d+ \(conditional_block\): its sub-block "
                                              rf"is {which}"):
        run(main)


@pytest.mark.parametrize("gc_gb", [-1.0, 0.0])
def test_a_sub_block_sees_the_feeds_of_the_block_running_it(gc_gb):
    """No op of block 0 but the conditional_blocks reads ``x``: the sub-blocks still read the fed ``x``."""
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    run(nested(3, refs=2))
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [2], "float32")
        pred = paddle.static.data("p", [1], "bool")
        out = main.global_block().create_var(name="out", shape=[2], dtype="float32", persistable=True)

        def body():
            main.current_block().append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [out]},
                                           attrs={"scale": 3.0})
        paddle.static.nn.cond(pred, body)
    run(main)


def test_sub_block_op_reading_what_nobody_wrote_is_a_typed_error_naming_it():
    """Block 0's input check cannot see into sub-blocks; the failing kernel's error names the empty input."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [2], "float32")
        pred = paddle.static.data("p", [1], "bool")
        out = main.global_block().create_var(name="out", shape=[2], dtype="float32", persistable=True)
        sub = main._create_block()
        ghost = sub.create_var(name="ghost", shape=[2], dtype="float32")
        sub.append_op(type="elementwise_add", inputs={"X": [x], "Y": [ghost]}, outputs={"Out": [out]})
        main._rollback()
        scope_var = main.global_block().create_var(type="STEP_SCOPES")
        main.global_block().append_op(type="conditional_block", inputs={"Cond": [pred], "Input": [x]},
                                      outputs={"Out": [out], "Scope": [scope_var]},
                                      attrs={"sub_block": sub, "is_scalar_condition": True})
    exe = paddle.static.Executor(paddle.CPUPlace())
    with pytest.raises(paddle.core.errors.PreconditionNotMet, match=r"block 1 op 0 \(elementwise_add\) reads "
                                                                    r"'ghost', which holds no value"):
        exe.run(main, feed={"x": np.ones(2, "float32"), "p": np.array([True])}, fetch_list=["out"],
                scope=paddle.static.Scope())
