"""Warm-up and annealing schedules of ``paddle.optimizer.lr``.

Mirrors ``LinearWarmup``, ``CosineAnnealingDecay`` and ``OneCycleLR`` of
``python/paddle/optimizer/lr.py``, with Paddle's arithmetic step for step:

- ``LinearWarmup(learning_rate, warmup_steps, start_lr, end_lr)``: for
  ``e < warmup_steps`` the line from ``start_lr`` to ``end_lr``; after it
  ``learning_rate`` (a float, or a scheduler stepped to ``e - warmup_steps``
  whose value is used). Its ``state_dict`` nests the inner scheduler's under
  ``LinearWarmup_LR``.
- ``CosineAnnealingDecay(learning_rate, T_max, eta_min=0)``: Paddle's
  recurrence on ``last_lr`` when stepped one by one, the closed form
  ``eta_min + (lr - eta_min) * (1 + cos(pi * e / T_max)) / 2`` when stepped
  to an epoch.
- ``OneCycleLR(max_learning_rate, total_steps, divide_factor=25.0,
  end_learning_rate=1e-4, phase_pct=0.3, anneal_strategy='cos',
  three_phase=False)``: from ``max / divide_factor`` up to ``max`` over the
  first ``phase_pct`` of the steps, then down to ``end_learning_rate`` (three
  phases: back to the initial value first), cosine or linear.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Union

from refimpl.core.errors import InvalidArgument, OutOfRange

from .lr_scheduler import LRScheduler, check_number, check_positive_int

__all__ = ["CosineAnnealingDecay", "LinearWarmup", "OneCycleLR"]


class LinearWarmup(LRScheduler):
    def __init__(self, learning_rate: Union[float, LRScheduler], warmup_steps: int, start_lr: float,
                 end_lr: float, last_epoch: int = -1, verbose: bool = False) -> None:
        if not isinstance(learning_rate, LRScheduler):
            check_number("LinearWarmup", "learning_rate", learning_rate)
        self.learning_rate = learning_rate
        self.warmup_steps = check_positive_int("LinearWarmup", "warmup_steps", warmup_steps)
        self.start_lr = check_number("LinearWarmup", "start_lr", start_lr)
        self.end_lr = check_number("LinearWarmup", "end_lr", end_lr)
        if not end_lr > start_lr:
            raise InvalidArgument(f"LinearWarmup: end_lr ({end_lr}) must be greater than start_lr ({start_lr})")
        super().__init__(start_lr, last_epoch, verbose)

    def state_dict(self) -> Dict[str, Any]:
        state = super().state_dict()
        if isinstance(self.learning_rate, LRScheduler):
            state["LinearWarmup_LR"] = self.learning_rate.state_dict()
        return state

    def set_state_dict(self, state_dict: Dict[str, Any]) -> None:
        super().set_state_dict({k: v for k, v in state_dict.items() if k != "LinearWarmup_LR"})
        if isinstance(self.learning_rate, LRScheduler):
            if "LinearWarmup_LR" not in state_dict:
                raise InvalidArgument("LinearWarmup.set_state_dict: state_dict has no 'LinearWarmup_LR' "
                                      "(the wrapped scheduler's state)")
            self.learning_rate.set_state_dict(state_dict["LinearWarmup_LR"])

    def get_lr(self) -> float:
        if self.last_epoch < self.warmup_steps:
            return (self.end_lr - self.start_lr) * float(self.last_epoch) / float(self.warmup_steps) + self.start_lr
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return self.learning_rate


class CosineAnnealingDecay(LRScheduler):
    def __init__(self, learning_rate: float, T_max: int, eta_min: float = 0, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        self.T_max = check_positive_int("CosineAnnealingDecay", "T_max", T_max)
        self.eta_min = check_number("CosineAnnealingDecay", "eta_min", eta_min)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        e, t = self.last_epoch, self.T_max
        if e == 0:
            return self.base_lr
        if (e - 1 - t) % (2 * t) == 0:
            return self.last_lr + (self.base_lr - self.eta_min) * (1 - math.cos(math.pi / t)) / 2
        return ((1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t))
                * (self.last_lr - self.eta_min) + self.eta_min)

    def _get_closed_form_lr(self) -> float:
        return (self.eta_min + (self.base_lr - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2)


class OneCycleLR(LRScheduler):
    def __init__(self, max_learning_rate: float, total_steps: int, divide_factor: float = 25.0,
                 end_learning_rate: float = 0.0001, phase_pct: float = 0.3, anneal_strategy: str = "cos",
                 three_phase: bool = False, last_epoch: int = -1, verbose: bool = False) -> None:
        cls = "OneCycleLR"
        max_lr = check_number(cls, "max_learning_rate", max_learning_rate, minimum=0.0)
        min_lr = check_number(cls, "end_learning_rate", end_learning_rate, minimum=0.0)
        self.total_steps = check_positive_int(cls, "total_steps", total_steps)
        if not isinstance(phase_pct, float) or not 0 <= phase_pct <= 1:
            raise InvalidArgument(f"{cls}: phase_pct must be a float in [0, 1], got {phase_pct!r}")
        if three_phase and phase_pct >= 0.5:
            raise InvalidArgument(f"{cls}: phase_pct must be < 0.5 when three_phase is True, got {phase_pct}")
        initial_lr = max_lr / float(check_number(cls, "divide_factor", divide_factor, minimum=0, strict=True))
        n = self.total_steps
        if three_phase:
            self._step_config = [0, phase_pct * n - 1, 2 * phase_pct * n - 2, n - 1, n - 1]
            c = self._step_config
            self._steps_size = [c[1] - c[0], c[2] - c[1], c[3] - c[2], c[3] - c[2]]
            self._lr_config = [initial_lr, max_lr, initial_lr, min_lr]
        else:
            self._step_config = [0, phase_pct * n - 1, n - 1, n - 1]
            c = self._step_config
            self._steps_size = [c[1] - c[0], c[2] - c[1], c[2] - c[1]]
            self._lr_config = [initial_lr, max_lr, min_lr]
        anneal = {"cos": self._cos_annealing, "linear": self._linear_annealing}
        if anneal_strategy not in anneal:
            raise InvalidArgument(f"{cls}: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.anneal_func = anneal[anneal_strategy]
        super().__init__(initial_lr, last_epoch, verbose)

    @staticmethod
    def _cos_annealing(start_lr: float, end_lr: float, pct: float) -> float:
        return end_lr + (start_lr - end_lr) / 2.0 * (math.cos(math.pi * pct) + 1)

    @staticmethod
    def _linear_annealing(start_lr: float, end_lr: float, pct: float) -> float:
        return (end_lr - start_lr) * pct + start_lr

    def get_lr(self) -> float:
        step = self.last_epoch
        if step > self.total_steps:
            raise OutOfRange(f"OneCycleLR: stepped to {step}, past total_steps {self.total_steps}")
        last_phase = len(self._lr_config) - 2
        for i, (end_step, size) in enumerate(zip(self._step_config[1:], self._steps_size)):
            if step <= end_step or i == last_phase:
                pct = (step - self._step_config[i]) / size
                return self.anneal_func(self._lr_config[i], self._lr_config[i + 1], pct)
        raise AssertionError("OneCycleLR: the last phase always matches")  # (unreachable)
