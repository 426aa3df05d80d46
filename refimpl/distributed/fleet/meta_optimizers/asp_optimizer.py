"""``ASPOptimizer`` (fleet): automatic n:m sparsity of the static program (``strategy.asp``).

Mirrors ``paddle/distributed/fleet/meta_optimizers/asp_optimizer.py`` of
Paddle 3.3.1: applies in collective mode when ``asp`` is on; may wrap AMP,
LARS, LAMB, recompute and gradient merge (sharding may wrap it); its
``minimize`` is ``paddle.incubate.asp.ASPHelper._minimize`` over the inner
optimizer -- the inner minimize, then a ``<param>.asp_mask`` parameter per
supported parameter and one ``elementwise_mul(param, mask) -> param`` each
after the optimizer ops. The masks stay all ones until
``paddle.incubate.asp.prune_model(program)`` fills them (after startup).

refimpl addition: with more than one worker and no sharding,
``_check_configs`` raises PreconditionNotMet before anything is built. There
Paddle 3.3.1's strategy compiler keeps ASP and drops ``RawProgramOptimizer``
(neither may wrap the other), so its program has no gradient all-reduce and
each trainer silently trains on its own data alone; ``ShardingOptimizer``
does wrap ASP and synchronizes the ranks.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Set, Tuple

from refimpl.core.errors import PreconditionNotMet

from .meta_optimizer_base import MetaOptimizerBase, ParamsGrads


class ASPOptimizer(MetaOptimizerBase):
    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.meta_optimizers_white_list = ["AMPOptimizer", "LarsOptimizer", "LambOptimizer", "RecomputeOptimizer",
                                           "GradientMergeOptimizer"]
        self.meta_optimizers_black_list: List[str] = []

    def _can_apply(self) -> bool:
        return bool(self.role_maker._is_collective and self.user_defined_strategy.asp)

    def _check_configs(self, loss: Any) -> None:
        workers = self.role_maker._worker_num()
        if workers > 1 and not self.user_defined_strategy.sharding:
            raise PreconditionNotMet(
                f"strategy.asp with {workers} workers needs strategy.sharding: without it Paddle 3.3.1 chains "
                f"ASPOptimizer instead of RawProgramOptimizer, so no gradient is all-reduced and each trainer "
                f"trains alone (ShardingOptimizer wraps ASPOptimizer and synchronizes the ranks)")

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.asp = False

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.asp = True

    def minimize_impl(self, loss: Any, startup_program: Optional[Any] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Any], ParamsGrads]:
        from refimpl.incubate.asp import ASPHelper
        return ASPHelper._minimize(self.inner_opt, loss, startup_program=startup_program,
                                   parameter_list=parameter_list, no_grad_set=no_grad_set)


__all__ = ["ASPOptimizer"]
