"""Optimizer base: ``minimize`` = backward + one update op per parameter.

Mirrors ``paddle.optimizer.Optimizer`` in static mode: ``minimize(loss)``
calls ``append_backward``; ``apply_gradients`` sorts ``(param, grad)`` pairs
by parameter name, clips them with ``grad_clip`` (``refimpl/nn/clip.py``),
adds weight decay (a parameter's own ``ParamAttr(regularizer=...)`` first,
else the optimizer's ``weight_decay``: the regularizer's term, then ``sum`` of
``[grad, term]`` into ``grad``, in the ``regularization`` name scope), then
creates the global learning-rate variable ``learning_rate_k`` (a
``fill_constant`` in the startup program, or a value the executor writes
before each run when an ``LRScheduler`` drives it), creates accumulators
named ``{param}_{acc}_k`` initialised in the startup program, and appends
each update op under role Optimize with ``op_role_var = [param, grad]``.
Master weights for ``multi_precision`` (a float32 copy of a float16 / bfloat16
parameter, cast from it in the startup program) and the auxiliary vars the AMP
decorators hand over (``found_inf``) are kept here, as in Paddle's base class.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Set, TYPE_CHECKING, Tuple, Union

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.framework import unique_name
from refimpl.framework.program import default_main_program, default_startup_program, device_guard, program_guard
from refimpl.framework.variable import Variable
from refimpl.nn.initializer import Constant
from refimpl.regularizer import L2Decay, WeightDecayRegularizer
from refimpl.static.backward import append_backward
from refimpl.static.input import create_global_var
from refimpl.static.layer_helper import LayerHelper

from .lr_scheduler import LRScheduler

if TYPE_CHECKING:
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Parameter

__all__ = ["Optimizer"]


def _check_grad_clip(cls: str, grad_clip: Any) -> Any:
    from refimpl.nn.clip import ClipGradBase
    if grad_clip is not None and not isinstance(grad_clip, ClipGradBase):
        raise InvalidArgument(f"{cls}: grad_clip must be a ClipGradByValue, ClipGradByNorm or "
                              f"ClipGradByGlobalNorm, got {type(grad_clip).__name__}")
    return grad_clip


def _to_regularizer(cls: str, weight_decay: Any) -> Optional[WeightDecayRegularizer]:
    """Paddle's rule: a float (or int) means ``L2Decay(weight_decay)``; None means no decay."""
    if weight_decay is None or isinstance(weight_decay, WeightDecayRegularizer):
        return weight_decay
    if isinstance(weight_decay, (int, float)) and not isinstance(weight_decay, bool):
        return L2Decay(float(weight_decay))
    raise InvalidArgument(f"{cls}: weight_decay must be a float, L1Decay or L2Decay, "
                          f"got {type(weight_decay).__name__}")


class Optimizer:
    type: Optional[str] = None

    def __init__(self, learning_rate: Union[float, LRScheduler, Variable] = 0.001,
                 parameters: Optional[Sequence[Union[Parameter, str]]] = None, weight_decay: Any = None,
                 grad_clip: Any = None, name: Optional[str] = None) -> None:
        if not isinstance(learning_rate, (int, float, LRScheduler, Variable)) or isinstance(learning_rate, bool):
            raise InvalidArgument(f"{type(self).__name__}: learning_rate must be a float, an LRScheduler "
                                  f"or a Variable, got {type(learning_rate).__name__}")
        if isinstance(learning_rate, (int, float)) and learning_rate < 0:
            raise InvalidArgument(f"{type(self).__name__}: learning_rate must be >= 0, got {learning_rate}")
        self._learning_rate = learning_rate
        self._parameter_list = parameters
        self._grad_clip = _check_grad_clip(type(self).__name__, grad_clip)
        self.regularization = _to_regularizer(type(self).__name__, weight_decay)
        self._learning_rate_map = {}
        self._accumulators = {}
        self._auxiliary_vars = {}
        self._multi_precision = False  # float32 master weights for float16 / bfloat16 parameters
        self._master_weights = {}
        self.helper = None
        # Paddle's: {param name: op_device of the first op reading it}, filled before the update ops are
        # added (they and the accumulators' initialisers go on that device); the legacy pipeline reads it
        self._param_device_map = {}

    # ---- learning rate ----------------------------------------------------
    def _global_learning_rate(self, program=None):
        return self._learning_rate_map.get(program or default_main_program())

    def _create_global_learning_rate(self):
        main = default_main_program()
        if self._global_learning_rate() is not None:
            return
        lr = self._learning_rate
        if isinstance(lr, Variable):
            self._learning_rate_map[main] = lr
        elif isinstance(lr, LRScheduler):
            name = unique_name.generate("learning_rate")
            var = self.helper.create_global_variable(name=name, persistable=True, stop_gradient=True,
                                                     shape=[], dtype="float32")
            self.helper.set_variable_initializer(var, Constant(float(lr())))
            main.lr_scheduler, main.lr_var = lr, var
            self._learning_rate_map[main] = var
        else:
            self._learning_rate_map[main] = create_global_var(
                [], float(lr), "float32", persistable=True, name=unique_name.generate("learning_rate"))

    def get_lr(self) -> Optional[float]:
        lr = self._learning_rate
        return float(lr()) if isinstance(lr, LRScheduler) else float(lr) if not isinstance(lr, Variable) else None

    def _create_param_lr(self, param_and_grad):
        return self._global_learning_rate()

    # ---- auxiliary vars (Paddle's: e.g. AMP's ``found_inf``, read by Adam as ``SkipUpdate``) ----------
    def _set_auxiliary_var(self, key: str, val: Any) -> None:
        self._auxiliary_vars[key] = val

    def _get_auxiliary_var(self, key: str) -> Any:
        return self._auxiliary_vars.get(key)

    # ---- master weights (multi_precision) -----------------------------------------------
    @staticmethod
    def _is_dtype_fp16_or_bf16(dtype: Any) -> bool:
        return dtype in ("float16", "bfloat16")

    def _find_master(self, param: Parameter) -> bool:
        return self._multi_precision and self._is_dtype_fp16_or_bf16(param.dtype)

    def _create_master_weight(self, param: Parameter) -> Variable:
        """``{param}_fp32_master_k``: a float32 persistable copy, cast from the parameter in the startup program."""
        if param.name in self._master_weights:
            return self._master_weights[param.name]
        var = create_global_var(name=unique_name.generate(param.name + "_fp32_master"), shape=list(param.shape or ()),
                                value=0, dtype="float32", persistable=True)
        default_startup_program().global_block().append_op(
            type="cast", inputs={"X": [param.name]}, outputs={"Out": [var.name]},
            attrs={"in_dtype": to_vartype(param.dtype), "out_dtype": to_vartype("float32")})
        self._master_weights[param.name] = var
        return var

    def _get_accumulator_master(self, name: str, param: Parameter) -> Variable:
        """The accumulator ``name`` of the parameter, or of its master weight when it has one."""
        target = self._master_weights[param.name] if self._find_master(param) else param
        return self._accumulators[(name, target.name)]

    # ---- accumulators -----------------------------------------------------
    def _add_accumulator(self, name, param, fill_value=0.0, shape=None, dtype=None, device=None):
        key = (name, param.name)
        if key in self._accumulators:
            return self._accumulators[key]
        var = self.helper.create_global_variable(
            name=unique_name.generate(f"{param.name}_{name}"), persistable=True,
            dtype=dtype or param.dtype, shape=list(param.shape) if shape is None else shape)
        with device_guard(device if device is not None else self._get_device_for_param(param.name)):
            self.helper.set_variable_initializer(var, Constant(float(fill_value)))
        self._accumulators[key] = var
        return var

    def _get_accumulator(self, name, param):
        return self._accumulators[(name, param.name)]

    def _create_accumulators(self, block, params):
        pass

    # ---- devices (Paddle's _update_param_device_map / _get_device_for_param) --------------
    def _update_param_device_map(self, params_grads: Any, target_block: Any) -> None:
        wanted = {p.name for p, _ in params_grads if p.stop_gradient is False}
        for op in target_block.ops:  # the first op reading each parameter names its device
            for name in wanted.intersection(op.input_arg_names):
                self._param_device_map[name] = op.attr("op_device") if op.has_attr("op_device") else ""
                wanted.discard(name)
            if not wanted:
                break

    def _get_device_for_param(self, param_name: str) -> Optional[str]:
        return self._param_device_map.get(param_name)

    def _append_optimize_op(self, block, param_and_grad):
        raise NotImplementedError

    # ---- the pass ---------------------------------------------------------
    def backward(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameters: Optional[Sequence[Union[Parameter, str]]] = None,
                 no_grad_set: Optional[Set[Any]] = None,
                 callbacks: Optional[Sequence[Callable[..., Any]]] = None) -> List[Tuple[Parameter, Variable]]:
        params = parameters if parameters is not None else self._parameter_list
        with program_guard(loss.block.program, startup_program or default_startup_program()):
            return append_backward(loss, params, no_grad_set)

    def apply_gradients(self, params_grads: Sequence[Tuple[Parameter, Variable]]) -> List[Operator]:
        params_grads = sorted(params_grads, key=lambda pg: pg[0].name)
        if self._grad_clip is not None:
            params_grads = self._grad_clip(params_grads)
        params_grads = self.append_regularization_ops(params_grads, self.regularization)
        return self._create_optimization_pass(params_grads)

    # ---- weight decay -----------------------------------------------------
    def _create_regularization_of_grad(self, param, grad, regularization=None):
        """``grad += term`` where term comes from the parameter's regularizer, else ``regularization``."""
        reg = getattr(param, "regularizer", None)
        if reg is not None and not isinstance(reg, WeightDecayRegularizer):
            raise InvalidArgument(f"{type(self).__name__}: the regularizer of parameter {param.name!r} must be "
                                  f"an L1Decay or L2Decay, got {type(reg).__name__}")
        reg = reg or regularization
        if grad is None or reg is None:
            return grad
        term = reg(param, grad, grad.block)
        grad.block.append_op(type="sum", inputs={"X": [grad, term]}, outputs={"Out": [grad]})
        return grad

    def append_regularization_ops(self, parameters_and_grads: Sequence[Tuple[Parameter, Variable]],
                                  regularization: Optional[WeightDecayRegularizer] = None
                                  ) -> List[Tuple[Parameter, Variable]]:
        """Add each parameter's weight-decay term to its gradient (ops in the ``regularization`` scope)."""
        out = []
        program = default_main_program()
        with program._name_scope("regularization"):
            for p, g in parameters_and_grads:
                with p.block.program._optimized_guard([p, g]):
                    out.append((p, self._create_regularization_of_grad(p, g, regularization)))
        return out

    def _create_optimization_pass(self, params_grads):
        program = default_main_program()
        block = program.global_block()
        start = len(block.ops)
        target = program.current_block()
        self.helper = LayerHelper(type(self).__name__)
        self._create_global_learning_rate()
        self._update_param_device_map(params_grads, target)
        self._create_accumulators(target, [p for p, _ in params_grads if not p.stop_gradient])
        for p, g in params_grads:
            if g is None or p.stop_gradient:
                continue
            with program._optimized_guard([p, g]), program._name_scope("optimizer"), \
                    device_guard(self._get_device_for_param(p.name)):
                self._append_optimize_op(target, (p, g))
        return block.ops[start:] if target is block else target.ops

    def apply_optimize(self, loss: Variable, startup_program: Optional[Program],
                       params_grads: Sequence[Tuple[Parameter, Variable]]) -> List[Operator]:
        with program_guard(loss.block.program, startup_program or default_startup_program()):
            return self.apply_gradients(params_grads)

    _apply_optimize = apply_optimize

    @paused_cyclic_gc
    def minimize(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameters: Optional[Sequence[Union[Parameter, str]]] = None,
                 no_grad_set: Optional[Set[Any]] = None
                 ) -> Tuple[List[Operator], List[Tuple[Parameter, Variable]]]:
        """Append backward and update ops for ``loss``; return (optimize_ops, params_grads)."""
        if not isinstance(loss, Variable):
            raise InvalidArgument(f"minimize: loss must be a static Variable, got {type(loss).__name__}")
        params_grads = self.backward(loss, startup_program, parameters, no_grad_set)
        optimize_ops = self.apply_optimize(loss, startup_program, params_grads)
        return optimize_ops, params_grads
