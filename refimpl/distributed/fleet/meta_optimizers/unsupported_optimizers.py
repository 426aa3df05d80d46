"""The meta-optimizers of Paddle 3.3.1 that refimpl does not implement.

Mirrors the applicability rules of ``qat_optimizer.py`` (``QATOptimizer``)
under ``paddle/distributed/fleet/meta_optimizers/``: it applies in collective
mode when its switch is on, so the strategy
compiler weighs it exactly as Paddle does; ``minimize`` then raises
Unimplemented naming the switch (``DistributedOptimizer`` checks this before
anything is built).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Set, Tuple

from refimpl.core.errors import Unimplemented

from .meta_optimizer_base import MetaOptimizerBase, ParamsGrads


class _Unsupported(MetaOptimizerBase):
    switch = ""
    white_list: List[str] = []

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.meta_optimizers_white_list = list(self.white_list)
        self.meta_optimizers_black_list = []

    def _can_apply(self) -> bool:
        return bool(self.role_maker._is_collective and getattr(self.user_defined_strategy, self.switch))

    def _check_configs(self, loss: Any) -> None:
        raise Unimplemented(f"DistributedStrategy.{self.switch} is set, but refimpl does not implement "
                            f"{type(self).__name__}")

    def _disable_strategy(self, dist_strategy: Any) -> None:
        setattr(dist_strategy, self.switch, False)
        if self.switch in ("qat", "sharding", "tensor_parallel"):
            setattr(dist_strategy, f"{self.switch}_configs", {})

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        return

    def minimize_impl(self, loss: Any, startup_program: Optional[Any] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Any], ParamsGrads]:
        self._check_configs(loss)
        raise AssertionError("unreachable")


class QATOptimizer(_Unsupported):
    switch = "qat"
    white_list = ["AMPOptimizer", "LarsOptimizer", "LambOptimizer", "GraphExecutionOptimizer", "RecomputeOptimizer",
                  "GradientMergeOptimizer"]


__all__ = ["QATOptimizer"]
