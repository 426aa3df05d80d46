"""``paddle.static.amp.decorate``: an optimizer wrapped for float16 / bfloat16 training with loss scaling.

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/decorator.py`` (legacy IR):
``OptimizerWithMixedPrecision.backward`` creates the persistable loss-scaling
state in the startup program (``loss_scaling_k`` float32 [1]; with dynamic
scaling ``num_good_steps_k`` / ``num_bad_steps_k`` int32 [1]; and a float32 [1]
``learning_rate_k`` when the learning rate is a float), rewrites the program
with ``cast_model_to_fp16`` (O1 / OD: the lists decide; O2: everything the
lists allow, parameters included), multiplies the loss by the scale
(``elementwise_mul``, unless the scale is a fixed 1.0) and differentiates the
scaled loss. ``apply_gradients`` moves the gradient casts behind the backward
(``update_role_var_grad``), appends ``check_finite_and_unscale`` over every
gradient (``find_infinite_scale.tmp_0``; at O2 one op per dtype, and one per
gradient when distributed, their flags ORed by ``concat`` + ``reduce_any``,
as Paddle 2.6.2 builds it: 3.3.1's ``paddle.any`` takes only PIR values), then
``update_loss_scaling`` (dynamic scaling with float16 only) and, for Adam /
AdamW, a ``memcpy`` of the overflow flag to the CPU that the update ops read
as ``SkipUpdate`` (other optimizers get it as their ``found_inf`` auxiliary
var). ``amp_init`` converts the O2 parameters in
the scope to low precision.

``decorate`` has Paddle's two signatures behind one name: the float16-only one
(``use_pure_fp16``, ``use_fp16_guard``, ``use_bf16``; defaults ``2**15, 1000, 2,
2.0, 0.8``) and the common one (``level``, ``dtype``, ``master_weight``, ...;
defaults ``2**16, 2000, 1, 2.0, 0.5``). Paddle's dispatch
(``function_overload.py``): a keyword only one of them has picks it; otherwise
a float third positional argument picks the float16-only one, and anything
else the common one.

Differences: these are an ``InvalidArgument`` at decorate time (Paddle takes
them and fails, or diverges, later): a loss scale that is no positive number,
step counts that are no positive ints, an ``incr_ratio`` below 1 or a
``decr_ratio`` outside (0, 1], an ``optimizer`` that is none, ``amp_lists``
that are no ``AutoMixedPrecisionLists``. The loss-scaling settings live in
one :class:`LossScaling` record rather than one attribute each;
``master_grad=True`` and optimizers with their own overflow check
(``_supports_check_nan_inf``) are ``Unimplemented``.
"""
from __future__ import annotations

import dataclasses
import inspect
import numbers
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented
from refimpl.framework import unique_name
from refimpl.framework.program import program_guard
from refimpl.static.input import create_global_var
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.manipulation import concat

from .amp_nn import check_finite_and_unscale, update_loss_scaling
from .fp16_lists import AutoMixedPrecisionLists, check_amp_dtype, od_lists
from .fp16_utils import cast_model_to_fp16, cast_parameters_to_fp16, update_role_var_grad
from .wrapper_common import (DecoratedSteps, check_amp_lists, check_optimizer, float32_loss, innermost_optimizer,
                             learning_rate_to_var)

__all__ = ["OptimizerWithMixedPrecision", "decorate"]

_LEVELS = ("O0", "OD", "O1", "O2")
_LISTS_HINT = "paddle.static.amp.CustomOpLists(...)"


@dataclasses.dataclass(frozen=True)
class LossScaling:
    """The loss-scaling settings of one wrapper (``update_loss_scaling``'s attrs when ``dynamic``)."""
    init: float
    dynamic: bool
    incr_every_n_steps: int
    decr_every_n_nan_or_inf: int
    incr_ratio: float
    decr_ratio: float

    @property
    def active(self) -> bool:
        """Whether the loss is scaled (and the gradients unscaled): not for a fixed scale of 1.0."""
        return self.dynamic or self.init != 1.0


def _check_loss_scaling(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) > 0:
        raise InvalidArgument(f"decorate: init_loss_scaling must be a positive number, got {value!r}")
    return float(value)


def _check_scaling_steps(incr_every_n_steps: Any, decr_every_n_nan_or_inf: Any, incr_ratio: Any,
                         decr_ratio: Any) -> None:
    """Step counts are positive ints; the scale grows by ``incr_ratio`` >= 1 and shrinks by 0 < ``decr_ratio`` <= 1."""
    for name, value in (("incr_every_n_steps", incr_every_n_steps),
                        ("decr_every_n_nan_or_inf", decr_every_n_nan_or_inf)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise InvalidArgument(f"decorate: {name} must be a positive int, got {value!r}")
    for name, value, ok in (("incr_ratio", incr_ratio, lambda r: r >= 1.0),
                            ("decr_ratio", decr_ratio, lambda r: 0.0 < r <= 1.0)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not ok(float(value)):
            bound = ">= 1" if name == "incr_ratio" else "in (0, 1]"
            raise InvalidArgument(f"decorate: {name} must be a number {bound}, got {value!r}")


def _loss_scaling(dtype: str, init: Any, dynamic: bool, incr_every_n_steps: int, decr_every_n_nan_or_inf: int,
                  incr_ratio: float, decr_ratio: float) -> LossScaling:
    init = _check_loss_scaling(init)
    _check_scaling_steps(incr_every_n_steps, decr_every_n_nan_or_inf, incr_ratio, decr_ratio)
    if dtype == "bfloat16" and dynamic:  # bfloat16 has float32's range: Paddle turns scaling off
        warnings.warn("Dynamic loss scaling for bfloat16 amp training is disabled, and the init_loss_scaling "
                      "is changed to 1.0 automatically by PaddlePaddle.")
        init, dynamic = 1.0, False
    return LossScaling(init, bool(dynamic), incr_every_n_steps, decr_every_n_nan_or_inf, incr_ratio, decr_ratio)


def _set_multi_precision(optimizer: Any, multi_precision: bool) -> None:
    from refimpl.optimizer import Optimizer
    if not isinstance(optimizer, Optimizer):
        raise PreconditionNotMet(f"Current AMP training level is O2, optimizer is expected to be "
                                 f"paddle.optimizer.Optimizer, but receive {type(optimizer)}.")
    if multi_precision and hasattr(optimizer, "_multi_precision"):
        optimizer._multi_precision = multi_precision


def _memcpy_to_cpu(x: Any) -> Any:
    """Paddle's ``paddle.tensor.creation._memcpy(x, CPUPlace())``: a ``memcpy`` op to ``memcpy_k.tmp_0``."""
    helper = LayerHelper("memcpy")
    out = helper.create_variable_for_type_inference(dtype=x.dtype)
    helper.append_op(type="memcpy", inputs={"X": [x]}, outputs={"Out": [out]}, attrs={"dst_place_type": 0})
    return out


def _any(x: Any) -> Any:
    """Paddle 2.6.2's static ``paddle.any(x)`` (3.3.1's legacy IR cannot build it): a ``reduce_any`` over
    every dim into ``any_k.tmp_0``."""
    helper = LayerHelper("any")
    out = helper.create_variable_for_type_inference(dtype="bool")
    helper.append_op(type="reduce_any", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"dim": [], "keep_dim": False, "reduce_all": True})
    return out


def _persistable(prefix: str, value: Any, dtype: str) -> Any:
    return create_global_var(name=unique_name.generate(prefix), shape=[1], value=value, dtype=dtype,
                             persistable=True)


class OptimizerWithMixedPrecision(DecoratedSteps):
    """An optimizer plus AMP: casts in the program, loss scaling, overflow-skipping updates."""

    def __init__(self, optimizer: Any, amp_lists: Any, level: str, dtype: str, init_loss_scaling: float,
                 use_dynamic_loss_scaling: bool, incr_every_n_steps: int, decr_every_n_nan_or_inf: int,
                 incr_ratio: float, decr_ratio: float, use_amp_guard: Optional[bool] = None,
                 use_master_grad: bool = False, use_promote: bool = False) -> None:
        check_optimizer("decorate", optimizer)
        check_amp_lists("decorate", amp_lists, AutoMixedPrecisionLists, _LISTS_HINT)
        if use_master_grad:
            raise Unimplemented("decorate: master_grad=True (float32 master gradients) is not implemented in refimpl")
        self._optimizer = optimizer
        self._amp_lists = amp_lists
        self._amp_level = level
        self._amp_vartype = dtype
        self._use_pure_fp16 = level == "O2"  # O2 casts the parameters too
        self._use_fp16_guard = bool(use_amp_guard)
        self.use_promote = use_promote
        self._scaling = _loss_scaling(dtype, init_loss_scaling, use_dynamic_loss_scaling, incr_every_n_steps,
                                      decr_every_n_nan_or_inf, incr_ratio, decr_ratio)
        self._is_distributed = False
        # made by backward()
        self._train_program: Any = None
        self._loss_scaling: Any = None
        self._num_good_steps: Any = None
        self._num_bad_steps: Any = None
        self._scaled_loss: Any = None
        self._to_fp16_var_names: Any = None

    def _set_distributed(self, flag: bool) -> None:
        """With data parallelism, one ``check_finite_and_unscale`` per gradient (to overlap the allreduce)."""
        self._is_distributed = flag

    def get_loss_scaling(self) -> Any:
        """The loss-scaling variable (``loss_scaling_k``)."""
        if self._loss_scaling is None:
            raise PreconditionNotMet("Please call minimize() before calling get_loss_scaling().")
        return self._loss_scaling

    def get_scaled_loss(self) -> Any:
        return self._scaled_loss

    def _supports_check_nan_inf(self) -> bool:
        return getattr(self._optimizer, "_supports_check_nan_inf", False)

    def _create_state(self) -> None:
        """The persistable state, in Paddle's order: scale, step counters (dynamic only), learning rate."""
        self._loss_scaling = _persistable("loss_scaling", self._scaling.init, "float32")
        if self._scaling.dynamic:
            self._num_good_steps = _persistable("num_good_steps", 0, "int32")
            self._num_bad_steps = _persistable("num_bad_steps", 0, "int32")
        learning_rate_to_var(self._optimizer)

    def _cast_program(self, program: Any) -> Any:
        """Insert the casts of this wrapper's level; ``fp16_guard`` counts at O2 only."""
        return cast_model_to_fp16(program, self._amp_lists, self._use_pure_fp16 and self._use_fp16_guard,
                                  self._amp_vartype, level=self._amp_level, use_promote=self.use_promote)

    def backward(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None, callbacks: Any = None) -> List[Tuple[Any, Any]]:
        """Rewrite the program, scale the loss and differentiate it; returns (param, scaled grad) pairs."""
        if self._supports_check_nan_inf():
            raise Unimplemented(f"decorate: {type(self._optimizer).__name__} checks nan/inf itself "
                                f"(_supports_check_nan_inf); refimpl does not implement that path")
        program = loss.block.program
        self._train_program = program
        with program_guard(program, startup_program):
            self._create_state()
            low_names = self._cast_program(program)
            if self._use_pure_fp16:
                self._to_fp16_var_names = low_names  # the parameters amp_init converts
            loss = float32_loss(loss)
            self._scaled_loss = loss * self._loss_scaling if self._scaling.active else loss
            return self._optimizer.backward(self._scaled_loss, startup_program, parameter_list, no_grad_set,
                                            callbacks)

    def amp_init(self, place: Any, scope: Any = None, test_program: Any = None, use_fp16_test: bool = False,
                 rewrite_master_weight: bool = False) -> None:
        """After the startup program ran: O2 parameters to low precision in ``scope``; rewrite ``test_program``."""
        if self._train_program is None:
            raise PreconditionNotMet("Please call the minimize method first.")
        if self._use_pure_fp16:
            cast_parameters_to_fp16(place, self._train_program, scope, self._to_fp16_var_names, self._amp_vartype,
                                    rewrite_master_weight, getattr(self._optimizer, "_master_weights", {}))
        if test_program is not None and (self._use_pure_fp16 or use_fp16_test):
            self._cast_program(test_program)

    def apply_gradients(self, params_grads: Sequence[Tuple[Any, Any]]) -> List[Any]:
        """Unscale and check the gradients, update the scale, then the optimizer's update ops."""
        update_role_var_grad(self._train_program, params_grads)
        if self._scaling.active:
            found_inf = self._check_finite_and_unscale(params_grads)
            if self._scaling.dynamic and self._amp_vartype == "float16":
                self._add_dynamic_loss_scaling(params_grads, found_inf)
            self._hand_overflow_flag(found_inf)
        return self._optimizer.apply_gradients(params_grads)

    def _hand_overflow_flag(self, found_inf: Any) -> None:
        """The update ops skip a step that overflowed: Adam / AdamW read the flag on the CPU (a ``memcpy``)."""
        from refimpl.optimizer import Adam  # AdamW is an Adam
        target = innermost_optimizer(self._optimizer)
        if isinstance(target, Adam):
            with self._train_program._optimized_guard([]):
                found_inf = _memcpy_to_cpu(found_inf)
        if hasattr(target, "_set_auxiliary_var"):
            target._set_auxiliary_var("found_inf", found_inf)

    def _split_grads(self, params_grads: Sequence[Tuple[Any, Any]]) -> Tuple[list, list, list]:
        """(every gradient, the float32 ones, the low-precision ones)."""
        grads = [g for _, g in params_grads]
        by_dtype = {d: [g for g in grads if g.dtype == d] for d in ("float32", self._amp_vartype)}
        if sum(map(len, by_dtype.values())) != len(grads):
            raise InvalidArgument(f"Data types of all grads must be either {self._amp_vartype} or float32, got "
                                  f"{sorted({g.dtype for g in grads})}")
        return grads, by_dtype["float32"], by_dtype[self._amp_vartype]

    def _check_finite_and_unscale(self, params_grads: Sequence[Tuple[Any, Any]]) -> Any:
        """One ``check_finite_and_unscale`` per group of gradients: all of them; at O2 one per dtype;
        distributed, one per gradient. Returns the overflow flag."""
        grads, fp32_grads, low_grads = self._split_grads(params_grads)
        if self._is_distributed:
            groups = [([g], [p, g], "find_infinite_scale") for p, g in params_grads]
        elif self._use_pure_fp16:
            groups = [(gs, gs, name) for gs, name in ((fp32_grads, "find_infinite_scale_fp32"),
                                                      (low_grads, "find_infinite_scale_fp16")) if gs]
        else:
            groups = [(grads, grads, "find_infinite_scale")]
        flags = []
        for group, role_vars, name in groups:
            with self._train_program._optimized_guard(role_vars):
                flags.append(check_finite_and_unscale(group, self._loss_scaling, name=name)[1])
        if len(flags) == 1:
            return flags[0]
        with self._train_program._optimized_guard([]):  # the flags ORed: concat + any
            return _any(concat(flags))

    def _add_dynamic_loss_scaling(self, params_grads: Sequence[Tuple[Any, Any]], found_inf: Any) -> None:
        """``update_loss_scaling`` over all gradients; at O2 one per dtype, the second with ``stop_update``."""
        grads, fp32_grads, low_grads = self._split_grads(params_grads)
        cfg = self._scaling
        args = (found_inf, self._loss_scaling, self._num_good_steps, self._num_bad_steps, cfg.incr_every_n_steps,
                cfg.decr_every_n_nan_or_inf, cfg.incr_ratio, cfg.decr_ratio)
        if self._use_pure_fp16:
            parts = [(gs, name) for gs, name in ((fp32_grads, "update_loss_scaling_fp32"),
                                                 (low_grads, "update_loss_scaling_fp16")) if gs]
        else:
            parts = [(grads, "update_loss_scaling")]
        with self._train_program._optimized_guard([]):
            for i, (group, name) in enumerate(parts):  # the second (float16) one only counts no steps
                update_loss_scaling(group, *args, stop_update=i > 0, name=name)


def _decorate_fp16_only(optimizer: Any, amp_lists: Any = None, init_loss_scaling: float = 2.0 ** 15,
                        incr_every_n_steps: int = 1000, decr_every_n_nan_or_inf: int = 2, incr_ratio: float = 2.0,
                        decr_ratio: float = 0.8, use_dynamic_loss_scaling: bool = True, use_pure_fp16: bool = False,
                        use_fp16_guard: Optional[bool] = None, use_bf16: bool = False,
                        use_promote: bool = False) -> OptimizerWithMixedPrecision:
    check_optimizer("decorate", optimizer)
    dtype = "bfloat16" if use_bf16 else "float16"
    lists = AutoMixedPrecisionLists(dtype=dtype) if amp_lists is None else amp_lists
    guard = use_pure_fp16 if use_fp16_guard is None else use_fp16_guard  # the guard comes with pure fp16
    scaling: Dict[str, Any] = dict(
        init_loss_scaling=init_loss_scaling, use_dynamic_loss_scaling=use_dynamic_loss_scaling,
        incr_every_n_steps=incr_every_n_steps, decr_every_n_nan_or_inf=decr_every_n_nan_or_inf,
        incr_ratio=incr_ratio, decr_ratio=decr_ratio)
    return OptimizerWithMixedPrecision(optimizer, lists, "O2" if use_pure_fp16 else "O1", dtype,
                                       use_amp_guard=guard, use_promote=use_promote, **scaling)


def _decorate_common(optimizer: Any, amp_lists: Any = None, level: str = "O1", dtype: str = "float16",
                     master_weight: Optional[bool] = None, master_grad: bool = False,
                     init_loss_scaling: float = 2.0 ** 16, incr_every_n_steps: int = 2000,
                     decr_every_n_nan_or_inf: int = 1, incr_ratio: float = 2.0, decr_ratio: float = 0.5,
                     use_dynamic_loss_scaling: Optional[bool] = None, use_amp_guard: bool = False,
                     use_promote: bool = False) -> OptimizerWithMixedPrecision:
    check_optimizer("decorate", optimizer)
    level = level.upper() if isinstance(level, str) else level
    if level not in _LEVELS:
        raise InvalidArgument(f"decorate: level should be O0, OD, O1 or O2, got {level!r}")
    amp_dtype = check_amp_dtype(dtype)
    if amp_lists is not None:
        check_amp_lists("decorate", amp_lists, AutoMixedPrecisionLists, _LISTS_HINT)
        if level == "OD":
            warnings.warn("If the Amp level is set to OD, the amp list will not be used.")
    if level == "OD":
        lists = od_lists(amp_dtype)
    else:
        lists = AutoMixedPrecisionLists(dtype=amp_dtype) if amp_lists is None else amp_lists
    dynamic = amp_dtype == "float16" if use_dynamic_loss_scaling is None else use_dynamic_loss_scaling
    _set_multi_precision(optimizer, master_weight is not False)
    scaling: Dict[str, Any] = dict(
        init_loss_scaling=init_loss_scaling, use_dynamic_loss_scaling=dynamic,
        incr_every_n_steps=incr_every_n_steps, decr_every_n_nan_or_inf=decr_every_n_nan_or_inf,
        incr_ratio=incr_ratio, decr_ratio=decr_ratio)
    return OptimizerWithMixedPrecision(optimizer, lists, level, amp_dtype, use_amp_guard=use_amp_guard,
                                       use_promote=use_promote, use_master_grad=master_grad, **scaling)


_FP16_ONLY_ARGS = _decorate_fp16_only.__code__.co_varnames[:_decorate_fp16_only.__code__.co_argcount]
_COMMON_ARGS = _decorate_common.__code__.co_varnames[:_decorate_common.__code__.co_argcount]


def decorate(*args: Any, **kwargs: Any) -> OptimizerWithMixedPrecision:
    """Wrap an optimizer for mixed-precision training (see the module docstring for the two signatures)."""
    candidates = [fn for fn, names in ((_decorate_fp16_only, _FP16_ONLY_ARGS), (_decorate_common, _COMMON_ARGS))
                  if all(k in names for k in kwargs)]
    if len(candidates) == 1:
        fn = candidates[0]
    elif len(args) >= 3 and isinstance(args[2], float):
        fn = _decorate_fp16_only
    else:
        fn = _decorate_common
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidArgument(f"decorate: {exc}") from None
    return fn(*args, **kwargs)
