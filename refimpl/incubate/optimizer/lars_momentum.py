"""``paddle.incubate.optimizer.LarsMomentumOptimizer``: one ``lars_momentum`` op per parameter.

Mirrors ``python/paddle/incubate/optimizer/lars_momentum.py`` of Paddle 3.3.1
in static mode: a ``{param}_velocity_0`` accumulator, and a ``lars_momentum``
op with one-element slot lists and attrs ``mu``, ``lars_coeff``,
``lars_weight_decay`` (a one-element list: 0 for a parameter whose name
contains one of ``exclude_from_weight_decay``), ``epsilon``,
``rescale_grad``, ``multi_precision``. ``regularization`` is the base
optimizer's ``weight_decay`` (a regularizer term added to the gradient).
Difference: float16 master weights (``multi_precision``) are not supported.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, TYPE_CHECKING, Union

import numpy as np

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.optimizer import Optimizer

if TYPE_CHECKING:
    from refimpl.framework.variable import Parameter, Variable
    from refimpl.optimizer.lr import LRScheduler

__all__ = ["LarsMomentumOptimizer"]


def _number(name: str, value: Any) -> float:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"LarsMomentumOptimizer: {name} must be a float, got {value!r}")
    return float(value)


def _name_fragments(value: Any) -> List[str]:
    """``exclude_from_weight_decay`` as a list of strings (Paddle 3.3.1 fails with a bare TypeError
    on a non-sequence, and matches a string letter by letter; both are refused here)."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or \
            not all(isinstance(f, str) for f in value):
        raise InvalidArgument("LarsMomentumOptimizer: exclude_from_weight_decay must be a list of name "
                              f"fragments (strings), got {value!r}")
    return list(value)


class LarsMomentumOptimizer(Optimizer):
    type = "lars_momentum"

    def __init__(self, learning_rate: Union[float, LRScheduler, Variable], momentum: float,
                 lars_coeff: float = 0.001, lars_weight_decay: float = 0.0005,
                 parameter_list: Optional[Sequence[Union[Parameter, str]]] = None, regularization: Any = None,
                 grad_clip: Any = None, name: Optional[str] = None,
                 exclude_from_weight_decay: Optional[Sequence[str]] = None, epsilon: float = 0,
                 multi_precision: bool = False, rescale_grad: float = 1.0) -> None:
        if learning_rate is None:
            raise InvalidArgument("LarsMomentumOptimizer: learning_rate must be given, got None")
        self._momentum = _number("momentum", momentum)
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._lars_coeff = _number("lars_coeff", lars_coeff)
        self._lars_weight_decay = _number("lars_weight_decay", lars_weight_decay)
        self._epsilon = _number("epsilon", epsilon)
        self._rescale_grad = _number("rescale_grad", rescale_grad)
        self._exclude_from_weight_decay = _name_fragments(exclude_from_weight_decay)
        self._multi_precision = bool(multi_precision)

    def _create_accumulators(self, block, params):
        for p in params:
            if self._multi_precision and str(p.dtype) in ("float16", "bfloat16"):
                raise Unimplemented(f"LarsMomentumOptimizer: multi_precision master weights for the {p.dtype} "
                                    f"parameter {p.name!r} are not supported")
            self._add_accumulator("velocity", p)

    def _weight_decay(self, p) -> float:
        if any(fragment in p.name for fragment in self._exclude_from_weight_decay):
            return 0.0
        return self._lars_weight_decay

    def _append_optimize_op(self, block, pg):
        p, g = pg
        v = self._get_accumulator("velocity", p)
        return block.append_op(
            type="lars_momentum",
            inputs={"Param": [p], "Grad": [g], "Velocity": [v], "LearningRate": [self._create_param_lr(pg)]},
            outputs={"ParamOut": [p], "VelocityOut": [v]},
            attrs={"mu": self._momentum, "lars_coeff": self._lars_coeff,
                   "lars_weight_decay": [float(np.float32(self._weight_decay(p)))], "multi_precision": False,
                   "epsilon": self._epsilon, "rescale_grad": self._rescale_grad})
