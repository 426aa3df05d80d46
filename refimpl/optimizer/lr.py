"""Learning-rate schedules.

Mirrors ``paddle.optimizer.lr``: an ``LRScheduler`` object (``StepDecay``,
``ExponentialDecay``) adds no ops; the executor writes ``scheduler()`` into
the learning-rate variable before every run and the user calls ``step()``.
``exponential_decay`` is the older in-graph form: it appends ops with the
LRSched op role (a step counter ``@LR_DECAY_COUNTER@`` incremented every run,
then ``lr * rate ** (step / decay_steps)``) and returns the lr Variable.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument

if TYPE_CHECKING:
    from refimpl.framework.variable import Variable


class LRScheduler:
    def __init__(self, learning_rate: float = 0.1, last_epoch: int = -1, verbose: bool = False) -> None:
        self.base_lr = float(learning_rate)
        self.last_epoch = last_epoch
        self.last_lr = self.base_lr
        self.step()

    def __call__(self):
        return self.last_lr

    def step(self, epoch: Optional[int] = None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self.last_lr = self.get_lr()

    def get_lr(self) -> float:
        raise NotImplementedError

    def state_dict(self) -> Dict[str, Any]:
        return {"last_epoch": self.last_epoch, "last_lr": self.last_lr}

    def set_state_dict(self, state: Dict[str, Any]) -> None:
        self.last_epoch, self.last_lr = state["last_epoch"], state["last_lr"]


class StepDecay(LRScheduler):
    def __init__(self, learning_rate: float, step_size: int, gamma: float = 0.1, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        if not isinstance(step_size, int) or step_size <= 0:
            raise InvalidArgument(f"StepDecay: step_size must be a positive int, got {step_size!r}")
        if gamma >= 1.0:
            raise InvalidArgument(f"StepDecay: gamma must be < 1.0, got {gamma}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class ExponentialDecay(LRScheduler):
    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        if not 0 < gamma < 1:
            raise InvalidArgument(f"ExponentialDecay: gamma must be in (0, 1), got {gamma}")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** self.last_epoch


def exponential_decay(learning_rate: float, decay_steps: float, decay_rate: float,
                      staircase: bool = False) -> Variable:
    """In-graph exponential decay: ``lr * decay_rate ** (step / decay_steps)``.

    Appends ops with the LRSched role (an ``increment`` of the persistable
    counter ``@LR_DECAY_COUNTER@`` prepended to the program, then ``cast``,
    ``scale``, ``elementwise_pow``, ``scale``) and returns the lr Variable.
    """
    from refimpl.framework.program import default_main_program
    from refimpl.static.input import create_global_var
    from refimpl.tensor.manipulation import cast
    if decay_steps <= 0:
        raise InvalidArgument(f"exponential_decay: decay_steps must be > 0, got {decay_steps}")
    if staircase:
        raise InvalidArgument("exponential_decay: staircase=True is not supported")
    main = default_main_program()
    with main._lr_schedule_guard():
        counter = create_global_var([1], -1, "int64", persistable=True, force_cpu=True,
                                    name="@LR_DECAY_COUNTER@")
        main.global_block()._prepend_op(type="increment", inputs={"X": [counter]},
                                        outputs={"Out": [counter]}, attrs={"step": 1.0})
        step = cast(counter, "float32")
        return float(learning_rate) * (float(decay_rate) ** (step * (1.0 / decay_steps)))
