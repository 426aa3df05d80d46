"""``paddle.static.ExponentialMovingAverage`` (``python/paddle/static/nn/common.py``).

Follows Paddle 2.6.2, the last release whose static graph was the legacy IR: Paddle 3.3.1's
legacy path of this class is broken (its ``static.nn.cond`` calls ``logical_not``, which 3.3.1
binds to a function that accepts only PIR values, so its own docstring example raises a
TypeError). What 2.6.2 builds:

- at construction, in the default main program: the decay ``scheduled_ema_decay_rate`` (``[1]``,
  a persistable global var, LR-schedule role), for every parameter with ``do_model_average`` a
  scratch var ``<param>.ema_tmp_N`` and, under the optimize role and the name scope
  ``moving_average``, its average ``<param>_ema_N`` (zeros, like the parameter); then two
  programs of their own: ``apply_program`` (cast the step counter ``@EMA_STEP_COUNTER@`` to
  float32, ``decay ** step``; per parameter: copy it into its scratch var, then set it to
  ``ema / (1 - decay ** step)`` once a step was taken, else to ``ema``) and
  ``restore_program`` (copy the scratch vars back);
- ``update()``: an ``increment`` of the step counter at the start of the main program, and per
  parameter ``ema = ema * decay + param * (1 - decay)`` under the optimize role.

One difference in the ops: 2.6.2 picks between the two values with a two-branch
``static.nn.cond`` (a ``conditional_block`` per branch, ``logical_not``, ``cast`` and
``select_input``); refimpl's ``cond`` has no false branch and no return values, so here the
parameter is first set to ``ema`` and a one-branch ``conditional_block`` overwrites it with the
bias-corrected value when the step counter is positive: the same values, other ops.

``thres_steps`` (a decay of ``min(decay, (t + 1) / (t + 10))``) is not supported here: Paddle's
builds a ``cond`` whose false branch is a NumPy array. Parameters with a ``.master`` copy
(multi-precision) are averaged like any other.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Optional, Tuple

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework import unique_name
from refimpl.framework.program import Program, default_main_program, name_scope, program_guard
from refimpl.framework.variable import Variable
from refimpl.static.input import create_global_var

__all__ = ["ExponentialMovingAverage"]

STEP_COUNTER = "@EMA_STEP_COUNTER@"


def _clone_variable(block: Any, var: Variable) -> Variable:
    """``var`` declared in ``block`` too, persistable (Paddle's ``Block._clone_variable``)."""
    return block.create_var(name=var.name, shape=var.shape, dtype=var.dtype, type=var.type, persistable=True)


class ExponentialMovingAverage:
    """Keeps a moving average of every parameter; ``apply`` swaps it in for evaluation."""

    def __init__(self, decay: float = 0.999, thres_steps: Optional[Variable] = None,
                 name: Optional[str] = None) -> None:
        if thres_steps is not None:
            raise Unimplemented("ExponentialMovingAverage: thres_steps is not supported by refimpl")
        if not isinstance(decay, (int, float)) or not 0.0 <= decay <= 1.0:
            raise InvalidArgument(f"ExponentialMovingAverage: decay must be a number in [0, 1], got {decay!r}")
        self._decay, self._thres_steps = decay, thres_steps
        self._name = name if name is not None else ""
        self._decay_var = self._get_ema_decay()
        self._step_counter_name = STEP_COUNTER
        main = default_main_program()
        self._params_tmps: List[Tuple[Any, Any]] = []  # (parameter, its scratch var)
        for param in main.global_block().all_parameters():
            if param.do_model_average:
                tmp = param.block.create_var(name=unique_name.generate(f"{self._name}{param.name}.ema_tmp"),
                                             dtype=param.dtype, persistable=False, stop_gradient=True)
                self._params_tmps.append((param, tmp))
        self._ema_vars: Dict[str, Any] = {}
        for param, tmp in self._params_tmps:
            with main._optimized_guard([param, tmp]), name_scope("moving_average"):
                self._ema_vars[param.name] = create_global_var(
                    name=unique_name.generate(f"{self._name}{param.name}_ema"), shape=param.shape, value=0.0,
                    dtype=param.dtype, persistable=True)
        self.apply_program = self._build_apply_program()
        self.restore_program = self._build_restore_program()

    def _get_ema_decay(self) -> Any:
        with default_main_program()._lr_schedule_guard():
            return create_global_var(shape=[1], value=self._decay, dtype="float32", persistable=True,
                                     name="scheduled_ema_decay_rate")

    def _build_apply_program(self) -> Program:
        from refimpl.static.control_flow import cond
        from refimpl.tensor.creation import assign
        from refimpl.tensor.manipulation import cast
        from refimpl.tensor.math import pow as pow_
        program = Program()
        block = program.global_block()
        with program_guard(program):
            global_step = create_global_var(name=self._step_counter_name, shape=[1], value=0, dtype="int64",
                                            persistable=True)
            global_step = cast(global_step, "float32")
            decay_pow = pow_(_clone_variable(block, self._decay_var), global_step)
            for param, tmp in self._params_tmps:
                param = _clone_variable(block, param)
                tmp = _clone_variable(block, tmp)
                ema = _clone_variable(block, self._ema_vars[param.name])
                assign(param, output=tmp)
                assign(ema, output=param)

                def corrected(ema=ema, param=param):
                    assign(ema / (1.0 - decay_pow), output=param)
                cond(global_step > 0, corrected)
        return program

    def _build_restore_program(self) -> Program:
        from refimpl.tensor.creation import assign
        program = Program()
        block = program.global_block()
        with program_guard(program):
            for param, tmp in self._params_tmps:
                tmp = _clone_variable(block, tmp)
                param = _clone_variable(block, param)
                assign(tmp, output=param)
        return program

    def update(self) -> None:
        """Append the moving-average update to the default main program (the training program)."""
        from refimpl.tensor.creation import assign
        main = default_main_program()
        self._step_counter()
        for param, tmp in self._params_tmps:
            with main._optimized_guard([param, tmp]), name_scope("moving_average"):
                param_ema, decay = self._ema_vars[param.name], self._decay_var
                ema_t = param_ema * decay + param * (1 - decay)
                assign(ema_t, output=param_ema)

    def _step_counter(self) -> Variable:
        """Paddle's ``autoincreased_step_counter``: an int64 [1] counter, 0 at startup, +1 first thing."""
        from refimpl.nn.initializer import Constant
        from refimpl.static.layer_helper import LayerHelper
        helper = LayerHelper("global_step_counter")
        block = helper.main_program.global_block()
        counter = block.vars.get(self._step_counter_name)
        if counter is not None:
            return counter
        counter = helper.create_global_variable(name=self._step_counter_name, dtype="int64", shape=[1],
                                                persistable=True)
        helper.set_variable_initializer(counter, Constant(value=0, force_cpu=True))
        block._prepend_op(type="increment", inputs={"X": [counter]}, outputs={"Out": [counter]},
                          attrs={"step": 1.0})
        counter.stop_gradient = True
        return counter

    @contextlib.contextmanager
    def apply(self, executor: Any, need_restore: bool = True) -> Iterator[None]:
        """Run ``apply_program`` (parameters := their averages); restore them on exit if asked."""
        executor.run(self.apply_program)
        try:
            yield
        finally:
            if need_restore:
                self.restore(executor)

    def restore(self, executor: Any) -> None:
        """Run ``restore_program``: the parameters get back the values ``apply`` saved."""
        executor.run(self.restore_program)
