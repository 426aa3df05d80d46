"""``paddle.static.amp.bf16.decorate_bf16``: an optimizer wrapped for bfloat16 training.

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/bf16/decorator.py``: no loss
scaling (bfloat16 has float32's range); ``backward`` creates a float32 [1]
``learning_rate_k`` when the learning rate is a float, rewrites the program
(O1: ``rewrite_program_bf16``; pure bf16: ``cast_model_to_bf16``, startup
initializers included) and differentiates the loss (cast to float32 first when
it is not). ``amp_init`` stores the pure-bf16 parameters as bfloat16 and
rewrites a test program.
"""
from __future__ import annotations

import types
import warnings
from typing import Any, List, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.framework import unique_name
from refimpl.framework.program import default_main_program, program_guard
from refimpl.static.input import create_global_var

from .amp_lists import AutoMixedPrecisionListsBF16
from .amp_utils import cast_model_to_bf16, cast_parameters_to_bf16, rewrite_program_bf16

__all__ = ["OptimizerWithMixedPrecision", "decorate_bf16"]


class OptimizerWithMixedPrecision:
    """An optimizer plus bfloat16 casts in the program (Paddle's bf16 wrapper of the same name)."""

    def __init__(self, optimizer: Any, amp_lists: AutoMixedPrecisionListsBF16, use_pure_bf16: bool,
                 use_bf16_guard: bool) -> None:
        if not hasattr(optimizer, "_learning_rate"):
            raise InvalidArgument(f"decorate_bf16: optimizer must be a paddle.optimizer.Optimizer, "
                                  f"got {type(optimizer).__name__}")
        self._optimizer = optimizer
        self._amp_lists = amp_lists
        self._param_grads: Any = None
        self._train_program: Any = None
        self._learning_rate = optimizer._learning_rate
        self._learning_rate_map = optimizer._learning_rate_map
        self._use_pure_bf16 = use_pure_bf16
        self._use_bf16_guard = use_bf16_guard
        self._to_bf16_var_names: Any = None

    def _init_amp_var(self) -> None:
        if isinstance(self._optimizer._learning_rate, float):  # float32, as the master parameters
            self._optimizer._learning_rate_map[default_main_program()] = create_global_var(
                name=unique_name.generate("learning_rate"), shape=[1],
                value=float(self._optimizer._learning_rate), dtype="float32", persistable=True)

    def backward(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None, callbacks: Any = None) -> List[Tuple[Any, Any]]:
        """Rewrite the program for bfloat16 and differentiate ``loss``; returns (param, grad) pairs."""
        self._train_program = loss.block.program
        with program_guard(self._train_program, startup_program):
            self._init_amp_var()
            if self._use_pure_bf16:
                self._to_bf16_var_names = cast_model_to_bf16(self._train_program, startup_program,
                                                             self._amp_lists, self._use_bf16_guard)
            else:
                rewrite_program_bf16(self._train_program, self._amp_lists)
            if loss.dtype != "float32":
                loss = loss.astype("float32")
            return self._optimizer.backward(loss, startup_program, parameter_list, no_grad_set, callbacks)

    def amp_init(self, place: Any, scope: Any = None, test_program: Any = None, use_bf16_test: bool = False) -> None:
        """After the startup program ran: pure-bf16 parameters to bfloat16 in ``scope``; rewrite ``test_program``."""
        if self._train_program is None:
            raise PreconditionNotMet("Please call the minimize method first.")
        if self._use_pure_bf16:
            cast_parameters_to_bf16(place, self._train_program, scope, self._to_bf16_var_names)
        if test_program is not None:
            if self._use_pure_bf16:
                cast_model_to_bf16(test_program, amp_lists=self._amp_lists, use_bf16_guard=self._use_bf16_guard)
            elif use_bf16_test:
                rewrite_program_bf16(test_program, amp_lists=self._amp_lists)

    def apply_gradients(self, params_grads: Sequence[Tuple[Any, Any]]) -> List[Any]:
        return self._optimizer.apply_gradients(params_grads)

    def apply_optimize(self, loss: Any, startup_program: Any, params_grads: Sequence[Tuple[Any, Any]]) -> List[Any]:
        with program_guard(loss.block.program, startup_program):
            return self.apply_gradients(params_grads)

    def minimize(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None) -> Tuple[List[Any], List[Tuple[Any, Any]]]:
        """backward + apply_optimize; returns (optimize ops, (param, grad) pairs)."""
        opt_dict = type(self._optimizer).__dict__
        if "minimize" in opt_dict and isinstance(opt_dict["minimize"], types.FunctionType):
            warnings.warn("The decorated optimizer has its own `minimize` method, but it will not be executed.")
        params_grads = self.backward(loss, startup_program=startup_program, parameter_list=parameter_list,
                                     no_grad_set=no_grad_set)
        return self.apply_optimize(loss, startup_program, params_grads), params_grads


def decorate_bf16(optimizer: Any, amp_lists: Optional[AutoMixedPrecisionListsBF16] = None,
                  use_pure_bf16: bool = False, use_bf16_guard: Optional[bool] = None) -> OptimizerWithMixedPrecision:
    """Wrap ``optimizer`` for bfloat16 training (``use_bf16_guard`` defaults to ``use_pure_bf16``)."""
    if amp_lists is None:
        amp_lists = AutoMixedPrecisionListsBF16()
    if use_bf16_guard is None:
        use_bf16_guard = use_pure_bf16
    return OptimizerWithMixedPrecision(optimizer, amp_lists, use_pure_bf16, use_bf16_guard)
