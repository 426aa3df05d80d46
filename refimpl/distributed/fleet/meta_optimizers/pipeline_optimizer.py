"""PipelineOptimizer: turn the minimized program into this rank's pipeline Plan.

Mirrors the role of Paddle's static ``PipelineOptimizer`` meta-optimizer: the
program (stages marked with ``device_guard("gpu:k")`` / ``("stage:k")``, or
cut evenly when nothing is marked) is split into stages, this rank's stage
gets its job programs and job list for ``schedule_mode`` with
``accumulate_steps`` micro-batches, and the program is marked with
``_pipeline_opt`` so that ``Executor.run`` runs the Plan (Paddle likewise
marks the program and runs it with its pipeline trainer). With data
parallelism each replica's pipeline has its own transfer rings and the
optimizer job all-reduces the accumulated gradients over the replicas; with
gradient merge the update happens every ``k_steps`` runs.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, TYPE_CHECKING

import numpy as np

from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context
from refimpl.distributed.pipeline.partition import even_cuts
from refimpl.distributed.pipeline.runner import build_pipeline
from refimpl.executor.plan_executor import PlanExecutor

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
            if ring not in ctx.groups:
                ctx.add_group(ring, [dd * pp + s for dd in range(dp)])
        dp_ring = _RING_BASE - 1 - stage
    return d, stage, pipes, dp_ring


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
    n_rings = 2 * pp * vpp + 2
    for dd, ranks in enumerate(pipes):  # every rank creates every replica's rings, in the same order
        for r in range(1, n_rings + 1):
            ring = _RING_BASE + dd * _RING_STRIDE + r
            if ring not in ctx.groups:
                ctx.add_group(ring, ranks)
    _extend_startup(startup, pipeline.startup)
    main._pipeline_opt = PipelineRun(pipeline, stage)
    return pipeline


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
    """``Executor.run`` of a pipelined program: this rank's Plan over micro-batch scopes."""

    def __init__(self, pipeline: Pipeline, stage: int) -> None:
        self.pipeline, self.stage = pipeline, stage
        self.plan = pipeline.plans[stage]
        self.executor: Optional[PlanExecutor] = None

    def has_var(self, name: str) -> bool:
        return any(name in self.plan.program(t).global_block().vars for t in self.plan.job_types())

    def run(self, exe: Executor, feed: Optional[Dict[str, Any]], fetch_list: Optional[Sequence[Any]],
            scope: Scope, return_numpy: bool = True, trace: Optional[Trace] = None) -> List[Any]:
        if self.executor is None:
            self.executor = PlanExecutor(exe.place, rank=self.stage)
        names = [f if isinstance(f, str) else f.name for f in (fetch_list or [])]
        here = [n for n in names if self.has_var(n)]
        out = self.executor.run(self.plan, feed=feed, fetch_list=here, scope=scope, trace=trace)
        got = dict(zip(here, out))
        return [np.asarray(got[n]) if n in got else None for n in names]
