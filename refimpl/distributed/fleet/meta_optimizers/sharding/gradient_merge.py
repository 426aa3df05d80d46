"""Sharding's own gradient merge (``sharding_configs['gradient_merge_acc_step'] > 1``).

Mirrors ``create_persistable_gradients_and_insert_merge_ops``,
``_create_gm_cond``, ``_true_apply_gradient`` and ``_sharding_gradient_merge``
of ``paddle/distributed/fleet/meta_optimizers/sharding_optimizer.py`` (Paddle
3.3.1), as a mixin of refimpl's ``ShardingOptimizer``.

After each segment's reduces, every gradient this rank owns is added into a
persistable ``<grad>@GradientMerge`` (zeroed in startup). The optimize ops are
then moved out of block 0 into a ``conditional_block`` run every
``acc_step``-th step (``gradient_merge_current_step`` incremented, modulo
``gradient_merge_acc_step``, equal to ``gradient_merge_zero``), which
allreduces the merged gradients on the dp ring (hybrid dp), scales them by
1/acc_step, runs the moved ops on them and zeroes them again.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import PreconditionNotMet
from refimpl.core.reduce_op import ReduceOp
from refimpl.framework.op_role import OpRole
from refimpl.framework.operator import Operator
from refimpl.framework.program import device_guard, program_guard
from refimpl.static.input import create_global_var

from .utils import OP_ROLE_KEY, get_grad_device, rename_input


class GradientMergeMixin:
    """Sharding's gradient merge (see the module docstring)."""

    # The state of ShardingOptimizer this mixin reads and writes (set in its __init__ and minimize).
    _main_program: Any
    _startup_program: Any
    _grad2merged_grad: Dict[str, str]
    _gradient_merge_acc_step: int
    gradient_merge_mode: str
    hybrid_dp: bool
    dp_ring_id: int

    def create_persistable_gradients_and_insert_merge_ops(self, main_block: Any, startup_block: Any,
                                                          insert_idx: int, grad_names: Sequence[str],
                                                          shard: Any) -> None:
        for grad_name in grad_names:
            if get_grad_device(grad_name, shard) != shard.worker_idx:
                raise PreconditionNotMet(f"sharding gradient merge: gradient [{grad_name}] is not this shard's")
            merged = grad_name + "@GradientMerge"
            if grad_name in self._grad2merged_grad:
                raise PreconditionNotMet(f"sharding gradient merge: grad [{grad_name}] merged twice (a shared "
                                         "weight?)")
            self._grad2merged_grad[grad_name] = merged
            grad = main_block.var(grad_name)
            main_var = main_block.create_var(name=merged, shape=grad.shape, dtype=grad.dtype, persistable=True)
            start_var = startup_block.create_var(name=merged, shape=grad.shape, dtype=grad.dtype, persistable=True)
            main_block._insert_op(insert_idx, type="elementwise_add", inputs={"X": [grad_name], "Y": [main_var]},
                                  outputs={"Out": [main_var]}, attrs={"axis": -1, OP_ROLE_KEY: OpRole.Backward})
            startup_block.append_op(type="fill_constant", outputs={"Out": [start_var]},
                                    attrs={"shape": list(grad.shape), "dtype": to_vartype(grad.dtype),
                                           "value": 0.0})

    def _create_gm_cond(self, main_block: Any) -> Any:
        with program_guard(self._main_program, self._startup_program):
            acc_step = create_global_var([1], int(self._gradient_merge_acc_step), "int32", persistable=True,
                                         force_cpu=True, name="gradient_merge_acc_step")
            zero = create_global_var([1], 0, "int32", persistable=True, force_cpu=True, name="gradient_merge_zero")
            step = create_global_var([1], 0, "int32", persistable=True, force_cpu=True,
                                     name="gradient_merge_current_step")
        cond = main_block.create_var(name="gradient_merge_cond", shape=[1], dtype="bool")
        with program_guard(self._main_program, self._startup_program), device_guard("cpu"):
            main_block.append_op(type="increment", inputs={"X": [step]}, outputs={"Out": [step]},
                                 attrs={"step": 1.0, OP_ROLE_KEY: OpRole.Optimize})
            main_block.append_op(type="elementwise_mod", inputs={"X": [step], "Y": [acc_step]},
                                 outputs={"Out": [step]}, attrs={"axis": -1, OP_ROLE_KEY: OpRole.Optimize})
            main_block.append_op(type="equal", inputs={"X": [step], "Y": [zero]}, outputs={"Out": [cond]},
                                 attrs={OP_ROLE_KEY: OpRole.Optimize})
        return cond

    def _true_apply_gradient(self, cond_block: Any, moved_ops: List[Operator]) -> None:
        main_block = self._main_program.global_block()
        if self.hybrid_dp:
            if self.dp_ring_id < 0:
                raise PreconditionNotMet("sharding gradient merge: dp_ring_id should be >= 0 in sharding x dp")
            for merged in self._grad2merged_grad.values():
                cond_block.append_op(type="all_reduce", inputs={"x": [merged]}, outputs={"out": [merged]},
                                     attrs={"ring_id": self.dp_ring_id, "reduce_type": int(ReduceOp.SUM),
                                            OP_ROLE_KEY: OpRole.Optimize})
        for merged in self._grad2merged_grad.values():
            cond_block.append_op(type="scale", inputs={"X": [merged]}, outputs={"Out": [merged]},
                                 attrs={"scale": 1.0 / float(self._gradient_merge_acc_step), "bias": 0.0,
                                        "bias_after_scale": False, OP_ROLE_KEY: OpRole.Optimize})
        moved = set()
        for old in moved_ops:
            op = cond_block._append_desc_op(old.type, {k: list(v) for k, v in old.inputs.items()},
                                            {k: list(v) for k, v in old.outputs.items()}, old.all_attrs())
            for grad, merged in self._grad2merged_grad.items():
                rename_input(op, grad, merged)
                op._rename_output(grad, merged)
            for name in op.desc.output_arg_names():  # the optimizer's temporaries move into the block
                if name in moved or name in self._grad2merged_grad.values() or not main_block.has_var(name):
                    continue
                var = main_block.var(name)
                if not var.persistable:
                    main_block._remove_var(name)
                    cond_block.create_var(name=name, shape=var.shape, dtype=var.dtype, persistable=False)
                    moved.add(name)
        for merged in self._grad2merged_grad.values():
            var = main_block.var(merged)
            cond_block.append_op(type="fill_constant", outputs={"Out": [merged]},
                                 attrs={"shape": list(var.shape), "dtype": to_vartype(var.dtype), "value": 0.0,
                                        OP_ROLE_KEY: OpRole.Optimize})

    def _sharding_gradient_merge(self) -> None:
        if not (self.gradient_merge_mode == "sharding_gm" and self._gradient_merge_acc_step > 1):
            return
        program = self._main_program
        main_block = program.global_block()
        # as Paddle: the optimize ops are copied (last first) into a scratch block 1, removed from block 0
        scratch = program._create_block()
        for idx in range(len(main_block.ops) - 1, -1, -1):
            op = main_block.ops[idx]
            if int(op.attr("op_role")) == int(OpRole.Optimize):
                scratch._append_desc_op(op.type, {k: list(v) for k, v in op.inputs.items()},
                                        {k: list(v) for k, v in op.outputs.items()}, op.all_attrs())
                main_block._remove_op(idx, sync=False)
        moved_ops = list(reversed(scratch.ops))
        program._rollback()
        cond = self._create_gm_cond(main_block)
        cond_block = program._create_block()
        self._true_apply_gradient(cond_block, moved_ops)
        program._rollback()
        step_scope = main_block.create_var(type="STEP_SCOPES")
        main_block.append_op(type="conditional_block", inputs={"Cond": [cond], "Input": []},
                             outputs={"Out": [], "Scope": [step_scope]},
                             attrs={"sub_block": cond_block, "is_scalar_condition": True})


__all__ = ["GradientMergeMixin"]
