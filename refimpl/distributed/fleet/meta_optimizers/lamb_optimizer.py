"""``LambOptimizer`` (fleet): replace an Adam optimizer by LAMB.

Mirrors ``paddle/distributed/fleet/meta_optimizers/lamb_optimizer.py`` of
Paddle 3.3.1: applies in collective mode when ``lamb`` is on and the inner
optimizer is an ``Adam`` (else it warns and does not apply); the update is
``refimpl.optimizer.Lamb`` with the Adam's learning rate, betas, epsilon,
parameters, grad clip and name, ``lamb_configs["lamb_weight_decay"]``, and
parameters whose name ends with an ``exclude_from_weight_decay`` entry
excluded from the decay. Wraps nothing.
"""
from __future__ import annotations

import logging
from typing import Any, Optional

from refimpl.optimizer import Adam

from .meta_optimizer_base import WrappingMetaOptimizer

logger = logging.getLogger("refimpl.distributed.fleet")


class LambOptimizer(WrappingMetaOptimizer):
    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.lamb_opt: Any = None
        self.meta_optimizers_white_list = []
        self.meta_optimizers_black_list = []

    def _lamb(self) -> Any:
        """The LAMB optimizer (made on first use: Paddle makes it in ``_set_basic_info``)."""
        if self.lamb_opt is None:
            from refimpl.optimizer import Lamb
            opt: Any = self.inner_opt  # an Adam: _can_apply checked it
            c = self.user_defined_strategy.lamb_configs
            suffixes = list(c["exclude_from_weight_decay"])

            def exclude(param: Any) -> bool:
                return any(param.name.endswith(s) for s in suffixes)

            self.lamb_opt = Lamb(learning_rate=opt._learning_rate, lamb_weight_decay=c["lamb_weight_decay"],
                                 beta1=opt._beta1, beta2=opt._beta2, epsilon=opt._epsilon,
                                 parameters=opt._parameter_list, grad_clip=opt._grad_clip,
                                 exclude_from_weight_decay_fn=exclude if suffixes else None,
                                 name=getattr(opt, "_name", None))
        return self.lamb_opt

    def _can_apply(self) -> bool:
        if not self.role_maker._is_collective or not self.user_defined_strategy.lamb:
            return False
        if not isinstance(self.inner_opt, Adam):
            logger.warning("lamb need the inner optimizer to be AdamOptimizer optimizer but got %s.",
                           getattr(self.inner_opt, "type", type(self.inner_opt).__name__))
            return False
        return True

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.lamb = False
        dist_strategy.lamb_configs = {}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.lamb = True
        dist_strategy.lamb_configs = {"lamb_weight_decay": 0.01, "exclude_from_weight_decay": []}

    def _wrapped(self) -> Any:
        return self._lamb()


__all__ = ["LambOptimizer"]
