"""The pipeline schedule simulator and its pictures, on Paddle's recorded job lists.

Job lists come from ``../shared/oracle/joblists.json`` (all stages of one
configuration = the job lists of all ranks), so these tests do not depend on
the scheduler passes.
"""
import json
import os
from collections import defaultdict

import pytest

from oracle import oracle_file
from refimpl.distributed.pipeline import (CostModel, ScheduleDeadlock, ScheduleError,
                                          check_job_lists, simulate, stage_map_for)
from refimpl.executor.plan import Job
from refimpl.schedule_cli import main as schedule_main
from refimpl.schedule_cli import recorded_job_lists
from refimpl.viz import ascii_grid, chrome_trace, gantt_png, write_chrome_trace

JOBLISTS = oracle_file("joblists.json")
UNIT = CostModel(forward=1, backward_b=1, backward_w=0)   # W folded into B: backward = 1
FBW = CostModel(forward=1, backward_b=1, backward_w=1)    # F = B = W; a full backward = 2


@pytest.fixture(scope="module")
def data():
    if not os.path.exists(JOBLISTS):
        pytest.fail(f"no {JOBLISTS}; the tests need the repository's oracle/ (or $REFIMPL_ORACLE)")
    with open(JOBLISTS) as f:
        return json.load(f)


def configurations(data, schedule, ir="pir"):
    """{(attrs without pp_stage): [job list per stage]} for complete configurations."""
    groups = defaultdict(dict)
    for e in data["entries"]:
        if e["schedule"] == schedule and e["ir"] == ir:
            attrs = {k: v for k, v in e["attrs"].items() if k != "pp_stage"}
            groups[json.dumps(attrs, sort_keys=True)][e["attrs"]["pp_stage"]] = e["jobs"]
    out = {}
    for key, stages in groups.items():
        attrs = json.loads(key)
        if len(stages) == attrs["pp_degree"]:
            out[key] = (attrs, [stages[s] for s in range(attrs["pp_degree"])])
    return out


def lists(data, schedule, p, m, **attrs):
    return recorded_job_lists(schedule, p, m, data=data, **attrs)


@pytest.mark.parametrize("schedule", ["FThenB", "1F1B"])
def test_unit_cost_bubble_is_exact(data, schedule):
    configs = configurations(data, schedule)
    assert len(configs) >= 7
    for attrs, jobs in configs.values():
        p, m = attrs["pp_degree"], attrs["num_micro_batches"]
        sim = simulate(jobs, p, costs=UNIT)
        expected = (p - 1) / (m + p - 1)
        assert sim.bubble_ratio == expected, (p, m)
        assert sim.bubble_ratios == [expected] * p, (p, m)
        assert sim.makespan == 2 * (m + p - 1)


def test_zbh1_bubble_against_1f1b(data):
    for p, m in [(2, 2), (2, 3), (2, 4), (2, 8), (4, 4), (4, 8), (4, 16)]:
        zb = simulate(lists(data, "ZBH1", p, m), p, costs=FBW)
        base = simulate(lists(data, "1F1B", p, m), p, costs=FBW)
        assert [base.idle(r) for r in range(p)] == [3 * (p - 1)] * p    # (p-1)(F+B+W)
        zb_idle = [zb.idle(r) for r in range(p)]
        if p == 2:      # at most (here exactly) a third of 1F1B's bubble
            assert all(3 * z <= 3 * (p - 1) for z in zb_idle), (p, m, zb_idle)
        else:
            # Paddle's ZBH1 runs full (unsplit) backwards in its cool-down, so
            # for p > 2 its gradients travel back at B+W per stage: 5 units of
            # bubble at p=4 instead of the ideal p-1 = 3 (see the hand-made
            # ideal schedule below).
            assert zb_idle == [5] * p, (p, m, zb_idle)
        assert zb.bubble_ratio < base.bubble_ratio


def ideal_zbh1(p, m, stage):
    """ZB-H1 as in the paper: every backward split, W deferred to fill bubbles."""
    jobs, pending, fwd, bwd = [], [], 0, 0
    for step in ["F"] * (p - stage) + ["BF"] * stage + ["BWF"] * (m - p) + ["BW"] * (p - stage):
        for kind in step:
            if kind == "F":
                jobs.append(("forward", fwd))
                fwd += 1
            elif kind == "B":
                jobs.append(("backward_b", bwd))
                pending.append(bwd)
                bwd += 1
            elif len(pending) > stage:
                jobs.append(("backward_w", pending.pop(0)))
    return jobs + [("backward_w", w) for w in pending] + [("optimizer", 0)]


def test_ideal_zbh1_bubble_is_a_third_of_1f1b(data):
    for p, m in [(2, 4), (4, 4), (4, 8), (4, 16)]:
        sim = simulate([ideal_zbh1(p, m, s) for s in range(p)], p, costs=FBW)
        assert [sim.idle(r) for r in range(p)] == [p - 1] * p     # (p-1)(F+B-W)
        assert sim.peak_in_flight == [p] * p


def test_peak_in_flight_1f1b_vs_fthenb(data):
    for attrs, jobs in configurations(data, "1F1B").values():
        p, m = attrs["pp_degree"], attrs["num_micro_batches"]
        sim = simulate(jobs, p, costs=UNIT)
        assert sim.peak_in_flight[0] == min(p, m)
        assert sim.peak_in_flight == [min(p, m) - s for s in range(p)]
    for attrs, jobs in configurations(data, "FThenB").values():
        sim = simulate(jobs, attrs["pp_degree"], costs=UNIT)
        assert sim.peak_in_flight == [attrs["num_micro_batches"]] * attrs["pp_degree"]


def test_every_recorded_schedule_completes(data):
    """All recorded job lists run to the end, except pir VPP with P=4, M=6,
    whose blocking recv_forward/send_backward order deadlocks (its legacy
    list, without those jobs, completes)."""
    count, deadlocked = 0, set()
    for schedule in ["FThenB", "1F1B", "Eager1F1B", "VPP", "ZBH1", "ZBVPP"]:
        for ir in ["pir", "legacy"]:
            for attrs, jobs in configurations(data, schedule, ir).values():
                p, m = attrs["pp_degree"], attrs["num_micro_batches"]
                v = attrs.get("vpp_degree", 1)
                kw = dict(costs=FBW, stage_map=stage_map_for(schedule))
                try:
                    sim = simulate(jobs, p, v, **kw)
                except ScheduleDeadlock:
                    deadlocked.add((schedule, ir, p, m, v))
                    sim = simulate(jobs, p, v, ignore_markers=True, **kw)
                assert sim.busy == [m * v * 3] * p
                count += 1
    assert count >= 100
    assert {("VPP", "pir", 4, 6, 2), ("VPP", "pir", 4, 6, 3)} <= deadlocked
    assert all(s == "VPP" and ir == "pir" and m % p for s, ir, p, m, _ in deadlocked)


def test_zbvpp_needs_the_v_shape(data):
    jobs = lists(data, "ZBVPP", 2, 2, vpp_degree=2, program_runtimes=[1, 1, 1, 0, 0])
    assert simulate(jobs, 2, 2, FBW, stage_map="vshape").makespan == 13
    with pytest.raises(ScheduleDeadlock):
        simulate(jobs, 2, 2, FBW, stage_map="interleaved")


def test_deadlock_names_rank_and_job():
    # rank 0 runs B0 before F1, but rank 1 needs F1 before it can run B0
    jobs = [[("forward", 0), ("backward", 0), ("forward", 1), ("backward", 1)],
            [("forward", 0), ("forward", 1), ("backward", 0), ("backward", 1)]]
    with pytest.raises(ScheduleDeadlock) as info:
        simulate(jobs, 2)
    e = info.value
    assert (e.rank, e.job.key) == (0, ("backward", 0, 0))
    assert [(r, str(a)) for r, a, _ in e.stuck] == [(0, "B0"), (1, "F1")]
    msg = str(e)
    assert ("rank 0 is stuck at job 1 (B0): it waits for B0 on rank 1, "
            "which is itself stuck at job 1 (F1)") in msg
    assert "rank 1 is stuck at job 1 (F1): it waits for F1 on rank 0" in msg


def test_recorded_vpp_deadlock_is_named(data):
    with pytest.raises(ScheduleDeadlock) as info:
        simulate(lists(data, "VPP", 4, 6, vpp_degree=2), 4, 2)
    assert (info.value.rank, str(info.value.job)) == (0, "RECV_F5.1")
    assert info.value.job.job_type == "recv_forward1"


def test_check_job_lists_rejects_bad_lists(data):
    good = lists(data, "1F1B", 2, 3)
    assert len(check_job_lists(good, 2)[0]) == len(good[0])
    missing = [good[0], [j for j in good[1] if j != ["backward", 2]]]
    with pytest.raises(ScheduleError, match="rank 1: chunk 0 micro-batch 2 has no backward"):
        check_job_lists(missing, 2)
    twice = [good[0] + [["forward", 1]], good[1]]
    with pytest.raises(ScheduleError, match="appears twice"):
        check_job_lists(twice, 2)
    unsent = [good[0], [j for j in good[1] if j != ["send_backward", 1]]]
    with pytest.raises(ScheduleError, match="send without its recv"):
        check_job_lists(unsent, 2)
    with pytest.raises(ScheduleError, match="unknown job type"):
        check_job_lists([[("fwd", 0)], [("fwd", 0)]], 2)
    with pytest.raises(ScheduleDeadlock, match="no rank's job list produces"):
        simulate(missing, 2, check=False)


def test_accepts_job_objects(data):
    jobs = [[Job(t, m) for t, m in rank] for rank in lists(data, "1F1B", 2, 4)]
    assert simulate(jobs, 2, costs=UNIT).bubble_ratio == 1 / 5


def test_ascii_grid_1f1b(data):
    sim = simulate(lists(data, "1F1B", 2, 3), 2, costs=UNIT)
    assert ascii_grid(sim) == (
        "step   |  0  1  2  3  4  5  6  7\n"
        "rank 0 | F0 F1  . B0 F2 B1  . B2\n"
        "rank 1 |  . F0 B0 F1 B1 F2 B2  .")


def test_ascii_grid_zbh1_and_vpp(data):
    sim = simulate(lists(data, "ZBH1", 2, 3), 2, costs=FBW)
    assert ascii_grid(sim) == (
        "step   |  0  1  2  3  4  5  6  7  8  9\n"
        "rank 0 | F0 F1  . B0 -- F2 B1 -- B2 --\n"
        "rank 1 |  . F0 B0 F1 B1 -- F2 B2 W2 W0")
    sim = simulate(lists(data, "VPP", 2, 2, vpp_degree=2), 2, 2, costs=UNIT)
    assert ascii_grid(sim) == (
        "step   |    0    1    2    3    4    5    6    7    8    9\n"
        "rank 0 | F0.0 F1.0 F0.1 F1.1    .    . B0.1 B1.1 B0.0 B1.0\n"
        "rank 1 |    . F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0    .")


def test_gantt_png_and_chrome_trace(data, tmp_path):
    pytest.importorskip("matplotlib")
    sim = simulate(lists(data, "VPP", 2, 4, vpp_degree=2), 2, 2, costs=FBW)
    png = gantt_png(sim, str(tmp_path / "vpp.png"), title="VPP")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    path = write_chrome_trace(sim, str(tmp_path / "vpp.json"))
    with open(path) as f:
        trace = json.load(f)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == sum(t.duration > 0 for jobs in sim.timeline for t in jobs)
    assert {e["pid"] for e in spans} == {0, 1}
    assert max(e["ts"] + e["dur"] for e in spans) == sim.makespan * 1000.0
    assert trace == chrome_trace(sim)


def test_cli_on_recorded_job_lists(capsys, tmp_path):
    trace = tmp_path / "t.json"
    code = schedule_main(["1F1B", "--stages", "2", "--micro-batches", "3", "--costs", "1,1,0",
                          "--joblists", JOBLISTS, "--activation-bytes", "1024",
                          "--trace", str(trace)])
    out = capsys.readouterr().out
    assert code == 0
    assert "rank 0 | F0 F1  . B0 F2 B1  . B2" in out
    assert "overall bubble ratio: 0.2500" in out
    assert "2048" in out and trace.exists()
    assert schedule_main(["VPP", "-p", "4", "-m", "6", "--joblists", JOBLISTS]) == 1
    assert "deadlocks" in capsys.readouterr().err


def test_add_parser_wires_a_subcommand(capsys):
    import argparse
    from refimpl.schedule_cli import add_parser
    parser = argparse.ArgumentParser(prog="refimpl")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["schedule", "zb-h1", "--stages", "2", "--micro-batches", "3",
                              "--joblists", JOBLISTS])
    assert args.name == "ZBH1" and args.func(args) == 0
    assert "rank 1 |  . F0 B0 F1 B1 -- F2 B2 W2 W0" in capsys.readouterr().out


@pytest.mark.parametrize("schedule,p,m", [("FThenB", 4, 8), ("1F1B", 4, 8), ("Eager1F1B", 4, 8),
                                          ("VPP", 4, 8), ("ZBH1", 4, 8), ("ZBVPP", 4, 4)])
def test_cli_on_the_scheduler_passes(capsys, schedule, p, m):
    pytest.importorskip("refimpl.distributed.passes")
    assert schedule_main([schedule, "-p", str(p), "-m", str(m)]) == 0
    assert "overall bubble ratio" in capsys.readouterr().out
