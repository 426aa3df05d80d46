"""``paddle.static.amp.bf16.decorate_bf16``: an optimizer wrapped for bfloat16 training.

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/bf16/decorator.py``: no loss
scaling (bfloat16 has float32's range); ``backward`` creates a float32 [1]
``learning_rate_k`` when the learning rate is a float, rewrites the program
(O1: ``rewrite_program_bf16``; pure bf16: ``cast_model_to_bf16``, startup
initializers included) and differentiates the loss (cast to float32 first when
it is not). ``amp_init`` stores the pure-bf16 parameters as bfloat16 and
rewrites a test program.

Differences: an ``optimizer`` that is none, or ``amp_lists`` that are no
``AutoMixedPrecisionListsBF16``, are an ``InvalidArgument`` at decorate time
(Paddle fails later with an AttributeError).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Set, Tuple

from refimpl.core.errors import PreconditionNotMet
from refimpl.framework.program import program_guard

from ..wrapper_common import DecoratedSteps, check_amp_lists, check_optimizer, float32_loss, learning_rate_to_var
from .amp_lists import AutoMixedPrecisionListsBF16
from .amp_utils import cast_model_to_bf16, cast_parameters_to_bf16, rewrite_program_bf16

__all__ = ["OptimizerWithMixedPrecision", "decorate_bf16"]


class OptimizerWithMixedPrecision(DecoratedSteps):
    """An optimizer plus bfloat16 casts in the program (Paddle's bf16 wrapper of the same name)."""

    def __init__(self, optimizer: Any, amp_lists: AutoMixedPrecisionListsBF16, use_pure_bf16: bool,
                 use_bf16_guard: bool) -> None:
        check_optimizer("decorate_bf16", optimizer)
        check_amp_lists("decorate_bf16", amp_lists, AutoMixedPrecisionListsBF16,
                        "paddle.static.amp.bf16.AutoMixedPrecisionListsBF16(...)")
        self._optimizer = optimizer
        self._amp_lists = amp_lists
        self._use_pure_bf16 = use_pure_bf16
        self._use_bf16_guard = use_bf16_guard
        self._train_program: Any = None  # set by backward()
        self._to_bf16_var_names: Optional[Set[str]] = None  # pure bf16: what amp_init converts

    def _cast_program(self, program: Any, startup_program: Any = None) -> Optional[Set[str]]:
        """Pure bf16: every var bf16 but around float32-only ops; O1: casts around the bf16-list ops."""
        if not self._use_pure_bf16:
            rewrite_program_bf16(program, amp_lists=self._amp_lists)
            return None
        return cast_model_to_bf16(program, startup_program, amp_lists=self._amp_lists,
                                  use_bf16_guard=self._use_bf16_guard)

    def backward(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None, callbacks: Any = None) -> List[Tuple[Any, Any]]:
        """Rewrite the program for bfloat16 and differentiate ``loss``; returns (param, grad) pairs."""
        program = loss.block.program
        self._train_program = program
        with program_guard(program, startup_program):
            learning_rate_to_var(self._optimizer)
            self._to_bf16_var_names = self._cast_program(program, startup_program)
            return self._optimizer.backward(float32_loss(loss), startup_program, parameter_list, no_grad_set,
                                            callbacks)

    def amp_init(self, place: Any, scope: Any = None, test_program: Any = None, use_bf16_test: bool = False) -> None:
        """After the startup program ran: pure-bf16 parameters to bfloat16 in ``scope``; rewrite ``test_program``."""
        if self._train_program is None:
            raise PreconditionNotMet("Please call the minimize method first.")
        if self._use_pure_bf16:
            cast_parameters_to_bf16(place, self._train_program, scope, self._to_bf16_var_names)
        if test_program is not None and (self._use_pure_bf16 or use_bf16_test):
            self._cast_program(test_program)

    def apply_gradients(self, params_grads: Sequence[Tuple[Any, Any]]) -> List[Any]:
        return self._optimizer.apply_gradients(params_grads)


def decorate_bf16(optimizer: Any, amp_lists: Optional[AutoMixedPrecisionListsBF16] = None,
                  use_pure_bf16: bool = False, use_bf16_guard: Optional[bool] = None) -> OptimizerWithMixedPrecision:
    """Wrap ``optimizer`` for bfloat16 training (``use_bf16_guard`` defaults to ``use_pure_bf16``)."""
    lists = AutoMixedPrecisionListsBF16() if amp_lists is None else amp_lists
    guard = use_pure_bf16 if use_bf16_guard is None else use_bf16_guard
    return OptimizerWithMixedPrecision(optimizer, lists, use_pure_bf16, guard)
