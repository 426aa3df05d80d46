"""``AMPOptimizer``: automatic mixed precision (fp16 / bf16) as a program rewrite.

Mirrors ``paddle/distributed/fleet/meta_optimizers/amp_optimizer.py`` of
Paddle 3.3.1: applies in collective mode when ``amp`` is on; builds
``refimpl.static.amp.AutoMixedPrecisionLists`` from ``amp_configs``
(``custom_white_list``, ``custom_black_list``, ``custom_black_varnames``)
and wraps the inner optimizer with ``refimpl.static.amp.decorate`` (the
loss-scaling keys ``init_loss_scaling``, ``incr_every_n_steps``,
``decr_every_n_nan_or_inf``, ``incr_ratio``, ``decr_ratio``,
``use_dynamic_loss_scaling``, then ``use_pure_fp16``, ``use_fp16_guard``),
distributed when there is more than one worker and no sharding. May wrap
LARS, LAMB and recompute; black-lists DGC. Addition: before anything is
built, ``_check_configs`` rejects an ``init_loss_scaling`` <= 0 and list
entries that name no registered op (a typed error naming the key and value).
"""
from __future__ import annotations

from typing import Any, Optional

from refimpl.core.errors import InvalidArgument

from .meta_optimizer_base import WrappingMetaOptimizer


class AMPOptimizer(WrappingMetaOptimizer):
    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.wrapped_opt: Any = None
        self.meta_optimizers_white_list = ["LarsOptimizer", "LambOptimizer", "RecomputeOptimizer"]
        self.meta_optimizers_black_list = ["DGCOptimizer"]

    def _init_wrapped_opt(self) -> None:
        if self.wrapped_opt is not None:
            return
        from refimpl.static import amp
        c = self.user_defined_strategy.amp_configs
        lists = amp.AutoMixedPrecisionLists(set(c["custom_white_list"]), set(c["custom_black_list"]),
                                            set(c["custom_black_varnames"]))
        self.wrapped_opt = amp.decorate(self.inner_opt, lists, c["init_loss_scaling"], c["incr_every_n_steps"],
                                        c["decr_every_n_nan_or_inf"], c["incr_ratio"], c["decr_ratio"],
                                        c["use_dynamic_loss_scaling"], c["use_pure_fp16"], c["use_fp16_guard"])
        distributed = self.role_maker._worker_num() > 1 and not self.user_defined_strategy.sharding
        self.wrapped_opt._set_distributed(distributed)

    def _can_apply(self) -> bool:
        return bool(self.role_maker._is_collective and self.user_defined_strategy.amp)

    def _check_configs(self, loss: Any) -> None:
        from refimpl.ops.registry import has_op
        c = self.user_defined_strategy.amp_configs
        if not c["init_loss_scaling"] > 0:
            raise InvalidArgument(f"amp_configs['init_loss_scaling'] must be > 0, got {c['init_loss_scaling']!r}")
        for key in ("custom_white_list", "custom_black_list"):
            unknown = [name for name in c[key] if not has_op(name)]
            if unknown:
                raise InvalidArgument(f"amp_configs['{key}'] names op types no op of refimpl's registry has: {unknown}")

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.amp = False
        dist_strategy.amp_configs = {}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.amp = True
        dist_strategy.amp_configs = {"init_loss_scaling": 32768.0, "incr_every_n_steps": 1000,
                                     "decr_every_n_nan_or_inf": 2, "incr_ratio": 2.0, "decr_ratio": 0.8,
                                     "use_dynamic_loss_scaling": True}

    def _wrapped(self) -> Any:
        self._init_wrapped_opt()
        return self.wrapped_opt

    def amp_init(self, place: Any, scope: Any = None, test_program: Any = None, use_fp16_test: bool = False) -> Any:
        return self.wrapped_opt.amp_init(place, scope, test_program, use_fp16_test)

    def get_loss_scaling(self) -> Any:
        return self.wrapped_opt.get_loss_scaling()


__all__ = ["AMPOptimizer"]
