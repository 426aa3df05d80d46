"""The strategy compiler and ``fleet.distributed_optimizer``'s optimizer.

Mirrors ``paddle.distributed.fleet``'s static-graph meta-optimizers: the
strategy decides which of them wrap the user's optimizer —
``PipelineOptimizer`` (``pipeline`` / ``pp_degree > 1``: the program becomes
this rank's pipeline Plan, with ``schedule_mode`` among the six schedules),
``GradientMergeOptimizer`` (``gradient_merge``: update every ``k_steps``
runs) and ``RawProgramOptimizer`` (data parallelism by allreduce insertion
when there are several workers and no pipeline; with a pipeline the
data-parallel allreduce happens inside each optimizer job; as in Paddle it
is also listed for a lone collective worker, where it inserts nothing).
``minimize`` records the runtime with ``fleet.record_minimized``. Their
combinations work; ``_get_applied_meta_list()`` and ``_final_strategy()``
report what was applied. Switches refimpl does not implement (amp,
recompute, sharding, ...) raise Unimplemented naming the switch. Made by
``fleet.distributed_optimizer``, ``minimize`` before ``fleet.init`` raises
``NotInitialized`` (also an ``AttributeError``, as Paddle's fails); made
directly with no fleet, it runs on the ranks of ``paddle.distributed``.

In parameter-server mode (``fleet.init()`` without ``is_collective``, on a
PS job) none of these apply: ``minimize`` runs the inner optimizer, then
``refimpl.distributed.ps.transpile`` (Paddle: ``ParameterServerOptimizer``),
which turns the program into this job's worker program and keeps the server
programs for ``fleet.init_server``.
"""
from __future__ import annotations

import copy
from typing import Any, List, Optional, Sequence, Set, TYPE_CHECKING, Tuple

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.distributed import collective
from refimpl.framework.program import default_startup_program

from ..base.runtime_factory import RuntimeFactory
from .pipeline_optimizer import apply_pipeline

if TYPE_CHECKING:
    from refimpl.distributed.fleet.base.distributed_strategy import DistributedStrategy
    from refimpl.distributed.fleet.fleet import Fleet
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Parameter, Variable
    from refimpl.optimizer.optimizer import Optimizer


class DistributedOptimizer:
    """What ``fleet.distributed_optimizer(opt, strategy)`` returns."""

    def __init__(self, inner_optimizer: Optimizer, strategy: Optional[DistributedStrategy] = None,
                 fleet: Optional[Fleet] = None) -> None:
        from refimpl.distributed.fleet.base.distributed_strategy import DistributedStrategy
        if strategy is not None and not isinstance(strategy, DistributedStrategy):
            raise InvalidArgument(f"distributed_optimizer: strategy must be a DistributedStrategy, "
                                  f"got {type(strategy).__name__}")
        self.inner_opt = inner_optimizer
        self.user_defined_strategy = strategy if strategy is not None else DistributedStrategy()
        self.fleet = fleet
        self._applied = []
        self._final = None

    # ---- what the strategy asks for -------------------------------------------
    @property
    def applied_strategy(self) -> Optional[DistributedStrategy]:
        """The strategy ``minimize`` applied (None before it): ``_final_strategy()`` without the error."""
        return self._final

    def _world(self):
        if self.fleet is not None:
            return self.fleet.worker_index(), self.fleet.worker_num()
        return collective.get_rank(), collective.get_world_size()

    def _degrees(self, world):
        hc = self.user_defined_strategy.hybrid_configs
        pp = int(hc.get("pp_degree", 1) or 1)
        dp = int(hc.get("dp_degree", -1))
        if dp in (-1, 0):
            dp = max(1, world // pp)
        if dp * pp != world:
            raise InvalidArgument(f"hybrid_configs: dp_degree ({dp}) x pp_degree ({pp}) must equal the number "
                                  f"of workers ({world})")
        return dp, pp

    def _check_supported(self, is_collective=True):
        missing = self.user_defined_strategy._unimplemented_enabled(is_collective)
        if missing:
            raise Unimplemented(f"DistributedStrategy.{missing[0]} is set, but refimpl does not implement it "
                                f"(all such switches set: {missing})")

    # ---- minimize ---------------------------------------------------------------
    def minimize(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameter_list: Optional[Sequence[Any]] = None,
                 no_grad_set: Optional[Set[Any]] = None
                 ) -> Tuple[List[Operator], List[Tuple[Parameter, Variable]]]:
        """Backward and update of the inner optimizer, rewritten as the strategy says."""
        if self.fleet is not None and self.fleet.role_maker is None:
            from refimpl.distributed.fleet.fleet import NotInitialized
            raise NotInitialized("DistributedOptimizer.minimize: fleet is not initialized on this rank: call "
                                 "fleet.init(...) before minimize")
        if self._is_ps():
            return self._minimize_ps(loss, startup_program, parameter_list, no_grad_set)
        self._check_supported()
        s = self.user_defined_strategy
        rank, world = self._world()
        dp, pp = self._degrees(world)
        gm = s.gradient_merge_configs if s.gradient_merge else {"k_steps": 1, "avg": True}
        k = int(gm.get("k_steps", 1))
        startup = startup_program or default_startup_program()
        optimize_ops, params_grads = self.inner_opt.minimize(loss, startup, parameter_list, no_grad_set)
        main = loss.block.program
        applied = []
        if s.pipeline or pp > 1:
            apply_pipeline(main, startup, loss, s.pipeline_configs, rank, dp, pp, k, self.fleet)
            applied.append("PipelineOptimizer")
            if dp > 1:
                applied.append("RawProgramOptimizer")
        else:
            if world > 1 or self._raw_program_applies():
                applied.append("RawProgramOptimizer")
            if world > 1:
                from refimpl.distributed.passes.data_parallel import apply_data_parallel
                from refimpl.static.build_strategy import BuildStrategy
                apply_data_parallel(main, world, rank, BuildStrategy())
                _broadcast_params(startup, main)
            if k > 1:
                from refimpl.distributed.passes import new_pass
                new_pass("auto_parallel_gradient_merge_pass",
                         {"k_steps": k, "avg": bool(gm.get("avg", True)),
                          "gradient_sync_after_accumulate": world > 1,
                          "params_grads": params_grads}).apply([main], [startup])
        if k > 1:
            applied.append("GradientMergeOptimizer")
        self._applied = applied
        self._final = self._final_from(applied)
        self._set_runtime()
        return optimize_ops, params_grads

    def _raw_program_applies(self):
        """Paddle's ``RawProgramOptimizer._can_apply``: collective, no tensor parallel / sharding, the default
        ``without_graph_optimization`` (it is listed even for one worker, where it inserts nothing)."""
        s = self.user_defined_strategy
        collective = self.fleet is not None and self.fleet.is_collective
        return collective and s.without_graph_optimization and not (s.tensor_parallel or s.sharding)

    def _set_runtime(self, ps_job=None):
        """Paddle's ``fleet.minimize`` creates the runtime handle the PS methods need."""
        if self.fleet is not None:
            context = {"role_maker": self.fleet.role_maker, "valid_strategy": self._final}
            self.fleet.record_minimized(RuntimeFactory()._create_runtime(context), ps_job)

    # ---- parameter-server mode (Paddle: ParameterServerOptimizer) ---------------------------
    def _is_ps(self):
        rm = self.fleet.role_maker if self.fleet is not None else None
        return rm is not None and not self.fleet.is_collective and not rm._is_non_distributed()

    def _minimize_ps(self, loss, startup_program, parameter_list, no_grad_set):
        from refimpl.distributed import ps
        missing = [m for m in self.user_defined_strategy._unimplemented_enabled(False) if m != "a_sync"]
        if missing:
            raise Unimplemented(f"DistributedStrategy.{missing[0]} is set, but refimpl's parameter-server mode "
                                f"does not implement it (all such switches set: {missing})")
        startup = startup_program or default_startup_program()
        optimize_ops, params_grads = self.inner_opt.minimize(loss, startup, parameter_list, no_grad_set)
        rm = self.fleet.role_maker
        job = ps.transpile(loss.block.program, startup, params_grads, self.user_defined_strategy,
                           rm._server_num(), rm._worker_num())
        self._applied = ["ParameterServerOptimizer"]
        self._final = self._final_from(self._applied)
        self._set_runtime(job)
        return optimize_ops, params_grads

    def _final_from(self, applied):
        final = copy.deepcopy(self.user_defined_strategy)
        final.pipeline = "PipelineOptimizer" in applied
        final.gradient_merge = "GradientMergeOptimizer" in applied
        return final

    def _get_applied_meta_list(self):
        return list(self._applied)

    def _get_applied_graph_list(self):
        """Paddle's graph optimizers (``GraphExecutionOptimizer``): refimpl applies none."""
        return []

    def _final_strategy(self):
        if self._final is None:
            raise InvalidArgument("_final_strategy: call minimize first")
        return self._final

    def __getattr__(self, name):  # everything else (get_lr, step ...) comes from the inner optimizer
        return getattr(self.inner_opt, name)


def _broadcast_params(startup, main):
    """Every worker starts from worker 0's parameters (Paddle's RawProgramOptimizer broadcast)."""
    block = startup.global_block()
    for p in main.all_parameters():
        if p.name in block.vars:
            block.append_op(type="c_broadcast", inputs={"X": [p.name]}, outputs={"Out": [p.name]},
                            attrs={"ring_id": 0, "root": 0, "use_calc_stream": True})
