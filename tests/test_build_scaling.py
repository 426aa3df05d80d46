"""Building a program costs work linear in its size; the build-scaling benchmark runs.

No test here looks at a clock: linearity is checked by counting the Python
function calls (``cProfile``'s ``total_calls``, deterministic for this code)
each build step makes per op of the program, at two sizes. A step that
scans the whole program once per op (or per parameter) makes several times
more calls per op at 4x the layers; a linear one makes about as many.
"""
import cProfile
import os
import pstats
import re
import subprocess
import sys

import pytest

import refimpl as paddle
from refimpl.distributed.passes import pass_utils
from refimpl.distributed.passes.gradient_accumulation import accumulate_gradients
from refimpl.executor import eager_deletion_vars
from refimpl.framework.op_role import OpRole

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _calls(fn):
    prof = cProfile.Profile()
    prof.enable()
    try:
        out = fn()
    finally:
        prof.disable()
    return pstats.Stats(prof).total_calls, out


def _mlp(layers):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        h = paddle.static.data("x", [None, 4], "float32")
        for _ in range(layers):
            h = paddle.static.nn.fc(h, 4, activation="relu")
        loss = paddle.mean(paddle.square(h))
    return main, startup, loss


def _calls_per_op(layers):
    """{step: Python calls per op of the minimized program} for an MLP of ``layers`` layers."""
    counts = {}
    counts["build"], (main, startup, loss) = _calls(lambda: _mlp(layers))

    def minimize():
        with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
            paddle.optimizer.Adam(0.01).minimize(loss)
    counts["minimize"], _ = _calls(minimize)
    ops = len(main.global_block().ops)
    counts["gc plan"], _ = _calls(lambda: eager_deletion_vars(main, [loss.name]))
    counts["split_program"], _ = _calls(lambda: pass_utils.split_program(main, [ops // 3, 2 * ops // 3]))
    counts["clone"], (m2, s2) = _calls(lambda: (main.clone(), startup.clone()))
    counts["grad merge"], _ = _calls(lambda: accumulate_gradients(m2, s2, 4))
    counts["required vars"], _ = _calls(lambda: pass_utils._get_required_vars_of_program(m2))
    return {k: v / ops for k, v in counts.items()}


def test_every_build_step_makes_a_constant_number_of_calls_per_op():
    small, large = _calls_per_op(16), _calls_per_op(64)
    for step in small:
        # linear steps stay within 2.5% (the loss and data ops weigh a little less in the larger
        # program); a scan of the program per op or per parameter adds 20% to 150% here
        assert large[step] <= 1.08 * small[step], (step, small[step], large[step])


def test_insert_ops_splices_groups_before_their_index():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 4], "float32")
        block = main.global_block()
        for _ in range(3):
            x = paddle.scale(x, 2.0)
        first, last = block.ops[0], block.ops[-1]
        made = [block._make_op("relu", {"X": [x]}, {"Out": [x]}, {}) for _ in range(4)]
    version = main._version
    block._insert_ops({0: made[:2], 3: [made[2]], 1: [made[3]]})
    assert [op.type for op in block.ops] == ["relu", "relu", "scale", "relu", "scale", "scale", "relu"]
    assert block.ops[0] is made[0] and block.ops[1] is made[1] and block.ops[2] is first
    assert block.ops[3] is made[3] and block.ops[5] is last and block.ops[6] is made[2]
    assert main._version > version  # executor caches see the change


def test_accumulating_two_gradients_of_one_op_puts_the_later_pair_first():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        a = paddle.static.create_parameter([4], "float32", name="a")
        b = paddle.static.create_parameter([4], "float32", name="b")
        paddle.optimizer.SGD(0.1).minimize(paddle.mean(a + b))
    accumulate_gradients(main, startup, 2)
    ops = main.global_block().ops
    i = [op.type for op in ops].index("elementwise_add_grad")
    adds = ops[i + 1:i + 3]
    # pairs come in parameter-name order (a, b); each add goes right after the gradient's op
    assert [op.output("Out") for op in adds] == [["b@GRAD@MERGE"], ["a@GRAD@MERGE"]]
    assert all(op.role() == OpRole.Backward for op in adds)
    sgd = [op for op in ops if op.type == "sgd"]
    assert [op.input("Grad") for op in sgd] == [["a@GRAD@MERGE"], ["b@GRAD@MERGE"]]
    assert [op.attr("op_role_var") for op in sgd] == [["a", "a@GRAD@MERGE"], ["b", "b@GRAD@MERGE"]]


def test_accumulate_gradients_names_a_gradient_no_op_produces():
    main, startup, loss = _mlp(1)
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        _, pg = paddle.optimizer.SGD(0.1).minimize(loss)
    with pytest.raises(paddle.core.errors.InvalidArgument, match="no op produces the gradient 'nope@GRAD'"):
        accumulate_gradients(main, startup, 2, params_grads=[(pg[0][0].name, "nope@GRAD")])


def test_benchmark_quick_mode_prints_both_tables():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "build_scaling.py"), "--quick"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    for phase in ("build", "minimize", "gc plan", "split_program", "clone", "grad merge", "skip_gc_vars",
                  "prepare"):
        rows = re.findall(rf"^{phase} +[0-9.]+ s \( *[0-9.]+\) +[0-9.]+ s \( *[0-9.]+\) +[0-9.]+$", out, re.M)
        assert len(rows) == 2, phase  # GC paused, GC on
    for schedule in ("FThenB", "1F1B", "Eager1F1B", "VPP", "ZBH1", "ZBVPP"):
        assert re.search(rf"^{schedule} +", out, re.M), schedule
    assert "goal: <= 1.5" in out
