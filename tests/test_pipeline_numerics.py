"""Pipeline parallelism gives the numbers of single-device training (issue 3, part 8).

An 8-layer MLP on P in {2, 4} stages, M in {P, 2P, 2P+1} micro-batches where
the schedule allows it, all six schedules: after three Adam steps the losses
and every parameter equal single-device training on the whole batch within
rtol 1e-5 — on in-process ranks here, and under ``mpiexec`` below.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import EnforceNotMet
from refimpl.distributed.communication import RankFailed
from refimpl.distributed.pipeline import runner
from refimpl.executor.plan import Job

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import pipeline_mlp  # noqa: E402


def allowed(schedule, p, m):
    return {"1F1B": m >= p, "ZBH1": m >= p, "VPP": m >= p, "Eager1F1B": m >= 2 * p - 1,
            "ZBVPP": m == p}.get(schedule, True)


GRID = [(s, p, m) for p in (2, 4) for s in pipeline_mlp.SCHEDULES for m in (p, 2 * p, 2 * p + 1)
        if allowed(s, p, m)]


@pytest.mark.parametrize("schedule, p, m", GRID, ids=[f"{s}-P{p}-M{m}" for s, p, m in GRID])
def test_pipeline_equals_single_device(schedule, p, m):
    ok, msg = pipeline_mlp.compare(schedule, p, m, vpp=2)
    assert ok, msg


@pytest.mark.parametrize("seed", range(4))
def test_float32_pipeline_equals_single_device_up_to_adams_magnified_rounding(seed):
    ok, msg = pipeline_mlp.compare("1F1B", 2, 2, vpp=1, seed=seed, dtype="float32")
    assert ok, msg


def test_pipeline_equals_single_device_without_gc():
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": -1.0})
    try:
        ok, msg = pipeline_mlp.compare("ZBH1", 4, 8, vpp=1)
    finally:
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})
    assert ok, msg


def test_rejected_configuration_names_the_problem():
    main, startup, loss = pipeline_mlp.build(4)
    with pytest.raises(AssertionError, match="micro"):
        runner.build_pipeline(main, startup, loss, "1F1B", 4, 2, cuts=pipeline_mlp.even_cuts(main, 4))
    with pytest.raises(EnforceNotMet, match="unknown pipeline schedule"):
        runner.build_pipeline(main, startup, loss, "2F2B", 2, 4)


def test_a_deadlocking_job_list_is_rejected_before_running(monkeypatch):
    from refimpl.distributed.passes.pipeline_scheduler_pass import PipelineFThenBPass
    real = PipelineFThenBPass.create_job_list

    def swapped(pass_obj):
        jobs = real(pass_obj)
        if pass_obj.get_attr("pp_stage") == 1:  # the last stage runs backward 0 before forward 0 arrives
            jobs = [Job("backward", 0)] + [j for j in jobs if j.as_tuple() != ("backward", 0)]
        return jobs
    monkeypatch.setattr(PipelineFThenBPass, "create_job_list", swapped)  # what build_pipeline's pass applies
    main, startup, loss = pipeline_mlp.build(4)
    with pytest.raises(EnforceNotMet, match="rank 1"):
        runner.build_pipeline(main, startup, loss, "FThenB", 2, 2, cuts=pipeline_mlp.even_cuts(main, 2))


def test_a_feed_of_the_wrong_dtype_is_named_by_the_rank_that_reads_it():
    main, startup, loss = pipeline_mlp.build(4)
    pl = runner.build_pipeline(main, startup, loss, "1F1B", 2, 2, cuts=pipeline_mlp.even_cuts(main, 2))
    with pytest.raises(RankFailed, match=r"rank 0 failed.*feed 'x': dtype float32 does not match .* float64"):
        runner.train_in_process(pl, [{"x": np.zeros((4, 8), "float32")}], timeout=10)


def test_a_failing_rank_stops_the_others():
    main, startup, loss = pipeline_mlp.build(4)
    pl = runner.build_pipeline(main, startup, loss, "1F1B", 2, 2, cuts=pipeline_mlp.even_cuts(main, 2))
    bad = [{"x": np.zeros((4, 8))}]
    op = pl.plans[1].program("forward").global_block().ops[-1]
    op._rename_input(op.input_arg_names[0], "ghost")  # rank 1 reads a var nobody writes
    with pytest.raises(RankFailed, match="rank 1"):
        runner.train_in_process(pl, bad, timeout=10)


@pytest.mark.parametrize("n", [2, 4])
def test_all_schedules_under_mpiexec(n):
    out = subprocess.run(["mpiexec", "-n", str(n), sys.executable, os.path.join(ROOT, "examples", "pipeline_mlp.py"),
                          "--schedule", "all", "--steps", "2"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("-> OK") == 6, out.stdout


@pytest.mark.parametrize("mode", [0, 1])
def test_section_worker_on_two_stages(mode):
    from refimpl.distributed.communication import context, run_in_process
    from refimpl.distributed.passes.gradient_accumulation import accumulate_gradients
    from refimpl.distributed.pipeline.partition import partition
    from refimpl.executor.section_worker import SectionWorker
    main, startup, loss = pipeline_mlp.build(4)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((8, 8))} for _ in range(3)]  # float64, as the model
    ref_losses, ref_params = pipeline_mlp.single_device(main, startup, loss, feeds, 0)
    m, s = main.clone(), startup.clone()
    accumulate_gradients(m, s, 4)
    stages = partition(m, 2, cuts=pipeline_mlp.even_cuts(m, 2))
    rings = sorted({op.attr("ring_id") for st in stages for op in st[0].global_block().ops
                    if op.type in ("send_v2", "recv_v2")})
    paddle.seed(0)
    init_scope = paddle.static.Scope()
    paddle.static.Executor().run(s, scope=init_scope)
    init = {n: np.array(init_scope.find_var(n).get_tensor()) for n in init_scope.local_var_names()}

    def rank_fn():
        r = context.current().rank
        for ring in rings:
            context.current().add_group(ring, range(2))
        scope = paddle.static.Scope()
        for n, v in init.items():
            scope.var(n).get_tensor().set(v)
        prog = stages[r][0]
        fetch = [loss.name] if loss.name in prog.global_block().vars else []
        worker = SectionWorker(prog, r, 2, 4, mode, fetch_list=fetch)
        outs = [worker.train(scope, f) for f in feeds]
        losses = [float(o[0].mean()) if fetch else None for o in outs]
        params = {n: np.array(scope.find_var(n).get_tensor()) for n, v in prog.global_block().vars.items()
                  if v.is_parameter}
        return losses, params
    results = run_in_process(2, rank_fn, timeout=30)
    np.testing.assert_allclose(results[1][0], ref_losses, **pipeline_mlp.TOLERANCE["float64"])
    for _, params in results:
        for n, v in params.items():
            np.testing.assert_allclose(v, ref_params[n], **pipeline_mlp.TOLERANCE["float64"])
