"""``ParameterServerOptimizer``: parameter-server training (not collective).

Mirrors the applicability of ``paddle/distributed/fleet/meta_optimizers/ps_optimizer.py``
of Paddle 3.3.1 (not collective, ``a_sync_configs["k_steps"] >= 0``; may wrap
recompute, AMP, LARS, LAMB, ASP). ``minimize`` runs the inner optimizer, then
``refimpl.distributed.ps.transpile``, which turns the program into this job's
worker program and keeps the server programs (``ps_job``) for
``fleet.init_server``. Difference: Paddle's program passes are replaced by
that one transpile; strategy switches the PS path does not implement raise
Unimplemented naming them.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Set, Tuple

from refimpl.core.errors import Unimplemented
from refimpl.framework.program import default_startup_program

from .meta_optimizer_base import MetaOptimizerBase, ParamsGrads


class ParameterServerOptimizer(MetaOptimizerBase):
    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.meta_optimizers_white_list = ["RecomputeOptimizer", "AMPOptimizer", "LarsOptimizer", "LambOptimizer",
                                           "ASPOptimizer"]
        self.meta_optimizers_black_list = []
        self.ps_job: Any = None

    def _can_apply(self) -> bool:
        if self.role_maker._is_collective:
            return False
        return self.user_defined_strategy.a_sync_configs["k_steps"] >= 0

    def _check_configs(self, loss: Any) -> None:
        missing = [m for m in self.user_defined_strategy._unimplemented_enabled(False) if m != "a_sync"]
        if missing:
            raise Unimplemented(f"DistributedStrategy.{missing[0]} is set, but refimpl's parameter-server mode "
                                f"does not implement it (all such switches set: {missing})")

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.a_sync = False
        dist_strategy.a_sync_configs = {"k_steps": -1}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        return

    def minimize_impl(self, loss: Any, startup_program: Optional[Any] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Any], ParamsGrads]:
        from refimpl.distributed import ps
        startup = startup_program or default_startup_program()
        optimize_ops, params_grads = self.inner_opt.minimize(loss, startup, parameter_list, no_grad_set)
        rm = self.role_maker
        self.ps_job = ps.transpile(loss.block.program, startup, params_grads, self.user_defined_strategy,
                                   rm._server_num(), rm._worker_num())
        return optimize_ops, params_grads


__all__ = ["ParameterServerOptimizer"]
