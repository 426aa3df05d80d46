"""``RecomputeOptimizer`` (fleet): recompute the forward between checkpoints in backward.

Mirrors ``paddle/distributed/fleet/meta_optimizers/recompute_optimizer.py``
of Paddle 3.3.1: applies in collective mode when ``recompute`` is on and
``recompute_configs["checkpoints"]`` is not empty (with none it silently does
not apply, and the final strategy shows recompute off); wraps
``refimpl.incubate.optimizer.RecomputeOptimizer`` with those checkpoints;
may wrap LARS, LAMB and DGC. ``enable_offload`` turns on the wrapped
optimizer's checkpoint offload with ``checkpoint_shape``. Addition: ``_check_configs``
rejects checkpoint names that are no variable of the loss's program, and
(with offload) a ``checkpoint_shape`` that is not a list of positive ints.
"""
from __future__ import annotations

from typing import Any, Optional

from refimpl.core.errors import InvalidArgument

from refimpl.incubate.optimizer.recompute_offload import check_checkpoint_shape

from .meta_optimizer_base import WrappingMetaOptimizer


class RecomputeOptimizer(WrappingMetaOptimizer):
    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.wrapped_opt: Any = None
        self.meta_optimizers_white_list = ["LarsOptimizer", "LambOptimizer", "DGCOptimizer"]
        self.meta_optimizers_black_list = []

    def _init_wrapped_opt(self) -> None:
        """Wrap the inner optimizer once, in refimpl's incubate RecomputeOptimizer, with the checkpoints."""
        if self.wrapped_opt is None:
            from refimpl.incubate.optimizer import RecomputeOptimizer as IncubateRecompute
            wrapped = IncubateRecompute(self.inner_opt)
            recompute_configs = self.user_defined_strategy.recompute_configs
            wrapped._set_checkpoints([name for name in recompute_configs["checkpoints"]])
            if recompute_configs["enable_offload"]:
                wrapped._enable_offload()
                wrapped.checkpoint_shape = list(recompute_configs["checkpoint_shape"])
            self.wrapped_opt = wrapped

    def _can_apply(self) -> bool:
        if not self.role_maker._is_collective:
            return False
        s = self.user_defined_strategy
        return bool(s.recompute) and len(s.recompute_configs["checkpoints"]) > 0

    def _check_configs(self, loss: Any) -> None:
        configs = self.user_defined_strategy.recompute_configs
        if configs["enable_offload"]:
            check_checkpoint_shape(configs["checkpoint_shape"])
        block = loss.block.program.global_block()
        missing = [n for n in configs["checkpoints"] if block._find_var_recursive(n) is None]
        if missing:
            raise InvalidArgument(f"recompute_configs['checkpoints'] names no variable of the program: {missing}")

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.recompute = False
        dist_strategy.recompute_configs = {}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        return

    def _wrapped(self) -> Any:
        self._init_wrapped_opt()
        return self.wrapped_opt


__all__ = ["RecomputeOptimizer"]
