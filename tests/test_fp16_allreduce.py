"""FP16AllReduceOptimizer (fleet meta-optimizer): Paddle's programs, and data parallelism on float16 gradients.

The recorded programs in ``oracle_localsgd/`` come from Paddle 3.3.1 (legacy
IR), the meta-optimizer applied directly to the one-fc net of
``test_localsgd.py`` (see ``oracle_localsgd/README.md``). The numbers: the
program runs data-parallel through ``CompiledProgram`` (whose pass
all-reduces the gradients that ``op_role_var`` names, here the float16
copies), and every step's update is checked against NumPy applied to the
per-rank float32 gradients: cast to float16, summed in rank order in
float16, divided by the rank count, cast back.
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.fleet.base.role_maker import Role, UserDefinedRoleMaker
from refimpl.distributed.fleet.meta_optimizers.fp16_allreduce_optimizer import FP16AllReduceOptimizer
from refimpl.framework import Program, unique_name

from test_localsgd import paddle_test_net, program_lines, recorded, regression_net, role_maker


def fp16_strategy(on=True):
    s = DistributedStrategy()
    s.fp16_allreduce = on
    return s


def compress(loss, startup, inner, rm=None):
    opt = FP16AllReduceOptimizer(inner)
    opt._set_basic_info(loss, rm or role_maker(1, 2), inner, fp16_strategy())
    with paddle.static.program_guard(loss.block.program, startup), unique_name.guard():
        opt.minimize(loss, startup)
    return opt


@pytest.mark.parametrize("dtype, name", [("float32", "fp16_allreduce_sgd"),
                                         ("float16", "fp16_allreduce_sgd_float16_net")])
def test_programs_match_paddle(dtype, name):
    main, startup, loss = paddle_test_net(dtype)
    compress(loss, startup, paddle.optimizer.SGD(learning_rate=0.01))
    expected = recorded(name)
    if dtype == "float32":  # (a float16 net's startup is the initializers' business, not this optimizer's)
        assert program_lines(startup) == expected["startup"]
    assert program_lines(main) == expected["main"]


def test_paddle_unittest_net_gets_twelve_casts():
    """Paddle's test_fleet_fp16_allreduce_meta_optimizer: 3 fc layers, 6 casts down and 6 back."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data(name="x", shape=[-1, 32], dtype="float32")
        y = paddle.static.data(name="y", shape=[-1, 1], dtype="int64")
        h = paddle.static.nn.fc(x=x, size=64, activation="tanh")
        h = paddle.static.nn.fc(x=h, size=64, activation="tanh")
        pred = paddle.static.nn.fc(x=[h], size=2, activation="softmax")
        cost = paddle.nn.functional.cross_entropy(input=pred, label=y, reduction="none", use_softmax=False)
        loss = paddle.mean(x=cost)
    compress(loss, startup, paddle.optimizer.SGD(learning_rate=0.01))
    casts = [op for op in main.global_block().ops if op.type == "cast"]
    assert len(casts) == 12
    assert all("cast_fp16" in op.output("Out")[0] for op in casts)


def test_can_apply_lists_and_switches():
    main, startup, loss = paddle_test_net()
    inner = paddle.optimizer.SGD(0.1)

    def can(rm, s):
        opt = FP16AllReduceOptimizer(inner)
        opt._set_basic_info(loss, rm, inner, s)
        return opt._can_apply()
    assert can(role_maker(0, 2), fp16_strategy())
    assert can(role_maker(0, 1), fp16_strategy())  # Paddle does not ask for several workers
    assert not can(role_maker(0, 2), fp16_strategy(False))
    ps_role = UserDefinedRoleMaker(is_collective=False, current_id=0, role=Role.WORKER, worker_num=2,
                                   server_endpoints=["127.0.0.1:6000"])
    ps_role._generate_role()
    assert not can(ps_role, fp16_strategy())
    opt = FP16AllReduceOptimizer(inner)
    assert opt.meta_optimizers_black_list == ["DGCOptimizer"]
    assert "LocalSGDOptimizer" in opt.meta_optimizers_white_list
    assert "AdaptiveLocalSGDOptimizer" in opt.meta_optimizers_white_list
    s = fp16_strategy()
    opt._disable_strategy(s)
    assert not s.fp16_allreduce
    opt._enable_strategy(s, None)
    assert s.fp16_allreduce


# ---- numbers: data parallel on float16 gradients ---------------------------------------------------
STEPS, ROWS, LR = 4, 3, 0.5
PARAMS = ("fc_0.w_0", "fc_0.b_0")


def fp16_mean(grads):
    """What the program computes from the ranks' float32 gradients: float16 copies summed in rank order
    in float16, scaled by 1/n in float16, cast back to float32."""
    acc = grads[0].astype(np.float16)
    for g in grads[1:]:
        acc = (acc + g.astype(np.float16)).astype(np.float16)
    return (acc * np.float16(1.0 / len(grads))).astype(np.float32)


def run_data_parallel(nranks, fp16, fuse=False):
    main, startup, loss = regression_net()
    inner = paddle.optimizer.SGD(LR)
    if fp16:
        compress(loss, startup, inner, role_maker(0, nranks))
    else:
        with paddle.static.program_guard(main, startup), unique_name.guard():
            inner.minimize(loss, startup)
    rng = np.random.default_rng(3)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    paddle.seed(11)
    exe.run(startup, scope=scope)
    bs = paddle.static.BuildStrategy()
    bs.fuse_all_reduce_ops = fuse  # one allreduce per float16 gradient, or one per fused float16 bucket
    compiled = paddle.static.CompiledProgram(main, build_strategy=bs, places=[paddle.CPUPlace()] * nranks)
    history = []
    for _ in range(STEPS):
        x = rng.standard_normal((nranks * ROWS, 4)).astype("float32")
        y = rng.standard_normal((nranks * ROWS, 1)).astype("float32")
        before = {n: np.array(scope.find_var(n).get_tensor()) for n in PARAMS}
        grads = exe.run(compiled, feed={"x": x, "y": y}, fetch_list=[n + "@GRAD" for n in PARAMS],
                        scope=scope, return_merged=False)
        after = {n: np.array(scope.find_var(n).get_tensor()) for n in PARAMS}
        history.append((before, {n: [np.asarray(g) for g in grads[i]] for i, n in enumerate(PARAMS)}, after))
    return history


@pytest.mark.parametrize("fuse", [False, True])
@pytest.mark.parametrize("nranks", [2, 4])
def test_updates_use_the_float16_mean_of_the_rank_gradients(nranks, fuse):
    history = run_data_parallel(nranks, fp16=True, fuse=fuse)
    rounding_seen = False
    for before, grads, after in history:
        for n in PARAMS:
            assert len(grads[n]) == nranks
            g16 = fp16_mean(grads[n])
            g32 = np.mean(np.stack(grads[n]), axis=0, dtype=np.float32)
            expected = before[n] - np.float32(LR) * g16
            np.testing.assert_allclose(after[n], expected, rtol=1e-6, atol=1e-7)
            rounding_seen |= not np.allclose(after[n], before[n] - np.float32(LR) * g32, rtol=1e-6, atol=1e-7)
    assert rounding_seen  # the float16 rounding is visible: these are not the float32 updates


@pytest.mark.parametrize("nranks", [2, 4])
def test_equals_plain_data_parallel_within_float16_rounding(nranks):
    fp16, fp32 = run_data_parallel(nranks, True), run_data_parallel(nranks, False)
    for (_, _, a16), (_, _, a32) in zip(fp16, fp32):
        for n in PARAMS:
            # float16 keeps 11 significant bits: each step moves a parameter by LR * g, rounded to ~2**-11 of it
            np.testing.assert_allclose(a16[n], a32[n], rtol=2e-3, atol=2e-3)


def test_through_fleet_nothing_all_reduces_the_float16_copies():
    """Paddle 3.3.1 chains no RawProgramOptimizer under FP16AllReduceOptimizer (neither white-lists the
    other), so fleet's programs have the casts and no collective at all: the op types below are those
    Paddle 3.3.1 (legacy IR) gives for this net as trainer 1 of 2 through fleet.distributed_optimizer."""
    from refimpl.distributed.fleet import Fleet
    f = Fleet()
    f.init(role_maker(1, 2))
    main, startup, loss = paddle_test_net()
    s = fp16_strategy()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        f.distributed_optimizer(paddle.optimizer.Momentum(0.01, 0.9), strategy=s).minimize(loss)
    assert f._get_applied_meta_list() == ["FP16AllReduceOptimizer"]
    assert [op.type for op in main.global_block().ops] == [
        "mul", "elementwise_add", "softmax", "softmax_with_cross_entropy", "reduce_mean", "fill_constant",
        "reduce_mean_grad", "softmax_with_cross_entropy_grad", "softmax_grad", "elementwise_add_grad", "mul_grad",
        "cast", "cast", "cast", "cast", "momentum", "momentum"]
    assert [op.type for op in startup.global_block().ops] == [
        "uniform_random", "fill_constant", "fill_constant", "fill_constant", "fill_constant"]
