"""Sharding x pipeline (``sharding_configs['pp_degree'] > 1``) with AMP and ``ClipGradByGlobalNorm``.

Expected values come from one device: the same net (plain fc layers where the hybrid run has
``paddle.distributed.split``'s shards) with the same optimizer, clip and AMP settings, trained on the
whole batch. Cases: sharding 2 x pp 2 (4 in-process ranks), x dp 2 and tp 2 x sharding 2 x pp 2
(8 ranks).

(a) clip, float64: the parameters of every rank equal one device's (1e-6) with a clip norm small
    enough that every step clips (checked: without the clip the parameters differ) -- so the global
    norm counts every parameter exactly once over the shards, stages and mp ranks;
(b) AMP (fp16 O1 dynamic loss scaling; on the numpy backend no casts, the loss-scaling flow in
    float32): parameters and loss scaling equal one device's; an inf fed on one rank makes every
    rank skip that step and lower the loss scaling (the found-inf flag max-reduced over the pipe,
    mp and sharding rings); AMP and clip together under tp 2 x sharding 2 x pp 2;
(c) gradient_merge_acc_step is unused under the pipeline, as in Paddle (warned); the options still
    not written are typed Unimplemented errors, a non-'avg' gradient scale an InvalidArgument (Paddle
    asserts), the same on every rank.
"""

import numpy as np
import pytest

import refimpl
import refimpl as paddle
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.fleet.meta_optimizers import DistributedOptimizer
from refimpl.framework import Program, unique_name

from pipeline_helpers import stage_holds

MP, WIDTH, MICRO, ROWS = 2, 8, 2, 8
AMP_CONFIGS = {"init_loss_scaling": 1024.0, "incr_every_n_steps": 2, "decr_every_n_nan_or_inf": 1}
#: the split net's parameters -> (the one-device net's, the axis of the shards; None: replicated)
SPLIT = {"linear_0.w_0": ("fc_0.w_0", 1), "linear_0.b_0": ("fc_0.b_0", 0), "linear_1.w_0": ("fc_1.w_0", 0),
         "linear_1.b_0": ("fc_1.b_0", None), "fc_0.w_0": ("fc_2.w_0", None), "fc_0.b_0": ("fc_2.b_0", None),
         "fc_1.w_0": ("fc_3.w_0", None), "fc_1.b_0": ("fc_3.b_0", None)}
FULL = {"fc_0.w_0": (WIDTH, 16), "fc_0.b_0": (16,), "fc_1.w_0": (16, WIDTH), "fc_1.b_0": (WIDTH,),
        "fc_2.w_0": (WIDTH, 16), "fc_2.b_0": (16,), "fc_3.w_0": (16, 2), "fc_3.b_0": (2,)}


def _net(dtype, split, pp, need_clip=True):
    """Stage 0: two layers (``split``: column- then row-parallel), stage 1: fc 16 tanh, fc 2 softmax, CE."""
    x = paddle.static.data("x", [-1, WIDTH], dtype)
    y = paddle.static.data("y", [-1, 1], "int64")
    with paddle.static.device_guard("gpu:0" if pp else None):
        if split:
            h = paddle.distributed.split(x, (WIDTH, 16), "linear", axis=1, num_partitions=MP, gather_out=False)
            h = paddle.nn.functional.tanh(h)
            h = paddle.nn.functional.tanh(paddle.distributed.split(h, (16, WIDTH), "linear", axis=0,
                                                                   num_partitions=MP))
        else:
            h = paddle.static.nn.fc(x, 16, activation="tanh")
            h = paddle.static.nn.fc(h, WIDTH, activation="tanh")
    with paddle.static.device_guard("gpu:1" if pp else None):
        h = paddle.static.nn.fc(h, 16, activation="tanh")
        pred = paddle.static.nn.fc(h, 2, activation="softmax", weight_attr=paddle.ParamAttr(need_clip=need_clip))
        loss = paddle.mean(paddle.nn.functional.cross_entropy(pred, y, reduction="none", use_softmax=False))
    return loss


def _opt(kind, clip):
    gc = paddle.nn.ClipGradByGlobalNorm(clip) if clip else None
    if kind == "momentum":
        return paddle.optimizer.Momentum(0.1, 0.9, grad_clip=gc)
    return paddle.optimizer.Adam(0.01, grad_clip=gc)


def _init(dtype):
    rng = np.random.default_rng(9)
    return {n: (rng.standard_normal(s) * 0.4).astype(dtype) for n, s in FULL.items()}


def _batches(dtype, steps=4, inf_at=None, inf_row=0):
    rng = np.random.default_rng(1)
    out = []
    for step in range(steps):
        x = rng.standard_normal((ROWS, WIDTH)).astype(dtype)
        if step == inf_at:
            x[inf_row, 0] = np.inf
        out.append((x, rng.integers(0, 2, (ROWS, 1)).astype("int64")))
    return out


def _values(scope, names):
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names if scope.find_var(n) is not None}


def _one_device(kind, clip, amp, dtype, batches, need_clip=True):
    def rank_fn():
        main, startup = Program(), Program()
        with paddle.static.program_guard(main, startup), unique_name.guard():
            loss = _net(dtype, split=False, pp=False, need_clip=need_clip)
            opt = _opt(kind, clip)
            if amp:
                s = DistributedStrategy()
                s.amp, s.amp_configs = True, dict(AMP_CONFIGS)
                opt = DistributedOptimizer(opt, s)
            opt.minimize(loss)
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        exe.run(startup, scope=scope)
        for name, value in _init(dtype).items():
            scope.find_var(name).get_tensor().set(value)
        for x, y in batches:
            exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        return _values(scope, list(FULL) + ["loss_scaling_0"])
    return run_in_process(1, rank_fn, timeout=60)[0]


def _strategy(world, mp, amp, configs=None, sh=2):
    dp = world // (sh * 2 * mp)
    s = DistributedStrategy()
    s.sharding, s.pipeline = True, True
    s.sharding_configs = dict({"sharding_degree": sh, "pp_degree": 2, "mp_degree": mp, "dp_degree": dp},
                              **(configs or {}))
    s.pipeline_configs = {"accumulate_steps": MICRO, "micro_batch_size": ROWS // (sh * dp) // MICRO}
    if amp:
        s.amp, s.amp_configs = True, dict(AMP_CONFIGS)
    return s


def _rank_run(world, mp, kind, clip, amp, dtype, batches, inf_on=None, configs=None, need_clip=True, sh=2):
    """This rank's part: its stage's parameters (and the loss scaling) after training on its rows;
    ``inf_on = (rank, step)``: that rank alone reads an inf in its first row at that step."""
    from refimpl.distributed import fleet
    r = context.current().rank
    dp = world // (sh * 2 * mp)
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        loss = _net(dtype, split=mp > 1, pp=True, need_clip=need_clip)
        fleet.distributed_optimizer(_opt(kind, clip), _strategy(world, mp, amp, configs, sh)).minimize(loss)
    exe, scope = paddle.static.Executor(), paddle.static.global_scope()
    exe.run(startup)
    layout = SPLIT if mp > 1 else {n: (n, None) for n in FULL}
    init = _init(dtype)
    mine = [n for n in layout if stage_holds(main, n)]
    for n in mine:
        full_name, axis = layout[n]
        full = init[full_name]
        scope.find_var(n).get_tensor().set(full if axis is None else np.split(full, mp, axis)[r % mp])
    rows = ROWS // (sh * dp)
    replica = (r // (sh * 2 * mp)) * sh + (r // mp) % sh   # (dp rank, sharding rank): its rows
    part = slice(replica * rows, (replica + 1) * rows)
    for step, (x, y) in enumerate(batches):
        x = x[part].copy()
        if inf_on == (r, step):
            x[0, 0] = np.inf
        exe.run(main, feed={"x": x, "y": y[part]}, fetch_list=[loss])
    return _values(scope, mine + (["loss_scaling_0"] if amp else []))


def _flat_rank_run(kind, clip, amp, dtype, batches):
    """tp 2 x sharding 2 without a pipeline (4 ranks): the parameters this rank owns (their optimizer state
    lives here) and the loss scaling, after training the split net on its rows."""
    from refimpl.distributed import fleet
    r = context.current().rank
    s = DistributedStrategy()
    s.sharding, s.sharding_configs = True, {"sharding_degree": 2, "mp_degree": MP, "dp_degree": 1}
    if amp:
        s.amp, s.amp_configs = True, dict(AMP_CONFIGS)
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        loss = _net(dtype, split=True, pp=False)
        fleet.distributed_optimizer(_opt(kind, clip), s).minimize(loss)
    exe, scope = paddle.static.Executor(), paddle.static.global_scope()
    exe.run(startup)
    init = _init(dtype)
    for n, (full_name, axis) in SPLIT.items():
        full, var = init[full_name], scope.find_var(n)   # (Paddle's sharding prunes the others' parameters)
        if var is not None:
            var.get_tensor().set(full if axis is None else np.split(full, MP, axis)[r % MP])
    rows = ROWS // 2
    part = slice(((r // MP) % 2) * rows, ((r // MP) % 2 + 1) * rows)
    for x, y in batches:
        exe.run(main, feed={"x": x[part], "y": y[part]}, fetch_list=[loss])
    state = "_velocity_0" if kind == "momentum" else "_moment1_0"
    owned = [n for n in SPLIT if scope.find_var(n + state) is not None]
    return _values(scope, owned + (["loss_scaling_0"] if amp else []))


def _tp_sharding_reference(kind, clip, amp, dtype, batches):
    """The one-device names' values tp 2 x sharding 2 without a pipeline trains to: what the pipeline must
    give under tp with a global-norm clip. There Paddle's ``prune_gradient_clip`` (3.3.1 and 2.6.2 alike)
    all-reduces every rank's squares over the mp ring, so the parameters both mp ranks hold whole count
    twice in the norm -- not one device's norm; refimpl writes the same program."""
    got = run_in_process(4, _flat_rank_run, kind, clip, amp, dtype, batches, timeout=240)
    shards = {(n, r % MP): v for r, values in enumerate(got) for n, v in values.items() if n != "loss_scaling_0"}
    ref = {full: shards[(n, 0)] if axis is None else np.concatenate([shards[(n, m)] for m in range(MP)], axis)
           for n, (full, axis) in SPLIT.items()}
    if amp:
        ref["loss_scaling_0"] = got[0]["loss_scaling_0"]
    return ref


def _check(world, mp, got, ref, amp, **tol):
    layout = SPLIT if mp > 1 else {n: (n, None) for n in FULL}
    shards = {}
    for r, values in enumerate(got):
        for n, v in values.items():
            if n == "loss_scaling_0":
                assert v.item() == ref[n].item(), (r, v, ref[n])
                continue
            assert np.isfinite(v).all(), (n, r)
            key = (n, r % mp)
            if key in shards:   # the sharding (and dp) replicas of a stage agree bitwise
                np.testing.assert_array_equal(v, shards[key], err_msg=f"{n} on rank {r}")
            shards[key] = v
    assert sorted({n for n, _ in shards}) == sorted(layout)
    for n, (full_name, axis) in layout.items():
        value = shards[(n, 0)] if axis is None else np.concatenate([shards[(n, m)] for m in range(mp)], axis)
        np.testing.assert_allclose(value, ref[full_name], err_msg=n, **tol)
    if amp:
        assert all("loss_scaling_0" in v for v in got)


# ---- (a) ClipGradByGlobalNorm, float64 -------------------------------------------------------------------------
@pytest.mark.parametrize("world, mp, kind", [(4, 1, "momentum"), (8, 1, "adam"), (8, 2, "momentum"),
                                             (8, 2, "adam")],
                         ids=["sh2xpp2", "sh2xpp2xdp2-adam", "tp2xsh2xpp2", "tp2xsh2xpp2-adam"])
def test_global_norm_clip_gives_one_device(float64_default, world, mp, kind):
    """Without tp: one device's numbers. With tp: those of tp x sharding without a pipeline (see
    ``_tp_sharding_reference``: Paddle's norm counts the replicated parameters once per mp rank)."""
    batches = _batches("float64", steps=3)
    ref = _one_device(kind, 0.05, False, "float64", batches)
    unclipped = _one_device(kind, None, False, "float64", batches)
    assert not np.allclose(ref["fc_0.w_0"], unclipped["fc_0.w_0"], rtol=1e-3)   # the clip is active
    if mp > 1:   # (and that norm is not one device's: the replicated parameters count twice)
        one_device, ref = ref, _tp_sharding_reference(kind, 0.05, False, "float64", batches)
        assert not np.allclose(ref["fc_2.w_0"], one_device["fc_2.w_0"], rtol=1e-6, atol=1e-9)
    got = run_in_process(world, _rank_run, world, mp, kind, 0.05, False, "float64", batches, timeout=240)
    _check(world, mp, got, ref, False, rtol=1e-6, atol=1e-9)


def test_a_parameter_without_need_clip_is_refused_on_every_rank(float64_default):
    """fc_3.w_0 (the last stage's output weight) with ParamAttr(need_clip=False), sharding 2 x pp 2: Paddle's
    prune_gradient_clip asserts on the rank owning it; refimpl refuses on every rank, naming it."""
    def rank_fn():
        from refimpl.distributed import fleet
        with paddle.static.program_guard(Program(), Program()), unique_name.guard():
            fleet.init(is_collective=True)
            try:
                fleet.distributed_optimizer(_opt("momentum", 0.05), _strategy(4, 1, False)).minimize(
                    _net("float64", split=False, pp=True, need_clip=False))
            except PreconditionNotMet as e:
                return str(e)
        return None
    msgs = run_in_process(4, rank_fn, timeout=60)
    assert msgs[0] is not None and len(set(msgs)) == 1, msgs
    assert "['fc_3.w_0'] are not clipped (need_clip=False)" in msgs[0], msgs


def test_tp_pipeline_through_sharding_with_degree_1_clips_and_scales_alike():
    """sharding_degree 1 (Paddle's tp x pp path of ShardingOptimizer), tp 2 x pp 2: AMP and clip together,
    an inf on mp rank 1 of stage 0 alone; the norm and the flag combine over the mp and pipe rings."""
    ref = _one_device("momentum", 0.05, True, "float32", _batches("float32", inf_at=2, inf_row=0))
    got = run_in_process(4, _rank_run, 4, 2, "momentum", 0.05, True, "float32", _batches("float32"), (1, 2),
                         None, True, 1, timeout=240)
    _check(4, 2, got, ref, True, **AMP_TOL)


# ---- (b) AMP (dynamic loss scaling), float32 -------------------------------------------------------------------
AMP_TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("world, mp", [(4, 1), (8, 2)], ids=["sh2xpp2", "tp2xsh2xpp2"])
def test_amp_gives_one_device(world, mp):
    batches = _batches("float32")
    ref = _one_device("adam", None, True, "float32", batches)
    assert ref["loss_scaling_0"].item() == 4096.0   # 4 good steps, doubled after every 2nd
    got = run_in_process(world, _rank_run, world, mp, "adam", None, True, "float32", batches, timeout=240)
    _check(world, mp, got, ref, True, **AMP_TOL)


@pytest.mark.parametrize("world, mp, inf_row", [(4, 1, 6), (8, 1, 6), (8, 2, 6)],
                         ids=["sh2xpp2-rank1", "sh2xpp2xdp2-dp1sh1", "tp2xsh2xpp2-sh1"])
def test_an_inf_on_one_replica_skips_the_step_everywhere(world, mp, inf_row):
    """The inf sits in rows only one (dp, sharding) replica feeds; every rank skips step 2 alike."""
    batches = _batches("float32", inf_at=1, inf_row=inf_row)
    ref = _one_device("adam", None, True, "float32", batches)
    assert ref["loss_scaling_0"].item() == np.float32(np.float32(1024.0 * 0.8) * 2.0)   # bad, good, good
    got = run_in_process(world, _rank_run, world, mp, "adam", None, True, "float32", batches, timeout=240)
    _check(world, mp, got, ref, True, **AMP_TOL)


def test_an_inf_on_one_model_parallel_rank_skips_the_step_everywhere():
    """tp 2 x sharding 2 x pp 2: rank 1 (mp rank 1 of stage 0) alone reads an inf, so only its shard of
    linear_0's gradient overflows; the flag's max over the mp ring makes its mp peer (and every other
    rank) skip too. One device skips the same step when that row holds the inf."""
    ref = _one_device("adam", None, True, "float32", _batches("float32", inf_at=1, inf_row=0))
    got = run_in_process(8, _rank_run, 8, 2, "adam", None, True, "float32", _batches("float32"), (1, 1),
                         timeout=240)
    _check(8, 2, got, ref, True, **AMP_TOL)


def test_amp_and_clip_together_under_tp_sharding_pipeline():
    batches = _batches("float32", inf_at=2, inf_row=3)
    ref = _tp_sharding_reference("momentum", 0.05, True, "float32", batches)   # (the norm: see there)
    got = run_in_process(8, _rank_run, 8, 2, "momentum", 0.05, True, "float32", batches, timeout=240)
    _check(8, 2, got, ref, True, **AMP_TOL)


def test_gradient_merge_acc_step_is_unused_under_the_pipeline_as_in_paddle(float64_default, caplog):
    """Paddle 3.3.1 replaces gradient_merge_acc_step by the pipeline's accumulate_steps when pp_degree > 1:
    every run still updates (one device's numbers step for step); refimpl warns that the option is unused."""
    batches = _batches("float64", steps=3)
    ref = _one_device("momentum", 0.05, False, "float64", batches)
    got = run_in_process(4, _rank_run, 4, 1, "momentum", 0.05, False, "float64", batches, None,
                         {"gradient_merge_acc_step": 2}, timeout=240)
    _check(4, 1, got, ref, False, rtol=1e-6, atol=1e-9)
    assert "gradient_merge_acc_step'] = 2 is not used with pp_degree = 2" in caplog.text


# ---- (c) what is still refused ------------------------------------------------------------------------------
def test_a_sum_gradient_scale_is_refused_as_paddle_asserts(float64_default):
    msgs = _refusals({}, None, None, InvalidArgument, scale="sum")
    assert msgs[0] is not None and len(set(msgs)) == 1, msgs
    assert "gradient_scale_configs['scale_strategy'] = 'sum'" in msgs[0] and "'avg'" in msgs[0], msgs[0]


def _refusals(configs, clip, amp_configs, error, scale=None):
    def rank_fn():
        from refimpl.distributed import fleet
        s = _strategy(4, 1, amp_configs is not None, configs)
        if amp_configs:
            s.amp_configs = dict(AMP_CONFIGS, **amp_configs)
        if scale:
            s.gradient_scale_configs = {"scale_strategy": scale}
        opt = paddle.optimizer.Momentum(0.1, 0.9, grad_clip=paddle.nn.ClipGradByNorm(1.0) if clip else None)
        with paddle.static.program_guard(Program(), Program()), unique_name.guard():
            fleet.init(is_collective=True)
            try:
                fleet.distributed_optimizer(opt, s).minimize(_net("float64", split=False, pp=True))
            except error as e:
                return str(e)
        return None
    return run_in_process(4, rank_fn, timeout=60)


# ---- (b') AMP with float16 casts: the CUDA backend on numba's simulator ----------------------------------------
def _amp_casts():
    """The number of ``cast`` ops AMP writes into the one-device program (0 on the numpy backend)."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        s = DistributedStrategy()
        s.amp, s.amp_configs = True, dict(AMP_CONFIGS)
        DistributedOptimizer(_opt("adam", None), s).minimize(_net("float32", split=False, pp=False))
    return [op.type for op in main.global_block().ops].count("cast")


# float16 keeps 11 significant bits: the pipeline rounds each micro-batch's float16 gradient before
# adding it in float32 (and sums the sharding halves), one device rounds the whole batch's; over two
# Adam steps that stays within 1e-2 relative, 1e-3 absolute (as tests/test_pipeline_amp.py finds).
FP16_TOL = dict(rtol=1e-2, atol=1e-3)
_CUDA_RUN = """
import json, sys
sys.path.insert(0, 'tests')
import test_sharding_pipeline_amp as T
from refimpl.distributed.communication import run_in_process
data = T._batches("float32", steps=3, inf_at=1, inf_row=6)
ref = T._one_device("adam", None, True, "float32", data)
got = run_in_process(4, T._rank_run, 4, 1, "adam", None, True, "float32", data, timeout=900)
print(json.dumps({"casts": T._amp_casts(), "ref": ref, "got": got}, default=lambda a: a.tolist()))
"""


def test_amp_with_float16_casts_on_the_cuda_simulator():
    """REFIMPL_BACKEND=cuda (Paddle's GPU build): AMP casts to float16; sharding 2 x pp 2 still equals one
    device, and the inf one sharding rank reads at step 2 is skipped on every rank."""
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", REFIMPL_BACKEND="cuda")
    out = subprocess.run([sys.executable, "-c", _CUDA_RUN], cwd=os.path.dirname(os.path.dirname(__file__)),
                         env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["casts"] > 0
    ref = {n: np.array(v) for n, v in res["ref"].items()}
    assert ref["loss_scaling_0"].item() == np.float32(1024.0 * 0.8)   # good, bad (lowered), good
    got = [{n: np.array(v) for n, v in g.items()} for g in res["got"]]
    _check(4, 1, got, ref, True, **FP16_TOL)
