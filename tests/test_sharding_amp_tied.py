"""Static sharding + AMP (the GPU AMP lists: real float16 casts) with a weight shared by two layers.

AMP casts the tied weight once, before the program's first op, where no segment reaches; Paddle 3.3.1
leaves that ``cast`` on the rank that does not own the weight, which then reads a pruned parameter
(NotFound when it runs). refimpl removes it there (``sharding/segments.py``, its docstring). The tests:
both ranks' programs against Paddle 3.3.1's (``oracle_sharding/tied_amp_programs.json``, recorded by
``oracle_sharding/tied_amp_cases.py``): the owner's equal, the other's less exactly that cast; and the
ranks' trained parameters against one device's.
"""
import json
import os
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

W = 16
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "oracle_sharding"))
import sharding_cases  # noqa: E402
import tied_amp_cases  # noqa: E402

from fleet_env import as_trainer

with open(os.path.join(HERE, "oracle_sharding", "tied_amp_programs.json")) as _f:
    PADDLE = json.load(_f)


@pytest.fixture(autouse=True)
def _gpu_amp_lists(gpu_amp_lists):
    """Every test here with the GPU build's AMP lists (conftest.gpu_amp_lists)."""


def _net():
    """Four relu fc layers, the first and the last sharing the weight 'tied', then a softmax head."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, W], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        h = x
        for i in range(4):
            tie = paddle.ParamAttr(name="tied") if i in (0, 3) else None
            h = paddle.static.nn.fc(h, W, activation="relu", weight_attr=tie)
        pred = paddle.static.nn.fc(h, 2, activation="softmax")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(pred, y, reduction="none", use_softmax=False))
    return main, startup, loss


def _opt(kind):
    return paddle.optimizer.Momentum(0.1, 0.9) if kind == "momentum" else paddle.optimizer.Adam(0.01)


def _init(name, shape):
    return (np.random.default_rng(sum(map(ord, name))).standard_normal(shape) * 0.3).astype("float32")


def _batches():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((8, W)).astype("float32"), rng.integers(0, 2, (8, 1)).astype("int64"))
            for _ in range(3)]


def _one_device(kind):
    main, startup, loss = _net()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        paddle.static.amp.decorate(_opt(kind)).minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    for p in main.all_parameters():
        scope.find_var(p.name).get_tensor().set(_init(p.name, p.shape))
    for x, y in _batches():
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def _build_rank(kind):
    from refimpl.distributed import fleet
    main, startup, loss = _net()
    s = DistributedStrategy()
    s.sharding, s.sharding_configs = True, {"segment_broadcast_MB": 0.001, "sharding_degree": 2}
    s.amp = True
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        fleet.distributed_optimizer(_opt(kind), s).minimize(loss)
    return main, startup, loss


def _rank_program():
    main, _, _ = _build_rank("momentum")
    return [(op.type, list(op.input_arg_names), list(op.output_arg_names)) for op in main.global_block().ops], \
        sorted(main.global_block().vars)


def _rank_run(kind):
    r = context.current().rank
    main, startup, loss = _build_rank(kind)
    exe, scope = paddle.static.Executor(), paddle.static.global_scope()
    exe.run(startup)
    owned = [v for v in main.global_block().vars.values() if v.is_parameter]
    for p in owned:
        scope.find_var(p.name).get_tensor().set(_init(p.name, p.shape))
    for x, y in _batches():
        exe.run(main, feed={"x": x[r * 4:(r + 1) * 4], "y": y[r * 4:(r + 1) * 4]}, fetch_list=[loss])
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in owned}


def test_only_the_owner_casts_the_tied_weight():
    (ops0, vars0), (ops1, vars1) = run_in_process(2, _rank_program, timeout=120)
    tied_cast = ("cast", ["tied"], ["tied.cast_fp16"])
    assert "tied" in vars0 and "tied" not in vars1  # rank 0 owns the tied weight
    # Paddle 3.3.1's rank-0 program starts with that cast, and so does refimpl's
    assert ops0[0] == tied_cast
    assert tied_cast not in ops1
    # rank 1 reads the weight only through the broadcast copies rank 0 sends
    assert not any("tied" in ins for _, ins, _ in ops1)
    tied_broadcasts = [ins[0] for t, ins, _ in ops1 if t == "broadcast" and ins[0].startswith("tied")]
    assert tied_broadcasts and all(n.startswith("tied.cast_fp16@BroadCast") for n in tied_broadcasts)
    # every var an op of rank 1 reads is written before it or is a var of the program
    names = set(vars1)
    assert all(n in names for _, ins, _ in ops1 for n in ins)


@pytest.mark.parametrize("kind", ["momentum", "adam"])
def test_tied_weight_ranks_give_one_device(kind):
    ref = _one_device(kind)
    results = run_in_process(2, _rank_run, kind, timeout=120)
    holders = {}
    for rank, params in enumerate(results):
        for name, value in params.items():
            holders.setdefault(name, []).append(rank)
            # float16 compute on both sides; the sharded run sums two half-batch gradients
            np.testing.assert_allclose(value, ref[name], rtol=2e-3, atol=2e-4, err_msg=f"{name} on rank {rank}")
    assert sorted(holders) == sorted(ref)
    assert all(len(h) == 1 for h in holders.values()), holders


@pytest.fixture
def clean_env(monkeypatch):
    return as_trainer(monkeypatch)


@pytest.mark.parametrize("case", ["tied0", "tied1"])
def test_programs_are_paddles_less_the_foreign_cast(clean_env, case):
    got = json.loads(json.dumps(sharding_cases.record(*tied_amp_cases.build(paddle, case))))
    want = PADDLE[case]
    tied_cast = ["cast", ["tied"], ["tied.cast_fp16"], {"op_role": 0}]
    assert want["main0"][0] == tied_cast   # Paddle's first op on both trainers
    if case == "tied1":   # trainer 1 does not own 'tied' (Paddle's program reads it all the same)
        assert "tied" not in want["vars"]
        want = dict(want, main0=want["main0"][1:])
    assert sorted(got) == sorted(want)
    for key in sorted(want):
        assert got[key] == want[key], f"{case}: {key} differs"
