"""FP16AllReduceOptimizer: gradients travel as float16 and are cast back before the update.

Mirrors ``paddle/distributed/fleet/meta_optimizers/fp16_allreduce_optimizer.py``
of Paddle 3.3.1. ``apply_optimize`` rewrites the (param, grad) list before
the inner optimizer sees it: for every float32 gradient whose producing op
names the pair in its ``op_role_var``,

1. the pair leaves that op's ``op_role_var`` (the attr is dropped when
   nothing is left), and a Backward-role ``cast`` to float16 writes
   ``<grad>.cast_fp16_N`` and takes the pair ``[param, <grad>.cast_fp16_N]``
   over — so a data-parallel pass that all-reduces the gradients named by
   ``op_role_var`` (refimpl's ``distributed/passes/data_parallel.py``, as
   Paddle's graph passes) sums the float16 copy;
2. after all of those, an Optimize-role ``cast`` back to float32
   (``<grad>.cast_fp16_N.cast_fp32_M``, name scope ``fp16_allreduce``) is
   the gradient the update reads.

Gradients that are not float32 (a float16 network) are left alone. As in
Paddle, the meta-optimizer inserts no collective of its own: through fleet
in the default raw-program mode nothing all-reduces the float16 copies
(Paddle 3.3.1 chains no ``RawProgramOptimizer`` under it either).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, TYPE_CHECKING

from refimpl.core.dtypes import to_vartype
from refimpl.framework import unique_name
from refimpl.framework.op_role import OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole
from refimpl.framework.program import name_scope

from .meta_optimizer_base import MetaOptimizerBase

if TYPE_CHECKING:
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Variable
    from refimpl.optimizer import Optimizer

ParamGrad = Tuple[Any, Any]


class FP16AllReduceOptimizer(MetaOptimizerBase):
    """Cast the gradients to float16 for their allreduce (``DistributedStrategy.fp16_allreduce``)."""

    def __init__(self, optimizer: Optimizer) -> None:
        super().__init__(optimizer)
        # as in Paddle, no meta-optimizer may sit inside this one yet
        self.meta_optimizers_white_list = ["LarsOptimizer", "LambOptimizer", "RecomputeOptimizer",
                                           "LocalSGDOptimizer", "GradientMergeOptimizer",
                                           "AdaptiveLocalSGDOptimizer"]
        self.meta_optimizers_black_list = ["DGCOptimizer"]

    def _can_apply(self) -> bool:
        if not self.role_maker._is_collective:
            return False
        return bool(self.user_defined_strategy.fp16_allreduce)

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.fp16_allreduce = False

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.fp16_allreduce = True

    @staticmethod
    def fp16_compression(param_and_grads: Sequence[ParamGrad]) -> List[ParamGrad]:
        """The (param, grad) list with float32 gradients sent through float16 (see the module docstring)."""
        casted = [_cast_to_fp16(param, grad) for param, grad in param_and_grads]
        # the casts back come after every cast down (Paddle keeps two loops: fusing the allreduces
        # across interleaved casts went wrong there)
        return [(param, _cast_to_fp32(param, grad) if was_cast else grad) for param, grad, was_cast in casted]

    def apply_optimize(self, loss: Variable, startup_program: Optional[Program],
                       params_grads: Sequence[ParamGrad]) -> List[Operator]:
        new_params_grads = self.fp16_compression(params_grads)
        return self.inner_opt._apply_optimize(loss, startup_program=startup_program, params_grads=new_params_grads)


def _cast_to_fp16(param: Any, grad: Any) -> Tuple[Any, Any, bool]:
    if grad is None or grad.dtype != "float32" or grad.op is None:
        return param, grad, False
    op = grad.op
    role_var = list(op.all_attrs().get(OP_ROLE_VAR_ATTR) or [])
    if param.name not in role_var:
        return param, grad, False
    role_var.remove(param.name)
    role_var.remove(grad.name)
    if len(role_var) > 1:
        op._set_attr(OP_ROLE_VAR_ATTR, role_var)
    else:
        op._remove_attr(OP_ROLE_VAR_ATTR)
    block = grad.block
    new_grad = block.create_var(name=unique_name.generate(grad.name + ".cast_fp16"), dtype="float16",
                                persistable=False, stop_gradient=True)
    with block.program._backward_role_guard():
        cast_op = block.append_op(type="cast", inputs={"X": grad}, outputs={"Out": new_grad},
                                  attrs={"in_dtype": to_vartype("float32"), "out_dtype": to_vartype("float16")})
    cast_op._set_attr(OP_ROLE_ATTR, OpRole.Backward)
    cast_op._set_attr(OP_ROLE_VAR_ATTR, [param.name, new_grad.name])
    new_grad.op = cast_op
    return param, new_grad, True


def _cast_to_fp32(param: Any, grad: Any) -> Any:
    block = grad.block
    new_grad = block.create_var(name=unique_name.generate(grad.name + ".cast_fp32"), dtype="float32",
                                persistable=False, stop_gradient=True)
    with block.program._optimized_guard([param, grad]), name_scope("fp16_allreduce"):
        block.append_op(type="cast", inputs={"X": grad}, outputs={"Out": new_grad},
                        attrs={"in_dtype": to_vartype("float16"), "out_dtype": to_vartype("float32")})
    return new_grad


__all__ = ["FP16AllReduceOptimizer"]
