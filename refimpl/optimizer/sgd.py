"""SGD, Momentum, Adam and AdamW: the ops each optimizer appends per parameter.

Mirrors ``paddle.optimizer.{SGD, Momentum, Adam, AdamW}`` in static mode:
the same update ops (``sgd``, ``momentum``, ``adam``, ``adamw``), slot
wiring, attrs and accumulator names (``_velocity_0``, ``_moment1_0``,
``_moment2_0``, ``_beta1_pow_acc_0``, ``_beta2_pow_acc_0``). As in Paddle,
Momentum fuses an L2 decay (a float ``weight_decay``, ``L2Decay``, or a
parameter's ``L2Decay``) into the ``momentum`` op's ``regularization_method``
/ ``regularization_coeff`` attrs instead of appending ``scale`` + ``sum``;
AdamW's decay is the ``adamw`` op's own ``coeff`` (decoupled). With
``multi_precision`` a float16 / bfloat16 parameter gets a float32 master weight
(``{param}_fp32_master_k``, see ``Optimizer._create_master_weight``): the
accumulators belong to it and the update op reads and writes it as
``MasterParam`` / ``MasterParamOut``; Adam's moments of such a parameter are
float32 either way. Adam / AdamW read an AMP decorator's ``found_inf``
auxiliary var as ``SkipUpdate``.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, TYPE_CHECKING, Union

from refimpl.core.errors import InvalidArgument
from refimpl.regularizer import L2Decay

from .optimizer import Optimizer

if TYPE_CHECKING:
    from refimpl.framework.variable import Parameter, Variable
    from .lr import LRScheduler

__all__ = ["SGD", "Momentum", "Adam", "AdamW"]


class SGD(Optimizer):
    type = "sgd"

    def __init__(self, learning_rate: Union[float, LRScheduler, Variable] = 0.001,
                 parameters: Optional[Sequence[Union[Parameter, str]]] = None, weight_decay: Any = None,
                 grad_clip: Any = None, multi_precision: bool = False, name: Optional[str] = None) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        self._multi_precision = bool(multi_precision)

    def _create_accumulators(self, block, params):
        for p in params:
            if self._find_master(p):
                self._create_master_weight(p)

    def _append_optimize_op(self, block, pg):
        p, g = pg
        inputs, outputs = _with_master(self, p, {"Param": p, "Grad": g, "LearningRate": self._create_param_lr(pg)},
                                       {"ParamOut": p})
        return block.append_op(type="sgd", inputs=inputs, outputs=outputs,
                               attrs={"multi_precision": self._find_master(p)})


def _with_master(opt: Any, p: Any, inputs: dict, outputs: dict) -> tuple:
    """The update op's slots plus ``MasterParam`` / ``MasterParamOut`` when ``p`` has a master weight."""
    if opt._find_master(p):
        master = opt._master_weights[p.name]
        inputs, outputs = dict(inputs, MasterParam=master), dict(outputs, MasterParamOut=master)
    return inputs, outputs


def _l2_coeff(decay: Any) -> tuple:
    """(``regularization_method``, ``regularization_coeff``) of a fused L2 decay."""
    return "l2_decay", float(decay._coeff if isinstance(decay, L2Decay) else decay)


class Momentum(Optimizer):
    type = "momentum"

    def __init__(self, learning_rate: Union[float, LRScheduler, Variable] = 0.001, momentum: float = 0.9,
                 parameters: Optional[Sequence[Union[Parameter, str]]] = None, use_nesterov: bool = False,
                 weight_decay: Any = None, grad_clip: Any = None, multi_precision: bool = False,
                 rescale_grad: float = 1.0, name: Optional[str] = None) -> None:
        if isinstance(weight_decay, int) and not isinstance(weight_decay, bool):
            weight_decay = float(weight_decay)
        fused = isinstance(weight_decay, (L2Decay, float))
        super().__init__(learning_rate, parameters, None if fused else weight_decay, grad_clip, name)
        self._momentum, self._use_nesterov, self._rescale_grad = float(momentum), bool(use_nesterov), rescale_grad
        self._regularization = _l2_coeff(weight_decay) if fused else ("", 0.0)
        self._multi_precision = bool(multi_precision)

    def _create_regularization_of_grad(self, param, grad, regularization=None):
        if isinstance(getattr(param, "regularizer", None), L2Decay):
            return grad  # fused into the momentum op below
        return super()._create_regularization_of_grad(param, grad, regularization)

    def _param_regularization(self, p):
        reg = getattr(p, "regularizer", None)
        if isinstance(reg, L2Decay):
            return _l2_coeff(reg)
        return ("", 0.0) if reg is not None else self._regularization

    def _create_accumulators(self, block, params):
        for p in params:
            self._add_accumulator("velocity", self._create_master_weight(p) if self._find_master(p) else p)

    def _append_optimize_op(self, block, pg):
        p, g = pg
        v = self._get_accumulator_master("velocity", p)
        method, coeff = self._param_regularization(p)
        inputs, outputs = _with_master(
            self, p, {"Param": p, "Grad": g, "Velocity": v, "LearningRate": self._create_param_lr(pg)},
            {"ParamOut": p, "VelocityOut": v})
        return block.append_op(
            type="momentum", inputs=inputs, outputs=outputs,
            attrs={"mu": self._momentum, "use_nesterov": self._use_nesterov,
                   "regularization_method": method, "regularization_coeff": coeff,
                   "multi_precision": self._find_master(p), "rescale_grad": float(self._rescale_grad)})


class Adam(Optimizer):
    type = "adam"

    def __init__(self, learning_rate: Union[float, LRScheduler, Variable] = 0.001, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-08,
                 parameters: Optional[Sequence[Union[Parameter, str]]] = None, weight_decay: Any = None,
                 grad_clip: Any = None, lazy_mode: bool = False, multi_precision: bool = False,
                 amsgrad: bool = False, name: Optional[str] = None) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        for k, v in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= v < 1:
                raise InvalidArgument(f"{type(self).__name__}: {k} must be in [0, 1), got {v}")
        if epsilon < 0:
            raise InvalidArgument(f"{type(self).__name__}: epsilon must be >= 0, got {epsilon}")
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)
        self._lazy_mode, self._amsgrad = lazy_mode, amsgrad
        self._multi_precision = bool(multi_precision)

    def _create_accumulators(self, block, params):
        for p in params:
            target = self._create_master_weight(p) if self._find_master(p) else p
            dtype = "float32" if self._is_dtype_fp16_or_bf16(target.dtype) else target.dtype
            self._add_accumulator("moment1", target, dtype=dtype)
            self._add_accumulator("moment2", target, dtype=dtype)
            # the beta powers have the moments' dtype too (Paddle 3.3.1 ``Adam._add_moments_pows``)
            self._add_accumulator("beta1_pow_acc", target, fill_value=self._beta1, shape=[1], dtype=dtype,
                                  device="cpu")
            self._add_accumulator("beta2_pow_acc", target, fill_value=self._beta2, shape=[1], dtype=dtype,
                                  device="cpu")

    def _attrs(self, p):
        return {"lazy_mode": self._lazy_mode, "min_row_size_to_use_multithread": 1000,
                "multi_precision": self._find_master(p), "beta1": self._beta1, "beta2": self._beta2,
                "epsilon": self._epsilon, "amsgrad": self._amsgrad}

    def _append_optimize_op(self, block, pg):
        p, g = pg
        acc = {k: self._get_accumulator_master(k, p)
               for k in ("moment1", "moment2", "beta1_pow_acc", "beta2_pow_acc")}
        inputs = {"Param": p, "Grad": g, "LearningRate": self._create_param_lr(pg),
                  "Moment1": acc["moment1"], "Moment2": acc["moment2"],
                  "Beta1Pow": acc["beta1_pow_acc"], "Beta2Pow": acc["beta2_pow_acc"]}
        found_inf = self._get_auxiliary_var("found_inf")  # AMP's overflow flag: skip this step's update
        if found_inf is not None:
            inputs["SkipUpdate"] = found_inf
        inputs, outputs = _with_master(
            self, p, inputs, {"ParamOut": p, "Moment1Out": acc["moment1"], "Moment2Out": acc["moment2"],
                              "Beta1PowOut": acc["beta1_pow_acc"], "Beta2PowOut": acc["beta2_pow_acc"]})
        return block.append_op(type=self.type, inputs=inputs, outputs=outputs, attrs=self._attrs(p))


class AdamW(Adam):
    type = "adamw"

    def __init__(self, learning_rate: Union[float, LRScheduler, Variable] = 0.001, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-08,
                 parameters: Optional[Sequence[Union[Parameter, str]]] = None, weight_decay: float = 0.01,
                 lr_ratio: Optional[Callable[[Parameter], float]] = None,
                 apply_decay_param_fun: Optional[Callable[[str], bool]] = None, grad_clip: Any = None,
                 lazy_mode: bool = False, multi_precision: bool = False, amsgrad: bool = False,
                 name: Optional[str] = None) -> None:
        super().__init__(learning_rate, beta1, beta2, epsilon, parameters, None, grad_clip,
                         lazy_mode, multi_precision, amsgrad, name)
        if not isinstance(weight_decay, (int, float)):
            raise InvalidArgument(f"AdamW: weight_decay must be a float, got {type(weight_decay).__name__}")
        self._coeff, self._lr_ratio, self._apply_decay = float(weight_decay), lr_ratio, apply_decay_param_fun

    def _attrs(self, p):
        a = super()._attrs(p)
        a.update({"coeff": self._coeff, "with_decay": self._apply_decay is None or bool(self._apply_decay(p.name)),
                  "lr_ratio": 1.0 if self._lr_ratio is None else float(self._lr_ratio(p))})
        return a
