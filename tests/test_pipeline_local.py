"""Pipeline building blocks on one rank: gradient accumulation, partitioning into
chunk and job programs, the plan executor and the SectionWorker all give the
same numbers as single-device training on the whole batch."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import InvalidArgument, PreconditionNotMet
from refimpl.distributed.passes.gradient_accumulation import accumulate_gradients
from refimpl.distributed.pipeline.partition import assign_stages, job_programs, partition, parse_job_type
from refimpl.executor.section_worker import SectionWorker
from refimpl.executor.plan import Job, Plan
from refimpl.executor.plan_executor import PlanExecutor
from refimpl.framework import Program, unique_name
from refimpl.framework.op_role import is_forward

X = np.random.default_rng(0).standard_normal((8, 8)).astype("float32")
STEPS = 3


def build(layers=4, opt=lambda: paddle.optimizer.Adam(0.01)):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        h = paddle.static.data("x", [None, 8], "float32")
        for _ in range(layers):
            h = paddle.static.nn.fc(h, 16, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        opt().minimize(loss)
    return main, startup, loss


def single_device():
    paddle.seed(1)
    main, startup, loss = build()
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"x": X}, fetch_list=[loss], scope=scope)[0]) for _ in range(STEPS)]
    return losses, np.array(scope.find_var("fc_0.w_0").get_tensor())


REF = single_device()


def accumulated(m):
    paddle.seed(1)
    main, startup, loss = build()
    accumulate_gradients(main, startup, m, avg=True)
    scope = paddle.static.Scope()
    paddle.static.Executor().run(startup, scope=scope)
    return main, loss, scope


def check(losses, scope):
    np.testing.assert_allclose(losses, REF[0], rtol=1e-5)
    np.testing.assert_allclose(np.array(scope.find_var("fc_0.w_0").get_tensor()), REF[1], rtol=1e-5, atol=1e-6)


def run_plan(plan, loss, scope):
    pe = PlanExecutor()
    return [float(pe.run(plan, feed={"x": X}, fetch_list=[loss], scope=scope)[0].mean()) for _ in range(STEPS)]


@pytest.mark.parametrize("gc", [0.0, -1.0])
def test_fthenb_plan_on_one_rank_equals_the_full_batch(gc):
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc})
    try:
        main, loss, scope = accumulated(4)
        chunks = partition(main, 1)[0]
        jobs = [Job("forward", m) for m in range(4)] + [Job("backward", m) for m in range(4)] + [Job("optimizer")]
        progs = job_programs(chunks, ["forward", "backward", "optimizer"])
        # forward outputs that backward reads must survive the forward job
        keep = [n for n, v in progs["backward"].global_block().vars.items() if not v.persistable]
        for j in jobs[:4]:
            j.set_skip_gc_vars(keep)
        check(run_plan(Plan(jobs, progs), loss, scope), scope)
    finally:
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})


def test_vpp_chunks_with_a_zero_bubble_split_on_one_rank():
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": -1.0})
    try:
        main, loss, scope = accumulated(4)
        chunks = partition(main, 1, vpp_degree=2, cuts=[6])[0]
        jobs = [Job(f"forward{c}", m) for m in range(4) for c in (0, 1)]
        jobs += [Job(t, m) for m in range(4) for t in ("backward_b1", "backward_w1", "backward_b0", "backward_w0")]
        jobs.append(Job("optimizer"))
        progs = job_programs(chunks, sorted({j.type() for j in jobs}))
        w_ops = [op for op in progs["backward_w0"].global_block().ops if op.type == "mul_grad"]
        assert w_ops and all(op.output("X@GRAD") == [] for op in w_ops)
        check(run_plan(Plan(jobs, progs), loss, scope), scope)
    finally:
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})


@pytest.mark.parametrize("mode", [0, 1])
def test_section_worker_on_one_stage(mode):
    main, loss, scope = accumulated(4)
    worker = SectionWorker(main, 0, 1, 4, mode, fetch_list=[loss])
    check([float(worker.train(scope, {"x": X})[0].mean()) for _ in range(STEPS)], scope)


def test_section_worker_errors():
    main, loss, _ = accumulated(4)
    with pytest.raises(InvalidArgument, match="schedule_mode"):
        SectionWorker(main, 0, 1, 4, 7)
    worker = SectionWorker(main, 0, 4, 3, 1, fetch_list=[loss])
    scope = paddle.static.Scope()
    with pytest.raises(InvalidArgument, match=r"number of microbatches \(3\) is than startup steps \(3\)"):
        worker.train(scope, {"x": X[:6]})
    main.global_block().ops[0]._set_attr("op_role", 3)
    with pytest.raises(PreconditionNotMet, match="None of LRSched, Forward, Backward or Optimize"):
        SectionWorker(main, 0, 1, 4)


def test_partition_places_every_op_and_inserts_transfers():
    main, loss, _ = accumulated(2)
    stages = assign_stages(main, 2, cuts=[6])
    ops = main.global_block().ops
    assert all(s in (0, 1) for s in stages)
    assert stages[[op.type for op in ops].index("reduce_mean")] == 1
    progs = partition(main, 2, cuts=[6])
    s0 = [op.type for op in progs[0][0].global_block().ops]
    s1 = [op.type for op in progs[1][0].global_block().ops]
    assert s0.count("send_v2") == 1 and s0.count("recv_v2") == 1  # activation out, its gradient back
    assert s1.count("send_v2") == 1 and s1.count("recv_v2") == 1
    assert parse_job_type("backward_w3") == ("backward_w", 3)
    with pytest.raises(InvalidArgument, match="cut points"):
        assign_stages(main, 3, cuts=[6])
    with pytest.raises(InvalidArgument, match="unknown pipeline job type"):
        parse_job_type("sideways")


def test_partition_by_device_guard_annotations():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 8], "float32")
        with paddle.static.device_guard("stage:0"):
            h = paddle.static.nn.fc(x, 8, activation="relu")
        with paddle.static.device_guard("stage:1"):
            loss = paddle.mean(paddle.static.nn.fc(h, 1))
        paddle.optimizer.SGD(0.1).minimize(loss)
    stages = assign_stages(main, 2)
    fwd = [s for s, op in zip(stages, main.global_block().ops) if is_forward(op.role())]
    assert fwd == [0, 0, 0, 1, 1, 1]
    with pytest.raises(InvalidArgument, match="4 virtual stages"):
        assign_stages(main, 4)
