"""Recompute: ``RecomputeOptimizer`` / ``append_backward(checkpoints=...)`` give Paddle's programs
and the numbers of plain training, with less activation memory.

The programs are compared with what Paddle 3.3.1 built for the same models and checkpoint choices
(``tests/oracle_recompute/programs.json``, written by ``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python
tests/oracle_recompute/recompute_models.py``): one checkpoint, checkpoints in odd order, names mixed
with Variables, duplicates and the loss itself, the input as a checkpoint, a checkpoint off the loss
path, an empty list, residual blocks (gradients summed across segments), ``nn.Layer`` models,
``no_grad_set``, and dropout (a ``seed`` op goes before it, fixed by the program's random_seed or not).
The zoo cases ``08_mlp_recompute`` / ``09_gpt_recompute`` are in ``test_zoo_builds.py``.
"""
import json
import os
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import VariableNotFound

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "oracle_recompute"))
sys.path.insert(0, HERE)
import recompute_models  # noqa: E402

with open(os.path.join(HERE, "oracle_recompute", "programs.json")) as _f:
    RECORDED = json.load(_f)


def _fresh():
    return paddle.static.Program(), paddle.static.Program()


@pytest.mark.parametrize("case", sorted(recompute_models.CASES))
def test_program_equals_paddles(case):
    main, startup = _fresh()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        recompute_models.build(paddle, case)
    got = json.loads(json.dumps(recompute_models.summary(main)))
    want = RECORDED[case]
    assert [(b["idx"], b["parent_idx"]) for b in got["blocks"]] == \
        [(b["idx"], b["parent_idx"]) for b in want["blocks"]]
    for gb, wb in zip(got["blocks"], want["blocks"]):
        for i, (g, w) in enumerate(zip(gb["ops"], wb["ops"])):
            assert g == w, f"block {gb['idx']} op {i}"
        assert len(gb["ops"]) == len(wb["ops"]), f"block {gb['idx']}"
    assert got["vars"] == want["vars"]
    with paddle.static.program_guard(*_fresh()), paddle.utils.unique_name.guard():
        assert recompute_models.sorted_names(paddle, case) == want["sorted_checkpoint_names"]


def test_recorded_programs_really_recompute():
    """The oracle itself: block 0 re-runs forward ops in the backward, writing ``.subprog_k`` vars."""
    ops = RECORDED["mlp_odd_order"]["blocks"][0]["ops"]
    rerun = [o for o in ops if o[3] == 1 and not o[0].endswith("_grad") and o[0] != "fill_constant"]
    assert rerun and all(n.endswith((".subprog_0", ".subprog_1", ".subprog_2"))
                         for o in rerun for n in o[2]["Out"])
    assert len(RECORDED["mlp_empty"]["blocks"]) == 1


# ---- bad input (Paddle 3.3.1 raises AssertionError, ValueError, NotImplementedError) ---------
def _rc():
    return paddle.incubate.optimizer.RecomputeOptimizer(paddle.optimizer.SGD(learning_rate=0.1))


@pytest.mark.parametrize("bad", ["fc_0.tmp_2", ("fc_0.tmp_2",), [1], None])
def test_checkpoints_that_are_not_a_list_of_variables_or_names(bad):
    with pytest.raises(AssertionError, match="list of Variable or a list of String") as e:
        _rc()._set_checkpoints(bad)
    assert isinstance(e.value, InvalidArgument) and repr(bad if not isinstance(bad, list) else bad[0]) in str(e.value)


def test_an_unknown_checkpoint_name_and_a_missing_set_checkpoints():
    main, startup = _fresh()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        _, _, loss = recompute_models._mlp(paddle)
        rc = _rc()
        with pytest.raises(AssertionError, match="_set_checkpoints first"):
            rc.minimize(loss)
        rc._set_checkpoints(["no_such_var"])
        with pytest.raises(VariableNotFound, match="no_such_var"):
            rc.minimize(loss)
    with pytest.raises(NotImplementedError, match="not supported by Recompute Optimizer"):
        rc.load({})


def test_append_backward_refuses_checkpoints_that_are_not_variables():
    with paddle.static.program_guard(*_fresh()), paddle.utils.unique_name.guard():
        _, _, loss = recompute_models._mlp(paddle)
        with pytest.raises(InvalidArgument, match="'fc_0.tmp_2'"):
            paddle.static.append_backward(loss, checkpoints=["fc_0.tmp_2"])


# ---- numbers: bitwise those of plain training ------------------------------------------------
def _train(model, recompute, steps=3, batch=16, opt="adam", merge_k=None, seed=3):
    """Losses, final persistables and the executor's memory stats of the last step."""
    main, startup = _fresh()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        if model == "mlp":
            x, hs, loss = recompute_models._mlp(paddle, layers=6, hid=32, din=16)
            ckpts = [hs[1], hs[3], hs[5]]
        else:
            x, hs, loss = recompute_models._residual(paddle)
            ckpts = hs[:2]
        inner = paddle.optimizer.Adam(learning_rate=0.01) if opt == "adam" else paddle.optimizer.SGD(0.1)
        if recompute:
            inner = paddle.incubate.optimizer.RecomputeOptimizer(inner)
            inner._set_checkpoints(ckpts)
        if merge_k:
            inner = paddle.incubate.optimizer.GradientMergeOptimizer(inner, k_steps=merge_k)
        inner.minimize(loss)
    paddle.seed(seed)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        feed = {"x": rng.standard_normal((batch, x.shape[1])).astype("float32")}
        losses.append(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])
    params = {v.name: np.array(scope.find_var(v.name).get_tensor())
              for v in main.list_vars() if v.persistable and scope.find_var(v.name) is not None
              and v.name not in ("feed", "fetch")}
    return losses, params, exe.memory_stats(), main


@pytest.mark.parametrize("model, opt, merge_k", [("mlp", "adam", None), ("residual", "sgd", None),
                                                 ("mlp", "sgd", 2), ("residual", "adam", 3)])
def test_recompute_gives_the_numbers_of_plain_training_bit_for_bit(model, opt, merge_k):
    """Also under ``GradientMergeOptimizer(RecomputeOptimizer(...))``, as Paddle allows."""
    got_l, got_p, _, main = _train(model, True, steps=4, opt=opt, merge_k=merge_k)
    want_l, want_p, _, _ = _train(model, False, steps=4, opt=opt, merge_k=merge_k)
    assert any(".subprog_" in op.output_arg_names[0] for op in main.global_block().ops if op.output_arg_names)
    for g, w in zip(got_l, want_l):
        assert np.array_equal(g, w)
    assert set(got_p) == set(want_p)
    for k in want_p:
        assert np.array_equal(got_p[k], want_p[k]), k


def test_recompute_lowers_the_measured_peak():
    """Activations ([512, 32] per layer) outweigh the weights here: the forward keeps three
    checkpoints instead of six relu outputs, and re-running one segment at a time costs less."""
    *_, plain, _ = _train("mlp", False, steps=1, batch=512)
    *_, rc, _ = _train("mlp", True, steps=1, batch=512)
    assert rc["peak_bytes"] < plain["peak_bytes"]
    assert rc["live_bytes"] == plain["live_bytes"]  # the same persistables after the step


# ---- inside a pipeline: the re-run forward ops belong to their stage's backward ---------------
def _pipeline_mlp(recompute):
    main, startup = _fresh()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        h = paddle.static.data("x", [None, 8], "float64")
        hs = []
        for _ in range(4):
            h = paddle.static.nn.fc(h, 16, activation="tanh")
            hs.append(h)
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        opt = paddle.optimizer.Adam(0.01)
        if recompute:
            opt = paddle.incubate.optimizer.RecomputeOptimizer(opt)
            opt._set_checkpoints([hs[1], hs[3]])
        opt.minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("schedule", ["FThenB", "1F1B"])
def test_recompute_inside_a_pipeline_gives_plain_pipeline_numbers(schedule):
    from refimpl.distributed.pipeline.runner import build_pipeline, train_in_process
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((8, 8))} for _ in range(3)]
    out = []
    for recompute in (True, False):
        main, startup, loss = _pipeline_mlp(recompute)
        # the cut after layer 2's tanh is also the first checkpoint: no segment crosses stages
        pl = build_pipeline(main, startup, loss, schedule, 2, 4, 1, cuts=[6])
        out.append(train_in_process(pl, feeds, seed=0))
        if recompute:
            backward = [op for op in pl.plans[1].program("backward").global_block().ops]
            assert any(op.type == "tanh" and op.output_arg_names[0].endswith(".subprog_0") for op in backward)
    (rl, rp), (pl_, pp) = out
    assert rl == pl_
    assert set(rp) == set(pp) and all(np.array_equal(rp[k], pp[k]) for k in pp)


def test_the_memory_estimator_predicts_smaller_forward_jobs():
    """``PipelineMemoryEstimator``: what a forward job keeps for its backward (per micro-batch,
    times the micro-batches in flight) shrinks on every rank. (On a whole program the estimator walks
    every block, as Paddle's does, so recompute's two scratch blocks would count there.)"""
    from refimpl.distributed.passes.memory_estimator import PipelineMemoryEstimator
    from refimpl.distributed.pipeline.runner import build_pipeline
    kept = {}
    for recompute in (True, False):
        main, startup, loss = _pipeline_mlp(recompute)
        pl = build_pipeline(main, startup, loss, "FThenB", 2, 4, 1, cuts=[6])
        for rank, plan in enumerate(pl.plans):
            progs = {k: plan.program(k) for k in ("forward", "backward", "optimizer")}
            est = PipelineMemoryEstimator(batch_size=2, paddle_quirks=False)
            est.set_program_skip_gc_vars(progs, ["forward", "backward", "optimizer"])
            kept[recompute, rank] = est.estimate_memory(progs["forward"], "forward")[0]
    for rank in (0, 1):
        assert 0 < kept[True, rank] < kept[False, rank]


def test_dropout_draws_the_same_mask_in_the_forward_and_its_rerun():
    """The seed op before the dropout (``seed=0``: a fresh seed every run) feeds both dropouts."""
    main, startup = _fresh()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        recompute_models.build(paddle, "dropout")
    assert [op.type for op in main.global_block().ops][3:5] == ["seed", "dropout"]
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    exe.run(startup, scope=scope)
    masks = []
    for _ in range(2):
        m, m_rerun = exe.run(main, feed={"x": np.ones((64, 4), "float32")}, scope=scope,
                             fetch_list=["dropout_0.tmp_1", "dropout_0.tmp_1.subprog_0"])
        assert np.array_equal(m, m_rerun) and 0 < m.mean() < 1
        masks.append(m)
    assert not np.array_equal(*masks)  # a new seed each run, as Paddle's std::random_device


def test_a_seeded_dropout_trains_bit_for_bit_as_without_recompute():
    """With the program's random_seed the dropout has a fixed seed; recompute moves it to the seed op."""
    runs = []
    for recompute in (True, False):
        main, startup = _fresh()
        with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
            x, hs, loss = recompute_models._dropout(paddle, seeded=True)
            opt = paddle.optimizer.Adam(0.01)
            if recompute:
                opt = paddle.incubate.optimizer.RecomputeOptimizer(opt)
                opt._set_checkpoints(hs)
            opt.minimize(loss)
        assert ("seed" in [op.type for op in main.global_block().ops]) == recompute
        paddle.seed(5)
        scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup, scope=scope)
        rng = np.random.default_rng(5)
        losses = [exe.run(main, feed={"x": rng.standard_normal((16, 4)).astype("float32")},
                          fetch_list=[loss], scope=scope)[0] for _ in range(3)]
        runs.append((losses, {p.name: np.array(scope.find_var(p.name).get_tensor())
                              for p in main.all_parameters()}))
    (rl, rp), (pl_, pp) = runs
    assert all(np.array_equal(a, b) for a, b in zip(rl, pl_))
    assert all(np.array_equal(rp[k], pp[k]) for k in pp)


def test_the_zoo_gpt_trains_bit_for_bit_as_without_recompute():
    """``09_gpt_recompute``'s builder (every transformer block's output a checkpoint, AdamW with a
    warm-up schedule) against ``gpt_mini``'s, which is the same model without the wrapper."""
    from zoo_build import case, zoo_module
    cfg = case("09_gpt_recompute")["config"]
    zoo = zoo_module(paddle)
    runs = []
    for builder in ("gpt_recompute", "gpt_mini"):
        main, startup = _fresh()
        with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
            loss, _ = zoo.MODELS[builder](dict(cfg))
        paddle.seed(9)
        scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup, scope=scope)
        rng = np.random.default_rng(9)
        losses = []
        for _ in range(3):
            feed = {n: rng.integers(0, cfg["vocab"], (3, cfg["seq"])).astype("int64") for n in ("ids", "labels")}
            losses.append(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])
        params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
        runs.append((losses, params, len(main.blocks)))
    (rl, rp, rblocks), (pl_, pp, pblocks) = runs
    assert (rblocks, pblocks) == (3, 1)
    assert all(np.array_equal(a, b) for a, b in zip(rl, pl_))
    assert set(rp) == set(pp) and all(np.array_equal(rp[k], pp[k]) for k in pp)
