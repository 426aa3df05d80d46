"""FLAGS_check_nan_inf: the first op whose output holds NaN or Inf fails the run, named."""
import os
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import PreconditionNotMet
from refimpl.distributed.communication import RankFailed
from refimpl.framework import Program, unique_name


@pytest.fixture(autouse=True)
def _flag_off_after():
    yield
    paddle.set_flags({"FLAGS_check_nan_inf": False})


def build():
    """x -> log -> scale -> sqrt -> mean: log(0) is -inf, sqrt of a negative is NaN."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 2], "float32")
        y = paddle.sqrt(paddle.scale(paddle.log(x), 1.0))
        loss = paddle.mean(y)
    return main, loss


def run(main, loss, x, exe=None):
    exe = exe or paddle.static.Executor(paddle.CPUPlace())
    return exe.run(main, feed={"x": np.array(x, dtype="float32")}, fetch_list=[loss],
                   scope=paddle.static.Scope())[0]


def test_off_by_default_nan_and_inf_flow_through():
    main, loss = build()
    assert paddle.get_flags("FLAGS_check_nan_inf") == {"FLAGS_check_nan_inf": False}
    assert np.isnan(run(main, loss, [[0.0, 1.0]]))  # NaN/Inf in a feed and in results are allowed
    paddle.set_flags({"FLAGS_check_nan_inf": True})
    with pytest.raises(PreconditionNotMet):
        run(main, loss, [[0.0, 1.0]])


def test_the_first_op_producing_inf_is_named():
    main, loss = build()
    paddle.set_flags({"FLAGS_check_nan_inf": True})
    with pytest.raises(PreconditionNotMet, match=r"block 0 op 0 \(log\).*'log_0\.tmp_0'.*Inf") as err:
        run(main, loss, [[0.0, 1.0]])
    assert "NaN" not in str(err.value)


def test_the_first_op_producing_nan_is_named():
    main, loss = build()
    paddle.set_flags({"FLAGS_check_nan_inf": True})
    with pytest.raises(PreconditionNotMet, match=r"block 0 op 2 \(sqrt\).*'sqrt_0\.tmp_0'.*NaN"):
        run(main, loss, [[0.5, 1.0]])  # log(0.5) < 0: finite until sqrt
    assert np.isfinite(run(main, loss, [[1.5, 2.0]]))  # finite values pass the check


def test_a_nan_in_a_feed_fails_at_the_first_op_that_reads_it():
    main, loss = build()
    paddle.set_flags({"FLAGS_check_nan_inf": True})
    with pytest.raises(PreconditionNotMet, match=r"op 0 \(log\).*NaN"):
        run(main, loss, [[np.nan, 1.0]])


def test_switching_the_flag_applies_to_a_cached_program():
    main, loss = build()
    exe = paddle.static.Executor(paddle.CPUPlace())
    assert np.isnan(run(main, loss, [[0.0, 1.0]], exe))
    paddle.set_flags({"FLAGS_check_nan_inf": True})
    with pytest.raises(PreconditionNotMet, match="log"):
        run(main, loss, [[0.0, 1.0]], exe)
    paddle.set_flags({"FLAGS_check_nan_inf": False})
    assert np.isnan(run(main, loss, [[0.0, 1.0]], exe))


def test_the_environment_variable_sets_the_flag():
    code = "import refimpl; print(refimpl.get_flags('FLAGS_check_nan_inf')['FLAGS_check_nan_inf'])"
    env = dict(os.environ, FLAGS_check_nan_inf="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.strip() == "True", out.stderr


def test_switching_the_flag_applies_to_a_cached_compiled_program():
    """CompiledProgram keeps its own cache of prepared places: it keys on the flag as the executor does."""
    main, loss = build()
    exe, scope = paddle.static.Executor(paddle.CPUPlace()), paddle.static.Scope()
    compiled = paddle.static.CompiledProgram(main, places=[paddle.CPUPlace()] * 2)
    x = {"x": np.array([[0.0, 1.0], [1.0, 1.0]], dtype="float32")}
    assert np.isnan(exe.run(compiled, feed=x, fetch_list=[loss], scope=scope)[0]).any()
    paddle.set_flags({"FLAGS_check_nan_inf": True})
    with pytest.raises(RankFailed, match="log") as info:  # the place whose row is 0 fails
        exe.run(compiled, feed=x, fetch_list=[loss], scope=scope)
    assert isinstance(info.value.error, PreconditionNotMet)
