"""Reads across pipeline stages give the numbers of the un-pipelined program, or a build-time error.

Every model here is trained twice from the same initial values on the same
batches: as one float64 program on one device, and as a two-rank pipeline
(four virtual stages for VPP and ZBVPP) under each of the six schedules.
Losses and every parameter must agree to rounding (rtol 1e-9). The reads:

* a residual from the previous stage's *first* layer: the stage sends two
  vars, made in one order and read in the other (the transfers of one ring
  must pair up in the order the receiver reads them);
* a backward op reading a forward activation of an earlier stage that no
  forward op of its stage reads, and one reading an activation of a later
  stage (ops inserted into the backward);
* recompute segments that cross stage boundaries (``x.subprog_k`` made on
  one stage, read by the next one's re-run);
* an optimizer op reading a var another stage's optimizer op made;
* on interleaved VPP, one stage sending to two chunks of one rank.

What cannot be made exact is refused when the pipeline is built, naming the
op, the variable and both stages.
"""
import os
import re
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.distributed.pipeline.runner import build_pipeline, train_in_process
from refimpl.framework import Program, unique_name
from refimpl.framework.op_role import OpRole

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import pipeline_mlp  # noqa: E402

SCHEDULES = ["FThenB", "1F1B", "Eager1F1B", "VPP", "ZBH1", "ZBVPP"]
P = 2
BACKWARD = "backward(_b)?"  # the job kinds that move gradients (zero-bubble ones split the backward)


def _virtual(schedule):
    return 2 if schedule in ("VPP", "ZBVPP") else 1


def _micro_batches(schedule):
    return P if schedule == "ZBVPP" else 2 * P


def build(nv, residual, width=16):
    """Per virtual stage (``device_guard("gpu:s")``): two fc+tanh layers; the first layer's output
    gets, with ``residual``, the previous stage's first-layer output added. Returns (main, startup,
    loss, {"first": [per-stage first-layer output names]})."""
    main, startup = Program(), Program()
    firsts = []
    with paddle.static.program_guard(main, startup), unique_name.guard():
        h = paddle.static.data("x", [None, 8], "float64")
        for s in range(nv):
            with paddle.static.device_guard(f"gpu:{s}"):
                a = paddle.static.nn.fc(h, width, activation="tanh")
                if residual and s > 0:
                    a = a + firsts[-1]
                firsts.append(a)
                h = paddle.static.nn.fc(a, width, activation="tanh")
        with paddle.static.device_guard(f"gpu:{nv - 1}"):
            loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        paddle.optimizer.Adam(0.01).minimize(loss)
    return main, startup, loss, {"first": [v.name for v in firsts]}


def insert_backward_read(main, grad_name, other):
    """Before the first reader of ``grad_name``, multiply it by ``other`` (a backward op reading ``other``;
    linear in the gradient, so splitting the batch into micro-batches keeps its numbers)."""
    block = main.global_block()
    at = next(i for i, op in enumerate(block.ops) if grad_name in op.input_arg_names)
    g = block.var(grad_name)
    new = block.create_var(name=grad_name + "@PLUS", shape=g.shape, dtype=g.dtype)
    for op in block.ops[at:]:
        op._rename_input(grad_name, new.name)
    block._insert_op(at, type="elementwise_mul", inputs={"X": [grad_name], "Y": [other]},
                     outputs={"Out": [new.name]}, attrs={"axis": -1, "op_role": OpRole.Backward})


def feeds(m, steps=3):
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((2 * m, 8))} for _ in range(steps)]


def assert_pipeline_equals_single_device(make, schedule, cuts=None):
    """``make()`` -> (main, startup, loss); pipelined with ``schedule`` vs run on one device."""
    m = _micro_batches(schedule)
    data = feeds(m)
    main, startup, loss = make()
    ref_losses, ref_params = pipeline_mlp.single_device(main, startup, loss, data, 0)
    main, startup, loss = make()
    pl = build_pipeline(main, startup, loss, schedule, P, m, _virtual(schedule), cuts=cuts)
    losses, params = train_in_process(pl, data, seed=0, timeout=60)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-9)
    assert set(params) == set(ref_params)
    for k, v in params.items():
        np.testing.assert_allclose(v, ref_params[k], rtol=1e-9, atol=1e-12, err_msg=k)
    return pl


def _transfers(pl, rank, kind, op_type):
    """The vars ``op_type`` moves in the ``kind`` jobs of ``rank`` (every chunk's: ``forward0``, ...)."""
    plan = pl.plans[rank]
    return [n for t in plan.job_types() if re.fullmatch(kind + r"\d*", t)
            for op in plan.program(t).global_block().ops if op.type == op_type
            for n in op.input_arg_names + op.output_arg_names]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_vars_sent_in_one_order_and_read_in_the_other(schedule):
    nv = P * _virtual(schedule)

    def make():
        main, startup, loss, _ = build(nv, residual=True)
        return main, startup, loss
    pl = assert_pipeline_equals_single_device(make, schedule)
    if schedule == "1F1B":  # stage 0 sends its boundary var and its first layer's output, in reader order
        first0 = build(nv, residual=True)[3]["first"][0]
        assert _transfers(pl, 0, "forward", "send_v2") == _transfers(pl, 1, "forward", "recv_v2")
        assert first0 in _transfers(pl, 0, "forward", "send_v2")


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_backward_op_reads_a_forward_activation_of_an_earlier_stage(schedule):
    nv = P * _virtual(schedule)
    names = build(nv, residual=False)[3]["first"]

    def make():
        main, startup, loss, _ = build(nv, residual=False)
        insert_backward_read(main, names[1] + "@GRAD", names[0])  # on stage 1: times stage 0's first output
        return main, startup, loss
    pl = assert_pipeline_equals_single_device(make, schedule)
    # it travels with the forward pass (a backward send would make stage 1 wait for stage 0's backward)
    assert names[0] in _transfers(pl, 0, "forward", "send_v2")
    assert names[0] in _transfers(pl, 1, "forward", "recv_v2")
    assert names[0] not in _transfers(pl, 1, BACKWARD, "recv_v2")


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_backward_op_reads_a_forward_activation_of_a_later_stage(schedule):
    nv = P * _virtual(schedule)
    names = build(nv, residual=False)[3]["first"]

    def make():
        main, startup, loss, _ = build(nv, residual=False)
        insert_backward_read(main, names[0] + "@GRAD", names[1])  # on stage 0: times stage 1's first output
        return main, startup, loss
    pl = assert_pipeline_equals_single_device(make, schedule)
    assert names[1] in _transfers(pl, 1, BACKWARD, "send_v2") and names[1] in _transfers(pl, 0, BACKWARD, "recv_v2")


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_optimizer_op_reads_an_optimizer_var_of_another_stage(schedule):
    """After the updates, stage 1's first bias gets the mean of stage 0's first weight added (two
    optimizer ops appended by hand): the mean travels in the optimizer jobs."""
    nv = P * _virtual(schedule)

    def make():
        main, startup, loss, _ = build(nv, residual=False)
        block = main.global_block()
        m = block.create_var(name="w0_mean", shape=[], dtype="float64")
        role = {"op_role": OpRole.Optimize}
        block.append_op(type="reduce_mean", inputs={"X": ["fc_0.w_0"]}, outputs={"Out": [m]},
                        attrs=dict(role, dim=[0, 1], keep_dim=False, reduce_all=True))
        block.append_op(type="elementwise_add", inputs={"X": ["fc_2.b_0"], "Y": [m]},
                        outputs={"Out": ["fc_2.b_0"]}, attrs=dict(role, axis=-1))
        return main, startup, loss
    pl = assert_pipeline_equals_single_device(make, schedule)
    assert "w0_mean" in _transfers(pl, 0, "optimizer", "send_v2") + _transfers(pl, 1, "optimizer", "recv_v2")


def _recompute_mlp(nv):
    """8 fc+tanh layers; checkpoints whose segments cross the cuts of ``nv`` even stages."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        h = paddle.static.data("x", [None, 8], "float64")
        hs = []
        for _ in range(8):
            h = paddle.static.nn.fc(h, 16, activation="tanh")
            hs.append(h)
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        opt = paddle.incubate.optimizer.RecomputeOptimizer(paddle.optimizer.Adam(0.01))
        opt._set_checkpoints([hs[0], hs[6]] if nv == 4 else [hs[1], hs[6]])
        opt.minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_recompute_segments_that_cross_stages(schedule):
    nv = P * _virtual(schedule)
    cuts = [24 // nv * k for k in range(1, nv)]  # 3 forward ops per layer: 8 // nv layers per stage
    pl = assert_pipeline_equals_single_device(lambda: _recompute_mlp(nv), schedule, cuts=cuts)
    plan = pl.plans[1]
    ops = [op for t in plan.job_types() if re.fullmatch(BACKWARD + r"\d*", t)
           for op in plan.program(t).global_block().ops]
    # the re-run on stage 1 starts from a copy of the var it received in the forward pass (as Paddle's 1F1B)
    copies = [op for op in ops if op.type == "assign" and op.output_arg_names[0].endswith(".subprog_0")]
    assert copies and all(op.output_arg_names[0] == op.input_arg_names[0] + ".subprog_0" for op in copies)
    assert not any(n.endswith(".subprog_0") for n in _transfers(pl, 1, BACKWARD, "recv_v2"))


# ---- refused at build time ---------------------------------------------------------------------
def test_a_forward_op_reading_a_later_stage_is_refused():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 8], "float64")
        with paddle.static.device_guard("gpu:1"):
            h = paddle.static.nn.fc(x, 8)
        with paddle.static.device_guard("gpu:0"):
            y = paddle.static.nn.fc(h, 8)
        with paddle.static.device_guard("gpu:1"):
            loss = paddle.mean(paddle.square(y))
        paddle.optimizer.SGD(0.1).minimize(loss)
    with pytest.raises(InvalidArgument, match=r"'mul' on virtual stage 0 reads 'fc_0.tmp_1', .* on virtual "
                                              r"stage 1; in the forward pass a var can only move to a later"):
        build_pipeline(main, startup, loss, "1F1B", 2, 2)


def test_a_parameter_read_off_its_stage_is_refused():
    """What recompute's re-run ops did before they followed their outputs' stage: read a parameter that
    another stage's optimizer updates (the copy would be stale from the second step on)."""
    main, startup, loss, out = build(2, residual=False)
    names = out["first"]
    insert_backward_read(main, names[0] + "@GRAD", "fc_2.b_0")  # on stage 0: times stage 1's first bias
    with pytest.raises(Unimplemented, match=r"\('elementwise_mul'\) on virtual stage 0 reads persistable var "
                                            r"'fc_2.b_0', which op \d+ \('adam'\) updates on virtual stage 1"):
        build_pipeline(main, startup, loss, "1F1B", 2, 2)


def test_a_backward_var_read_by_a_later_stages_backward_is_refused():
    main, startup, loss, out = build(2, residual=False)
    names = out["first"]
    g0, g1 = names[0] + "@GRAD", names[1] + "@GRAD"
    block = main.global_block()
    at = max(i for i, op in enumerate(block.ops) if g0 in op.output_arg_names) + 1
    out = block.create_var(name=g1 + "@LATE", shape=[-1, 16], dtype="float64")
    block._insert_op(at, type="elementwise_add", inputs={"X": [g1], "Y": [g0]}, outputs={"Out": [out]},
                     attrs={"axis": -1, "op_role": OpRole.Backward})  # on stage 1: it follows g1's var
    with pytest.raises(Unimplemented, match=rf"'elementwise_add' on virtual stage 1 reads '{g0}', which op "
                                            rf"'\w+' makes on virtual stage 0 in the backward pass; sending it would "
                                            r"make stage 1's backward job wait for stage 0's"):
        build_pipeline(main, startup, loss, "1F1B", 2, 2)


@pytest.mark.parametrize("schedule", ["VPP", "ZBVPP"])
def test_one_stage_sending_to_two_chunks_of_one_rank(schedule):
    """Interleaved VPP on 2 ranks: stages 1 and 3 live on rank 1; a var of stage 0 read on stage 3 takes
    an extra ring (9, after the 8 of four stages): on stage 0's own ring to rank 1 it would meet the
    boundary var of stage 1 in another order than rank 1 reads them. (ZB-VPP puts stage 3 on rank 0.)"""
    names = build(4, residual=False)[3]["first"]

    def make():
        main, startup, loss, _ = build(4, residual=False)
        insert_backward_read(main, names[3] + "@GRAD", names[0])
        return main, startup, loss
    pl = assert_pipeline_equals_single_device(make, schedule)
    assert (9 in pl.rings) == (schedule == "VPP") and max(pl.rings) <= 9
