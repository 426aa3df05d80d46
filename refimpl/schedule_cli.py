"""``refimpl schedule NAME``: simulate one of Paddle's pipeline schedules and draw it.

No Paddle counterpart (Paddle only logs the job lists). The job lists of all
ranks come from the scheduler passes (``new_pass("pipeline_scheduler_<NAME>",
attrs).create_job_list()``, one pass per stage) or, with ``--joblists``, from
a recorded ``joblists.json``; they are checked, timed by
``refimpl.distributed.pipeline.simulator`` and drawn by ``refimpl.viz``.

    refimpl schedule 1F1B --stages 4 --micro-batches 8
    refimpl schedule VPP --stages 4 --micro-batches 8 --vpp 2 --plot vpp.png --trace vpp.json
    python -m refimpl.schedule_cli ZBH1 --stages 4 --micro-batches 8 --costs 1,1,1,0
"""
import argparse
import json
import os
import sys

from refimpl.cli import missing_folder, plain_text
from refimpl.distributed.passes import new_pass
from refimpl.distributed.passes.pipeline_scheduler_pass import SCHEDULES
from refimpl.distributed.passes.pipeline_scheduler_pass.pipeline_zero_bubble import DEFAULT_PROGRAM_RUNTIMES

PASS_PREFIX = "pipeline_scheduler_"
_PREFERRED = {"split_backward": False, "program_runtimes": list(DEFAULT_PROGRAM_RUNTIMES),
              "injected_max_memory": None}


class ScheduleUnavailable(RuntimeError):
    """The job lists cannot be produced (no passes, no recorded entry)."""


def schedule_name(text):
    """Case-insensitive schedule name -> Paddle's spelling (``zb-h1`` -> ``ZBH1``)."""
    key = text.replace("-", "").replace("_", "").lower()
    for name in SCHEDULES:
        if name.lower() == key:
            return name
    raise argparse.ArgumentTypeError(f"unknown schedule {text!r}; choose from {', '.join(SCHEDULES)}")


def pass_attrs(schedule, pp_degree, num_micro_batches, stage, vpp_degree=1,
               split_backward=False, program_runtimes=None):
    """The attrs Paddle's generator sets on the pass of one stage."""
    attrs = {"num_micro_batches": num_micro_batches, "pp_degree": pp_degree, "pp_stage": stage}
    if schedule == "VPP":
        attrs.update(vpp_degree=vpp_degree, split_backward=split_backward)
    elif schedule == "ZBVPP":
        zero = {"forward": 0, "backward_b": 0, "backward_w": 0}
        attrs.update(vpp_degree=vpp_degree, memory_limit_times=-1,
                     program_runtimes=list(program_runtimes or DEFAULT_PROGRAM_RUNTIMES),
                     injected_mem_usage_per_job=dict(zero),
                     injected_max_mem_usage_per_job=dict(zero),
                     injected_base_memory=0, injected_max_memory=None)
    return attrs


def job_lists_from_passes(schedule, pp_degree, num_micro_batches, vpp_degree=1, **kw):
    """Job lists of all stages from the scheduler passes (one pass per stage)."""
    lists = []
    for stage in range(pp_degree):
        attrs = pass_attrs(schedule, pp_degree, num_micro_batches, stage, vpp_degree, **kw)
        try:
            p = new_pass(PASS_PREFIX + schedule, attrs)
        except KeyError as e:   # NotFound / PassNotRegistered
            raise ScheduleUnavailable(f"pass {PASS_PREFIX + schedule} is not registered "
                                      f"({e}); use --joblists to read recorded job lists") from e
        lists.append(p.create_job_list())
    return lists


def default_joblists_path() -> str:
    """``$REFIMPL_ORACLE/joblists.json`` if set, else the repository's ``oracle/joblists.json``.

    Without that file (a checkout that lacks it) ``<repo>/../shared/oracle/joblists.json``,
    the workspace copy the repository's one is synced from.
    """
    if "REFIMPL_ORACLE" in os.environ:
        return os.path.join(os.environ["REFIMPL_ORACLE"], "joblists.json")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(repo, "oracle", "joblists.json")
    if not os.path.exists(path):
        path = os.path.join(os.path.dirname(repo), "shared", "oracle", "joblists.json")
    return path


def recorded_job_lists(schedule, pp_degree, num_micro_batches, vpp_degree=None, ir="pir",
                       path=None, data=None, **attrs):
    """Job lists of all stages of one configuration recorded in ``joblists.json``.

    ``attrs`` must match exactly; among several matches per stage the one with
    Paddle's defaults (no split backward, default runtimes, no memory limit)
    wins. Raises :class:`ScheduleUnavailable` when a stage is missing.
    """
    if data is None:
        with open(path or default_joblists_path()) as f:
            data = json.load(f)
    want = dict(attrs, num_micro_batches=num_micro_batches, pp_degree=pp_degree)
    if vpp_degree is not None and schedule in ("VPP", "ZBVPP"):
        want["vpp_degree"] = vpp_degree
    best = {}
    for e in data["entries"]:
        a = e["attrs"]
        if e["schedule"] != schedule or e["ir"] != ir or any(a.get(k) != v for k, v in want.items()):
            continue
        score = sum(a.get(k, v) == v for k, v in _PREFERRED.items())
        if a["pp_stage"] not in best or score > best[a["pp_stage"]][0]:
            best[a["pp_stage"]] = (score, e["jobs"])
    missing = [s for s in range(pp_degree) if s not in best]
    if missing:
        raise ScheduleUnavailable(f"no recorded {schedule}/{ir} job list for stages {missing} "
                                  f"with {want}")
    return [best[s][1] for s in range(pp_degree)]


def _costs(text):
    try:
        nums = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--costs wants numbers F,B,W[,comm], got {text!r}") from None
    if len(nums) not in (3, 4) or min(nums) < 0:
        raise argparse.ArgumentTypeError(f"--costs wants 3 or 4 non-negative numbers F,B,W[,comm], got {text!r}")
    nums = [int(x) if x.is_integer() else x for x in nums] + [0] * (4 - len(nums))
    return nums


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"wants a positive integer, got {text!r}")
    return value


def add_parser(subparsers):
    """Add the ``schedule`` sub-command to an argparse ``subparsers`` object."""
    p = subparsers.add_parser("schedule", help="simulate a pipeline schedule: grid, bubble, memory",
                              description=plain_text(__doc__.splitlines()[0]))
    _arguments(p)
    p.set_defaults(func=run)
    return p


def _arguments(p):
    p.add_argument("name", type=schedule_name, metavar="NAME", help=" | ".join(SCHEDULES))
    p.add_argument("--stages", "-p", type=_positive, required=True, help="pipeline degree P")
    p.add_argument("--micro-batches", "-m", type=_positive, required=True, help="micro-batches M")
    p.add_argument("--vpp", type=_positive, default=None, help="chunks per stage (VPP, ZBVPP; default 2)")
    p.add_argument("--split-backward", action="store_true", help="VPP: split_backward=True")
    p.add_argument("--costs", type=_costs, default=[1, 1, 1, 0], metavar="F,B,W[,comm]",
                   help="job costs: forward, backward_b, backward_w, transfer latency "
                        "(a full backward costs B+W; default 1,1,1,0)")
    p.add_argument("--activation-bytes", type=int, default=1,
                   help="bytes one forward job holds until its backward (default 1)")
    p.add_argument("--ir", choices=("pir", "legacy"), default="pir",
                   help="FLAGS_enable_pir_api when the passes are built (default pir)")
    p.add_argument("--joblists", nargs="?", const="", default=None, metavar="PATH",
                   help="read recorded job lists (default: the oracle's joblists.json)")
    p.add_argument("--ignore-comm-markers", action="store_true",
                   help="drop recv_forward/send_backward jobs instead of letting them block")
    p.add_argument("--plot", metavar="PNG", help="write a Gantt chart (needs matplotlib)")
    p.add_argument("--trace", metavar="JSON", help="write a Chrome/Perfetto trace")


def _job_lists(args, vpp):
    f, b, w, comm = args.costs
    if args.joblists is not None:
        extra = {"split_backward": args.split_backward} if args.name == "VPP" else {}
        return recorded_job_lists(args.name, args.stages, args.micro_batches, vpp, args.ir,
                                  path=args.joblists or None, **extra)
    kw = {}
    if args.name == "VPP":
        kw["split_backward"] = args.split_backward
    if args.name == "ZBVPP":
        kw["program_runtimes"] = [f, b, w, 0, comm]
    import refimpl
    old = refimpl.get_flags("FLAGS_enable_pir_api")
    refimpl.set_flags({"FLAGS_enable_pir_api": args.ir == "pir"})
    try:
        return job_lists_from_passes(args.name, args.stages, args.micro_batches, vpp, **kw)
    finally:
        refimpl.set_flags(old)


def run(args, out=None):
    """Run the ``schedule`` command; returns the exit code."""
    from refimpl.distributed.pipeline import (CostModel, ScheduleDeadlock, ScheduleError,
                                              simulate, stage_map_for)
    out = out or sys.stdout
    for option, path in (("--plot", args.plot), ("--trace", args.trace)):
        problem = missing_folder(option, path) if path else None
        if problem:
            print(f"refimpl schedule: {problem}", file=sys.stderr)
            return 2
    vpp = (args.vpp or 2) if args.name in ("VPP", "ZBVPP") else 1
    if args.vpp not in (None, 1) and vpp == 1:
        print(f"warning: --vpp is ignored by {args.name}", file=sys.stderr)
    f, b, w, comm = args.costs
    config = f"{args.name} P={args.stages} M={args.micro_batches}" + (
        f" V={vpp}" if args.name in ("VPP", "ZBVPP") else "")
    try:
        lists = _job_lists(args, vpp)
        sim = simulate(lists, args.stages, vpp, CostModel(f, b, w, comm=comm),
                       stage_map=stage_map_for(args.name), ignore_markers=args.ignore_comm_markers)
    except ScheduleUnavailable as e:
        print(f"refimpl schedule: {e}", file=sys.stderr)
        return 2
    except (ScheduleError, ScheduleDeadlock) as e:
        hint = ("\n(recv_forward/send_backward jobs block like stream-ordered send/recv; "
                "--ignore-comm-markers drops them)") if isinstance(e, ScheduleDeadlock) else ""
        print(f"refimpl schedule: {config}: {e}{hint}", file=sys.stderr)
        return 1
    except (AssertionError, ValueError, KeyError, NotImplementedError) as e:
        print(f"refimpl schedule: Paddle's pass rejects {config}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 2
    _report(args, sim, vpp, out)
    return 0


def _report(args, sim, vpp, out):
    from refimpl import viz
    title = f"{args.name}  P={args.stages} M={args.micro_batches}" + (
        f" V={vpp}" if args.name in ("VPP", "ZBVPP") else "")
    print(title, file=out)
    step = viz.grid_step(sim)
    print(viz.ascii_grid(sim, step=step), file=out)
    if step != 1:
        exact = "" if viz.grid_is_exact(sim, step) else "; spans are rounded"
        print(f"(one column = {step} cost units{exact})", file=out)
    print(viz.summary(sim, args.activation_bytes), file=out)
    if args.plot:
        viz.gantt_png(sim, args.plot, title=title)
        print(f"wrote {args.plot}", file=out)
    if args.trace:
        viz.write_chrome_trace(sim, args.trace)
        print(f"wrote {args.trace}", file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m refimpl.schedule_cli",
                                     description=plain_text(__doc__.splitlines()[0]))
    _arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
