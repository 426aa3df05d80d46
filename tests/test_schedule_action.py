"""The pipeline schedule vocabulary: Action prints compactly, parses back, and
turns into Paddle's job types; the schedules, the passes and the simulator share it."""
import dataclasses

import pytest
from hypothesis import given, strategies as st

from refimpl.core.errors import InvalidArgument
from refimpl.distributed.passes import PassContext, new_pass
from refimpl.distributed.passes.pipeline_scheduler_pass import fthenb_schedule, vpp_schedule
from refimpl.distributed.passes.pipeline_scheduler_pass.action import KINDS, Action, parse_job_type
from refimpl.executor.plan import Job
from refimpl.framework import Program

from test_pipeline_joblists import two_stage_mlp

# written out by hand: (action, its text, Paddle's job type)
EXAMPLES = [
    (Action("forward", 3), "F3", "forward"),
    (Action("backward", 3), "B3", "backward"),
    (Action("backward_b", 3), "I3", "backward_b"),
    (Action("backward_w", 3), "W3", "backward_w"),
    (Action("recv_forward", 0), "RECV_F0", "recv_forward"),
    (Action("send_backward", 12), "SEND_B12", "send_backward"),
    (Action("optimizer", 0), "O0", "optimizer"),
    (Action("forward", 3, 1), "F3.1", "forward1"),
    (Action("forward", 3, 0), "F3.0", "forward0"),
    (Action("backward_b", 5, 2), "I5.2", "backward_b2"),
    (Action("backward_w", 0, 10), "W0.10", "backward_w10"),
    (Action("recv_forward", 5, 1), "RECV_F5.1", "recv_forward1"),
    (Action("send_backward", 7, 0), "SEND_B7.0", "send_backward0"),
]


@pytest.mark.parametrize("action,text,job_type", EXAMPLES, ids=[e[1] for e in EXAMPLES])
def test_prints_parses_back_and_names_paddles_job_type(action, text, job_type):
    assert str(action) == text
    assert Action.parse(text) == action
    assert action.job_type == job_type
    assert action.to_job() == Job(job_type, action.micro_batch)
    assert Action.from_job(Job(job_type, action.micro_batch)) == action
    assert Action.from_job([job_type, action.micro_batch]) == action   # as recorded in joblists.json


@given(kind=st.sampled_from(KINDS), micro_batch=st.integers(0, 10_000),
       chunk=st.one_of(st.none(), st.integers(0, 64)))
def test_round_trips_for_every_kind(kind, micro_batch, chunk):
    action = Action(kind, micro_batch, chunk)
    assert Action.parse(str(action)) == action
    assert Action.from_job(action.to_job()) == action


def test_chunk_none_and_chunk_zero_are_the_same_work_spelled_differently():
    single, first = Action("forward", 2), Action("forward", 2, 0)
    assert single != first and single.job_type == "forward" and first.job_type == "forward0"
    assert single.key == first.key == ("forward", 0, 2)
    assert single.model_chunk == first.model_chunk == 0
    assert Action("backward_b", 4, 3).key == ("backward_b", 3, 4)


@pytest.mark.parametrize("text", ["", "F", "3", "X3", "f3", "F-1", "F03", "F3.", "F3.01", "F3.1.2",
                                  "F 3", "BW3", "RECV3", "forward3", " F3", "O"])
def test_bad_text_raises_invalid_argument(text):
    with pytest.raises(InvalidArgument, match="not a pipeline action"):
        Action.parse(text)


def test_bad_job_types_and_fields_raise_invalid_argument():
    for job_type in ["sideways", "", "forward01", "backward_x", "3", "Forward"]:
        with pytest.raises(InvalidArgument, match="unknown pipeline job type"):
            parse_job_type(job_type)
    assert parse_job_type("backward_w3") == ("backward_w", 3)
    assert parse_job_type("optimizer") == ("optimizer", None)
    with pytest.raises(InvalidArgument, match="kind"):
        Action("fwd", 0)
    with pytest.raises(InvalidArgument, match="micro_batch"):
        Action("forward", -1)
    with pytest.raises(InvalidArgument, match="micro_batch"):
        Action("forward", "3")
    with pytest.raises(InvalidArgument, match="chunk"):
        Action("forward", 0, -1)
    with pytest.raises(InvalidArgument):
        Action.parse(None)


def test_is_immutable_and_hashable():
    action = Action("forward", 1, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        action.micro_batch = 2
    assert len({action, Action("forward", 1, 1), Action("forward", 1)}) == 2


def test_schedules_passes_and_simulator_share_the_type():
    from refimpl.distributed import pipeline
    assert pipeline.Action is Action
    steps = fthenb_schedule(2)
    assert [str(a) for a in steps] == ["F0", "F1", "B0", "B1", "O0"]
    vpp = vpp_schedule(2, 2, 0, 2, with_comm_jobs=False)
    assert all(isinstance(a, Action) for a in vpp)
    assert [str(a) for a in vpp[:4]] == ["F0.0", "F1.0", "F0.1", "F1.1"]
    assert str(vpp[-1]) == "O0" and vpp[-1].job_type == "optimizer"
    sim = pipeline.simulate([[Job("forward", 0), Job("backward", 0)]], 1)
    assert sim.timeline[0][1].action == Action("backward", 0)


def test_job_program_hook_rewrites_job_programs_before_the_plan_is_made():
    (stage0, _), startup = two_stage_mlp(2)
    seen, replaced = [], {}

    def hook(job_type, program):
        seen.append(job_type)
        if job_type != "optimizer":
            return program
        new = Program()
        new.global_block().append_op(type="fill_constant", outputs={"Out": [new.global_block().create_var(
            name="hook_marker", shape=[1], dtype="float32")]}, attrs={"shape": [1], "value": 1.0,
                                                                      "dtype": 5})
        replaced["optimizer"] = new
        return new

    attrs = {"num_micro_batches": 2, "pp_degree": 2, "pp_stage": 0, "job_program_hook": hook}
    plan = new_pass("pipeline_scheduler_FThenB", attrs).apply([stage0], [startup], PassContext()).get_attr("plan")
    assert seen == ["forward", "backward", "optimizer"]
    assert plan.program("optimizer") is replaced["optimizer"]
    assert [op.type for op in plan.program("forward").global_block().ops][-1] == "send_v2"
