"""``paddle.optimizer.Lamb``: one ``lamb`` op per parameter.

Mirrors ``python/paddle/optimizer/lamb.py`` of Paddle 3.3.1 in static mode:
accumulators ``{param}_moment1_0``, ``_moment2_0``, ``_beta1_pow_acc_0``,
``_beta2_pow_acc_0`` (the pows filled with beta1 / beta2, shape [1], on the
CPU), the ``lamb`` op's attrs ``beta1``, ``beta2``, ``epsilon``,
``weight_decay`` (``lamb_weight_decay``, or 0 where
``exclude_from_weight_decay_fn(param)`` is true), ``always_adapt``,
``multi_precision``, and a ``SkipUpdate`` input when an AMP decorator has set
the ``found_inf`` auxiliary var. Lamb takes no ``weight_decay`` regularizer
(Paddle passes None). Differences: betas and epsilon must be floats (Paddle
also takes Tensors), and float16 master weights (``multi_precision`` with a
float16 parameter) are not supported.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, TYPE_CHECKING, Union

from refimpl.core.errors import InvalidArgument, Unimplemented

from .optimizer import Optimizer

if TYPE_CHECKING:
    from refimpl.framework.variable import Parameter, Variable
    from .lr import LRScheduler

__all__ = ["Lamb"]


def _check_float(name: str, value: Any, low: float, high: Optional[float]) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"Lamb: {name} must be a float, got {type(value).__name__}")
    if value < low or (high is not None and value >= high):
        bound = f"[{low}, {high})" if high is not None else f">= {low}"
        raise InvalidArgument(f"Lamb: {name} must be in {bound}, got {value}")
    return float(value)


class Lamb(Optimizer):
    type = "lamb"

    def __init__(self, learning_rate: Union[float, LRScheduler, Variable] = 0.001, lamb_weight_decay: float = 0.01,
                 beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-6,
                 parameters: Optional[Sequence[Union[Parameter, str]]] = None, grad_clip: Any = None,
                 exclude_from_weight_decay_fn: Optional[Callable[[Parameter], bool]] = None,
                 multi_precision: bool = False, always_adapt: bool = False, name: Optional[str] = None) -> None:
        super().__init__(learning_rate, parameters, None, grad_clip, name)
        self._beta1 = _check_float("beta1", beta1, 0.0, 1.0)
        self._beta2 = _check_float("beta2", beta2, 0.0, 1.0)
        self._epsilon = _check_float("epsilon", epsilon, 0.0, None)
        self._lamb_weight_decay = _check_float("lamb_weight_decay", lamb_weight_decay, 0.0, None)
        if exclude_from_weight_decay_fn is not None and not callable(exclude_from_weight_decay_fn):
            raise InvalidArgument(f"Lamb: exclude_from_weight_decay_fn must be callable, "
                                  f"got {type(exclude_from_weight_decay_fn).__name__}")
        self._exclude_from_weight_decay_fn = exclude_from_weight_decay_fn
        self._multi_precision = bool(multi_precision)
        self.always_adapt = bool(always_adapt)
        self._auxiliary_vars: dict = {}

    # the AMP decorators hand their found_inf var over this way (Paddle's Optimizer API)
    def _set_auxiliary_var(self, key: str, val: Any) -> None:
        self._auxiliary_vars[key] = val

    def _get_auxiliary_var(self, key: str) -> Any:
        return self._auxiliary_vars.get(key)

    def _create_accumulators(self, block, params):
        for p in params:
            if self._multi_precision and str(p.dtype) in ("float16", "bfloat16"):
                raise Unimplemented(f"Lamb: multi_precision master weights for the {p.dtype} parameter "
                                    f"{p.name!r} are not supported")
            self._add_accumulator("moment1", p)
            self._add_accumulator("moment2", p)
            self._add_accumulator("beta1_pow_acc", p, fill_value=self._beta1, shape=[1], dtype=p.dtype,
                                  device="cpu")
            self._add_accumulator("beta2_pow_acc", p, fill_value=self._beta2, shape=[1], dtype=p.dtype,
                                  device="cpu")

    def _weight_decay(self, p: Any) -> float:
        fn = self._exclude_from_weight_decay_fn
        return 0.0 if fn is not None and fn(p) else self._lamb_weight_decay

    def _append_optimize_op(self, block, pg):
        p, g = pg
        acc = {k: self._get_accumulator(k, p) for k in ("moment1", "moment2", "beta1_pow_acc", "beta2_pow_acc")}
        inputs = {"Param": p, "Grad": g, "LearningRate": self._create_param_lr(pg),
                  "Moment1": acc["moment1"], "Moment2": acc["moment2"],
                  "Beta1Pow": acc["beta1_pow_acc"], "Beta2Pow": acc["beta2_pow_acc"]}
        found_inf = self._get_auxiliary_var("found_inf")
        if found_inf is not None:
            inputs["SkipUpdate"] = found_inf
        return block.append_op(
            type="lamb", inputs=inputs,
            outputs={"ParamOut": p, "Moment1Out": acc["moment1"], "Moment2Out": acc["moment2"],
                     "Beta1PowOut": acc["beta1_pow_acc"], "Beta2PowOut": acc["beta2_pow_acc"]},
            attrs={"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                   "weight_decay": self._weight_decay(p), "always_adapt": self.always_adapt,
                   "multi_precision": False})
