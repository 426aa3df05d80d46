"""``LarsOptimizer`` (fleet): replace a Momentum optimizer by LARS momentum.

Mirrors ``paddle/distributed/fleet/meta_optimizers/lars_optimizer.py`` of
Paddle 3.3.1: applies in collective mode when ``lars`` is on and the inner
optimizer is a ``Momentum`` (else it warns and does not apply, and the final
strategy shows lars off); the update is
``refimpl.incubate.optimizer.LarsMomentumOptimizer`` with the Momentum's
learning rate, momentum, parameters, regularization, grad clip and name and
``lars_configs``' ``lars_coeff``, ``lars_weight_decay``,
``exclude_from_weight_decay`` and ``epsilon``. Wraps nothing.
"""
from __future__ import annotations

import logging
from typing import Any, Optional

from refimpl.optimizer import Momentum

from .meta_optimizer_base import WrappingMetaOptimizer

logger = logging.getLogger("refimpl.distributed.fleet")


class LarsOptimizer(WrappingMetaOptimizer):
    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.lars_opt: Any = None
        self.meta_optimizers_white_list = []
        self.meta_optimizers_black_list = []

    def _lars(self) -> Any:
        """The LARS optimizer (made on first use: Paddle makes it in ``_set_basic_info``)."""
        if self.lars_opt is None:
            from refimpl.incubate.optimizer import LarsMomentumOptimizer
            opt: Any = self.inner_opt  # a Momentum: _can_apply checked it
            c = self.user_defined_strategy.lars_configs
            self.lars_opt = LarsMomentumOptimizer(
                learning_rate=opt._learning_rate, momentum=opt._momentum, lars_coeff=c["lars_coeff"],
                lars_weight_decay=c["lars_weight_decay"], parameter_list=opt._parameter_list,
                regularization=opt.regularization, grad_clip=opt._grad_clip, name=getattr(opt, "_name", None),
                exclude_from_weight_decay=c["exclude_from_weight_decay"], epsilon=c["epsilon"])
        return self.lars_opt

    def _can_apply(self) -> bool:
        if not self.role_maker._is_collective or not self.user_defined_strategy.lars:
            return False
        if not isinstance(self.inner_opt, Momentum):
            logger.warning("lars need the inner optimizer to be Momentum optimizer but got %s.",
                           getattr(self.inner_opt, "type", type(self.inner_opt).__name__))
            return False
        return True

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.lars = False
        dist_strategy.lars_configs = {}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.lars = True
        dist_strategy.lars_configs = {"lars_coeff": 0.01, "lars_weight_decay": 0.0005}

    def _wrapped(self) -> Any:
        return self._lars()


__all__ = ["LarsOptimizer"]
