"""LocalSGD and adaptive LocalSGD (fleet meta-optimizers): Paddle's programs, and their numbers on ranks.

The recorded programs in ``oracle_localsgd/`` come from Paddle 3.3.1 (legacy
IR) building the net of Paddle's ``test_fleet_localsgd_meta_optimizer.py``
family, shrunk to one ``fc``, with the meta-optimizer applied directly as
trainer 1 of 2 (see ``oracle_localsgd/README.md``). The numbers are checked
against a NumPy simulation of LocalSGD: each rank trains on its shard, and
the parameters are averaged at the steps the strategy says.
"""
import json
import os

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.fleet.base.role_maker import Role, UserDefinedRoleMaker
from refimpl.distributed.fleet.meta_optimizers.localsgd_optimizer import (
    AdaptiveLocalSGDOptimizer, LocalSGDOptimizer)
from refimpl.framework import Program, unique_name

ORACLE = os.path.join(os.path.dirname(__file__), "oracle_localsgd")
ENDPOINTS = ["127.0.0.1:36001", "127.0.0.1:36002", "127.0.0.1:36003", "127.0.0.1:36004"]

# ---- the recorded programs ---------------------------------------------------------------------
KEYS = ("op_role", "ring_id", "root", "reduce_type", "scale", "step", "value", "dtype", "shape", "in_dtype",
        "out_dtype", "force_cpu", "rank", "nranks", "endpoint", "other_endpoints", "endpoints", "op_role_var")


def _val(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_val(x) for x in v) + "]"
    return str(v)


def op_line(op):
    """``type slots -> slots | attrs``: the form the recorded op lists use (conditional_block's lists as sets)."""
    cond = op.type == "conditional_block"

    def slots(d):
        return " ".join(f"{k}={','.join(sorted(v) if cond else v)}" for k, v in sorted(d.items())
                        if v and not (cond and k == "Scope"))
    a = op.all_attrs()
    attrs = " ".join(f"{k}={_val(a[k])}" for k in KEYS if k in a and not (k == "op_role_var" and not a[k]))
    return f"{op.type} {slots(op.inputs)} -> {slots(op.outputs)} | {attrs}"


def program_lines(program):
    return [[op_line(op) for op in block.ops] for block in program.blocks]


def recorded(name):
    with open(os.path.join(ORACLE, name + ".json")) as f:
        return json.load(f)


def role_maker(rank, nranks, collective=True):
    rm = UserDefinedRoleMaker(is_collective=collective, current_id=rank, role=Role.WORKER, worker_num=nranks,
                              worker_endpoints=ENDPOINTS[:nranks])
    rm._generate_role()
    return rm


def paddle_test_net(dtype="float32"):
    """One fc with softmax, cross entropy, mean: the recorded programs' net."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data(name="x", shape=[-1, 4], dtype=dtype)
        y = paddle.static.data(name="y", shape=[-1, 1], dtype="int64")
        pred = paddle.static.nn.fc(x=x, size=2, activation="softmax")
        cost = paddle.nn.functional.cross_entropy(input=pred, label=y, reduction="none", use_softmax=False)
        loss = paddle.mean(x=cost)
    return main, startup, loss


def strategy(kind, k, begin):
    s = DistributedStrategy()
    if kind == "localsgd":
        s.localsgd = True
        s.localsgd_configs = {"k_steps": k, "begin_step": begin}
    else:
        s.adaptive_localsgd = True
        s.adaptive_localsgd_configs = {"init_k_steps": k, "begin_step": begin}
    return s


def apply(cls, inner, loss, startup, rm, s):
    opt = cls(inner)
    opt._set_basic_info(loss, rm, inner, s)
    with paddle.static.program_guard(loss.block.program, startup), unique_name.guard():
        opt.minimize(loss, startup)
    return opt


@pytest.mark.parametrize("cls, kind, inner, name", [
    (LocalSGDOptimizer, "localsgd", lambda: paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9),
     "localsgd_momentum_k2_b3"),
    (AdaptiveLocalSGDOptimizer, "adaptive_localsgd", lambda: paddle.optimizer.SGD(learning_rate=0.01),
     "adaptive_localsgd_sgd_k2_b3"),
])
def test_programs_match_paddle(cls, kind, inner, name):
    main, startup, loss = paddle_test_net()
    apply(cls, inner(), loss, startup, role_maker(1, 2), strategy(kind, 2, 3))
    expected = recorded(name)
    assert program_lines(startup) == expected["startup"]
    assert program_lines(main) == expected["main"]
    # what Paddle's own unit test asserts: a conditional_block writing the snapshots
    outs = "".join(",".join(op.output("Out")) for op in main.global_block().ops if op.type == "conditional_block")
    assert "@SNAPSHOT" in outs


# ---- _can_apply and the strategy switches ------------------------------------------------------------
@pytest.mark.parametrize("cls, kind", [(LocalSGDOptimizer, "localsgd"),
                                       (AdaptiveLocalSGDOptimizer, "adaptive_localsgd")])
def test_can_apply(cls, kind):
    main, startup, loss = paddle_test_net()

    def can(rm, s, inner=None):
        inner = inner or paddle.optimizer.SGD(0.1)
        opt = cls(inner)
        opt._set_basic_info(loss, rm, inner, s)
        return opt._can_apply()
    assert can(role_maker(0, 2), strategy(kind, 1, 1))
    assert can(role_maker(0, 2), strategy(kind, 1, 1), paddle.optimizer.Momentum(0.1, 0.9))
    assert not can(role_maker(0, 2), strategy(kind, 1, 1), paddle.optimizer.Adam(0.1))
    assert not can(role_maker(0, 1), strategy(kind, 1, 1))          # one worker
    assert not can(role_maker(0, 2), DistributedStrategy())         # switch off
    ps_role = UserDefinedRoleMaker(is_collective=False, current_id=0, role=Role.WORKER, worker_num=2,
                                   server_endpoints=["127.0.0.1:6000"])
    ps_role._generate_role()
    assert not can(ps_role, strategy(kind, 1, 1))


def test_a_program_without_parameters_is_refused():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data(name="x", shape=[-1, 4], dtype="float32")
        x.stop_gradient = False
        loss = paddle.mean(x)
    with pytest.raises(InvalidArgument, match="LocalSGDOptimizer: the program of loss 'mean_0.tmp_0' has no"):
        apply(LocalSGDOptimizer, paddle.optimizer.SGD(0.1), loss, startup, role_maker(0, 2),
              strategy("localsgd", 1, 1))


def test_strategy_switches_and_lists():
    lo, ad = LocalSGDOptimizer(paddle.optimizer.SGD(0.1)), AdaptiveLocalSGDOptimizer(paddle.optimizer.SGD(0.1))
    assert lo.meta_optimizers_white_list == ad.meta_optimizers_white_list == ["AMPOptimizer"]
    assert lo.meta_optimizers_black_list == ["AdaptiveLocalSGDOptimizer"]
    assert ad.meta_optimizers_black_list == ["LocalSGDOptimizer"]
    s = strategy("localsgd", 4, 30)
    lo._disable_strategy(s)
    assert not s.localsgd
    lo._enable_strategy(s, None)
    assert s.localsgd and s.localsgd_configs == {"k_steps": 1, "begin_step": 1}
    s = strategy("adaptive_localsgd", 4, 30)
    ad._disable_strategy(s)
    assert not s.adaptive_localsgd
    ad._enable_strategy(s, None)
    assert s.adaptive_localsgd and s.adaptive_localsgd_configs == {"init_k_steps": 1, "begin_step": 1}


# ---- numbers on ranks --------------------------------------------------------------------------------
STEPS, ROWS, LR, MU = 7, 3, 0.1, 0.8


def regression_net():
    """pred = x @ w + b, loss = mean((pred - y)^2): gradients a NumPy simulation can write down."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data(name="x", shape=[-1, 4], dtype="float32")
        y = paddle.static.data(name="y", shape=[-1, 1], dtype="float32")
        pred = paddle.static.nn.fc(x=x, size=1)
        loss = paddle.mean(paddle.square(pred - y))
    return main, startup, loss


def data(nranks):
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((STEPS, nranks * ROWS, 4)).astype("float32")
    # every rank's shard has its own target, so that the ranks drift apart between averagings
    w_true = rng.standard_normal((nranks, 4, 1)).astype("float32")
    ys = np.concatenate([xs[:, r * ROWS:(r + 1) * ROWS] @ w_true[r] for r in range(nranks)], axis=1)
    return xs, ys


def train_ranks(cls, kind, momentum, k, begin, nranks):
    xs, ys = data(nranks)

    def rank_fn():
        r = context.current().rank
        main, startup, loss = regression_net()
        inner = paddle.optimizer.Momentum(LR, MU) if momentum else paddle.optimizer.SGD(LR)
        apply(cls, inner, loss, startup, role_maker(r, nranks), strategy(kind, k, begin))
        scope = paddle.static.Scope()
        exe = paddle.static.Executor()
        paddle.seed(r)  # different initial values on every rank: the startup broadcasts rank 0's
        exe.run(startup, scope=scope)
        init = {n: np.array(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0")}
        losses, ks = [], []
        for s in range(STEPS):
            sl = slice(r * ROWS, (r + 1) * ROWS)
            out = exe.run(main, feed={"x": xs[s, sl], "y": ys[s, sl]}, fetch_list=[loss], scope=scope)
            losses.append(float(out[0]))
            ks.append(int(np.array(scope.find_var("k_steps").get_tensor())[0]))
        final = {n: np.array(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0")}
        return init, final, losses, ks
    return xs, ys, run_in_process(nranks, rank_fn, timeout=60)


def simulate(init, xs, ys, nranks, momentum, k, begin, adaptive):
    """LocalSGD in float64 NumPy: per-rank updates, averaging as Paddle's conditional blocks decide."""
    w = [init["fc_0.w_0"].astype(np.float64) for _ in range(nranks)]
    b = [init["fc_0.b_0"].astype(np.float64) for _ in range(nranks)]
    vw = [np.zeros_like(w[0]) for _ in range(nranks)]
    vb = [np.zeros_like(b[0]) for _ in range(nranks)]
    last = 0 if adaptive else begin
    init_k, loss_0, ks = k, None, []
    for s in range(1, STEPS + 1):
        losses = []
        for r in range(nranks):
            x = xs[s - 1, r * ROWS:(r + 1) * ROWS].astype(np.float64)
            y = ys[s - 1, r * ROWS:(r + 1) * ROWS].astype(np.float64)
            err = x @ w[r] + b[r] - y
            losses.append(np.mean(err ** 2))
            dpred = 2 * err / err.size
            gw, gb = x.T @ dpred, dpred.sum(axis=0)
            if momentum:
                vw[r], vb[r] = MU * vw[r] + gw, MU * vb[r] + gb
                gw, gb = vw[r], vb[r]
            w[r], b[r] = w[r] - LR * gw, b[r] - LR * gb
        avg_loss = np.mean(losses)
        if s == 1:
            loss_0 = avg_loss
        if s <= begin or s - last == k:
            w = [np.mean(w, axis=0)] * nranks
            b = [np.mean(b, axis=0)] * nranks
            if s > begin and adaptive:
                # the learning rate is constant here, so lr_0 / lr is 1
                k = int(np.clip(np.ceil(np.sqrt(avg_loss / loss_0 * init_k)), 1, 16))
            last = s
        ks.append(k)
    return w, b, ks


@pytest.mark.parametrize("momentum, k, begin, nranks", [
    (False, 2, 1, 2),   # averaged at steps 1, 3, 5, 7
    (True, 3, 2, 2),    # at steps 1, 2, then 5: the ranks end apart
    (True, 3, 3, 4),    # 1, 2, 3, 6
    (False, 4, 1, 4),   # 1, 5
])
def test_localsgd_numbers_match_a_numpy_simulation(momentum, k, begin, nranks):
    xs, ys, results = train_ranks(LocalSGDOptimizer, "localsgd", momentum, k, begin, nranks)
    init = results[0][0]
    for r in range(1, nranks):  # the startup's broadcast: every rank starts from rank 0's values
        np.testing.assert_array_equal(results[r][0]["fc_0.w_0"], init["fc_0.w_0"])
    w, b, _ = simulate(init, xs, ys, nranks, momentum, k, begin, adaptive=False)
    for r in range(nranks):
        np.testing.assert_allclose(results[r][1]["fc_0.w_0"], w[r], rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(results[r][1]["fc_0.b_0"], b[r], rtol=2e-5, atol=1e-6)
    # the ranks end together exactly when the last step averaged
    ended_together = np.allclose(w[0], w[1])
    assert ended_together == ((STEPS - begin) % k == 0)
    assert np.array_equal(results[0][1]["fc_0.w_0"], results[1][1]["fc_0.w_0"]) == ended_together


@pytest.mark.parametrize("init_k, begin, nranks", [(2, 1, 2), (3, 2, 4)])
def test_adaptive_localsgd_numbers_match_a_numpy_simulation(init_k, begin, nranks):
    xs, ys, results = train_ranks(AdaptiveLocalSGDOptimizer, "adaptive_localsgd", True, init_k, begin, nranks)
    init = results[0][0]
    w, b, ks = simulate(init, xs, ys, nranks, True, init_k, begin, adaptive=True)
    for r in range(nranks):
        assert results[r][3] == ks  # k_steps after every step
        np.testing.assert_allclose(results[r][1]["fc_0.w_0"], w[r], rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(results[r][1]["fc_0.b_0"], b[r], rtol=2e-5, atol=1e-6)


# ---- through fleet -----------------------------------------------------------------------------------
def train_with_fleet(nranks, s):
    from refimpl.distributed.fleet import Fleet
    xs, ys = data(nranks)

    def rank_fn():
        r = context.current().rank
        f = Fleet()
        f.init(role_maker(r, nranks))
        main, startup, loss = regression_net()
        with paddle.static.program_guard(main, startup), unique_name.guard():
            opt = f.distributed_optimizer(paddle.optimizer.Momentum(LR, MU), strategy=s)
            opt.minimize(loss)
        scope = paddle.static.Scope()
        exe = paddle.static.Executor()
        paddle.seed(r)
        exe.run(startup, scope=scope)
        for step in range(STEPS):
            sl = slice(r * ROWS, (r + 1) * ROWS)
            exe.run(main, feed={"x": xs[step, sl], "y": ys[step, sl]}, fetch_list=[loss], scope=scope)
        ops = [op.type for op in main.global_block().ops]
        return f._get_applied_meta_list(), ops, {n: np.array(scope.find_var(n).get_tensor())
                                                 for n in ("fc_0.w_0", "fc_0.b_0")}
    return run_in_process(nranks, rank_fn, timeout=60)


def test_program_through_fleet_matches_paddle():
    from refimpl.distributed.fleet import Fleet
    f = Fleet()
    f.init(role_maker(1, 2))
    main, startup, loss = paddle_test_net()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        f.distributed_optimizer(paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9),
                                strategy=strategy("localsgd", 2, 3)).minimize(loss)
    expected = recorded("localsgd_momentum_k2_b3_fleet")
    assert f._get_applied_meta_list() == ["RawProgramOptimizer", "LocalSGDOptimizer"]
    assert program_lines(startup) == expected["startup"]
    assert program_lines(main) == expected["main"]


def test_through_fleet_raw_program_wraps_localsgd_as_in_paddle():
    """Paddle 3.3.1 chains RawProgramOptimizer over LocalSGDOptimizer (its white list names it), so the
    gradients are all-reduced every step too and the ranks never drift: the numbers of plain data
    parallelism. Adaptive LocalSGD is not in that white list and runs alone."""
    local = train_with_fleet(2, strategy("localsgd", 2, 1))
    plain = train_with_fleet(2, DistributedStrategy())
    adaptive = train_with_fleet(2, strategy("adaptive_localsgd", 2, 1))
    assert local[0][0] == ["RawProgramOptimizer", "LocalSGDOptimizer"]
    assert adaptive[0][0] == ["AdaptiveLocalSGDOptimizer"]
    assert "conditional_block" in local[0][1] and "all_reduce" in local[0][1]
    for n in ("fc_0.w_0", "fc_0.b_0"):
        np.testing.assert_allclose(local[0][2][n], local[1][2][n], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(local[0][2][n], plain[0][2][n], rtol=1e-5, atol=1e-6)
