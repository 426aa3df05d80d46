"""``DGCMomentumOptimizer`` and fleet's ``DGCOptimizer`` (Deep Gradient Compression).

Mirrors ``python/paddle/distributed/fleet/meta_optimizers/dgc_optimizer.py``
of Paddle 3.3.1. ``apply_gradients`` first adds the DGC state to the programs:
the step counter ``__g_dgc_counter__`` (filled with -1 on the CPU, an
``increment`` prepended to the main program), ``__g_nranks__`` (the number of
trainers) and ``__g_rampup_begin_step__``; per parameter a velocity
``{param}__dgc_u__0``; and, for the parameters DGC compresses (float32, at least
16384 elements), ``{param}__dgc_v__0``, ``{param}__dgc_k__``,
``{param}__dgc_encoded__``, ``{param}__dgc_gather__``, the removal of that
pair from the backward ops' ``op_role_var``, an optional ``dgc_clip_by_norm``
(``grad_clip`` must be a ``ClipGradByNorm``; its norm scaled by
``num_trainers ** -0.5``) and a ``dgc`` op (role Backward, ``op_role_var``
[param, grad]) appended after the backward. The other gradients get the
optimizer's clip and regularization as usual; then one ``momentum`` or
``dgc_momentum`` op per parameter (sorted by name), with the ``__dgc_u__``
velocity; before each ``dgc_momentum``, the sparse allreduce of that
parameter: a ``c_allgather`` of ``__dgc_encoded__`` into ``__dgc_gather__``
over ring 0 and a ``dgc_sparse_reduce`` that adds every rank's top-k into
the gradient.

Differences: Paddle asserts a CUDA build here; refimpl builds and runs these
programs on both backends. Paddle's distributed lookup table (an ``sgd`` for
the table) is not supported. The sparse allreduce is refimpl's addition
(``dgc_sparse_reduce`` is refimpl's op): Paddle 2.x's ParallelExecutor ran
that exchange as an SSA-graph op handle (``SparseAllReduceOpHandle``), and
Paddle 3.3.1's static programs have nothing in its place (from the ramp-up on
they apply the zeroed gradient), so refimpl's programs have two ops per
compressed parameter more than Paddle's. Without ``num_trainers``,
``__g_nranks__`` holds -1 and the dgc ops refuse to run (PreconditionNotMet).
"""
from __future__ import annotations

import logging
from functools import reduce
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument
from refimpl.framework.op_role import OpRole
from refimpl.framework.program import default_main_program
from refimpl.nn.clip import ClipGradByNorm
from refimpl.nn.initializer import Constant
from refimpl.optimizer import Momentum, Optimizer
from refimpl.regularizer import L1Decay, L2Decay
from refimpl.static.input import create_global_var
from refimpl.static.layer_helper import LayerHelper

from .meta_optimizer_base import WrappingMetaOptimizer

__all__ = ["DGCMomentumOptimizer", "DGCOptimizer"]

logger = logging.getLogger(__name__)

COUNTER = "__g_dgc_counter__"
NRANKS = "__g_nranks__"
RAMPUP_BEGIN_STEP = "__g_rampup_begin_step__"
K, ENCODED, GATHER = "__dgc_k__", "__dgc_encoded__", "__dgc_gather__"
MIN_NUMEL = 16384  # smaller (or non-float32) parameters keep plain momentum


def regularization_param(regularization: Any) -> Tuple[int, float]:
    """(regular_type, regular_coeff) of the dgc op: 0 none, 1 L1Decay, 2 L2Decay."""
    if regularization is None:
        return 0, 0.0
    if isinstance(regularization, L1Decay):
        return 1, float(regularization._coeff)
    if isinstance(regularization, L2Decay):
        return 2, float(regularization._coeff)
    raise InvalidArgument(f"DGCMomentumOptimizer: regularization must be None, L1Decay or L2Decay, "
                          f"got {type(regularization).__name__}")


class DGCMomentumOptimizer(Optimizer):
    type = "dgc_momentum"
    _u_velocity_acc_str = "_dgc_u_"
    _v_velocity_acc_str = "_dgc_v_"

    def __init__(self, learning_rate: Any, momentum: float, rampup_begin_step: int, rampup_step: int = 1,
                 sparsity: Sequence[float] = (0.999,), parameter_list: Optional[Sequence[Any]] = None,
                 use_nesterov: bool = False, num_trainers: Optional[int] = None, regularization: Any = None,
                 grad_clip: Any = None, name: Optional[str] = None) -> None:
        if momentum is None or learning_rate is None:
            raise InvalidArgument("DGCMomentumOptimizer: learning_rate and momentum must be given")
        if grad_clip is not None and not isinstance(grad_clip, ClipGradByNorm):
            raise InvalidArgument("DGCMomentumOptimizer: grad_clip must be a ClipGradByNorm, "
                                  f"got {type(grad_clip).__name__}")
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        if rampup_begin_step < 0:
            raise InvalidArgument(f"DGCMomentumOptimizer: rampup_begin_step must be >= 0, got {rampup_begin_step}")
        if rampup_step <= 0:
            raise InvalidArgument(f"DGCMomentumOptimizer: rampup_step must be > 0, got {rampup_step}")
        if not sparsity or any(not 0 < s <= 1 for s in sparsity):
            raise InvalidArgument(f"DGCMomentumOptimizer: sparsity must be a non-empty list of values in (0, 1], "
                                  f"got {list(sparsity)}")
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
            raise InvalidArgument(f"DGCMomentumOptimizer: momentum must be a float, got {momentum!r}")
        self._momentum, self._use_nesterov = float(momentum), bool(use_nesterov)
        self._rampup_begin_step, self._rampup_step = rampup_begin_step, rampup_step
        self._sparsity = [float(s) for s in sparsity]
        self._num_trainers = num_trainers
        self._dgc_clip_norm: Optional[float] = None
        if grad_clip is not None:
            if isinstance(num_trainers, bool) or not isinstance(num_trainers, int) or num_trainers <= 0:
                raise InvalidArgument(f"DGCMomentumOptimizer: num_trainers must be an int > 0 with grad_clip, "
                                      f"got {num_trainers!r}")
            self._dgc_clip_norm = grad_clip.clip_norm * (num_trainers ** -0.5)
        self.regular_type, self.regular_coeff = regularization_param(self.regularization)
        self._global_step_var: Any = None
        self._nranks_var: Any = None
        self._sparse_vars: dict = {}  # param name -> (k, encoded, gather)

    @staticmethod
    def _is_use_dgc(param: Any, grad: Any) -> bool:
        numel = abs(reduce(lambda x, y: x * y, param.shape, 1))
        return numel >= MIN_NUMEL and str(param.dtype) == "float32"

    # ---- the DGC state --------------------------------------------------------------------------
    def _global_counter(self, name: str, value: float) -> Any:
        """The float32 [1] persistable ``name`` (made once, filled with ``value`` on the CPU)."""
        helper = LayerHelper("global_step_counter")
        block = helper.main_program.global_block()
        if name in block.vars:
            return block.vars[name]
        var = helper.create_global_variable(name=name, dtype="float32", shape=[1], persistable=True)
        helper.set_variable_initializer(var, Constant(float(value), force_cpu=True))
        var.stop_gradient = True
        return var

    def _add_auto_increment_var(self, counter_name: str, begin: int, step: int = 1) -> Any:
        block = default_main_program().global_block()
        new = counter_name not in block.vars
        counter = self._global_counter(counter_name, begin - 1)
        if new:
            block._prepend_op(type="increment", inputs={"X": [counter]}, outputs={"Out": [counter]},
                              attrs={"step": float(step)})
        return counter

    def _append_dgc_ops(self, params_grads: Sequence[Tuple[Any, Any]]) -> None:
        main = default_main_program()
        setattr(main, "_enable_dgc", True)  # Paddle's flag for its graph passes; nothing in refimpl reads it
        self._global_step_var = self._add_auto_increment_var(COUNTER, 0)
        self._nranks_var = self._global_counter(NRANKS, -1 if self._num_trainers is None else self._num_trainers)
        create_global_var([1], self._rampup_begin_step * 1.0, "float32", persistable=True, force_cpu=True,
                          name=RAMPUP_BEGIN_STEP)
        self.helper = LayerHelper(type(self).__name__)  # type: ignore[assignment]
        for param, grad in params_grads:
            u = self._add_accumulator(self._u_velocity_acc_str, param)
            if not self._is_use_dgc(param, grad):
                continue
            v = self._add_accumulator(self._v_velocity_acc_str, param)
            k = create_global_var([1], 0.0, param.dtype, persistable=True, force_cpu=True, name=param.name + K)
            encoded = create_global_var([1], 0.0, param.dtype, persistable=True, name=param.name + ENCODED)
            gather = create_global_var([1], 0.0, param.dtype, persistable=True, name=param.name + GATHER)
            self._sparse_vars[param.name] = (k, encoded, gather)
            self._drop_role_var(main, param, grad)
            clipped = grad if self._dgc_clip_norm is None else self._append_clip_norm(grad, self._dgc_clip_norm)
            self._dgc_op(param, clipped, grad, u, v, k, encoded, gather)

    @staticmethod
    def _drop_role_var(main: Any, param: Any, grad: Any) -> None:
        """Take (param, grad) out of the backward ops' op_role_var (the dgc op carries it instead)."""
        for op in main.global_block().ops:
            if not op.has_attr("op_role_var") or int(op.attr("op_role")) != int(OpRole.Backward):
                continue
            pairs = list(op.attr("op_role_var"))
            if param.name not in pairs:
                continue
            pairs.remove(param.name)
            pairs.remove(grad.name)
            if len(pairs) > 1:
                op._set_attr("op_role_var", pairs)
            else:
                op._remove_attr("op_role_var")

    def _append_clip_norm(self, grad: Any, clip_norm: float) -> Any:
        with grad.block.program._backward_role_guard():
            grad.block.append_op(type="dgc_clip_by_norm", inputs={"X": grad, "current_step": self._global_step_var},
                                 outputs={"Out": grad},
                                 attrs={"max_norm": clip_norm, "rampup_begin_step": float(self._rampup_begin_step)})
        return grad

    def _dgc_op(self, param: Any, clipped: Any, grad: Any, u: Any, v: Any, k: Any, encoded: Any,
                gather: Any) -> None:
        regular_type, regular_coeff = self.regular_type, self.regular_coeff
        if getattr(param, "regularizer", None) is not None:
            regular_type, regular_coeff = regularization_param(param.regularizer)
        block = default_main_program().global_block()
        op = block.append_op(
            type="dgc",
            inputs={"U": u, "V": v, "Grad": clipped, "Param": param, "current_step": self._global_step_var,
                    "nranks": self._nranks_var},
            outputs={"U_out": u, "V_out": v, "EncodeGrad": encoded, "k": k, "Grad_out": grad, "GatherBuff": gather},
            attrs={"m": self._momentum, "sparsity": [float(np.float32(s)) for s in self._sparsity],
                   "use_nesterov": self._use_nesterov, "rampup_begin_step": float(self._rampup_begin_step),
                   "rampup_step": float(self._rampup_step), "regular_coeff": float(regular_coeff),
                   "regular_type": int(regular_type)})
        op._set_attr("op_role", int(OpRole.Backward))
        op._set_attr("op_role_var", [param.name, grad.name])

    # ---- the update ops --------------------------------------------------------------------------
    def _append_optimize_op(self, block, pg):
        p, g = pg
        inputs = {"Param": p, "Grad": g, "Velocity": self._get_accumulator(self._u_velocity_acc_str, p),
                  "LearningRate": self._create_param_lr(pg)}
        outputs = {"ParamOut": p, "VelocityOut": inputs["Velocity"]}
        attrs = {"mu": self._momentum, "use_nesterov": self._use_nesterov}
        if not self._is_use_dgc(p, g):
            return block.append_op(type="momentum", inputs=inputs, outputs=outputs, attrs=attrs)
        self._append_sparse_allreduce(block, p, g)
        inputs.update({"current_step": self._global_step_var, "nranks": self._nranks_var})
        outputs["Grad_out"] = g
        attrs["rampup_begin_step"] = float(self._rampup_begin_step)
        return block.append_op(type="dgc_momentum", inputs=inputs, outputs=outputs, attrs=attrs)

    def _append_sparse_allreduce(self, block: Any, p: Any, g: Any) -> None:
        """Every rank's top-k of ``p`` into its gradient: c_allgather, then dgc_sparse_reduce."""
        k, encoded, gather = self._sparse_vars[p.name]
        block.append_op(type="c_allgather", inputs={"X": encoded}, outputs={"Out": gather},
                        attrs={"ring_id": 0, "nranks": int(self._num_trainers or 0), "use_calc_stream": True})
        block.append_op(type="dgc_sparse_reduce", inputs={"GatherBuff": gather, "k": k, "Grad": g},
                        outputs={"Grad_out": g})

    def apply_gradients(self, params_grads: Sequence[Tuple[Any, Any]]) -> List[Any]:
        self._append_dgc_ops(params_grads)
        params_grads = sorted(params_grads, key=lambda pg: pg[0].name)
        plain = [(p, g) for p, g in params_grads if not self._is_use_dgc(p, g)]
        compressed = [(p, g) for p, g in params_grads if self._is_use_dgc(p, g)]
        if self._grad_clip is not None:
            plain = self._grad_clip(plain)
        plain = self.append_regularization_ops(plain, self.regularization)
        return self._create_optimization_pass(sorted(plain + compressed, key=lambda pg: pg[0].name))


class DGCOptimizer(WrappingMetaOptimizer):
    """Fleet's ``strategy.dgc``: a Momentum inner optimizer becomes a DGCMomentumOptimizer."""

    def __init__(self, optimizer: Optimizer) -> None:
        super().__init__(optimizer)
        self.dgc_opt: Optional[DGCMomentumOptimizer] = None
        self.meta_optimizers_white_list: List[str] = []
        self.meta_optimizers_black_list: List[str] = []

    def _init_dgc_opt(self) -> DGCMomentumOptimizer:
        if self.dgc_opt is None:
            opt = self.inner_opt
            if not self.role_maker._is_collective or not isinstance(opt, Momentum):
                raise InvalidArgument("DGCOptimizer: dgc needs a collective role maker and a Momentum inner "
                                      f"optimizer, got {type(opt).__name__}")
            configs = self.user_defined_strategy.dgc_configs
            sparsity = list(configs.get("sparsity") or []) or [0.999]
            self.dgc_opt = DGCMomentumOptimizer(
                learning_rate=opt._learning_rate, momentum=opt._momentum,
                rampup_begin_step=configs["rampup_begin_step"], rampup_step=configs["rampup_step"],
                sparsity=sparsity, parameter_list=opt._parameter_list, use_nesterov=opt._use_nesterov,
                num_trainers=self.role_maker._worker_num(), regularization=opt.regularization,
                grad_clip=opt._grad_clip, name=getattr(opt, "_name", None))
        return self.dgc_opt

    def _can_apply(self) -> bool:
        if not self.role_maker._is_collective or not self.user_defined_strategy.dgc:
            return False
        if not isinstance(self.inner_opt, Momentum):
            logger.warning("dgc only works on Momentum optimizer")
            return False
        if self.role_maker._worker_num() <= 1:
            logger.warning("dgc only works on multi cards")
            return False
        return True

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.dgc = False
        dist_strategy.dgc_configs = {}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.dgc = True
        dist_strategy.dgc_configs = {"rampup_begin_step": 0, "rampup_step": 1}

    def _wrapped(self) -> Any:
        return self._init_dgc_opt()
