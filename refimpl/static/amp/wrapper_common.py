"""What the float16 and the bfloat16 optimizer wrappers share: argument checks and small program steps.

No Paddle file of its own: Paddle's ``python/paddle/static/amp/decorator.py``
and ``python/paddle/static/amp/bf16/decorator.py`` each spell these out. The
checks are refimpl's: Paddle fails later with an AttributeError when
``decorate`` gets no optimizer or lists of the wrong kind.
"""
from __future__ import annotations

import types
import warnings
from typing import Any

from refimpl.core.errors import InvalidArgument
from refimpl.framework import unique_name
from refimpl.framework.program import default_main_program
from refimpl.static.input import create_global_var

__all__: list = []


def check_optimizer(api: str, optimizer: Any) -> None:
    """InvalidArgument unless ``optimizer`` is an optimizer (or a meta-optimizer around one)."""
    if not all(hasattr(optimizer, attr) for attr in ("_learning_rate", "backward", "apply_gradients")):
        raise InvalidArgument(f"{api}: optimizer must be a paddle.optimizer.Optimizer, "
                              f"got {type(optimizer).__name__} ({optimizer!r:.60})")


def check_amp_lists(api: str, amp_lists: Any, expected: type, hint: str) -> None:
    """InvalidArgument unless ``amp_lists`` is an ``expected`` (``hint`` names how to build one)."""
    if not isinstance(amp_lists, expected):
        raise InvalidArgument(f"{api}: amp_lists must be an {expected.__name__} ({hint}), "
                              f"got {type(amp_lists).__name__} ({amp_lists!r:.60})")


def innermost_optimizer(optimizer: Any) -> Any:
    """The optimizer at the bottom of a chain of meta-optimizers (each holds the next as ``inner_opt``)."""
    return innermost_optimizer(optimizer.inner_opt) if hasattr(optimizer, "inner_opt") else optimizer


def learning_rate_to_var(optimizer: Any) -> None:
    """A float learning rate becomes a float32 [1] persistable ``learning_rate_k`` of the main program
    (float32 as the master parameters, whatever the model's precision)."""
    rate = optimizer._learning_rate
    if isinstance(rate, float):
        var = create_global_var(name=unique_name.generate("learning_rate"), shape=[1], value=rate,
                                dtype="float32", persistable=True)
        optimizer._learning_rate_map[default_main_program()] = var


def warn_own_minimize(optimizer: Any) -> None:
    """Paddle's warning: a wrapper calls backward + apply_gradients, never the optimizer's own minimize."""
    own = type(optimizer).__dict__.get("minimize")
    if isinstance(own, types.FunctionType):
        warnings.warn("The decorated optimizer has its own `minimize` method, but it will not be executed.")


def float32_loss(loss: Any) -> Any:
    """The loss the backward starts from is float32."""
    return loss if loss.dtype == "float32" else loss.astype("float32")


class DecoratedSteps:
    """What both AMP wrappers (float16 and bfloat16) share: the inner optimizer's learning rate, read
    through; ``apply_optimize`` and ``minimize``, which run the wrapper's own ``backward`` and
    ``apply_gradients`` in the loss's program, as Paddle's decorators run them."""

    _optimizer: Any

    @property
    def _learning_rate(self) -> Any:  # the inner optimizer's, read through (fleet's meta-optimizers read it)
        return self._optimizer._learning_rate

    @property
    def _learning_rate_map(self) -> Any:
        return self._optimizer._learning_rate_map

    def backward(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None, callbacks: Any = None) -> Any:
        raise NotImplementedError

    def apply_gradients(self, params_grads: Any) -> Any:
        raise NotImplementedError

    def apply_optimize(self, loss: Any, startup_program: Any, params_grads: Any) -> Any:
        from refimpl.framework.program import program_guard
        with program_guard(loss.block.program, startup_program):
            return self.apply_gradients(params_grads)

    def minimize(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None) -> Any:
        """backward + apply_optimize; returns (optimize ops, (param, grad) pairs)."""
        warn_own_minimize(self._optimizer)
        params_grads = self.backward(loss, startup_program=startup_program, parameter_list=parameter_list,
                                     no_grad_set=no_grad_set)
        return self.apply_optimize(loss, startup_program, params_grads), params_grads

