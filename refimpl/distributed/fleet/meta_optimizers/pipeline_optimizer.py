"""PipelineOptimizer: turn the minimized program into this rank's pipeline Plan.

Mirrors the role of Paddle's static ``PipelineOptimizer`` meta-optimizer
(``paddle/distributed/fleet/meta_optimizers/pipeline_optimizer.py``, whose
applicability rules and white list the class follows); the
program (stages marked with ``device_guard("gpu:k")`` / ``("stage:k")``, or
cut evenly when nothing is marked) is split into stages, this rank's stage
gets its job programs and job list for ``schedule_mode`` with
``accumulate_steps`` micro-batches, and the program is marked with
``_pipeline_opt`` so that ``Executor.run`` runs the Plan (Paddle likewise
marks the program and runs it with its pipeline trainer). With data
parallelism each replica's pipeline has its own transfer rings and the
optimizer job all-reduces the accumulated gradients over the replicas; with
gradient merge (``apply_pipeline``'s ``k_steps``) the update happens every ``k_steps``
runs. With ``pipeline_configs["micro_batch_size"]`` given, a fed batch must
have ``micro_batch_size x accumulate_steps`` rows (Paddle sizes its receive
buffers from it; refimpl raises InvalidArgument before any job runs, where
it would otherwise split the batch into micro-batches of another size).
Difference: Paddle's legacy pipeline program (its section programs and
ring layout) is not reproduced: refimpl runs its own Plan with the same
numbers. ``program._pipeline_opt`` reads like Paddle's dict for the keys
refimpl can fill (see :class:`PipelineRun`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, TYPE_CHECKING, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context
from refimpl.distributed.pipeline.partition import even_cuts, join_programs
from refimpl.distributed.pipeline.runner import build_pipeline
from refimpl.executor.plan_executor import PlanExecutor

from .meta_optimizer_base import MetaOptimizerBase, ParamsGrads

if TYPE_CHECKING:
    from refimpl.core.scope import Scope
    from refimpl.distributed.fleet.fleet import Fleet
    from refimpl.distributed.pipeline.runner import Pipeline
    from refimpl.executor.executor import Executor
    from refimpl.executor.trace import Trace
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Variable

_RING_BASE = 10000  # transfer rings of replica d: _RING_BASE + d * _RING_STRIDE + ...
_RING_STRIDE = 1000
_VPP_DEGREE = 2      # chunks per stage for VPP / ZBVPP (pipeline_configs has no key for it)


def _marked(main, stages):
    """True when ops carry stage annotations; they must then name every one of ``stages`` stages."""
    from refimpl.distributed.pipeline.partition import _device_stage
    marks = {_device_stage(op) for op in main.global_block().ops} - {None}
    if marks and marks != set(range(stages)):
        raise InvalidArgument(f"pipeline: device_guard annotations name stages {sorted(marks)}, but "
                              f"{stages} (pp_degree x chunks) are needed")
    return bool(marks)


def _topology(rank, dp, pp, fleet):
    """(dp index, stage, pipe groups [ranks per replica], dp rings {stage: ring})."""
    from refimpl.distributed.fleet.base.topology import HybridCommunicateGroup
    ctx = context.current()
    hcg = None
    if fleet is not None:
        try:
            hcg = fleet.get_hybrid_communicate_group()
        except AssertionError:  # fleet.init was not called: no topology yet
            hcg = None
    if isinstance(hcg, HybridCommunicateGroup) and hcg.get_pipe_parallel_world_size() == pp:
        topo = hcg.topology()
        pipes = [sorted(g) for g in topo.get_comm_list("pipe")]
        d, stage = hcg.get_data_parallel_rank(), hcg.get_stage_id()
        dp_ring = hcg.get_data_parallel_group().id if dp > 1 else None
        return d, stage, pipes, dp_ring
    pipes = [[d * pp + s for s in range(pp)] for d in range(dp)]
    d, stage = divmod(rank, pp)
    dp_ring = None
    if dp > 1:  # one ring per stage, created by every rank in the same order
        for s in range(pp):
            ring = _RING_BASE - 1 - s
            if ring not in ctx.groups and _can_host(ctx, dp * pp):
                ctx.add_group(ring, [dd * pp + s for dd in range(dp)])
        dp_ring = _RING_BASE - 1 - stage
    return d, stage, pipes, dp_ring


def _can_host(ctx: Any, world: int) -> bool:
    """Whether this rank context's world has the ``world`` ranks the pipeline's rings name.

    A lone process building the program of one trainer among several (as Paddle's unit tests do) has
    not: the rings are then left out, and running that program raises NotFound naming the ring.
    """
    return ctx.world_size >= world


def apply_pipeline(main: Program, startup: Program, loss: Variable, configs: Dict[str, Any], rank: int,
                   dp: int, pp: int, k_steps: int, fleet: Optional[Fleet] = None) -> Pipeline:
    schedule = configs.get("schedule_mode", "1F1B")
    m = int(configs.get("accumulate_steps", 1))
    if m < 1:
        raise InvalidArgument(f"pipeline_configs.accumulate_steps must be >= 1, got {m}")
    vpp = _VPP_DEGREE if schedule in ("VPP", "ZBVPP") else 1
    d, stage, pipes, dp_ring = _topology(rank, dp, pp, fleet)
    cuts = None if _marked(main, pp * vpp) else even_cuts(main, pp * vpp)
    offset = _RING_BASE + d * _RING_STRIDE
    pipeline = build_pipeline(main, startup, loss, schedule, pp, m, vpp, cuts, ring_offset=offset,
                              dp_degree=dp, dp_ring=dp_ring, update_every=k_steps)
    ctx = context.current()
    relative = [r - offset for r in pipeline.rings]  # the same layout in every replica
    for dd, ranks in enumerate(pipes):  # every rank creates every replica's rings, in the same order
        for r in relative:
            ring = _RING_BASE + dd * _RING_STRIDE + r
            if ring not in ctx.groups and _can_host(ctx, dp * pp):
                ctx.add_group(ring, ranks)
    _extend_startup(startup, pipeline.startup)
    mbs = configs.get("micro_batch_size")
    main._pipeline_opt = PipelineRun(pipeline, stage, None if mbs is None else int(mbs), schedule)
    return pipeline


def _given_pipeline_configs(strategy: Any) -> Dict[str, Any]:
    """``strategy.pipeline_configs``, less ``micro_batch_size`` when the user left it at its default."""
    configs = dict(strategy.pipeline_configs)
    if not strategy.strategy.get("pipeline_configs").has("micro_batch_size"):
        configs.pop("micro_batch_size", None)
    return configs


def _extend_startup(startup, extended):
    """Append what the pipeline added to its copy of the startup program (merge buffers, counters)."""
    block, src = startup.global_block(), extended.global_block()
    for op in src.ops[len(block.ops):]:
        for n in op.output_arg_names:
            v = src.vars[n]
            block.create_var(name=n, shape=v.shape, dtype=v.dtype, persistable=True)
        block._append_desc_op(op.type, {k: list(v) for k, v in op.inputs.items()},
                              {k: list(v) for k, v in op.outputs.items()}, op.all_attrs())


class PipelineRun:
    """``Executor.run`` of a pipelined program: this rank's Plan over micro-batch scopes.

    Also read-only mapping of the keys of Paddle's ``_pipeline_opt`` dict
    (legacy ``python/paddle/incubate/optimizer/pipeline.py``) that refimpl
    can fill: ``pipeline_stage``, ``num_pipeline_stages``, ``schedule_mode``,
    ``num_microbatches``, ``inner_parallelism`` and ``section_program``,
    this rank's stage as one program: the job programs of one micro-batch in
    the order the job list first runs them (forward, backward, optimizer),
    with their ``send_v2`` / ``recv_v2``. Paddle's trainer, device-worker,
    place and CPU-core keys have no counterpart and are absent.
    """

    KEYS = ("pipeline_stage", "num_pipeline_stages", "schedule_mode", "num_microbatches", "inner_parallelism",
            "section_program")

    def __init__(self, pipeline: Pipeline, stage: int, micro_batch_size: Optional[int] = None,
                 schedule_mode: str = "1F1B") -> None:
        self.pipeline, self.stage = pipeline, stage
        self.micro_batch_size = micro_batch_size
        self.schedule_mode = schedule_mode
        self.plan = pipeline.plans[stage]
        self.executor: Optional[PlanExecutor] = None
        self._section: Optional[Program] = None

    def keys(self) -> List[str]:
        return list(self.KEYS)

    def __contains__(self, key: object) -> bool:
        return key in self.KEYS

    def __getitem__(self, key: str) -> Any:
        if key not in self.KEYS:
            raise KeyError(key)
        if key == "section_program":
            return self.section_program()
        pp = self.pipeline.pp_degree
        return {"pipeline_stage": self.stage, "num_pipeline_stages": pp, "inner_parallelism": pp,
                "schedule_mode": self.schedule_mode, "num_microbatches": self.pipeline.num_micro_batches}[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self.KEYS else default

    def section_program(self) -> Program:
        """This rank's job programs, each job type once, in the order of their first job."""
        if self._section is None:
            order = list(dict.fromkeys(j.type() for j in self.plan.job_list()))
            self._section = join_programs([self.plan.program(t) for t in order])
        return self._section

    def has_var(self, name: str) -> bool:
        return any(name in self.plan.program(t).global_block().vars for t in self.plan.job_types())

    def run(self, exe: Executor, feed: Optional[Dict[str, Any]], fetch_list: Optional[Sequence[Any]],
            scope: Scope, return_numpy: bool = True, trace: Optional[Trace] = None) -> List[Any]:
        if self.executor is None:
            self.executor = PlanExecutor(exe.place, rank=self.stage)
        self._check_batch(feed)
        names = [f if isinstance(f, str) else f.name for f in (fetch_list or [])]
        here = [n for n in names if self.has_var(n)]
        out = self.executor.run(self.plan, feed=feed, fetch_list=here, scope=scope, trace=trace)
        got = dict(zip(here, out))
        return [np.asarray(got[n]) if n in got else None for n in names]


    def _check_batch(self, feed: Optional[Dict[str, Any]]) -> None:
        """Fed rows must be micro_batch_size x accumulate_steps when micro_batch_size was set.

        Paddle sizes the pipeline's receive buffers from ``micro_batch_size``,
        so another batch size cannot run there; refimpl splits whatever is fed
        into ``accumulate_steps`` parts, and would otherwise train silently
        with micro-batches of another size. Checked before any job runs.
        """
        if self.micro_batch_size is None:
            return
        m = self.pipeline.num_micro_batches
        for name, value in (feed or {}).items():
            rows = np.shape(value)[0] if np.ndim(value) > 0 else None
            if rows is not None and rows != self.micro_batch_size * m:
                raise InvalidArgument(
                    f"pipeline_configs['micro_batch_size'] = {self.micro_batch_size} with accumulate_steps = {m} "
                    f"needs batches of {self.micro_batch_size * m} rows, but feed {name!r} has {rows}")


class PipelineOptimizer(MetaOptimizerBase):
    """Fleet's ``PipelineOptimizer``: when it applies, and the Plan it makes (see the module docstring).

    Paddle 3.3.1 (``meta_optimizers/pipeline_optimizer.py``): applies in
    collective mode when ``pipeline`` is on and sharding is off; may wrap
    recompute and AMP. The stage count is ``hybrid_configs["pp_degree"]``
    when > 1, else the number of stages the program marks with
    ``device_guard``; the remaining workers are data-parallel replicas.
    """

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.meta_optimizers_white_list = ["RecomputeOptimizer", "AMPOptimizer"]
        self.meta_optimizers_black_list = []
        self.pipeline: Optional[Pipeline] = None
        self.fleet: Optional[Fleet] = None

    def _can_apply(self) -> bool:
        s = self.user_defined_strategy
        return bool(self.role_maker._is_collective and not s.sharding and s.pipeline)

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.pipeline = False
        dist_strategy.pipeline_configs = {"micro_batch_size": 1, "accumulate_steps": 1, "schedule_mode": "1F1B"}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.pipeline = True
        dist_strategy.pipeline_configs = {"micro_batch_size": 1, "accumulate_steps": 1, "schedule_mode": "1F1B"}

    def _degrees(self, main: Program) -> Tuple[int, int]:
        from refimpl.distributed.pipeline.partition import _device_stage
        world = self.role_maker._worker_num()
        hc = self.user_defined_strategy.hybrid_configs
        pp = int(hc.get("pp_degree", 1) or 1)
        if pp <= 1:
            marks = {_device_stage(op) for op in main.global_block().ops} - {None}
            pp = len(marks) if marks else world
        if world % pp != 0:
            raise InvalidArgument(f"pipeline: {world} workers cannot hold whole pipelines of {pp} stages")
        dp = int(hc.get("dp_degree", -1))
        if dp in (-1, 0):
            dp = world // pp
        if dp * pp != world:
            raise InvalidArgument(f"hybrid_configs: dp_degree ({dp}) x pp_degree ({pp}) must equal the number "
                                  f"of workers ({world})")
        return dp, pp

    def minimize_impl(self, loss: Variable, startup_program: Optional[Program] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Any], ParamsGrads]:
        from refimpl.framework.program import default_startup_program
        startup = startup_program or default_startup_program()
        main = loss.block.program
        dp, pp = self._degrees(main)
        optimize_ops, params_grads = self.inner_opt.minimize(loss, startup, parameter_list, no_grad_set)
        self.pipeline = apply_pipeline(main, startup, loss, _given_pipeline_configs(self.user_defined_strategy),
                                       self.role_maker._worker_index(), dp, pp, 1, self.fleet)
        return optimize_ops, params_grads
