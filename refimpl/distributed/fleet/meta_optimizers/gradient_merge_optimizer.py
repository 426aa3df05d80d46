"""``GradientMergeOptimizer`` (fleet): update every ``k_steps`` runs with the merged gradients.

Mirrors ``paddle/distributed/fleet/meta_optimizers/gradient_merge_optimizer.py``
of Paddle 3.3.1: applies in collective mode when ``gradient_merge`` is on and
``gradient_merge_configs["k_steps"] > 1``; wraps
``refimpl.incubate.optimizer.GradientMergeOptimizer`` (the step counter, the
``@GRAD@GradientMerge`` accumulators and the ``conditional_block`` marked
with ``grad_merge_cond_name``, where ``RawProgramOptimizer`` puts its
allreduce); may wrap AMP, LARS, LAMB and recompute.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Set, Tuple

from refimpl.core.errors import InvalidArgument

from .meta_optimizer_base import MetaOptimizerBase, ParamsGrads


class GradientMergeOptimizer(MetaOptimizerBase):
    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.wrapped_opt: Any = None
        self.meta_optimizers_white_list = ["AMPOptimizer", "LarsOptimizer", "LambOptimizer", "RecomputeOptimizer"]
        self.meta_optimizers_black_list = []

    def _init_wrapped_opt(self) -> None:
        from refimpl.incubate.optimizer import GradientMergeOptimizer as GM
        configs = self.user_defined_strategy.gradient_merge_configs
        self.wrapped_opt = GM(self.inner_opt, k_steps=int(configs["k_steps"]), avg=bool(configs["avg"]))

    def _can_apply(self) -> bool:
        if not self.role_maker._is_collective:
            return False
        s = self.user_defined_strategy
        return bool(s.gradient_merge) and s.gradient_merge_configs["k_steps"] > 1

    def _check_configs(self, loss: Any) -> None:
        k = self.user_defined_strategy.gradient_merge_configs["k_steps"]
        if not isinstance(k, int) or k < 1:
            raise InvalidArgument(f"gradient_merge_configs['k_steps'] must be a positive int, got {k!r}")

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.gradient_merge = False
        dist_strategy.gradient_merge_configs = {}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        return

    def minimize_impl(self, loss: Any, startup_program: Optional[Any] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Any], ParamsGrads]:
        self._init_wrapped_opt()
        return self.wrapped_opt.minimize(loss, startup_program, parameter_list, no_grad_set)


__all__ = ["GradientMergeOptimizer"]
