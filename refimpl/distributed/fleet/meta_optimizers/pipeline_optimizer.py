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

Tensor parallelism inside the stages (``mp`` > 1: ``hybrid_configs
["mp_degree"]`` and / or ``tensor_parallel_configs
["tensor_parallel_degree"]`` with ``tensor_parallel`` on): the program's
``fleet.meta_parallel`` layers hold the tensor-parallel ops on ring 0; the
world is dp x pp x mp in Paddle's order (``pipeline/hybrid.py``), every
(dp rank, mp rank) has its own pipe and transfer rings, ring 0 is bound to
the stage's model group, the optimizer job averages over the (stage, mp
rank)'s data group, AMP's found-inf flag is also reduced over the model
group, and the startup broadcasts each stage's parameters over the model
group (all but ``split``'s marked shards) and the data group. Paddle 3.3.1's
compiler chains ``PipelineOptimizer`` alone for ``pipeline`` +
``tensor_parallel`` (neither is in the other's white list; the pipeline
comes first) and reports ``tensor_parallel`` off, and its legacy pipeline
hard-codes ``mp_degree`` 1, leaving ring 0 without a communicator (its tp x pp
path is ShardingOptimizer's hybrid mode): refimpl keeps Paddle's chain and
report, and runs the tensor-parallel stages (an addition).

Rings: the transfer rings have fixed ids (``10000 + pipe * 1000 + r``), as do
the data rings made without fleet's group (``9999 - i``). A second pipeline of
another layout in the same world finds those ids naming other ranks;
:func:`claim_ring` then binds them to fresh groups of its ranks, and each
``PipelineRun`` puts back the rings it was built with before it runs, so both
layouts' programs keep training (refimpl's: Paddle's ring ids are per process).

Memory: every rank runs the whole startup program (the user's ``exe.run(startup)`` and what
:func:`_extend_startup` appends), so that its random draws are those of one device. Paddle instead
splits the startup per stage (``paddle/incubate/optimizer/pipeline.py``, ``_split_startup_program``).
So before each run, :meth:`PipelineRun.run` drops from the scope the persistables only other stages
use: every persistable var of another stage's job programs or of the pipeline's startup that no job
program of this rank's plan (any job type, any chunk) declares, reads or writes and that is not
fetched -- the other stages' parameters, their ``@GRAD@MERGE`` buffers, moments, beta powers and
other optimizer accumulators. A rank's scope then holds its own stage's persistables only.

Difference: this meta-optimizer does not write Paddle's legacy section
programs and ring layout: refimpl runs its own Plan with the same numbers.
(Those programs are written by ``paddle.incubate.optimizer.PipelineOptimizer``,
``refimpl/incubate/optimizer/pipeline/``, which sharding inside a pipeline
uses, as Paddle's does.) ``program._pipeline_opt`` reads like Paddle's dict
for the keys refimpl can fill (see :class:`PipelineRun`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, TYPE_CHECKING, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.distributed.communication import context
from refimpl.distributed.pipeline.hybrid import MODEL_RING, HybridLayout, broadcast_stage_params
from refimpl.distributed.pipeline.partition import even_cuts, join_programs
from refimpl.distributed.pipeline.runner import build_pipeline
from refimpl.executor.plan_executor import PlanExecutor
from refimpl.ops.model_parallel_ops import RING_OPS

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


def _layout(rank: int, dp: int, pp: int, mp: int, fleet: Optional[Fleet]) -> HybridLayout:
    """This rank's place in dp x pp x mp: fleet's hybrid group when it has these degrees, else Paddle's order."""
    from refimpl.distributed.fleet.base.topology import HybridCommunicateGroup
    hcg = None
    if fleet is not None:
        try:
            hcg = fleet.get_hybrid_communicate_group()
        except AssertionError:  # fleet.init was not called: no topology yet
            hcg = None
    if isinstance(hcg, HybridCommunicateGroup) and (hcg.get_pipe_parallel_world_size(),
                                                    hcg.get_model_parallel_world_size()) == (pp, mp):
        return HybridLayout.from_hcg(hcg)
    layout = HybridLayout(rank, dp, pp, mp)
    layout.create_data_rings(_RING_BASE)  # one ring per (stage, mp rank), created by every rank in order
    return layout


def apply_pipeline(main: Program, startup: Program, loss: Variable, configs: Dict[str, Any], rank: int,
                   dp: int, pp: int, k_steps: int, fleet: Optional[Fleet] = None, mp: int = 1,
                   layout: Optional[HybridLayout] = None, bind_model_ring: bool = True,
                   broadcast_params: Optional[bool] = None, flag_ring: Optional[int] = MODEL_RING) -> Pipeline:
    """Make ``main`` this rank's pipeline (see the module docstring); also the entry point of hybrid callers.

    ``dp`` x ``pp`` x ``mp`` ranks (``mp`` > 1: the program holds tensor-parallel ops on ring 0, made by
    ``fleet.meta_parallel``'s layers or ``paddle.distributed.split``); ``layout`` (default: from fleet's
    hybrid group, else Paddle's rank order) says which ranks form each pipe / data / model group. Each pipe
    gets transfer rings of its own, the optimizer job averages the gradients over this rank's data group,
    ring 0 is bound to its model group (``bind_model_ring``), and with ``broadcast_params`` (default: when
    ``mp`` or ``dp`` > 1) the startup program broadcasts this stage's parameters from the first rank of its
    model group (those not ``is_distributed``) and of its data group (all), as Paddle's meta-optimizers do. With
    ``mp`` > 1, AMP's found-inf flag is also max-reduced over ``flag_ring`` (default ring 0, the model
    group; None: not).
    """
    schedule = configs.get("schedule_mode", "1F1B")
    m = int(configs.get("accumulate_steps", 1))
    if m < 1:
        raise InvalidArgument(f"pipeline_configs.accumulate_steps must be >= 1, got {m}")
    vpp = _VPP_DEGREE if schedule in ("VPP", "ZBVPP") else 1
    layout = layout or _layout(rank, dp, pp, mp, fleet)
    if (layout.dp, layout.pp, layout.mp) != (dp, pp, mp):
        raise InvalidArgument(f"apply_pipeline: the layout {layout} does not have dp_degree {dp}, pp_degree {pp}, "
                              f"mp_degree {mp}")
    stage = layout.stage
    cuts = None if _marked(main, pp * vpp) else even_cuts(main, pp * vpp)
    offset = _RING_BASE + layout.pipe_index * _RING_STRIDE
    pipeline = build_pipeline(main, startup, loss, schedule, pp, m, vpp, cuts, ring_offset=offset,
                              dp_degree=dp, dp_ring=layout.dp_ring, update_every=k_steps,
                              mp_ring=flag_ring if mp > 1 else None)
    relative = [r - offset for r in pipeline.rings]  # the same layout in every pipe
    used = []
    for i, ranks in enumerate(layout.pipes):  # every rank creates every pipe's rings, in the same order
        for r in relative:
            if layout.can_host():
                claim_ring(_RING_BASE + i * _RING_STRIDE + r, ranks)
                used.append(_RING_BASE + i * _RING_STRIDE + r)
    if bind_model_ring:
        layout.bind_model_ring()
    _extend_startup(startup, pipeline.startup)
    if broadcast_params if broadcast_params is not None else (mp > 1 or dp > 1):
        _broadcast_stage_params(startup, pipeline, layout)
    mbs = configs.get("micro_batch_size")
    main._pipeline_opt = PipelineRun(pipeline, stage, None if mbs is None else int(mbs), schedule)
    main._pipeline_opt.layout = layout
    used += [ring for ring in (layout.dp_ring, MODEL_RING if bind_model_ring and mp > 1 else None) if ring is not None]
    ctx = context.current()
    main._pipeline_opt.rings = (ctx, ctx.snapshot_rings(used))
    return pipeline


def claim_ring(ring_id: int, ranks: Sequence[int]) -> None:
    """Make the fixed ring id ``ring_id`` of a pipeline program answer with the group ``ranks`` on this rank.

    Every rank calls it for every ring, in the same order. An id no group holds yet is created with
    ``ranks``; one that already names this group (a pipeline of the same layout built before) is kept; one that names other ranks (an
    earlier pipeline of another layout in the same world) is bound (``RankContext.bind_ring``) to a
    fresh group of ``ranks`` from ``collective.new_group``, so both layouts' programs keep working on
    their own rings. ``ranks`` must be ascending (``new_group`` sorts), as pipes and data groups are.
    """
    from refimpl.distributed import collective
    ctx, ranks = context.current(), tuple(int(r) for r in ranks)
    if list(ranks) != sorted(ranks):
        raise InvalidArgument(f"pipeline ring {ring_id}: its ranks {list(ranks)} must be ascending")
    held = ctx.groups.get(ring_id)
    if held is None:
        ctx.add_group(ring_id, ranks)
    elif tuple(held) != ranks:
        ctx.bind_ring(ring_id, collective.new_group(list(ranks)).id)


def _broadcast_stage_params(startup: Program, pipeline: Pipeline, layout: HybridLayout) -> None:
    """This stage's parameters from rank 0 of its model group (all but split's shards), then of its data group."""
    plan = pipeline.plans[layout.stage]
    owned = sorted({n for t in plan.job_types() for n, v in plan.program(t).global_block().vars.items()
                    if v.is_parameter})
    if layout.mp > 1:
        broadcast_stage_params(startup, owned, MODEL_RING, skip_distributed=True)
    if layout.dp > 1:
        if layout.dp_ring is None:
            raise PreconditionNotMet(f"pipeline stage {layout.stage}: dp_degree={layout.dp} but no data-parallel "
                                     f"ring is bound")
        broadcast_stage_params(startup, owned, layout.dp_ring, skip_distributed=False)


def given_pipeline_configs(strategy: Any) -> Dict[str, Any]:
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
        self.layout: Optional[HybridLayout] = None  # set by apply_pipeline: the pipe / data / model groups
        #: set by apply_pipeline: what its ring ids answered with when built, put back before each run (a
        #: pipeline of another layout built later in the same world rebinds them, see claim_ring)
        self.rings: Optional[Tuple[Any, Dict[int, Any]]] = None   # (the rank context, its snapshot)
        self._section: Optional[Program] = None
        self._foreign: Optional[Tuple[str, ...]] = None  # see foreign_persistables

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

    def foreign_persistables(self) -> Tuple[str, ...]:
        """The persistables only other stages use (see the module docstring), sorted."""
        if self._foreign is None:
            mine = set()
            for t in self.plan.job_types():
                for block in self.plan.program(t).blocks:
                    mine.update(block.vars)
                    for op in block.ops:
                        mine.update(op.input_arg_names)
                        mine.update(op.output_arg_names)
            programs = [plan.program(t) for plan in self.pipeline.plans for t in plan.job_types()]
            programs.append(self.pipeline.startup)
            every = {n for p in programs for b in p.blocks for n, v in b.vars.items() if v.persistable}
            self._foreign = tuple(sorted(every - mine))
        return self._foreign

    def _drop_foreign(self, scope: Scope, fetched: Sequence[str]) -> None:
        """Erase from ``scope`` what only other stages use (the shared startup initialized it here)."""
        keep = set(fetched)
        scope.erase_vars([n for n in self.foreign_persistables()
                          if n not in keep and scope.find_local_var(n) is not None])

    def run(self, exe: Executor, feed: Optional[Dict[str, Any]], fetch_list: Optional[Sequence[Any]],
            scope: Scope, return_numpy: bool = True, trace: Optional[Trace] = None) -> List[Any]:
        if self.executor is None:
            self.executor = PlanExecutor(exe.place, rank=self.stage)
        if self.rings is not None and self.rings[0] is context.current():
            self.rings[0].restore_rings(self.rings[1])
        self._check_batch(feed)
        names = [f if isinstance(f, str) else f.name for f in (fetch_list or [])]
        self._drop_foreign(scope, names)
        here = [n for n in names if self.has_var(n)]
        out = self.executor.run(self.plan, feed=feed, fetch_list=here, scope=scope, trace=trace)
        got = dict(zip(here, out))
        return [np.asarray(got[n]) if n in got else None for n in names]


    def memory_stats(self) -> Dict[str, Any]:
        """This rank's bytes in its last pipelined run (``Executor.memory_stats`` keys)."""
        if self.executor is None:
            raise PreconditionNotMet("memory_stats: the pipelined program has not run on this rank yet")
        return self.executor.memory_stats()

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

    def _mp_degree(self) -> int:
        """The tensor-parallel degree of the program's ring-0 ops: ``hybrid_configs["mp_degree"]`` and / or
        ``tensor_parallel_configs["tensor_parallel_degree"]`` (with ``tensor_parallel`` on); they must agree."""
        s = self.user_defined_strategy
        hybrid = int(s.hybrid_configs.get("mp_degree", 1) or 1)
        tp = int(s.tensor_parallel_configs["tensor_parallel_degree"]) if s.tensor_parallel else 1
        if hybrid > 1 and tp > 1 and hybrid != tp:
            raise InvalidArgument(f"pipeline: hybrid_configs['mp_degree'] ({hybrid}) and "
                                  f"tensor_parallel_configs['tensor_parallel_degree'] ({tp}) must be equal")
        return max(hybrid, tp)

    def _degrees(self, main: Program) -> Tuple[int, int, int]:
        """(dp, pp, mp), checked against the number of workers before anything is built."""
        from refimpl.distributed.pipeline.partition import _device_stage
        world = self.role_maker._worker_num()
        hc = self.user_defined_strategy.hybrid_configs
        mp = self._mp_degree()
        pp = int(hc.get("pp_degree", 1) or 1)
        if pp <= 1:
            marks = {_device_stage(op) for op in main.global_block().ops} - {None}
            pp = len(marks) if marks else world // mp if world % mp == 0 else world
        if world % (pp * mp) != 0:
            raise InvalidArgument(f"pipeline: {world} workers cannot hold whole pipelines of {pp} stages"
                                  + (f" x mp_degree {mp}" if mp > 1 else ""))
        dp = int(hc.get("dp_degree", -1))
        if dp in (-1, 0):
            dp = world // (pp * mp)
        if dp * pp * mp != world:
            raise InvalidArgument(f"hybrid_configs: dp_degree ({dp}) x pp_degree ({pp})"
                                  + (f" x mp_degree ({mp})" if mp > 1 else "")
                                  + f" must equal the number of workers ({world})")
        return dp, pp, mp

    def _check_model_parallel_ops(self, main: Program, mp: int) -> None:
        """InvalidArgument when the program's tensor-parallel ops were built for another degree than ``mp``."""
        where = (f"pipeline: the model-parallel degree is {mp} (hybrid_configs['mp_degree'] / "
                 f"tensor_parallel_configs['tensor_parallel_degree'] with tensor_parallel on)")
        for i, op in enumerate(main.global_block().ops):
            built = None
            if op.type == "c_embedding":
                rows = main.global_block()._find_var_recursive(op.input("W")[0]).shape[0]
                vocab = int(op.attr("vocab_size"))
                built = vocab // max(int(rows), 1) if vocab >= 0 else None
            elif op.type in RING_OPS and op.has_attr("nranks"):
                built = int(op.attr("nranks"))
            elif op.type in RING_OPS and mp == 1 and op.attr("ring_id") == MODEL_RING:
                raise InvalidArgument(f"{where}, but op {i} ({op.type}) communicates over ring 0, the "
                                      f"model-parallel ring: set tensor_parallel and its degree")
            if built is not None and built != mp:
                raise InvalidArgument(f"{where}, but op {i} ({op.type}) was built for {built} model-parallel ranks")

    def minimize_impl(self, loss: Variable, startup_program: Optional[Program] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Any], ParamsGrads]:
        from refimpl.framework.program import default_startup_program
        startup = startup_program or default_startup_program()
        main = loss.block.program
        dp, pp, mp = self._degrees(main)
        self._check_model_parallel_ops(main, mp)
        optimize_ops, params_grads = self.inner_opt.minimize(loss, startup, parameter_list, no_grad_set)
        self.pipeline = apply_pipeline(main, startup, loss, given_pipeline_configs(self.user_defined_strategy),
                                       self.role_maker._worker_index(), dp, pp, 1, self.fleet, mp=mp)
        return optimize_ops, params_grads
