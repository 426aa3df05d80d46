"""The oracle: refimpl builds, runs and garbage-collects programs exactly as Paddle 3.3.1 did.

For every recorded case under ``../shared/oracle/programs`` (and the extra
Paddle-recorded cases in ``tests/oracle_extra``):
(a) building the same model with refimpl's API gives the same main and
    startup programs;
(b) the recorded main program, run from the recorded initial persistables
    on the recorded feeds, gives the recorded losses and final persistables;
(c) ``eager_deletion_vars`` equals Paddle's plan, with and without skip vars,
    and the executor frees exactly those variables after exactly those ops.
"""
import glob
import os

import numpy as np
import pytest

import refimpl as paddle
from refimpl.executor import Trace, eager_deletion_vars
from refimpl.framework import Program

from oracle import EXTRA, array, case_files, diff_programs, load, load_models, replay

PUBLIC = case_files()
EXTRA_FILES = sorted(glob.glob(os.path.join(EXTRA, "*.json")))
ALL = PUBLIC + EXTRA_FILES
ids = [os.path.basename(p) for p in ALL]


def _builder(case_path, d):
    if case_path in PUBLIC:
        models = load_models()
    else:
        import importlib.util
        spec = importlib.util.spec_from_file_location("extra_models", os.path.join(EXTRA, "extra_models.py"))
        models = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(models)
    models.bind(paddle, paddle.nn.functional)
    return models.MODELS[d["case"]]


def _build(case_path, d):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            loss, _ = _builder(case_path, d)(d["config"])
    return main, startup, loss


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_builds_the_same_programs(path):
    d = load(path)
    main, startup, loss = _build(path, d)
    assert loss.name == d["loss_name"]
    assert diff_programs(main.to_dict(), d["main"]) == []
    assert diff_programs(startup.to_dict(), d["startup"]) == []


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_reproduces_recorded_numbers(path):
    d = load(path)
    _, scope, losses, _ = replay(d)
    for got, want in zip(losses, d["fetched_loss"]):
        np.testing.assert_allclose(got, array(want), rtol=1e-5, atol=1e-6)
    for name, entry in d["final_persistables"].items():
        np.testing.assert_allclose(np.array(scope.find_var(name).get_tensor()), array(entry),
                                   rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_eager_deletion_plan_matches_paddle(path):
    d = load(path)
    prog = Program.from_dict(d["main"])
    assert eager_deletion_vars(prog, [d["loss_name"]]) == d["eager_deletion_vars"]
    assert eager_deletion_vars(prog, []) == d["eager_deletion_vars_no_skip"]


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_executor_frees_exactly_the_plan(path):
    d = load(path)
    trace = Trace()
    prog, _, _, _ = replay(d, trace=trace)
    plan = d["eager_deletion_vars"]
    for b, block_plan in enumerate(plan):
        want = {i: names for i, names in enumerate(block_plan) if names}
        got = trace.frees_by_op(block=b)
        ran = {e.op for e in trace.of_kind("op") if e.block == b}
        want = {i: n for i, n in want.items() if i in ran}
        assert got == want, f"block {b}"


def test_no_need_buffer_slots_match_paddle():
    from refimpl.ops import get_op_def
    for path in ALL:
        d = load(path)
        for op_type, slots in d["no_need_buffer_slots"].items():
            assert sorted(get_op_def(op_type).no_need_buffer) == sorted(slots), (path, op_type)
