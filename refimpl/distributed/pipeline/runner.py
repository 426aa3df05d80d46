"""Pipeline training end to end: build every rank's Plan, check it, run it.

This is the glue a user would otherwise write by hand, in the order Paddle's
static pipeline runs it: accumulate gradients into ``@GRAD@MERGE`` buffers
(``gradient_accumulation``), cut the program into stage and chunk programs
(``partition``), ask the scheduler pass for each rank's job list, cut each
rank's chunks into job programs, give every job its ``skip_gc_vars``
(``pass_utils.set_skip_gc_vars``), check the job lists of all ranks together
(every transfer has its partner, the simulated schedule completes) and run
each rank's Plan with a ``PlanExecutor``, on in-process ranks or MPI ranks.
"""
import numpy as np

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.passes.gradient_accumulation import accumulate_gradients
from refimpl.distributed.passes.pass_utils import set_skip_gc_vars
from refimpl.distributed.passes.pipeline_scheduler_pass import SCHEDULES, create_job_list
from refimpl.executor.plan import Plan
from refimpl.executor.plan_executor import PlanExecutor

from .partition import job_programs, partition
from .simulator import check_job_lists, simulate, stage_map_for


class Pipeline:
    """Every rank's Plan for one schedule, plus the startup program and the loss name."""

    def __init__(self, plans, startup, loss_name, schedule, pp_degree, num_micro_batches, rings):
        self.plans, self.startup, self.loss_name = plans, startup, loss_name
        self.schedule, self.pp_degree, self.num_micro_batches = schedule, pp_degree, num_micro_batches
        self.rings = rings

    def job_lists(self):
        return [plan.job_list() for plan in self.plans]


def _schedule_attrs(schedule, pp_degree, stage, m, vpp_degree, split_backward, program_runtimes):
    attrs = {"num_micro_batches": m, "pp_degree": pp_degree, "pp_stage": stage}
    if schedule in ("VPP", "ZBVPP"):
        attrs["vpp_degree"] = vpp_degree
    if schedule == "VPP":
        attrs["split_backward"] = split_backward
    if schedule == "ZBVPP":
        attrs["program_runtimes"] = list(program_runtimes or [61, 72, 71, 34, 3])
        attrs["memory_limit_times"] = -1
    return attrs


def build_pipeline(main, startup, loss, schedule, pp_degree, num_micro_batches, vpp_degree=1, cuts=None,
                   split_backward=False, program_runtimes=None):
    """Every rank's Plan for ``schedule``; ``main``/``startup`` are left untouched."""
    if schedule not in SCHEDULES:
        raise InvalidArgument(f"unknown pipeline schedule {schedule!r}; choose one of {list(SCHEDULES)}")
    if schedule not in ("VPP", "ZBVPP") and vpp_degree != 1:
        raise InvalidArgument(f"schedule {schedule} has one chunk per stage; vpp_degree must be 1")
    main, startup = main.clone(), startup.clone()
    accumulate_gradients(main, startup, num_micro_batches, avg=True)
    chunks = partition(main, pp_degree, vpp_degree, cuts, stage_map_for(schedule))
    plans = []
    for rank in range(pp_degree):
        jobs = create_job_list(schedule, _schedule_attrs(schedule, pp_degree, rank, num_micro_batches,
                                                         vpp_degree, split_backward, program_runtimes))
        types = list(dict.fromkeys(j.type() for j in jobs))
        progs = job_programs(chunks[rank], types)
        set_skip_gc_vars(num_micro_batches, types, [progs[t] for t in types], jobs)
        plans.append(Plan(jobs, progs))
    lists = [p.job_list() for p in plans]
    check_job_lists(lists, pp_degree, vpp_degree, num_micro_batches)
    simulate(lists, pp_degree, vpp_degree, stage_map=stage_map_for(schedule), ignore_markers=True)
    rings = sorted({op.attr("ring_id") for rank in chunks for prog in rank
                    for op in prog.global_block().ops if op.type in ("send_v2", "recv_v2")})
    return Pipeline(plans, startup, getattr(loss, "name", loss), schedule, pp_degree, num_micro_batches, rings)


def initial_values(pipeline, seed=0):
    """Run the startup program once (seeded); {persistable name: array}."""
    paddle.seed(seed)
    scope = paddle.static.Scope()
    paddle.static.Executor().run(pipeline.startup, scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in scope.local_var_names()
            if scope.find_var(n).get_tensor()._is_initialized()}


def train_rank(pipeline, rank, feeds, seed=0, initial=None, timings=None):
    """Initialise, then run one Plan per feed on ``rank``; return (losses, parameters).

    The persistables start from ``initial`` (see :func:`initial_values`), or
    from running the startup program seeded with ``seed`` (one rank per
    process). ``losses`` holds, per step, the mean loss over micro-batches on
    the rank that computes it (None elsewhere); ``parameters`` the values
    this rank owns.
    """
    ctx = context.current()
    for ring in pipeline.rings:
        if ring not in ctx.groups:
            ctx.add_group(ring, range(pipeline.pp_degree))
    scope = paddle.static.Scope()
    for name, value in (initial if initial is not None else initial_values(pipeline, seed)).items():
        scope.var(name).get_tensor().set(value)
    plan = pipeline.plans[rank]
    has_loss = any(pipeline.loss_name in plan.program(t).global_block().vars for t in plan.job_types())
    pe = PlanExecutor(rank=rank)
    losses = []
    for feed in feeds:
        out = pe.run(plan, feed=feed, fetch_list=[pipeline.loss_name] if has_loss else [], scope=scope,
                     timings=timings)
        losses.append(float(np.mean(out[0])) if has_loss else None)
    owned = {n for t in plan.job_types() for n, v in plan.program(t).global_block().vars.items()
             if v.is_parameter}
    params = {n: np.array(scope.find_var(n).get_tensor()) for n in sorted(owned)}
    return losses, params


def train_in_process(pipeline, feeds, seed=0, timeout=60):
    """Train on ``pp_degree`` in-process ranks; return (losses of the last stage, all parameters)."""
    initial = initial_values(pipeline, seed)  # once: the random state is shared by the threads
    results = run_in_process(pipeline.pp_degree, lambda: train_rank(pipeline, context.current().rank,
                                                                     feeds, initial=initial), timeout=timeout)
    losses = next(r[0] for r in results if r[0] and r[0][0] is not None)
    params = {}
    for _, p in results:
        params.update(p)
    return losses, params

