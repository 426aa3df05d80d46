"""Two pipeline layouts in one world (``pipeline_optimizer.claim_ring``).

The pipeline's transfer rings have fixed ids (``10000 + pipe * 1000 + r``) and its data rings too
(``9999 - i``, without fleet's hybrid group). Building pp 4 x dp 2 and then pp 2 x dp 4 in the same
8-rank world must give the second layout rings of its own ranks (a fresh group bound to each fixed id
an earlier layout holds with other ranks), and the first layout's programs must still run on theirs.
Expected values: a one-device run of the same net on the whole batch (plain SGD, float32, 1e-5).
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

ROWS, WIDTH, STEPS = 16, 4, 2


def _batches():
    rng = np.random.default_rng(3)
    return [rng.standard_normal((ROWS, WIDTH)).astype("float32") for _ in range(STEPS)]


def _net(stages):
    h = paddle.static.data("x", [-1, WIDTH], "float32")
    for s in range(stages):
        with paddle.static.device_guard(f"gpu:{s}"):
            h = paddle.static.nn.fc(h, WIDTH, activation="tanh")
            if s == stages - 1:
                loss = paddle.mean(paddle.square(h))
    return loss


def _init(stages):
    rng = np.random.default_rng(7)
    return {f"fc_{s}.{k}": rng.standard_normal((WIDTH, WIDTH) if k == "w_0" else (WIDTH,)).astype("float32") * 0.5
            for s in range(stages) for k in ("w_0", "b_0")}


def _one_device(stages):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        loss = _net(stages)
        paddle.optimizer.SGD(0.1).minimize(loss)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    for n, v in _init(stages).items():
        scope.find_var(n).get_tensor().set(v)
    for b in _batches():
        exe.run(main, feed={"x": b}, fetch_list=[loss], scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in _init(stages)}


def _build(pp, dp, hybrid):
    from refimpl.distributed import fleet
    s = DistributedStrategy()
    s.pipeline = True
    s.pipeline_configs = {"accumulate_steps": 4, "schedule_mode": "1F1B"}
    if hybrid:
        s.hybrid_configs = {"pp_degree": pp, "dp_degree": dp}
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True, strategy=s)
        loss = _net(pp)
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), s).minimize(loss)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    mine = [n for n in _init(pp) if main._pipeline_opt.has_var(n)]
    for n in mine:
        scope.find_var(n).get_tensor().set(_init(pp)[n])
    return main, loss, exe, scope, mine


def _train(built):
    main, loss, exe, scope, mine = built
    d, rows = main._pipeline_opt.layout.dp_rank, ROWS // main._pipeline_opt.layout.dp
    for b in _batches():
        exe.run(main, feed={"x": b[d * rows:(d + 1) * rows]}, fetch_list=[loss], scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in mine}


def _rank_fn(hybrid, interleave):
    first = _build(4, 2, hybrid)
    if interleave:   # build the second layout before the first trains: the first must keep its rings
        second = _build(2, 4, hybrid)
        return _train(first), _train(second)
    got = _train(first)
    return got, _train(_build(2, 4, hybrid))


@pytest.mark.parametrize("hybrid, interleave", [(True, False), (False, False), (True, True), (False, True)],
                         ids=["hybrid_configs", "marked-stages", "hybrid-built-first", "marked-built-first"])
def test_pp4xdp2_then_pp2xdp4_both_train_as_one_device(hybrid, interleave):
    ref4, ref2 = _one_device(4), _one_device(2)
    out = run_in_process(8, _rank_fn, hybrid, interleave, timeout=180)
    seen4, seen2 = set(), set()
    for r, (got4, got2) in enumerate(out):
        for n, v in got4.items():
            np.testing.assert_allclose(v, ref4[n], rtol=1e-5, atol=1e-6, err_msg=f"pp4 x dp2: {n} on rank {r}")
        for n, v in got2.items():
            np.testing.assert_allclose(v, ref2[n], rtol=1e-5, atol=1e-6, err_msg=f"pp2 x dp4: {n} on rank {r}")
        seen4 |= set(got4)
        seen2 |= set(got2)
    assert seen4 == set(ref4) and seen2 == set(ref2)


def test_a_ring_id_held_by_other_ranks_is_bound_to_a_fresh_group():
    from refimpl.distributed.fleet.meta_optimizers.pipeline_optimizer import claim_ring

    def rank_fn():
        ctx = context.current()
        claim_ring(10000, [0, 1])
        before = ctx.snapshot_rings([10000])
        claim_ring(10000, [0, 1])              # the same group: kept as it is
        same = ctx.snapshot_rings([10000]) == before
        claim_ring(10000, [1, 2])              # other ranks: a fresh group
        return same, tuple(ctx.groups[10000]), 10000 in ctx.comms
    out = run_in_process(4, rank_fn, timeout=30)
    assert [o[0] for o in out] == [True] * 4
    assert [o[1] for o in out] == [(1, 2)] * 4
    assert [o[2] for o in out] == [False, True, True, False]
