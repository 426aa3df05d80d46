"""``paddle.optimizer.lr.LRScheduler``: the base of every learning-rate schedule.

Mirrors the ``LRScheduler`` class of ``python/paddle/optimizer/lr.py``. A
scheduler adds no ops: an optimizer built with one creates the persistable
0-D ``learning_rate_N`` variable, and the executor writes ``scheduler()``
(``last_lr``) into it before every run; the user calls ``step()`` after it.
``step(epoch=None)`` advances ``last_epoch`` by one, or sets it to ``epoch``
(then a schedule with a closed form, ``_get_closed_form_lr``, uses it instead
of its recurrence), recomputes ``last_lr = get_lr()`` and, with
``verbose=True``, prints Paddle's line
``Epoch {last_epoch}: {class name} set learning rate to {last_lr}.``.
The constructor calls ``step()`` once, so a fresh scheduler is at epoch 0.
``state_dict()`` holds the attributes named by ``state_keys()``
(``last_epoch``, ``last_lr``); ``flatten_state`` / ``unflatten_state`` turn
a nested state (``LinearWarmup``'s) into ``{"LinearWarmup_LR.last_epoch": ..}``
and back, for checkpoint formats that store one number per name. Bad arguments raise InvalidArgument (Paddle:
TypeError / ValueError / AssertionError) naming the class and the argument.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, Optional

from refimpl.core.errors import InvalidArgument, NotFound

__all__ = ["LRScheduler"]

_SEP = "."


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_number(cls: str, arg: str, value: Any, minimum: Optional[float] = None, strict: bool = False) -> float:
    """``value`` as a float; InvalidArgument naming ``cls`` and ``arg`` if it is no number or too small."""
    if not _is_number(value):
        raise InvalidArgument(f"{cls}: {arg} must be a float, got {type(value).__name__} {value!r}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise InvalidArgument(f"{cls}: {arg} must be {'>' if strict else '>='} {minimum}, got {value}")
    return float(value)


def check_positive_int(cls: str, arg: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidArgument(f"{cls}: {arg} must be a positive int, got {value!r}")
    return value


class LRScheduler:
    """Base class: subclasses define ``get_lr()`` from ``base_lr``, ``last_epoch`` (and ``last_lr``)."""

    def __init__(self, learning_rate: float = 0.1, last_epoch: int = -1, verbose: bool = False) -> None:
        lr = check_number(type(self).__name__, "learning_rate", learning_rate, minimum=0.0)
        self.base_lr = lr
        self.last_lr = lr
        self.last_epoch = last_epoch
        self.verbose = verbose
        self._var_name = None
        self.step()

    def __call__(self) -> float:
        return self.last_lr

    def step(self, epoch: Optional[int] = None) -> None:
        """Advance one epoch (or go to ``epoch``) and recompute ``last_lr``."""
        if epoch is None:
            self.last_epoch += 1
            self.last_lr = self.get_lr()
        else:
            self.last_epoch = epoch
            closed_form = getattr(self, "_get_closed_form_lr", None)
            self.last_lr = closed_form() if closed_form is not None else self.get_lr()
        self._report()

    def _report(self) -> None:
        if self.verbose:
            print(f"Epoch {self.last_epoch}: {type(self).__name__} set learning rate to {self.last_lr}.")

    def get_lr(self) -> float:
        raise NotImplementedError

    # ---- state ------------------------------------------------------------------------------
    def state_keys(self) -> None:
        self.keys = ["last_epoch", "last_lr"]

    def state_dict(self) -> Dict[str, Any]:
        self.state_keys()
        return {k: self.__dict__[k] for k in self.keys if k in self.__dict__}

    def set_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.state_keys()
        for key in self.keys:
            if key not in state_dict:
                raise NotFound(f"{type(self).__name__}.set_state_dict: state_dict has no {key!r} "
                               f"(it has {sorted(state_dict)})")
            self.__dict__[key] = state_dict[key]
        if len(state_dict) > len(self.keys):
            warnings.warn(f"{type(self).__name__}.set_state_dict: unused entries "
                          f"{sorted(set(state_dict) - set(self.keys))}")

    set_dict = set_state_dict


def flatten_state(state: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """A nested ``state_dict()`` as one level: ``{"LinearWarmup_LR.last_lr": v, ...}``."""
    flat = {}
    for k, v in state.items():
        if isinstance(v, dict):
            flat.update(flatten_state(v, f"{prefix}{k}{_SEP}"))
        else:
            flat[prefix + k] = v
    return flat


def unflatten_state(flat: Dict[str, Any]) -> Dict[str, Any]:
    """The inverse of ``flatten_state``."""
    state: Dict[str, Any] = {}
    for k, v in flat.items():
        *outer, last = k.split(_SEP)
        d = state
        for part in outer:
            d = d.setdefault(part, {})
        d[last] = v
    return state
