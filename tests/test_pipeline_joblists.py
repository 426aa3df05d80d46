"""Pipeline scheduler passes against Paddle's recorded job lists, plus the pass infrastructure.

Every entry of ``../shared/oracle/joblists.json`` (see JOBLISTS.md there) must
be reproduced exactly and every rejected configuration refused with Paddle's
builtin exception class and message. Hypothesis checks structural properties
of the schedules on configurations outside the recorded grid.
"""
import builtins
import json
import os
import sys
import types
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

import refimpl
from oracle import oracle_file
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound
from refimpl.distributed.passes import PassBase, PassContext, PassManager, new_pass, register_pass
from refimpl.distributed.passes.pipeline_scheduler_pass import SCHEDULES, create_job_list
from refimpl.executor.plan import Job, Plan

JOBLISTS = oracle_file("joblists.json")


def _load():
    if not os.path.exists(JOBLISTS):
        pytest.fail(f"no {JOBLISTS}; the tests need the repository's oracle/ (or $REFIMPL_ORACLE)")
    with open(JOBLISTS) as f:
        return json.load(f)


DATA = _load()


def _id(rec, i):
    a = rec["attrs"]
    extra = "".join(f"-{k[0]}{a[k]}" for k in ("vpp_degree", "split_backward") if k in a)
    return f"{i}-{rec['schedule']}-{rec['ir']}-m{a['num_micro_batches']}-p{a['pp_degree']}-s{a['pp_stage']}{extra}"


@pytest.fixture
def ir():
    """Set FLAGS_enable_pir_api for the pass construction; restore the default after."""
    def set_ir(name):
        refimpl.set_flags({"FLAGS_enable_pir_api": name == "pir"})
    yield set_ir
    refimpl.set_flags({"FLAGS_enable_pir_api": True})


def _make(rec, ir):
    ir(rec["ir"])
    return new_pass(DATA["pass_name_prefix"] + rec["schedule"], rec["attrs"])


@pytest.mark.parametrize("rec", DATA["entries"], ids=[_id(r, i) for i, r in enumerate(DATA["entries"])])
def test_job_list_matches_paddle(rec, ir):
    p = _make(rec, ir)
    jobs = p.create_job_list()
    assert all(isinstance(j, Job) for j in jobs)
    assert [list(j.as_tuple()) for j in jobs] == rec["jobs"]
    assert p._create_job_list() == jobs  # Paddle's private name


@pytest.mark.parametrize("rec", DATA["rejected"], ids=[_id(r, i) for i, r in enumerate(DATA["rejected"])])
def test_rejected_like_paddle(rec, ir):
    p = _make(rec, ir)
    with pytest.raises(EnforceNotMet) as info:
        p.create_job_list()
    assert isinstance(info.value, getattr(builtins, rec["error_type"]))
    assert str(info.value) == rec["error"]


def test_grid_is_complete():
    for key, n in DATA["counts"].items():
        schedule, ir_name = key.split("/")
        assert sum(e["schedule"] == schedule and e["ir"] == ir_name for e in DATA["entries"]) == n["entries"]
        assert sum(e["schedule"] == schedule and e["ir"] == ir_name for e in DATA["rejected"]) == n["rejected"]


@pytest.mark.parametrize("schedule", DATA["schedules"])
def test_constructor_defaults(schedule):
    p = new_pass(DATA["pass_name_prefix"] + schedule)
    for key, value in DATA["constructor_defaults"][schedule].items():
        assert p.get_attr(key) == value


def test_ir_flag_is_read_at_construction(ir):
    attrs = dict(num_micro_batches=4, pp_degree=2, pp_stage=0, vpp_degree=2)
    ir("pir")
    p = new_pass("pipeline_scheduler_VPP", attrs)
    ir("legacy")
    q = new_pass("pipeline_scheduler_VPP", attrs)
    assert any(j.type().startswith("recv_forward") for j in p.create_job_list())
    assert not any(j.type().startswith("recv_forward") for j in q.create_job_list())


def test_missing_attr_is_named():
    with pytest.raises(InvalidArgument, match="pp_degree"):
        create_job_list("1F1B", {"num_micro_batches": 4, "pp_stage": 0})


# ---------------------------------------------------------------- pass infrastructure

def test_new_pass_unknown_name():
    with pytest.raises(NotFound, match="no_such_pass") as info:
        new_pass("no_such_pass")
    assert isinstance(info.value, AssertionError)  # what Paddle raises
    assert "pipeline_scheduler_1F1B" in str(info.value)  # lists the registered ones


class _Recorder(PassBase):
    def __init__(self):
        super().__init__()
        self.seen = []

    def _check_self(self):
        return self.get_attr("enabled", True)

    def _check_conflict(self, other_pass):
        return other_pass.name != "test_blocker"

    def _apply_single_impl(self, main_program, startup_program, context):
        self.seen.append((main_program, startup_program))
        context.set_attr("last", main_program)


register_pass("test_recorder")(_Recorder)
register_pass("test_other_recorder")(type("_Other", (_Recorder,), {}))
register_pass("test_blocker")(type("_Blocker", (_Recorder,), {}))


def test_attrs_and_apply():
    p = new_pass("test_recorder", {"a": 1})
    assert p.name == "test_recorder" and p.get_attr("a") == 1 and p.get_attr("b", 7) == 7
    assert p.set_attr("b", 2) is p and p.get_attr("b") == 2
    ctx = p.apply(["m0", "m1"], ["s0", "s1"])
    assert isinstance(ctx, PassContext)
    assert p.seen == [("m0", "s0"), ("m1", "s1")]
    assert ctx.passes == [p] and ctx.get_attr("last") == "m1" and ctx.get_attr("nope", 3) == 3


def test_apply_skips_disabled_conflicting_and_repeated_passes():
    ctx = PassContext()
    new_pass("test_recorder", {"enabled": False}).apply(["m"], ["s"], ctx)
    assert ctx.passes == []
    first = new_pass("test_recorder")
    first.apply(["m"], ["s"], ctx)
    again = new_pass("test_recorder")
    again.apply(["m"], ["s"], ctx)  # one pass type at most once per context
    assert ctx.passes == [first] and again.seen == []
    new_pass("test_blocker").apply(["m"], ["s"], ctx)
    late = new_pass("test_other_recorder")
    late.apply(["m"], ["s"], ctx)  # conflicts with the blocker
    assert late.seen == [] and [p.name for p in ctx.passes] == ["test_recorder", "test_blocker"]


def test_apply_checks_program_lists():
    with pytest.raises(InvalidArgument):
        new_pass("test_recorder").apply(["m0", "m1"], ["s0"])
    with pytest.raises(InvalidArgument):
        new_pass("test_recorder").apply("m", "s")


def test_pass_manager():
    passes = [new_pass("test_recorder"), new_pass("test_recorder", {"enabled": False}),
              new_pass("test_other_recorder"), new_pass("test_recorder")]
    pm = PassManager(passes)
    assert pm.names == ["test_recorder", "test_other_recorder"]
    ctx = pm.apply(["m"], ["s"])
    assert ctx is pm.context and [p.name for p in ctx.passes] == pm.names


def two_stage_mlp(accumulate_steps):
    """(stage programs, startup) of a two-layer MLP with SGD, gradients accumulated over
    ``accumulate_steps`` micro-batches, cut after its third op into two stages (one chunk each)."""
    import refimpl as paddle
    from refimpl.distributed.passes.gradient_accumulation import accumulate_gradients
    from refimpl.distributed.pipeline.partition import partition
    from refimpl.framework import Program, unique_name
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        h = paddle.static.data("x", [None, 4], "float32")
        for _ in range(2):
            h = paddle.static.nn.fc(h, 4, activation="relu")
        paddle.optimizer.SGD(0.1).minimize(paddle.mean(h))
    accumulate_gradients(main, startup, accumulate_steps)
    return [chunks[0] for chunks in partition(main, 2, cuts=[3])], startup


def test_pipeline_pass_applied_to_a_stage_program_builds_its_plan():
    from refimpl.distributed.passes import PassContext
    (_, stage1), startup = two_stage_mlp(4)
    ctx = PassContext()
    new_pass("pipeline_scheduler_1F1B", {"num_micro_batches": 4, "pp_degree": 2, "pp_stage": 1}).apply(
        [stage1], [startup], ctx)
    plan = ctx.get_attr("plan")
    assert [j.type() for j in plan.job_list()][:3] == ["recv_forward", "forward", "backward"]
    fwd = [op.type for op in plan.program("forward").global_block().ops]
    assert fwd[0] == "recv_v2" and "reduce_mean" in fwd
    assert any(j.skip_gc_vars() for j in plan.job_list() if j.type() == "forward")


def test_pipeline_pass_apply_builds_plan(monkeypatch):
    fake = types.ModuleType("refimpl.distributed.passes.pass_utils")
    fake.set_skip_gc_vars = lambda m, job_types, progs, jobs: dict(zip(job_types, progs))
    monkeypatch.setitem(sys.modules, fake.__name__, fake)

    def split(pass_obj, program):
        kinds = pass_obj.required_job_types()
        return kinds, [f"{program}:{k}" for k in kinds]

    p = new_pass("pipeline_scheduler_1F1B", {"num_micro_batches": 3, "pp_degree": 2, "pp_stage": 1,
                                             "partial_programs": split})
    ctx = p.apply(["main"], ["startup"])
    plan = ctx.get_attr("plan")
    assert isinstance(plan, Plan) and ctx.passes == [p]
    assert plan.job_list() == p.create_job_list()
    assert plan.program("send_backward") == "main:send_backward"


# ---------------------------------------------------------------- properties

_PHASES = {"forward": "F", "backward": "BW", "backward_b": "B", "backward_w": "W"}


def _check_structure(jobs, num_micro_batches, chunks):
    """Each (chunk, micro-batch) has F, B and W exactly once, in that order; optimizer last."""
    assert jobs[-1].as_tuple() == ("optimizer", 0)
    assert [j.type() for j in jobs].count("optimizer") == 1
    seen, position = Counter(), {}
    for i, job in enumerate(jobs[:-1]):
        kind = job.type().rstrip("0123456789")
        chunk = job.type()[len(kind):]
        for phase in _PHASES.get(kind, ""):
            seen[(chunk, job.micro_batch_id(), phase)] += 1
            position[(chunk, job.micro_batch_id(), phase)] = i
    want = {(c, mb, ph) for c in chunks for mb in range(num_micro_batches) for ph in "FBW"}
    assert set(seen) == want and set(seen.values()) == {1}
    for c in chunks:
        for mb in range(num_micro_batches):
            assert position[(c, mb, "F")] < position[(c, mb, "B")] <= position[(c, mb, "W")]


@st.composite
def _configs(draw):
    schedule = draw(st.sampled_from(["FThenB", "1F1B", "Eager1F1B", "ZBH1", "VPP"]))
    p = draw(st.integers(1, 8))
    s = draw(st.integers(0, p - 1))
    low = 2 * (p - s) - 1 if schedule == "Eager1F1B" else p
    m = draw(st.integers(low if schedule != "FThenB" else 1, 3 * p + 2))
    attrs = dict(num_micro_batches=m, pp_degree=p, pp_stage=s)
    if schedule == "VPP":
        attrs.update(vpp_degree=draw(st.integers(1, 4)), split_backward=draw(st.booleans()))
    return schedule, attrs, draw(st.sampled_from(["pir", "legacy"]))


@settings(max_examples=300, deadline=None)
@given(_configs())
def test_every_job_once_and_optimizer_last(config):
    schedule, attrs, ir_name = config
    if schedule == "1F1B":
        ir_name = "pir"  # Paddle has no legacy 1F1B list
    refimpl.set_flags({"FLAGS_enable_pir_api": ir_name == "pir"})
    try:
        jobs = create_job_list(schedule, attrs)
    finally:
        refimpl.set_flags({"FLAGS_enable_pir_api": True})
    v = attrs.get("vpp_degree")
    _check_structure(jobs, attrs["num_micro_batches"], [str(c) for c in range(v)] if v else [""])
    comm = [j for j in jobs if j.type().startswith(("recv_forward", "send_backward"))]
    assert not comm or len(comm) == 2 * attrs["num_micro_batches"] * (v or 1)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 5), v=st.integers(2, 4),
       runtimes=st.lists(st.integers(0, 100), min_size=5, max_size=5),
       limit=st.one_of(st.none(), st.integers(0, 40)))
def test_zbvpp_every_stage_complete_and_within_memory(p, v, runtimes, limit):
    attrs = dict(num_micro_batches=p, pp_degree=p, pp_stage=0, vpp_degree=v, program_runtimes=runtimes,
                 injected_mem_usage_per_job={"forward": 2, "backward_b": -1, "backward_w": -1},
                 injected_max_mem_usage_per_job={"forward": 2, "backward_b": 1, "backward_w": 0},
                 injected_base_memory=0, injected_max_memory=limit)
    zb = new_pass("pipeline_scheduler_ZBVPP", attrs)
    try:
        stages = zb.all_stage_schedules()
    except ValueError as exc:  # the memory limit cannot be met
        assert limit is not None and isinstance(exc, EnforceNotMet)
        return
    peak = {"forward": 2, "backward_b": 1, "backward_w": 0}
    usage = attrs["injected_mem_usage_per_job"]
    for stage, actions in enumerate(stages):
        jobs = [Job(f"{a.kind}{a.chunk}", a.micro_batch) for a in actions] + [Job("optimizer")]
        _check_structure(jobs, p, [str(c) for c in range(v)])
        mem = 0
        for a in actions:
            assert limit is None or mem + peak[a.kind] <= limit
            mem += usage[a.kind]
        zb.set_attr("pp_stage", stage)
        assert zb.create_job_list() == jobs


def test_all_schedules_registered():
    for schedule in SCHEDULES:
        assert new_pass("pipeline_scheduler_" + schedule).name == "pipeline_scheduler_" + schedule
