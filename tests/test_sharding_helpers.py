"""ZeRO sharding's AMP, gradient-clip, weight-decay and offload helpers, and sharded save / load.

The op lists are Paddle 3.3.1's: ``tests/oracle_sharding_helpers/helper_cases.py`` builds each
program with Paddle's legacy static API and runs Paddle's own helper on it (with Paddle's
``Shard``); ``programs.json`` holds what it recorded (read from Paddle 3.3.1). Here the same
builder runs on refimpl with refimpl's helpers and ``Shard``. The numeric tests run the pruned
programs on in-process ranks and compare with one device (closed form: the same program
unpruned).
"""
import json
import os
import sys
import types

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.distributed.communication import run_in_process
from refimpl.distributed.fleet.meta_optimizers.sharding import (fp16_helper, gradient_clip_helper, offload_helper,
                                                                 persistables, shard, weight_decay_helper)
from refimpl.distributed.fleet.meta_optimizers.sharding.fp16_helper import FP16Utils
from refimpl.distributed.fleet.meta_optimizers.sharding.gradient_clip_helper import GradientClipHelper
from refimpl.distributed.fleet.meta_optimizers.sharding.offload_helper import OffloadHelper, PlaceType
from refimpl.distributed.fleet.meta_optimizers.sharding.weight_decay_helper import WeightDecayHelper
from refimpl.static.amp import fp16_lists

ORACLE = os.path.join(os.path.dirname(__file__), "oracle_sharding_helpers")
sys.path.insert(0, ORACLE)
import helper_cases  # noqa: E402

paddle.enable_static()

HELPERS = types.SimpleNamespace(FP16Utils=fp16_helper.FP16Utils,
                                GradientClipHelper=gradient_clip_helper.GradientClipHelper,
                                WeightDecayHelper=weight_decay_helper.WeightDecayHelper,
                                OffloadHelper=offload_helper.OffloadHelper, Shard=shard.Shard)

with open(os.path.join(ORACLE, "programs.json")) as _f:
    PADDLE = json.load(_f)


@pytest.fixture(scope="module")
def refimpl_results():
    """helper_cases.run on refimpl, with the AMP lists of a GPU build (as the recorder gave Paddle)
    and the memcpy place types of the CPU wheel it ran on (whatever refimpl's backend)."""
    sys_lists, cuda_build = fp16_lists._get_sys_unsupported_list, offload_helper._cuda_build
    fp16_lists._get_sys_unsupported_list = lambda dtype: ("GPU", set(), sys_lists(dtype)[2])
    offload_helper._cuda_build = lambda: False
    try:
        return helper_cases.run(paddle, HELPERS)
    finally:
        fp16_lists._get_sys_unsupported_list, offload_helper._cuda_build = sys_lists, cuda_build


FLOWS = sorted(helper_cases.flow_cases())


@pytest.mark.parametrize("case", sorted(set(PADDLE) - set(FLOWS)))
def test_helper_rewrites_as_paddle(refimpl_results, case):
    assert refimpl_results[case] == PADDLE[case]


@pytest.fixture
def paddle_like_build(monkeypatch, gpu_amp_lists):
    """A lone trainer's environment (the case sets its id; put back after the test), a GPU build's
    AMP lists and the CPU wheel's memcpy place types, as the recorder had them."""
    for key in list(os.environ):
        if key.startswith(("PADDLE_", "TRAINING_ROLE")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PADDLE_TRAINER_ID", "0")
    monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:36001,127.0.0.1:36002")
    monkeypatch.setattr(offload_helper, "_cuda_build", lambda: False)


@pytest.mark.parametrize("case", FLOWS)
def test_sharded_programs_with_offload_or_cast_are_paddles(paddle_like_build, case):
    """The whole program of fleet's minimize with optimize_offload / optimize_cast (every op, var
    and persistable of main and startup)."""
    got = json.loads(json.dumps(helper_cases.record_flow(paddle, case)))
    want = PADDLE[case]
    assert sorted(got) == sorted(want)
    for key in sorted(want):
        assert got[key] == want[key], f"{case}: {key} differs"


def test_recorded_cases_touch_what_they_claim():
    """The oracle is not vacuous: each helper changed the program it was given."""
    assert any("all_reduce" in line for line in PADDLE["amp_w0"])
    assert not any("fc_2.w_0@GRAD" in line for line in PADDLE["amp_w0"])  # worker 1 owns fc_2
    assert any(line.startswith("fill_constant  -> add_n_0.tmp_0") for line in PADDLE["clip_w7of8"])
    assert sum(line.startswith("scale") for line in PADDLE["wd_w1"]) == 3
    assert sum("@offload_0" in line for line in PADDLE["offload"]) == 24
    assert "fc_2.w_0.cast_fp16" in PADDLE["opt_sharding_persist"]
    assert sum(op[0] == "memcpy" for op in PADDLE["flow_offload"]["main0"]) == 19
    assert "fc_2.w_0.cast_fp16" in PADDLE["flow_cast"]["persist"]


# ---- typed errors -----------------------------------------------------------------------------
def _built(amp=False, clip=False, wd=False, opt="adam"):
    main, startup, pg, names = helper_cases._net(paddle, opt, amp=amp, clip=clip, wd=wd)
    return main, startup, pg


def _shard(pg, worker, n=2):
    s = shard.Shard()
    s.setup(pg, worker, n)
    return s


def test_weight_decay_op_without_role_var_is_named():
    main, _, pg = _built(wd=True)
    op = next(op for op in main.global_block().ops if str(op.attr("op_namescope")).startswith("/regularization"))
    op._set_attr("op_role_var", [])
    with pytest.raises(InvalidArgument, match="op_role_var"):
        WeightDecayHelper().prune_weight_decay(main.global_block(), _shard(pg, 0))


def test_amp_check_of_a_non_grad_is_named():
    main, _, pg = _built(amp=True, opt="momentum")
    block = main.global_block()
    check = next(op for op in block.ops if op.type == "check_finite_and_unscale")
    check.desc.set_input("X", check.input("X") + ["mean_0.tmp_0"])
    with pytest.raises(InvalidArgument, match="mean_0.tmp_0"):
        FP16Utils.prune_fp16(block, _shard(pg, 0), {}, [0])


def test_offload_of_a_param_read_twice_in_fp16_is_refused():
    main, startup, pg = _built()
    block = main.global_block()
    # fc_0.w_0 cast to fp16 under a name that is not <param>.cast_fp16: Paddle's assert, typed here
    block.create_var(name="w16.cast_fp16", shape=[32, 64], dtype="float16")
    block._insert_op(0, type="cast", inputs={"X": ["fc_0.w_0"]}, outputs={"Out": ["w16.cast_fp16"]},
                     attrs={"in_dtype": 5, "out_dtype": 4})
    with pytest.raises(PreconditionNotMet, match="fc_0.w_0"):
        OffloadHelper().cast_fp32param_in_optimize(block, startup.global_block())


def test_place_types_follow_the_backend(monkeypatch):
    import refimpl.base.core as core
    monkeypatch.setattr(core, "is_compiled_with_cuda", lambda: False)
    assert (PlaceType.default_device(), PlaceType.default_pinned()) == (0, 0)  # NumPy: Paddle's CPU wheel
    monkeypatch.setattr(core, "is_compiled_with_cuda", lambda: True)
    assert (PlaceType.default_device(), PlaceType.default_pinned()) == (1, 2)  # Paddle's GPU build


# ---- numbers on two in-process ranks ------------------------------------------------------------
def _mlp(clip=False, amp=False):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [-1, 4], "float32")
        h = paddle.static.nn.fc(x, 6, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        opt = paddle.optimizer.SGD(0.5, grad_clip=paddle.nn.ClipGradByGlobalNorm(0.01) if clip else None)
        if amp:
            opt = paddle.static.amp.decorate(opt, init_loss_scaling=8.0, use_dynamic_loss_scaling=True,
                                             decr_every_n_nan_or_inf=1)
        _, pg = opt.minimize(loss)
    return main, startup, pg


def _persistables(block, scope):
    return {v: np.array(scope.find_var(v).get_tensor()) for v in block.vars
            if block.var(v).persistable and scope.find_var(v) is not None}


def _step(main, startup, feed, prune=None, initial=None):
    """Run startup (seeded) and one step of ``main`` after ``prune``; the persistables after it
    (and, into ``initial`` if given, those before it)."""
    paddle.seed(3)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    if initial is not None:
        initial.update(_persistables(main.global_block(), scope))
    if prune is not None:
        prune(main.global_block())
    exe.run(main, feed={"x": feed}, scope=scope)
    return _persistables(main.global_block(), scope)


X = np.random.default_rng(1).standard_normal((3, 4)).astype("float32")


def test_pruned_global_norm_clip_equals_one_device():
    main, startup, _ = _mlp(clip=True)
    want = _step(main, startup, X)

    def rank():
        from refimpl.distributed.communication import context
        m, s, pg = _mlp(clip=True)
        sh = _shard(pg, context.current().rank)
        got = _step(m, s, X, lambda b: GradientClipHelper(None).prune_gradient_clip(b, sh, [0]))
        return {p: got[p] for p in sh.global_params if sh.has_param(p)}

    owned = run_in_process(2, rank, timeout=60)
    assert set(owned[0]) and set(owned[1]) and not set(owned[0]) & set(owned[1])
    for params in owned:
        for name, value in params.items():
            np.testing.assert_allclose(value, want[name], rtol=1e-6, atol=1e-7, err_msg=name)


def _prune_amp(block, sh):
    """prune_fp16, then what the sharding prune does next: drop the updates of other ranks' params
    (with the CUDA backend's casts, their fp32 grads are gone)."""
    FP16Utils.prune_fp16(block, sh, {}, [0])
    for i in reversed(range(len(block.ops))):
        op = block.ops[i]
        if op.type == "sgd" and not sh.has_param(op.input("Param")[0]):
            block._remove_op(i)


def test_found_inf_on_one_rank_skips_the_step_on_every_rank():
    bad = X.copy()
    bad[0, 0] = np.nan  # every grad of rank 1 is NaN, its own ones too

    def rank():
        from refimpl.distributed.communication import context
        r = context.current().rank
        m, s, pg = _mlp(amp=True)
        sh = _shard(pg, r)
        before = {}
        got = _step(m, s, bad if r == 1 else X, lambda b: _prune_amp(b, sh), before)
        return sh, before, got

    for sh, before, got in run_in_process(2, rank, timeout=60):
        # rank 0's batch was finite, yet its params kept their initial values: the flag was shared
        for p in sh.global_params:
            if sh.has_param(p):
                np.testing.assert_array_equal(got[p], before[p], err_msg=p)
        assert float(got["loss_scaling_0"][0]) == 4.0  # halved once, on both ranks


# ---- sharded save / load on two in-process ranks ----------------------------------------------------
def _sharded_rank(seed, steps, dirname, mode, configs=None, amp=False):
    """Build and minimize a 2-way sharded MLP (Adam) on this rank; ``mode`` "save": train
    ``steps``, save, train ``steps`` more; "load": load, train ``steps``; "train": train ``2 *
    steps``. Returns the final persistables of this rank and its owned parameter names."""
    from refimpl.distributed import fleet
    from refimpl.distributed.communication import context
    rank = context.current().rank
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        fleet.init(is_collective=True)
        h = paddle.static.data("x", [None, 8], "float32")
        for _ in range(3):
            h = paddle.static.nn.fc(h, 16, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        s = fleet.DistributedStrategy()
        s.sharding = True
        s.sharding_configs = dict({"sharding_degree": 2, "segment_broadcast_MB": 0.001}, **(configs or {}))
        s.amp = amp
        fleet.distributed_optimizer(paddle.optimizer.Adam(0.01), strategy=s).minimize(loss)
    paddle.seed(seed)
    exe = paddle.static.Executor()
    exe.run(startup)
    rng = np.random.default_rng(7)
    batches = [rng.standard_normal((4, 8)).astype("float32") for _ in range(2 * steps)]
    if mode == "load":
        fleet.load_persistables(exe, dirname, main)
        batches = batches[steps:]
    for i, b in enumerate(batches):
        exe.run(main, feed={"x": b[2 * rank:2 * rank + 2]})
        if mode == "save" and i == steps - 1:
            fleet.save_persistables(exe, dirname, main)
    scope = paddle.static.global_scope()
    values = {v.name: np.array(scope.find_var(v.name).get_tensor()) for v in main.list_vars() if v.persistable}
    # the params this rank updates (offload made them plain vars, as Paddle's optimizer does)
    return values, {op.input("Param")[0] for op in main.global_block().ops if op.type == "adam"}


@pytest.mark.parametrize("configs", [None, {"optimize_offload": True}])
def test_sharded_model_saved_on_two_ranks_resumes_bit_identically(tmp_path, gpu_amp_lists, configs):
    """Offload: under AMP with a GPU build's lists, so the fp32 params are offloaded too."""
    dirname, amp = str(tmp_path / "ckpt"), bool(configs)
    saved = run_in_process(2, _sharded_rank, 5, 2, dirname, "save", configs, amp, timeout=120)
    (vals0, own0), (vals1, own1) = saved
    assert own0 and own1 and not own0 & own1  # each rank holds only its shard
    files = set(os.listdir(dirname))
    # rank 0 wrote its persistables (the learning rate among them), rank 1 its params and moments
    offload = "@offload_0" if configs else ""  # offloaded params and moments are saved as their host copies
    assert {"learning_rate_0"} | {n + offload for n in own0 | own1} <= files
    assert {n + "_moment1_0" + offload for n in own0 | own1} <= files
    resumed = run_in_process(2, _sharded_rank, 99, 2, dirname, "load", configs, amp, timeout=120)  # another seed
    for (want, _), (got, _) in zip(saved, resumed):
        assert set(got) == set(want)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_sharding_save_predicate_takes_owned_state_only():
    main, _, pg = _built(wd=True)
    block = main.global_block()
    chosen = {v.name for v in block.vars.values() if persistables.sharding_predicate(v)}
    params = {p.name for p, _ in pg}
    assert params <= chosen and "learning_rate_0" not in chosen
    assert {p + "_moment1_0" for p in params} <= chosen


@pytest.mark.parametrize("configs", [{"optimize_offload": True}, {"optimize_cast": True}])
def test_offload_and_optimize_cast_train_as_plain_sharding(gpu_amp_lists, configs):
    """Moments and fp32 params fetched before the update and offloaded after it, the fp16 params
    cast once after it: the same numbers as sharding alone (the memcpys copy, the casts move)."""
    plain = run_in_process(2, _sharded_rank, 5, 2, None, "train", None, True, timeout=120)
    moved = run_in_process(2, _sharded_rank, 5, 2, None, "train", configs, True, timeout=120)
    for (want, own), (got, _) in zip(plain, moved):
        for name in own:
            np.testing.assert_array_equal(got.get(name, got.get(name + "@offload_0")), want[name], err_msg=name)
