"""Sharding inside a pipeline (``sharding_configs['pp_degree'] > 1``): Paddle 3.3.1's section programs.

``oracle_sharding_pp/programs.json`` was recorded from Paddle 3.3.1 (/tmp/pd33, ``FLAGS_enable_pir_api=0``)
by ``oracle_sharding_pp/sharding_pp_cases.py`` (which says how the CPU wheel was made to build what the GPU
build builds): for one trainer of the world, the section program of its stage and the split startup
program -- every op (type, sorted inputs and outputs, ring ids, roots, op roles, peers ...), the vars and
the persistables -- and the plain entries of ``main._pipeline_opt``. refimpl must build the same.
The cases are the seven of Paddle's ``test_fleet_hybrid_meta_optimizer.py`` (``dpopt*``, ``boundary*``:
dp as optimizer sharding, fused, AMP, clip, fused gradient merge, optimize_cast), then pure dp around the
pipeline (``pp2dp2*``: fused, averaged after the sum), the plain pipeline (``pp2*``), sharding x pp (x dp,
AMP, recompute, clip, ``pp_allreduce_in_optimize``), ``optimize_offload``, pure fp16 and mp x pp.

The programs then train: built through fleet on four in-process ranks (the rings bound at ``minimize``) and run
by refimpl's ``SectionWorker``, every parameter ends as one device training on the whole batch.

Paddle's own test asserts op type lists under Paddle 2.x's names (``c_reduce_sum``, ``c_broadcast``,
``c_allreduce_sum``); Paddle 3.3.1 writes ``reduce``, ``broadcast`` and ``all_reduce``, and so does refimpl.
"""
import json
import os
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import Unimplemented
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import unique_name

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "oracle_sharding_pp"))
import sharding_pp_cases as cases  # noqa: E402

from fleet_env import as_trainer

with open(os.path.join(HERE, "oracle_sharding_pp", "programs.json")) as _f:
    PADDLE = json.load(_f)

HYBRID_TEST_CASES = ["dpopt", "dpopt+fuse", "dpopt+amp+clip+fuse", "dpopt+amp+clip+fuse+fgm",
                     "dpopt+amp+rc+fuse+fgm+cast", "boundary", "boundary_card1"]


@pytest.fixture
def clean_env(monkeypatch):
    # build() sets the trainer id and endpoints of its case; setting them here first has monkeypatch put the
    # environment back afterwards
    return as_trainer(monkeypatch, 0, cases.TWO)


def _built(case):
    return json.loads(json.dumps(cases.record(*cases.build(paddle, case))))


def test_every_recorded_case_is_tested():
    assert set(HYBRID_TEST_CASES) <= set(cases.CASES) == set(PADDLE)


@pytest.mark.parametrize("case", sorted(cases.CASES, key=lambda c: (c not in HYBRID_TEST_CASES, c)))
def test_section_programs_are_paddles(clean_env, gpu_amp_lists, case):
    got, want = _built(case), PADDLE[case]
    assert sorted(got) == sorted(want)
    for key in sorted(want):
        if key.startswith(("main", "startup")) and key != "startup_vars":  # the first op that differs
            for i, (g, w) in enumerate(zip(got[key], want[key])):
                assert g == w, f"{case}: {key} op {i} differs"
            assert len(got[key]) == len(want[key]), f"{case}: {key} has {len(got[key])} ops, Paddle {len(want[key])}"
        assert got[key] == want[key], f"{case}: {key} differs"


#: test_opt_sharding_with_pp of Paddle's test_fleet_hybrid_meta_optimizer.py (trainer 3 of dp 2 x pp 2, dp as
#: optimizer sharding, no fuse): its asserted op type lists, as "name x count" runs, names mapped to 3.3.1's
_HYBRID_TEST_STARTUP = [("uniform_random", 1), ("fill_constant", 1)] * 4 + [("fill_constant", 6)] + \
    [("c_gen_nccl_id", 1), ("c_comm_init", 1)] * 4 + [("broadcast", 8)]
_FC = [("mul", 1), ("elementwise_add", 1), ("tanh", 1)]
_FC_GRAD = [("elementwise_add_grad", 1), ("mul_grad", 1), ("tanh_grad", 1)]
_HYBRID_TEST_MAIN = [("recv_v2", 1)] + _FC * 3 + [("mul", 1), ("elementwise_add", 1), ("softmax", 1),
                                                  ("softmax_with_cross_entropy", 1), ("reduce_mean", 1),
                                                  ("fill_constant", 1), ("reduce_mean_grad", 1),
                                                  ("softmax_with_cross_entropy_grad", 1), ("softmax_grad", 1)] + \
    _FC_GRAD * 3 + [("elementwise_add_grad", 1), ("mul_grad", 1), ("c_sync_calc_stream", 1), ("send_v2", 1)] + \
    [("fill_constant", 1), ("sum", 1)] * 8 + [("reduce", 8), ("c_sync_comm_stream", 1), ("momentum", 5),
                                              ("broadcast", 8)]


def _expand(runs):
    return [name for name, n in runs for _ in range(n)]


def test_hybrid_test_op_lists(clean_env, gpu_amp_lists):
    """The op type lists and ring facts Paddle's test asserts for its first case (read from that test)."""
    main, startup = cases.build(paddle, "dpopt")
    section, start = main._pipeline_opt["section_program"], startup._pipeline_opt["startup_program"]
    assert [op.type for op in start.global_block().ops] == _expand(_HYBRID_TEST_STARTUP)
    assert [op.type for op in section.global_block().ops] == _expand(_HYBRID_TEST_MAIN)
    ring_ids = [op.attr("ring_id") for op in start.global_block().ops if op.type == "c_comm_init"]
    assert 2 in ring_ids and 20 in ring_ids  # the dp ring and the first pair ring
    other = {op.output_arg_names[0]: op.attr("other_endpoints") for op in start.global_block().ops
             if op.type == "c_gen_nccl_id"}
    assert other["comm_id_0"] == ["127.0.0.1:36003"]  # the pipe
    assert other["comm_id_3"] == ["127.0.0.1:36002"]  # the dp group


# ---- the rings on in-process ranks ----------------------------------------------------------------------
def _rank_minimize(configs, fields):
    from refimpl.distributed import fleet
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        loss = cases._pp_net(paddle, fleet)
    s = DistributedStrategy()
    for k, v in fields.items():
        setattr(s, k, v)
    s.sharding, s.sharding_configs = True, dict(configs)
    with paddle.static.program_guard(main, startup), unique_name.guard():
        opt = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9)
        fleet.distributed_optimizer(opt, strategy=s).minimize(loss)
    ctx = context.current()
    start = startup._pipeline_opt["startup_program"].global_block()
    inits = [(op.attr("ring_id"), op.attr("rank"), op.attr("nranks")) for op in start.ops if op.type == "c_comm_init"]
    return {ring: list(ctx.groups[ring]) for ring, _, _ in inits}, inits


MP2PP2 = dict(cases.DPOPT, mp_degree=2, dp_degree=1, _dp_as_optimizer_sharding=False)


@pytest.mark.parametrize("configs", [cases.DPOPT, cases.SH2PP2, MP2PP2], ids=["dp2pp2", "sh2pp2", "mp2pp2"])
def test_rings_bind_to_the_world_groups(clean_env, configs):
    """Each c_comm_init ring is bound to this rank's group, in which the rank has the op's rank, and the groups
    are Paddle's layout (mp -> sharding -> pp -> dp): mp neighbours, sharding groups of the ranks mp apart,
    pipes of the ranks sharding * mp apart, the pair rings ordered by the pair (stage 1 is rank 0 of the
    backward ring 21), dp groups of the ranks sharding * mp * pp apart."""
    sh, mp, dp = (int(configs.get(k, 1)) for k in ("sharding_degree", "mp_degree", "dp_degree"))
    inner = sh * mp  # the ranks of one stage of one pipe's replica
    got = run_in_process(4, _rank_minimize, configs, dict(cases.PIPE, fuse_all_reduce_ops=False), timeout=120)
    for r, (groups, inits) in enumerate(got):
        base = (r // (2 * inner)) * 2 * inner + r % inner
        pipe = [base, base + inner]
        want = {4: pipe, 20: pipe, 21: pipe[::-1]}
        if mp > 1:
            want[0] = [r - r % mp + i for i in range(mp)]
        if sh > 1:
            first = r - r % inner + r % mp
            want[1] = [first + mp * i for i in range(sh)]
        if dp > 1:
            want[2] = [r % (2 * inner) + 2 * inner * i for i in range(dp)]
        assert groups == want, f"rank {r}"
        for ring, rank, nranks in inits:
            assert groups[ring].index(r) == rank and len(groups[ring]) == nranks, f"rank {r} ring {ring}"


def test_pure_bf16_with_pipeline_is_refused(clean_env):
    """Pure bf16 inside the pipeline is not checked against Paddle here: a typed error before anything is built."""
    clean_env.setenv("PADDLE_TRAINER_ID", "3")
    clean_env.setenv("PADDLE_TRAINER_ENDPOINTS", cases.FOUR)
    from refimpl.distributed import fleet
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(fleet.PaddleCloudRoleMaker(is_collective=True))
        loss = cases._pp_net(paddle, fleet)
    s = DistributedStrategy()
    for k, v in dict(cases.PIPE, amp=True, amp_configs={"use_pure_bf16": True}).items():
        setattr(s, k, v)
    s.sharding, s.sharding_configs = True, dict(cases.SH2PP2)
    with paddle.static.program_guard(main, startup), unique_name.guard():
        opt = fleet.distributed_optimizer(paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9), strategy=s)
        with pytest.raises(Unimplemented, match=r"use_pure_bf16'\] = True with sharding_configs\['pp_degree'\] = 2"):
            opt.minimize(loss)
    assert len(main.global_block().ops) == len([op for op in main.global_block().ops if op.attr("op_role") == 0])


# ---- the section programs train: refimpl's SectionWorker on four in-process ranks ---------------------------
M, MB = 4, 2  # the recorder's accumulate_steps and micro_batch_size


def _one_device(feeds, init):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        loss = cases._pp_net(paddle, None)
        paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    for n, v in init.items():
        scope.var(n).get_tensor().set(v)
    for feed in feeds:
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in init}


def _rank_train(configs, fields, feeds, init):
    """Build this rank's section program through fleet, run it with SectionWorker (1F1B) on this dp replica's
    rows; returns the parameters it holds."""
    from refimpl.executor.section_worker import SectionWorker
    from refimpl.distributed import fleet
    r = context.current().rank
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        loss = cases._pp_net(paddle, fleet)
    s = DistributedStrategy()
    for k, v in dict(cases.PIPE, **fields).items():
        setattr(s, k, v)
    s.sharding, s.sharding_configs = True, dict(configs)
    with paddle.static.program_guard(main, startup), unique_name.guard():
        opt = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
        fleet.distributed_optimizer(opt, strategy=s).minimize(loss)
    pipeline = main._pipeline_opt
    scope = paddle.static.Scope()
    paddle.static.Executor().run(startup._pipeline_opt["startup_program"], scope=scope)
    section = pipeline["section_program"].global_block()
    mine = {n: v for n, v in init.items() if n in section.vars and section.var(n).persistable}
    for n, v in mine.items():
        scope.var(n).get_tensor().set(v)
    worker = SectionWorker(pipeline["section_program"], pipeline["pipeline_stage"],
                           pipeline["num_pipeline_stages"], pipeline["num_microbatches"], 1)
    inner = int(configs.get("sharding_degree", 1)) * int(configs.get("mp_degree", 1))
    replica, rows = r // (2 * inner), M * MB
    for feed in feeds:
        worker.train(scope, {k: v[replica * rows:(replica + 1) * rows] for k, v in feed.items()})
    return {n: np.array(scope.find_var(n).get_tensor()) for n in mine}


PP2DP2 = dict(cases.DPOPT, _dp_as_optimizer_sharding=False)
NO_FUSE = {"fuse_all_reduce_ops": False}
#: the merge buffers fused too: the gradients and their @GRAD@MERGED sums are views of coalesce_tensor buffers
FGM = dict(cases.FUSE, fuse_grad_merge=True)


@pytest.mark.parametrize("configs, fields", [(PP2DP2, NO_FUSE), (cases.DPOPT, NO_FUSE), (cases.SH2PP2, NO_FUSE),
                                             (MP2PP2, NO_FUSE), (PP2DP2, cases.FUSE), (cases.DPOPT, cases.FUSE),
                                             (PP2DP2, FGM), (cases.DPOPT, FGM)],
                         ids=["pp2dp2", "dp_as_optimizer_sharding", "sh2pp2", "mp2pp2", "pp2dp2+fuse",
                              "dp_as_optimizer_sharding+fuse", "pp2dp2+fuse_grad_merge",
                              "dp_as_optimizer_sharding+fuse_grad_merge"])
def test_sections_train_to_one_device_parameters(clean_env, configs, fields):
    """Each parameter, on every rank holding it, ends as one device training on the whole batch: the rings
    bound at minimize carry the programs' send / recv, reduce, broadcast and all_reduce."""
    dp = int(configs.get("dp_degree", 1))
    rng = np.random.default_rng(0)
    n = M * MB * dp
    feeds = [{"x": rng.standard_normal((n, 32)).astype("float32"),
              "y": rng.integers(0, 2, (n, 1)).astype("int64")} for _ in range(2)]
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()), unique_name.guard():
        cases._pp_net(paddle, None)
    init = {p.name: (rng.standard_normal(p.shape) * 0.3).astype("float32") for p in main.all_parameters()}
    want = _one_device(feeds, init)
    got = run_in_process(4, _rank_train, configs, fields, feeds, init, timeout=120)
    held = sorted({name for params in got for name in params})
    assert held == sorted(want)
    for r, params in enumerate(got):
        for name, value in params.items():
            assert not np.allclose(value, init[name]), f"{name} on rank {r} did not train"
            np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-6, err_msg=f"{name} on rank {r}")
