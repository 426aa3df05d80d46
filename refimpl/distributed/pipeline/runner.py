"""Pipeline training end to end: build every rank's Plan, check it, run it.

This is the glue a user would otherwise write by hand, in the order Paddle's
static pipeline runs it: accumulate gradients into ``@GRAD@MERGE`` buffers
(``gradient_accumulation``), cut the program into stage and chunk programs
(``partition``), ask the scheduler pass for each rank's job list, cut each
rank's chunks into job programs, give every job its ``skip_gc_vars``
(``pass_utils.set_skip_gc_vars``) -- the pass's own ``apply`` does those
three, with a hook that adds the data-parallel sync and the every-k update
to the optimizer program -- check the job lists of all ranks together
(every transfer has its partner, the simulated schedule completes) and run
each rank's Plan with a ``PlanExecutor``, on in-process ranks or MPI ranks.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Iterable, List, Optional, Sequence, TYPE_CHECKING, Tuple, Union

import numpy as np

import refimpl as paddle
from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.framework.op_role import OpRole
from refimpl.distributed.communication import DEFAULT_TIMEOUT, context, run_in_process
from refimpl.distributed.passes import PassContext, new_pass
from refimpl.distributed.passes.gradient_accumulation import accumulate_gradients
from refimpl.distributed.passes.pipeline_scheduler_pass import SCHEDULES
from refimpl.distributed.passes.pipeline_scheduler_pass.pipeline_zero_bubble import DEFAULT_PROGRAM_RUNTIMES
from refimpl.executor.plan_executor import PlanExecutor

from .partition import partition
from .simulator import check_job_lists, simulate, stage_map_for

if TYPE_CHECKING:
    from refimpl.executor.plan import Job, Plan
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Variable


class Pipeline:
    """Every rank's Plan for one schedule, plus the startup program and the loss name."""

    def __init__(self, plans: List[Plan], startup: Program, loss_name: str, schedule: str, pp_degree: int,
                 num_micro_batches: int, rings: Any) -> None:
        self.plans, self.startup, self.loss_name = plans, startup, loss_name
        self.schedule, self.pp_degree, self.num_micro_batches = schedule, pp_degree, num_micro_batches
        self.rings = rings

    def job_lists(self) -> List[List[Job]]:
        return [plan.job_list() for plan in self.plans]


def _schedule_attrs(schedule, pp_degree, stage, m, vpp_degree, split_backward, program_runtimes):
    attrs = {"num_micro_batches": m, "pp_degree": pp_degree, "pp_stage": stage}
    if schedule in ("VPP", "ZBVPP"):
        attrs["vpp_degree"] = vpp_degree
    if schedule == "VPP":
        attrs["split_backward"] = split_backward
    if schedule == "ZBVPP":
        attrs["program_runtimes"] = list(program_runtimes or DEFAULT_PROGRAM_RUNTIMES)
        attrs["memory_limit_times"] = -1
    return attrs


def build_pipeline(main: Program, startup: Program, loss: Union[Variable, str], schedule: str, pp_degree: int,
                   num_micro_batches: int, vpp_degree: int = 1, cuts: Optional[Sequence[int]] = None,
                   split_backward: bool = False, program_runtimes: Optional[Dict[str, float]] = None,
                   ring_offset: int = 0, dp_degree: int = 1, dp_ring: Optional[int] = None,
                   update_every: int = 1, mp_ring: Optional[int] = None) -> Pipeline:
    """Every rank's Plan for ``schedule``; ``main``/``startup`` are left untouched.

    With ``dp_degree > 1`` each optimizer job first all-reduces (ring
    ``dp_ring``) and averages the accumulated gradients over the replicas;
    with ``update_every = k > 1`` the update happens on every k-th run only
    (gradient merge across runs). ``ring_offset`` gives this pipeline's
    transfers rings of their own. With ``mp_ring`` (tensor parallelism: the
    ring of this stage's model-parallel group), AMP's found-inf flag is
    also max-reduced over that ring, as the shards of one stage hold
    different gradients (Paddle's sharding hybrid mode syncs it over its mp
    ring the same way).
    """
    if schedule not in SCHEDULES:
        raise InvalidArgument(f"unknown pipeline schedule {schedule!r}; choose one of {list(SCHEDULES)}")
    if schedule not in ("VPP", "ZBVPP") and vpp_degree != 1:
        raise InvalidArgument(f"schedule {schedule} has one chunk per stage; vpp_degree must be 1")
    if dp_degree > 1 and dp_ring is None:
        raise InvalidArgument("build_pipeline: dp_degree > 1 needs the dp_ring to all-reduce gradients on")
    main, startup = main.clone(), startup.clone()
    merged = accumulate_gradients(main, startup, num_micro_batches * update_every, avg=True)
    chunks = partition(main, pp_degree, vpp_degree, cuts, stage_map_for(schedule), ring_offset)
    hook = _optimizer_hook(startup, [m for _, m in merged], dp_degree, dp_ring, update_every, mp_ring)
    plans = []
    for rank in range(pp_degree):
        attrs = _schedule_attrs(schedule, pp_degree, rank, num_micro_batches, vpp_degree, split_backward,
                                program_runtimes)
        attrs.update(chunk_programs=chunks[rank], job_program_hook=hook)
        context = new_pass("pipeline_scheduler_" + schedule, attrs).apply([chunks[rank][0]], [startup],
                                                                         PassContext())
        plans.append(context.get_attr("plan"))
    lists = [p.job_list() for p in plans]
    check_job_lists(lists, pp_degree, vpp_degree, num_micro_batches)
    simulate(lists, pp_degree, vpp_degree, stage_map=stage_map_for(schedule), ignore_markers=True)
    rings = sorted({op.attr("ring_id") for rank in chunks for prog in rank
                    for op in prog.global_block().ops if op.type in ("send_v2", "recv_v2", "c_allreduce_max")})
    loss_name = loss if isinstance(loss, str) else loss.name
    return Pipeline(plans, startup, loss_name, schedule, pp_degree, num_micro_batches, rings)


def _optimizer_hook(startup, merge_names, dp_degree, dp_ring, update_every, mp_ring=None):
    """The scheduler pass's ``job_program_hook``: data-parallel sync and every-k update of ``optimizer``."""
    def hook(job_type, program):
        if job_type != "optimizer":
            return program
        if dp_degree > 1:
            add_dp_sync(program, merge_names, dp_degree, dp_ring)
        if mp_ring is not None:
            add_model_parallel_flag_sync(program, mp_ring)
        return update_every_k(program, startup, update_every) if update_every > 1 else program
    return hook


def add_dp_sync(program: Program, merge_names: Iterable[str], dp_degree: int, ring_id: int) -> None:
    """Sum every accumulated gradient of ``program`` over the data-parallel ring, then average."""
    block = program.global_block()
    at = 0
    for name in merge_names:
        if name not in block.vars:
            continue  # this stage does not own the parameter
        block._insert_op(at, type="c_allreduce_sum", inputs={"X": [name]}, outputs={"Out": [name]},
                         attrs={"ring_id": ring_id, "use_calc_stream": True, "op_role": OpRole.Optimize})
        block._insert_op(at + 1, type="scale", inputs={"X": [name]}, outputs={"Out": [name]},
                         attrs={"scale": 1.0 / dp_degree, "op_role": OpRole.Optimize})
        at += 2


def add_model_parallel_flag_sync(program: Program, ring_id: int) -> None:
    """After each chain of all-reduces of AMP's found-inf flag (over the stages, then the rings added by
    earlier calls), the same max over ``ring_id``: calls for several rings chain, one max per ring."""
    block = program.global_block()
    ops = block.ops
    for i in reversed(range(len(ops))):
        op = ops[i]
        if op.type != "c_allreduce_max" or not op.input("X")[0].endswith("@CAST_INT32"):
            continue
        nxt = ops[i + 1] if i + 1 < len(ops) else None
        if nxt is not None and nxt.type == "c_allreduce_max" and nxt.input("X") == op.input("X"):
            continue  # not the chain's last
        block._insert_op(i + 1, type="c_allreduce_max", inputs={"X": op.input("X")},
                         outputs={"Out": op.output("Out")},
                         attrs={"ring_id": ring_id, "use_calc_stream": True, "op_role": OpRole.Optimize})


def update_every_k(program: Program, startup: Program, k: int) -> Program:
    """``program`` run only on every k-th call: a step counter and a ``conditional_block``."""
    from refimpl.framework.program import Program
    from refimpl.static.control_flow import _inputs_outputs
    src = program.global_block()
    out = Program()
    b0 = out.global_block()
    for v in src.vars.values():
        b0.vars[v.name] = copy.copy(v)
        b0.vars[v.name].block = b0
    sblock = startup.global_block()
    counters = {}
    for name, value in (("gradient_merge_k", k), ("gradient_merge_zero", 0), ("gradient_merge_step", 0)):
        counters[name] = b0.create_var(name=name, shape=[1], dtype="int32", persistable=True)
        if name not in sblock.vars:
            sv = sblock.create_var(name=name, shape=[1], dtype="int32", persistable=True)
            sblock.append_op(type="fill_constant", outputs={"Out": sv},
                             attrs={"shape": [1], "dtype": to_vartype("int32"), "value": float(value),
                                    "force_cpu": True})
    cond = b0.create_var(name="gradient_merge_cond", shape=[1], dtype="bool")
    step = counters["gradient_merge_step"]
    role = {"op_role": OpRole.Optimize}
    b0.append_op(type="increment", inputs={"X": [step]}, outputs={"Out": [step]}, attrs=dict(role, step=1.0))
    b0.append_op(type="elementwise_mod", inputs={"X": [step], "Y": [counters["gradient_merge_k"]]},
                 outputs={"Out": [step]}, attrs=dict(role, axis=-1))
    b0.append_op(type="equal", inputs={"X": [step], "Y": [counters["gradient_merge_zero"]]},
                 outputs={"Out": [cond]}, attrs=role)
    sub = out._create_block(0)
    for op in src.ops:
        sub._append_desc_op(op.type, {k_: list(v) for k_, v in op.inputs.items()},
                            {k_: list(v) for k_, v in op.outputs.items()}, op.all_attrs())
    out._rollback()
    reads, writes = _inputs_outputs(sub)
    scope_var = b0.create_var(name="gradient_merge_scope", type="STEP_SCOPES")
    b0.append_op(type="conditional_block", inputs={"Cond": [cond], "Input": reads},
                 outputs={"Out": writes, "Scope": [scope_var]},
                 attrs=dict(role, sub_block=sub, is_scalar_condition=True))
    return out


def initial_values(pipeline: Pipeline, seed: int = 0) -> Dict[str, np.ndarray]:
    """Run the startup program once (seeded); {persistable name: array}."""
    paddle.seed(seed)
    scope = paddle.static.Scope()
    paddle.static.Executor().run(pipeline.startup, scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in scope.local_var_names()
            if scope.find_var(n).get_tensor()._is_initialized()}


def train_rank(pipeline: Pipeline, rank: int, feeds: Sequence[Dict[str, np.ndarray]], seed: int = 0,
               initial: Optional[Dict[str, np.ndarray]] = None,
               timings: Optional[Dict[str, float]] = None) -> Tuple[List[Optional[float]], Dict[str, np.ndarray]]:
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


def train_in_process(pipeline: Pipeline, feeds: Sequence[Dict[str, np.ndarray]], seed: int = 0,
                     timeout: float = DEFAULT_TIMEOUT) -> Tuple[List[Optional[float]], Dict[str, np.ndarray]]:
    """Train on ``pp_degree`` in-process ranks; return (losses of the last stage, all parameters)."""
    initial = initial_values(pipeline, seed)  # once: the random state is shared by the threads
    results = run_in_process(pipeline.pp_degree, lambda: train_rank(pipeline, context.current().rank,
                                                                     feeds, initial=initial), timeout=timeout)
    losses = next(r[0] for r in results if r[0] and r[0][0] is not None)
    params = {}
    for _, p in results:
        params.update(p)
    return losses, params

