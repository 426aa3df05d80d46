"""Learning-rate schedules: ``paddle.optimizer.lr``.

Mirrors ``python/paddle/optimizer/lr.py``. An ``LRScheduler`` object adds no
ops; the executor writes ``scheduler()`` into the learning-rate variable
before every run and the user calls ``step()``. The schedulers live in
``lr_scheduler.py`` (the base class), ``lr_decay.py`` (closed-form decays),
``lr_warmup.py`` (warm-up, cosine annealing, one-cycle) and ``lr_plateau.py``
(``ReduceOnPlateau``); this module re-exports them all.
``exponential_decay`` is the older in-graph form: it appends ops with the
LRSched op role (a step counter ``@LR_DECAY_COUNTER@`` incremented every run,
then ``lr * rate ** (step / decay_steps)``) and returns the lr Variable.
"""
from __future__ import annotations

from typing import Optional, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument

from .lr_decay import *  # noqa: F401,F403
from .lr_decay import __all__ as _decay_all
from .lr_plateau import *  # noqa: F401,F403
from .lr_plateau import __all__ as _plateau_all
from .lr_scheduler import LRScheduler
from .lr_warmup import *  # noqa: F401,F403
from .lr_warmup import __all__ as _warmup_all

if TYPE_CHECKING:
    from refimpl.framework.variable import Variable

__all__ = ["LRScheduler", "autoincreased_step_counter", "exponential_decay", *_decay_all, *_warmup_all, *_plateau_all]


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


def autoincreased_step_counter(counter_name: Optional[str] = None, begin: int = 1, step: int = 1) -> Variable:
    """Paddle's in-graph step counter: an int64 [1] persistable var (default ``@STEP_COUNTER@``).

    The first call in a program creates it (startup: ``fill_constant`` of
    ``begin - 1`` on the CPU) and prepends an ``increment`` by ``step`` to the
    main program, so its first value in a run is ``begin``; later calls
    return the same var.
    """
    from refimpl.nn.initializer import Constant
    from refimpl.static.layer_helper import LayerHelper
    helper = LayerHelper("global_step_counter")
    name = counter_name or "@STEP_COUNTER@"
    block = helper.main_program.global_block()
    counter = block.vars.get(name)
    if counter is None:
        counter = helper.create_global_variable(name=name, dtype="int64", shape=[1], persistable=True)
        helper.set_variable_initializer(counter, Constant(value=begin - 1, force_cpu=True))
        block._prepend_op(type="increment", inputs={"X": [counter]}, outputs={"Out": [counter]},
                          attrs={"step": float(step)})
    counter.stop_gradient = True
    return counter


from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
