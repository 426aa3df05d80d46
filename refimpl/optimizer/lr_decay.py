"""The closed-form decay schedules of ``paddle.optimizer.lr``.

Mirrors ``python/paddle/optimizer/lr.py``: each ``get_lr()`` is Paddle's
formula in ``last_epoch`` (``e``) and ``base_lr`` (``lr``), computed in the
same order so the values agree to the last bit:

- ``NoamDecay(d_model, warmup_steps, learning_rate=1.0)``:
  ``lr * d_model**-0.5 * min(e**-0.5 (1 at e=0), warmup_steps**-1.5 * e)``
- ``PiecewiseDecay(boundaries, values)``: ``values[i]`` for the first
  ``e < boundaries[i]``, else ``values[-1]``
- ``NaturalExpDecay(lr, gamma)``: ``lr * exp(-gamma * e)``
- ``InverseTimeDecay(lr, gamma)``: ``lr / (1 + gamma * e)``
- ``PolynomialDecay(lr, decay_steps, end_lr=1e-4, power=1.0, cycle=False)``:
  ``(lr - end_lr) * (1 - e / steps) ** power + end_lr`` (``e`` capped at
  ``decay_steps``, or ``steps`` grown to the next multiple with ``cycle``)
- ``ExponentialDecay(lr, gamma)``: ``lr * gamma ** e``
- ``MultiStepDecay(lr, milestones, gamma=0.1)``: ``lr * gamma ** (milestones passed)``
- ``StepDecay(lr, step_size, gamma=0.1)``: ``lr * gamma ** (e // step_size)``
- ``LambdaDecay(lr, lr_lambda)``: ``lr * lr_lambda(e)``

Bad arguments raise InvalidArgument naming the class and the argument.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from refimpl.core.errors import InvalidArgument

from .lr_scheduler import LRScheduler, check_number, check_positive_int

__all__ = ["ExponentialDecay", "InverseTimeDecay", "LambdaDecay", "MultiStepDecay", "NaturalExpDecay",
           "NoamDecay", "PiecewiseDecay", "PolynomialDecay", "StepDecay"]


def _check_gamma_below_one(cls: str, gamma: float) -> float:
    gamma = check_number(cls, "gamma", gamma)
    if gamma >= 1.0:
        raise InvalidArgument(f"{cls}: gamma must be < 1.0, got {gamma}")
    return gamma


class NoamDecay(LRScheduler):
    def __init__(self, d_model: int, warmup_steps: int, learning_rate: float = 1.0, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        check_number("NoamDecay", "d_model", d_model, minimum=0, strict=True)
        check_number("NoamDecay", "warmup_steps", warmup_steps, minimum=0, strict=True)
        self.d_model, self.warmup_steps = d_model, warmup_steps
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        a = 1 if self.last_epoch == 0 else self.last_epoch ** -0.5
        b = self.warmup_steps ** -1.5 * self.last_epoch
        return self.base_lr * (self.d_model ** -0.5) * min(a, b)


class PiecewiseDecay(LRScheduler):
    def __init__(self, boundaries: Sequence[int], values: Sequence[float], last_epoch: int = -1,
                 verbose: bool = False) -> None:
        if not isinstance(boundaries, (list, tuple)) or len(boundaries) == 0:
            raise InvalidArgument(f"PiecewiseDecay: boundaries must be a non-empty list, got {boundaries!r}")
        if not isinstance(values, (list, tuple)) or len(values) != len(boundaries) + 1:
            raise InvalidArgument(f"PiecewiseDecay: values must have one more element than boundaries, got "
                                  f"len(values) {len(values) if isinstance(values, (list, tuple)) else values!r}"
                                  f" and len(boundaries) {len(boundaries)}")
        if any(b >= c for b, c in zip(boundaries, boundaries[1:])):
            raise InvalidArgument(f"PiecewiseDecay: boundaries must increase, got {list(boundaries)}")
        for v in values:
            check_number("PiecewiseDecay", "values", v, minimum=0.0)
        self.boundaries, self.values = boundaries, values
        super().__init__(last_epoch=last_epoch, verbose=verbose)

    def get_lr(self) -> float:
        for i, b in enumerate(self.boundaries):
            if self.last_epoch < b:
                return self.values[i]
        return self.values[len(self.values) - 1]


class NaturalExpDecay(LRScheduler):
    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1, verbose: bool = False) -> None:
        self.gamma = check_number("NaturalExpDecay", "gamma", gamma, minimum=0.0, strict=True)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * math.exp(-1 * self.gamma * self.last_epoch)


class InverseTimeDecay(LRScheduler):
    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1, verbose: bool = False) -> None:
        self.gamma = check_number("InverseTimeDecay", "gamma", gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr / (1 + self.gamma * self.last_epoch)


class PolynomialDecay(LRScheduler):
    def __init__(self, learning_rate: float, decay_steps: int, end_lr: float = 0.0001, power: float = 1.0,
                 cycle: bool = False, last_epoch: int = -1, verbose: bool = False) -> None:
        self.decay_steps = check_positive_int("PolynomialDecay", "decay_steps", decay_steps)
        self.end_lr = check_number("PolynomialDecay", "end_lr", end_lr)
        self.power = check_number("PolynomialDecay", "power", power, minimum=0.0, strict=True)
        self.cycle = cycle
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        epoch, steps = self.last_epoch, self.decay_steps
        if self.cycle:
            times = 1 if self.last_epoch == 0 else math.ceil(float(self.last_epoch) / float(self.decay_steps))
            steps = self.decay_steps * times
        else:
            epoch = min(self.last_epoch, self.decay_steps)
        return (self.base_lr - self.end_lr) * ((1 - float(epoch) / float(steps)) ** self.power) + self.end_lr


class ExponentialDecay(LRScheduler):
    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1, verbose: bool = False) -> None:
        gamma = check_number("ExponentialDecay", "gamma", gamma)
        if not 0.0 < gamma < 1.0:
            raise InvalidArgument(f"ExponentialDecay: gamma must be in (0, 1), got {gamma}")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * (self.gamma ** self.last_epoch)


class MultiStepDecay(LRScheduler):
    def __init__(self, learning_rate: float, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        if not isinstance(milestones, (list, tuple)):
            raise InvalidArgument(f"MultiStepDecay: milestones must be a list or tuple, got "
                                  f"{type(milestones).__name__}")
        if any(a >= b for a, b in zip(milestones, milestones[1:])):
            raise InvalidArgument(f"MultiStepDecay: milestones must increase, got {list(milestones)}")
        self.milestones = milestones
        self.gamma = _check_gamma_below_one("MultiStepDecay", gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        for i, m in enumerate(self.milestones):
            if self.last_epoch < m:
                return self.base_lr * (self.gamma ** i)
        return self.base_lr * (self.gamma ** len(self.milestones))


class StepDecay(LRScheduler):
    def __init__(self, learning_rate: float, step_size: int, gamma: float = 0.1, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        self.step_size = check_positive_int("StepDecay", "step_size", step_size)
        self.gamma = _check_gamma_below_one("StepDecay", gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * (self.gamma ** (self.last_epoch // self.step_size))


class LambdaDecay(LRScheduler):
    def __init__(self, learning_rate: float, lr_lambda: Callable[[int], float], last_epoch: int = -1,
                 verbose: bool = False) -> None:
        if not callable(lr_lambda):
            raise InvalidArgument(f"LambdaDecay: lr_lambda must be a function, got {type(lr_lambda).__name__}")
        self.lr_lambda = lr_lambda
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.lr_lambda(self.last_epoch)
