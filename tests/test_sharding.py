"""Static ZeRO sharding (``strategy.sharding``, ``ShardingOptimizer``): Paddle 3.3.1's programs,
one device's numbers on in-process ranks, 1/N of the optimizer state per rank, typed errors.

Programs: ``oracle_sharding/programs.json`` was recorded from Paddle 3.3.1 (/tmp/pd33,
``FLAGS_enable_pir_api=0``) by ``oracle_sharding/sharding_cases.py``, which says how the CPU wheel
was made to build what the GPU build builds; every op of every block (type, inputs, outputs, ring
ids, roots, op roles ...) and the vars must be the same here. Paddle's own
``test_fleet_sharding_meta_optimizer.py`` asserts the same op lists but under the op names of
Paddle 2.x (``c_broadcast``, ``c_reduce_sum``, ``c_allreduce_sum``); Paddle 3.3.1's sharding code
writes ``broadcast``, ``reduce`` and ``all_reduce``, and so does refimpl.
"""
import json
import os
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "oracle_sharding"))
import sharding_cases  # noqa: E402

from fleet_env import as_trainer

with open(os.path.join(HERE, "oracle_sharding", "programs.json")) as _f:
    PADDLE = json.load(_f)


@pytest.fixture
def clean_env(monkeypatch):
    return as_trainer(monkeypatch, 0, sharding_cases.TWO)


# ---- (a) the programs of Paddle 3.3.1 --------------------------------------------------------------
#: cases where refimpl writes what Paddle meant, each with its own test below
NOT_PADDLES = {"mp+split3"}


@pytest.mark.parametrize("case", sorted(set(sharding_cases.CASES) - NOT_PADDLES))
def test_programs_are_paddles(clean_env, gpu_amp_lists, case):
    got = json.loads(json.dumps(sharding_cases.record(*sharding_cases.build(paddle, case))))
    want = PADDLE[case]
    assert sorted(got) == sorted(want)
    for key in sorted(want):
        assert got[key] == want[key], f"{case}: {key} differs"


def test_mp_backward_all_reduce_is_not_a_reduced_gradient(clean_env):
    """Paddle 3.3.1 prunes from every summing ``all_reduce``, so the model-parallel ring's backward one (the
    gradient of the gathered column-parallel layer's ``c_identity``) makes it drop, on rank 3, the
    ``reduce`` of the gradients rank 1 owns (linear_0.*, linear_1.w_0) and the ops computing them, though its
    ``c_sync_comm_stream`` still names them. refimpl keeps them: its program is Paddle's with exactly those
    ops (and their vars) added, the ops written as in the ``mp+split`` case, where Paddle keeps them."""
    got = json.loads(json.dumps(sharding_cases.record(*sharding_cases.build(paddle, "mp+split3"))))
    want = PADDLE["mp+split3"]
    assert sorted(got) == sorted(want)
    for key in sorted(want):
        if key not in ("main0", "vars"):
            assert got[key] == want[key], f"{key} differs"
    extra = [op for op in got["main0"] if op not in want["main0"]]
    assert [op for op in got["main0"] if op in want["main0"]] == want["main0"]
    assert [(t, o) for t, _, o, _ in extra] == [
        ("c_identity", ["linear_1.tmp_0@GRAD"]),
        ("matmul_v2_grad", ["linear_1.w_0@GRAD", "relu_0.tmp_0@GRAD"]),
        ("relu_grad", ["linear_0.tmp_1@GRAD"]),
        ("elementwise_add_grad", ["linear_0.b_0@GRAD", "linear_0.tmp_0@GRAD"]),
        ("matmul_v2_grad", ["linear_0.w_0@GRAD"]),
        ("reduce", ["linear_1.w_0@GRAD"]), ("reduce", ["linear_0.b_0@GRAD"]), ("reduce", ["linear_0.w_0@GRAD"])]
    assert all(op[3]["root_id"] == 0 and op[3]["ring_id"] == 1 for op in extra if op[0] == "reduce")
    assert sorted(set(got["vars"]) - set(want["vars"])) == [
        "linear_0.b_0@GRAD", "linear_0.tmp_0@GRAD", "linear_0.tmp_1@GRAD", "linear_0.w_0@GRAD",
        "linear_1.tmp_0@GRAD", "linear_1.w_0@GRAD", "relu_0.tmp_0@GRAD"]
    assert set(want["vars"]) <= set(got["vars"])


# read from Paddle 3.3.1's test_fleet_sharding_meta_optimizer.py (test_sharding_optimizer), with the
# op names of 3.3.1's sharding code
FWD = ["mul", "elementwise_add", "tanh"] * 2 + ["mul", "elementwise_add", "softmax", "softmax_with_cross_entropy",
                                                "reduce_mean"]
BWD = ["fill_constant", "reduce_mean_grad", "softmax_with_cross_entropy_grad", "softmax_grad",
       "elementwise_add_grad", "mul_grad", "tanh_grad", "elementwise_add_grad", "mul_grad", "tanh_grad",
       "elementwise_add_grad", "mul_grad"]
HEAD = ["fill_constant"] * 3 + ["c_sync_calc_stream"] + ["broadcast"] * 6 + ["c_sync_comm_stream"]
REDUCE = ["c_sync_calc_stream"] + ["reduce"] * 6 + ["c_sync_comm_stream"]
OWNED = {"fc_1.b_0", "fc_2.b_0", "fc_2.w_0", "fc_1.b_0_velocity_0", "fc_2.b_0_velocity_0", "fc_2.w_0_velocity_0",
         "learning_rate_0"}


def test_sharding_program_reads_as_paddles_test(clean_env):
    clean_env.setenv("PADDLE_TRAINER_ID", "1")
    main, startup = sharding_cases.build(paddle, "sharding")
    assert [op.type for op in main.global_block().ops] == HEAD + FWD + BWD + REDUCE + ["momentum"] * 3
    assert {v.name for v in main.list_vars() if v.persistable} == OWNED
    assert any("@BroadCast" in v.name for v in main.list_vars())
    roots = {op.input("x")[0]: op.attr("root") for op in main.global_block().ops if op.type == "broadcast"}
    assert roots == {"fc_0.w_0@BroadCast_0": 0, "fc_0.b_0@BroadCast_0": 0, "fc_1.w_0@BroadCast_0": 0,
                     "fc_1.b_0": 1, "fc_2.w_0": 1, "fc_2.b_0": 1}
    loss_grad = next(op for op in main.global_block().ops if op.type == "fill_constant" and op.attr("op_role") == 257)
    assert loss_grad.attr("value") == pytest.approx(0.5)  # 1 / sharding_degree


def test_hybrid_dp_gradient_merge_reads_as_paddles_test(clean_env):
    """Paddle 3.3.1 cannot build this case (its ``all_reduce`` in the merge block is given slot ``X``:
    "Input x not found"); refimpl builds what Paddle's test_sharding_hybrid_dp_gm asserts."""
    clean_env.setenv("PADDLE_TRAINER_ID", "3")
    sharding_cases.CASES["hydpgm"] = (3, sharding_cases.FOUR, dict(sharding_cases.HYBRID, gradient_merge_acc_step=4),
                                      {}, {})
    try:
        main, startup = sharding_cases.build(paddle, "hydpgm")
    finally:
        del sharding_cases.CASES["hydpgm"]
    assert [op.type for op in main.blocks[0].ops] == HEAD + FWD + BWD + REDUCE + ["elementwise_add"] * 3 + [
        "increment", "elementwise_mod", "equal", "conditional_block"]
    assert [op.type for op in main.blocks[2].ops] == ["all_reduce"] * 3 + ["scale"] * 3 + ["momentum"] * 3 + [
        "fill_constant"] * 3
    assert [op.attr("scale") for op in main.blocks[2].ops if op.type == "scale"] == [0.25] * 3
    assert [op.attr("ring_id") for op in main.blocks[2].ops if op.type == "all_reduce"] == [2] * 3
    inits = {op.attr("ring_id"): op.attr("other_endpoints") for op in startup.global_block().ops
             if op.type == "c_gen_nccl_id"}
    assert inits == {1: ["127.0.0.1:36003"], 2: ["127.0.0.1:36002"]}


# ---- (b) numbers on in-process ranks ----------------------------------------------------------------
WIDTH = 16


def _net(layers=4, dtype="float64"):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, WIDTH], dtype)
        y = paddle.static.data("y", [-1, 1], "int64")
        h = x
        for _ in range(layers):
            h = paddle.static.nn.fc(h, WIDTH, activation="tanh")
        pred = paddle.static.nn.fc(h, 2, activation="softmax")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(pred, y, reduction="none", use_softmax=False))
    return main, startup, loss


def _opt(kind):
    if kind == "clip+wd":  # global-norm clipping and L2 decay: pruned to each owner's share, norm summed
        return paddle.optimizer.Momentum(0.1, 0.9, grad_clip=paddle.nn.ClipGradByGlobalNorm(0.5),
                                         weight_decay=paddle.regularizer.L2Decay(0.01))
    return paddle.optimizer.Momentum(0.1, 0.9) if kind == "momentum" else paddle.optimizer.Adam(0.01)


def _init(name, shape):
    """Each parameter's starting value, from its name alone (the same on one device and on its owner)."""
    return np.random.default_rng(sum(map(ord, name))).standard_normal(shape) * 0.3


def _batches(steps=3, rows=8):
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((rows, WIDTH)), rng.integers(0, 2, (rows, 1)).astype("int64"))
            for _ in range(steps)]


def _set_params(scope, params):
    for p in params:
        scope.find_var(p.name).get_tensor().set(_init(p.name, p.shape).astype(p.dtype))


def _one_device(kind, batches, k_steps=1, fields=None):
    fields = fields or {}
    main, startup, loss = _net(dtype="float32" if fields.get("amp") else "float64")
    with paddle.static.program_guard(main, startup), unique_name.guard():
        opt = _opt(kind)
        if k_steps > 1:
            opt = paddle.incubate.optimizer.GradientMergeOptimizer(opt, k_steps=k_steps)
        if fields.get("recompute"):
            opt = paddle.incubate.optimizer.RecomputeOptimizer(opt)
            opt._set_checkpoints(list(fields["recompute_configs"]["checkpoints"]))
        if fields.get("amp"):  # fleet's amp_configs defaults are decorate's
            opt = paddle.static.amp.decorate(opt)
        opt.minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    _set_params(scope, main.all_parameters())
    for x, y in batches:
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    return params, exe.memory_stats()["live_by_category"]["optimizer_state"]


def _rank_run(world, kind, batches, configs, fields=None):
    """This rank's part of a sharded run: its slice of each batch; returns its parameters and the bytes of
    its optimizer state."""
    from refimpl.distributed import fleet
    fields = fields or {}
    r = context.current().rank
    main, startup, loss = _net(dtype="float32" if fields.get("amp") else "float64")
    s = DistributedStrategy()
    s.sharding, s.sharding_configs = True, dict({"segment_broadcast_MB": 0.001}, **configs)
    for k, v in fields.items():
        setattr(s, k, v)
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        fleet.distributed_optimizer(_opt(kind), s).minimize(loss)
    exe, scope = paddle.static.Executor(), paddle.static.global_scope()
    exe.run(startup)
    owned = [v for v in main.global_block().vars.values() if v.is_parameter]  # the rest were pruned
    _set_params(scope, owned)
    rows = len(batches[0][0]) // world
    for x, y in batches:
        exe.run(main, feed={"x": x[r * rows:(r + 1) * rows], "y": y[r * rows:(r + 1) * rows]}, fetch_list=[loss])
    params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in owned}
    return params, exe.memory_stats()["live_by_category"]["optimizer_state"]


def _sharded(world, kind, batches, configs, fields=None):
    return run_in_process(world, _rank_run, world, kind, batches, configs, fields, timeout=120)


def _check_against_one_device(results, ref, ranks_per_param, rtol=1e-6, atol=1e-9):
    holders = {}
    for rank, (params, _) in enumerate(results):
        for name, value in params.items():
            holders.setdefault(name, []).append(rank)
            np.testing.assert_allclose(value, ref[name], rtol=rtol, atol=atol, err_msg=f"{name} on rank {rank}")
    assert sorted(holders) == sorted(ref)  # every parameter is held by its owners
    assert all(len(h) == ranks_per_param for h in holders.values()), holders


@pytest.mark.parametrize("kind", ["momentum", "adam"])
@pytest.mark.parametrize("world, sharding, dp", [(2, 2, 1), (4, 4, 1), (4, 2, 2)])
def test_ranks_give_one_device_on_the_whole_batch(kind, world, sharding, dp):
    batches = _batches()
    ref, ref_state = _one_device(kind, batches)
    results = _sharded(world, kind, batches, {"sharding_degree": sharding, "dp_degree": dp})
    _check_against_one_device(results, ref, ranks_per_param=dp)
    # optimizer state: each accumulator lives on its owner only, so a sharding group holds one device's
    # bytes; Paddle's split gives each owner its share of the parameters, overshooting by at most one
    states = [state for _, state in results]
    largest = max(ref_state * v.size / sum(p.size for p in ref.values()) for v in ref.values())
    for group in range(dp):
        mine = states[group * sharding:(group + 1) * sharding]
        assert sum(mine) == ref_state
        assert max(mine) <= ref_state / sharding + largest + 16 * len(ref) / sharding


@pytest.mark.parametrize("world, dp", [(2, 1), (4, 2)])
def test_gradient_merge_gives_one_device_merging(world, dp):
    batches = _batches(steps=4)
    ref, _ = _one_device("momentum", batches, k_steps=2)
    results = _sharded(world, "momentum", batches, {"sharding_degree": 2, "dp_degree": dp,
                                                    "gradient_merge_acc_step": 2})
    _check_against_one_device(results, ref, ranks_per_param=dp)


@pytest.mark.parametrize("kind, fields", [
    ("clip+wd", {}),
    ("momentum", {"recompute": True, "recompute_configs": {"checkpoints": ["fc_1.tmp_2", "fc_3.tmp_2"]}}),
    ("momentum", {"amp": True}),  # float32; the host backend's AMP lists (no float16 kernels: no casts)
], ids=["clip+wd", "recompute", "amp"])
def test_with_other_strategies_ranks_give_one_device(kind, fields):
    batches = [(x.astype("float32") if fields.get("amp") else x, y) for x, y in _batches()]
    ref, _ = _one_device(kind, batches, fields=fields)
    results = _sharded(2, kind, batches, {"sharding_degree": 2}, fields)
    tol = {"rtol": 1e-5, "atol": 1e-7} if fields.get("amp") else {}
    _check_against_one_device(results, ref, ranks_per_param=1, **tol)


def test_segment_anchors_give_one_device():
    batches = _batches()
    ref, _ = _one_device("momentum", batches)
    results = _sharded(2, "momentum", batches, {"sharding_degree": 2, "sharding_segment_strategy": "segment_anchors",
                                                "segment_anchors": ["fc_1.tmp_2", "fc_3.tmp_2"]})
    _check_against_one_device(results, ref, ranks_per_param=1)


def test_hybrid_dp_startup_broadcasts_the_replicas():
    """With dp, startup broadcasts every kept parameter from dp rank 0: different draws end equal."""
    from refimpl.distributed import fleet

    def rank_fn():
        main, startup, loss = _net()
        s = DistributedStrategy()
        s.sharding, s.sharding_configs = True, {"sharding_degree": 2, "dp_degree": 2}
        with paddle.static.program_guard(main, startup), unique_name.guard():
            fleet.init(is_collective=True)
            fleet.distributed_optimizer(_opt("momentum"), s).minimize(loss)
        paddle.seed(10 + context.current().rank)
        paddle.static.Executor().run(startup)
        scope = paddle.static.global_scope()
        return {v.name: np.array(scope.find_var(v.name).get_tensor())
                for v in main.global_block().vars.values() if v.is_parameter}
    got = run_in_process(4, rank_fn, timeout=120)
    for a, b in ((0, 2), (1, 3)):  # the dp pairs of sharding ranks 0 and 1
        assert sorted(got[a]) == sorted(got[b])
        for name in got[a]:
            np.testing.assert_array_equal(got[a][name], got[b][name], err_msg=name)
    assert not any(np.array_equal(got[0][n], got[1].get(n)) for n in got[0] if n in got[1])


# ---- (c) bad input -------------------------------------------------------------------------------------
def _minimize(configs, **fields):
    from refimpl.distributed.fleet import Fleet, PaddleCloudRoleMaker
    main, startup, loss = _net()
    s = DistributedStrategy()
    s.sharding, s.sharding_configs = True, configs
    for k, v in fields.items():
        setattr(s, k, v)
    f = Fleet()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        f.init(PaddleCloudRoleMaker(is_collective=True))
        f.distributed_optimizer(_opt("momentum"), s).minimize(loss)
    return main


@pytest.mark.parametrize("configs, fields, error, words", [
    ({"sharding_degree": 4}, {}, InvalidArgument, r"degrees .*'sharding_degree': 4.* multiply to 4.*world size.* 2"),
    ({"sharding_degree": 2, "dp_degree": 2}, {}, InvalidArgument, r"multiply to 4.*world size.* 2"),
    ({"sharding_degree": 2, "sharding_segment_strategy": "segment_anchors", "segment_anchors": ["fc_9.tmp_2"]}, {},
     InvalidArgument, r"segment_anchors.*fc_9.tmp_2.*not variables"),
    ({"sharding_degree": 2, "sharding_segment_strategy": "by_layer"}, {}, InvalidArgument,
     r"sharding_segment_strategy'\] = 'by_layer'"),
    ({"sharding_degree": 2, "segment_broadcast_MB": 0}, {}, InvalidArgument, r"segment_broadcast_MB'\] = 0"),
    ({"sharding_degree": 1, "pp_degree": 2}, {"pipeline": True, "gradient_scale_configs": {"scale_strategy": "sum"}},
     InvalidArgument, r"scale_strategy'\] = 'sum' with sharding_configs\['pp_degree'\] = 2"),
    ({"sharding_degree": 1, "pp_degree": 2}, {"pipeline": True, "amp": True,
                                               "amp_configs": {"use_pure_bf16": True}}, Unimplemented,
     r"amp_configs\['use_pure_bf16'\] = True with sharding_configs\['pp_degree'\] = 2"),
    ({"sharding_degree": 1, "pp_degree": 2}, {}, InvalidArgument, r"pp_degree'\] = 2.*strategy.pipeline"),
    ({"sharding_degree": 2}, {"fuse_grad_merge": True}, Unimplemented, r"fuse_grad_merge"),
])
def test_bad_configs_raise_before_building(clean_env, configs, fields, error, words):
    with pytest.raises(error, match=words):
        _minimize(configs, **fields)


def test_an_anchor_not_met_is_a_typed_error(clean_env):
    """A variable that is not on the forward/backward path of any parameter's gradient (the label)."""
    with pytest.raises(InvalidArgument, match=r"segment_anchors.*\['y'\] were not met"):
        _minimize({"sharding_degree": 2, "sharding_segment_strategy": "segment_anchors", "segment_anchors": ["y"]})


def test_bad_config_fails_on_every_rank_without_hanging():
    from refimpl.distributed import fleet

    def rank_fn():
        main, startup, loss = _net()
        s = DistributedStrategy()
        s.sharding, s.sharding_configs = True, {"sharding_degree": 2, "dp_degree": 2}
        with paddle.static.program_guard(main, startup), unique_name.guard():
            fleet.init(is_collective=True)
            try:
                fleet.distributed_optimizer(_opt("momentum"), s).minimize(loss)
            except InvalidArgument as e:
                return str(e)
        return None
    msgs = run_in_process(2, rank_fn, timeout=30)
    assert msgs[0] == msgs[1] and "dp_degree" in msgs[0]


def test_one_worker_does_not_shard(clean_env):
    clean_env.setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:36001")
    main = _minimize({"sharding_degree": 1})
    assert "broadcast" not in [op.type for op in main.global_block().ops]


# ---- under mpiexec ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, configs", [(2, "sharding_degree=2"), (4, "sharding_degree=2,dp_degree=2")])
def test_mpiexec_ranks_give_one_device(n, configs):
    """This file as a script under ``mpiexec -n N`` (see tests/test_mpi.py): each process one rank."""
    import shutil
    import subprocess
    pytest.importorskip("mpi4py")
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if exe is None:
        pytest.fail("mpi4py is installed but mpiexec is not on PATH (pip install mpich)")
    root = os.path.dirname(HERE)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([exe, "-n", str(n), sys.executable, os.path.abspath(__file__), configs], capture_output=True,
                       text=True, timeout=300, env=env, cwd=root)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(line for line in p.stdout.splitlines() if line.startswith("OK")) == [f"OK {r}" for r in range(n)]


def _mpi_main(configs):
    import refimpl.distributed as dist
    dist.init_parallel_env()
    ctx = context.current()
    assert ctx.backend == "mpi", ctx
    configs = {k: int(v) for k, v in (kv.split("=") for kv in configs.split(","))}
    batches = _batches()
    ref, _ = _one_device("momentum", batches)
    params, _ = _rank_run(ctx.world_size, "momentum", batches, configs)
    assert params, "this rank owns no parameter"
    for name, value in params.items():
        np.testing.assert_allclose(value, ref[name], rtol=1e-6, atol=1e-9, err_msg=f"{name} on rank {ctx.rank}")
    sys.stdout.flush()
    os.write(1, f"OK {ctx.rank}\n".encode())


if __name__ == "__main__":
    _mpi_main(sys.argv[1])
