"""``paddle.optimizer.lr.ReduceOnPlateau``: lower the rate when a metric stops improving.

Mirrors ``ReduceOnPlateau`` of ``python/paddle/optimizer/lr.py``. Unlike the
other schedules it starts at ``last_epoch = 0`` without a first ``step`` and
is stepped with the metric: ``step(metrics, epoch=None)``. A metric better
than ``best`` (``mode`` min/max, ``threshold`` relative or absolute) resets
the count of bad epochs; after more than ``patience`` bad epochs the rate
becomes ``max(last_lr * factor, min_lr)`` (if that lowers it by more than
``epsilon``; printed with ``verbose``) and ``cooldown`` epochs are ignored.
Its ``state_dict`` holds ``cooldown_counter``, ``best``, ``num_bad_epochs``,
``last_epoch``, ``last_lr``.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from refimpl.core.errors import InvalidArgument

from .lr_scheduler import LRScheduler, check_number

__all__ = ["ReduceOnPlateau"]


class ReduceOnPlateau(LRScheduler):
    def __init__(self, learning_rate: float, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr: float = 0,
                 epsilon: float = 1e-8, verbose: bool = False) -> None:
        cls = "ReduceOnPlateau"
        mode, threshold_mode = str(mode).lower(), str(threshold_mode).lower()
        if mode not in ("min", "max"):
            raise InvalidArgument(f"{cls}: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise InvalidArgument(f"{cls}: threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        if check_number(cls, "factor", factor) >= 1.0:
            raise InvalidArgument(f"{cls}: factor must be < 1.0 (new_lr = lr * factor), got {factor}")
        self.mode, self.factor, self.threshold_mode = mode, factor, threshold_mode
        self.patience, self.threshold, self.cooldown = patience, threshold, cooldown
        self.min_lr, self.epsilon = min_lr, epsilon
        self.cooldown_counter, self.best, self.num_bad_epochs = 0, None, 0
        self.base_lr = self.last_lr = check_number(cls, "learning_rate", learning_rate, minimum=0.0)
        self.last_epoch = 0
        self.verbose = verbose
        self._var_name = None

    def state_keys(self) -> None:
        self.keys = ["cooldown_counter", "best", "num_bad_epochs", "last_epoch", "last_lr"]

    def step(self, metrics: Any, epoch: Optional[int] = None) -> None:  # type: ignore[override]  # as Paddle's
        """One epoch with the observed ``metrics`` (a number or a one-element array)."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if isinstance(metrics, np.ndarray) or hasattr(metrics, "numpy"):
            metrics = np.asarray(metrics)
            if metrics.size != 1:
                raise InvalidArgument(f"ReduceOnPlateau.step: metrics must hold one element, got shape "
                                      f"{list(metrics.shape)} (take its mean first)")
        elif isinstance(metrics, bool) or not isinstance(metrics, (int, float, np.floating, np.integer)):
            raise InvalidArgument(f"ReduceOnPlateau.step: metrics must be a number or a one-element array, "
                                  f"got {type(metrics).__name__}")
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            return
        if self.best is None or self._is_better(metrics, self.best):
            self.best, self.num_bad_epochs = metrics, 0
        else:
            self.num_bad_epochs += 1
        if self.num_bad_epochs > self.patience:
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
            new_lr = max(self.last_lr * self.factor, self.min_lr)
            if self.last_lr - new_lr > self.epsilon:
                self.last_lr = new_lr
                self._report()

    def _is_better(self, current: float, best: float) -> bool:
        rel = self.threshold_mode == "rel"
        if self.mode == "min":
            return current < (best - best * self.threshold if rel else best - self.threshold)
        return current > (best + best * self.threshold if rel else best + self.threshold)
