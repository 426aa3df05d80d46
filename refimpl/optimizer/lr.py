"""Learning-rate schedules.

Mirrors ``paddle.optimizer.lr``: an ``LRScheduler`` object (``StepDecay``,
``ExponentialDecay``) adds no ops; the executor writes ``scheduler()`` into
the learning-rate variable before every run and the user calls ``step()``.
``exponential_decay`` is the older in-graph form: it appends ops with the
LRSched op role (a step counter ``@LR_DECAY_COUNTER@`` incremented every run,
then ``lr * rate ** (step / decay_steps)``) and returns the lr Variable.
"""
from refimpl.core.errors import InvalidArgument


class LRScheduler:
    def __init__(self, learning_rate=0.1, last_epoch=-1, verbose=False):
        self.base_lr = float(learning_rate)
        self.last_epoch = last_epoch
        self.last_lr = self.base_lr
        self.step()

    def __call__(self):
        return self.last_lr

    def step(self, epoch=None):
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self.last_lr = self.get_lr()

    def get_lr(self):
        raise NotImplementedError

    def state_dict(self):
        return {"last_epoch": self.last_epoch, "last_lr": self.last_lr}

    def set_state_dict(self, state):
        self.last_epoch, self.last_lr = state["last_epoch"], state["last_lr"]


class StepDecay(LRScheduler):
    def __init__(self, learning_rate, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        if not isinstance(step_size, int) or step_size <= 0:
            raise InvalidArgument(f"StepDecay: step_size must be a positive int, got {step_size!r}")
        if gamma >= 1.0:
            raise InvalidArgument(f"StepDecay: gamma must be < 1.0, got {gamma}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class ExponentialDecay(LRScheduler):
    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        if not 0 < gamma < 1:
            raise InvalidArgument(f"ExponentialDecay: gamma must be in (0, 1), got {gamma}")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.gamma ** self.last_epoch


def exponential_decay(learning_rate, decay_steps, decay_rate, staircase=False):
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
