"""Splitting a device-annotated program into per-stage section programs, and its startup program.

Mirrors ``_split_program``, ``_create_vars``, ``_insert_allreduce_op``, ``_split_startup_program``,
``_get_op_device_for_startup_program``, ``_add_sub_blocks``, ``_get_input_output_info``,
``_find_prev_op`` / ``_find_post_op`` and the var helpers of Paddle 3.3.1's
``python/paddle/incubate/optimizer/pipeline.py``: every op goes, as a copy with ``op_device`` cleared, to
the section of its device (a ``"gpu:all"`` op to every section); each section then declares the vars its
ops use, cloned from the original block, and, without sharding, sums the global-norm of gradient
clipping and ORs AMP's found-inf flag over the ``global_ring_id`` ring (``all_reduce``). Differences:
refimpl has no C++ ``OpDesc`` to copy, so an op is copied slot by slot and attr by attr; Paddle's
asserts are typed errors.
"""
from __future__ import annotations

import copy
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

from refimpl.core.dtypes import to_vartype
from refimpl.framework.op_role import OP_DEVICE_ATTR, OP_ROLE_ATTR, OpRole
from refimpl.framework.operator import Operator
from refimpl.framework.program import Program

from .devices import PipelineBuildError, translate_device

__all__ = ["SectionsMixin", "copy_op"]

_SUM, _MAX = 0, 1  # paddle.distributed.ReduceOp.SUM / MAX


def copy_op(block, op, index: Optional[int] = None) -> Operator:
    """A copy of ``op`` appended to ``block`` (or inserted at ``index``), as Paddle's ``OpDesc.copy_from``."""
    new = Operator(block, op.type, {k: list(v) for k, v in op.inputs.items()},
                   {k: list(v) for k, v in op.outputs.items()},
                   {k: (copy.copy(v) if isinstance(v, list) else v) for k, v in op.all_attrs().items()},
                   fill_proto=False)
    if index is None:
        block.ops.append(new)
    else:
        block.ops.insert(index, new)
    block.program._bump()
    return new


def clone_var(block, src):
    """``src`` declared again in ``block`` (a Parameter stays a Parameter)."""
    var = copy.copy(src)
    var.block, var.op = block, None
    block.vars[var.name] = var
    block.program._bump()
    return var


class SectionsMixin:
    """Section programs and the split startup program of :class:`PipelineOptimizer`."""

    # ---- op lookup ---------------------------------------------------------------------------
    @staticmethod
    def _get_input_output_info(block) -> Tuple[Dict[str, list], Dict[str, list]]:
        writers, readers = defaultdict(list), defaultdict(list)
        for index, op in enumerate(block.ops):
            for name in op.input_arg_names:
                readers[name].append([op, index])
            for name in op.output_arg_names:
                writers[name].append([op, index])
        return writers, readers

    def _find_post_op(self, index: int, var_name: str):
        """The last op after ``index`` (in the op list as first recorded) that reads ``var_name``."""
        var_name = var_name.replace(".cast_fp32", "").replace(".cast_fp16", "")
        for op, idx in reversed(self.input_var_to_op[var_name]):
            if idx > index:
                return op
        return None

    def _find_prev_op(self, index: int, var_name: str):
        """The last op before ``index`` that writes ``var_name``."""
        for op, idx in reversed(self.output_var_to_op[var_name]):
            if idx < index:
                return op
        return None

    # ---- vars ----------------------------------------------------------------------------------
    @staticmethod
    def _rename_arg(op, old_name: str, new_name: str) -> None:
        op._rename_input(old_name, new_name)
        op._rename_output(old_name, new_name)

    def _create_var(self, block, ref_var, name: str, dtype=None):
        new_var = block.create_var(name=name, shape=ref_var.shape, dtype=ref_var.dtype if dtype is None else dtype,
                                   type=ref_var.type, lod_level=ref_var.lod_level, persistable=ref_var.persistable,
                                   is_data=ref_var.is_data, need_check_feed=ref_var.need_check_feed)
        self._clone_var_attr(new_var, ref_var)
        return new_var

    @staticmethod
    def _clone_var_attr(dest, src) -> None:
        dest.stop_gradient = src.stop_gradient
        dest.is_distributed = getattr(src, "is_distributed", False)

    def _keep_local_inputs(self, block, op, outputs_too: bool) -> List[str]:
        kept = [n for n in op.input("X") if block._find_var_recursive(n) is not None]
        op.desc_set_input("X", kept)
        if outputs_too:
            op.desc_set_output("Out", kept)
        return kept

    def _create_vars(self, block, ori_block) -> None:
        """Declare in ``block`` every var its ops use (cloned from ``ori_block``); drop the inputs of the
        all-stage AMP / clip ops that live on other stages; without sharding, add the ``all_reduce``s."""
        used = set()
        op_idx = 0
        while op_idx < len(block.ops):
            op = block.ops[op_idx]
            should_insert = False
            if op.type == "reduce_any" and self._is_optimize_op(op):
                should_insert = True
            elif op.type == "concat" and self._is_optimize_op(op):
                self._keep_local_inputs(block, op, False)
            elif op.type == "update_loss_scaling":
                self._keep_local_inputs(block, op, True)
            elif op.type == "check_finite_and_unscale":
                if not self._keep_local_inputs(block, op, True):
                    block._remove_op(op_idx)
                    continue
            elif op.type == "sum" and self._is_gradient_clip_op(op):
                self._keep_local_inputs(block, op, False)
                should_insert = True
            for name in op.input_arg_names + op.output_arg_names:
                if name in used or "_blocking_queue" in name:
                    continue
                used.add(name)
                if block._find_var_recursive(name) is not None:
                    continue
                src = ori_block._find_var_recursive(name)
                if src is None:
                    raise PipelineBuildError(f"PipelineOptimizer: var {name!r} of op {op.type!r} is not in the "
                                             f"original program")
                self._clone_var_attr(clone_var(block, src), src)
            op_idx += 1
            if self.use_sharding or not should_insert:
                continue
            op_idx += self._insert_allreduce_op(op_idx - 1, block)

    def _insert_allreduce_op(self, op_idx: int, block) -> int:
        """After ``block.ops[op_idx]``: all-reduce its output over the global ring (MAX through int32 for
        ``reduce_any``'s bool); returns the number of ops added."""
        op = block.ops[op_idx]
        out_var = block.var(op.output_arg_names[0])
        offset = 0
        target = out_var
        opt = {OP_ROLE_ATTR: OpRole.Optimize}
        if op.type == "reduce_any":
            from refimpl.framework import unique_name
            target = block.create_var(name=unique_name.generate(out_var.name + "_cast_int32"), shape=[1],
                                      dtype="int32")
            block._insert_op(op_idx + 1, "cast", {"X": out_var}, {"Out": target},
                             dict(opt, in_dtype=to_vartype(out_var.dtype), out_dtype=to_vartype(target.dtype)))
            offset += 1
        block._insert_op(op_idx + 1 + offset, "all_reduce", {"x": target}, {"out": target},
                         dict(opt, ring_id=self.global_ring_id, reduce_type=_MAX if op.type == "reduce_any" else _SUM))
        offset += 1
        if op.type == "reduce_any":
            block._insert_op(op_idx + 1 + offset, "cast", {"X": target}, {"Out": out_var},
                             dict(opt, in_dtype=to_vartype(target.dtype), out_dtype=to_vartype(out_var.dtype)))
            offset += 1
        return offset

    # ---- programs --------------------------------------------------------------------------------
    def _split_program(self, main_program, devices: List[str]) -> List[Program]:
        """One program per device, each with the ops of its device and the ``"gpu:all"`` ops."""
        programs: Dict[str, Program] = defaultdict(Program)
        for op in main_program.block(0).ops:
            device = op.attr(OP_DEVICE_ATTR)
            for dev in (devices if device == f"{self._device}:all" else [device]):
                copy_op(programs[dev].global_block(), op)._set_attr(OP_DEVICE_ATTR, "")
        return [programs[d] for d in devices]

    def _get_op_device_for_startup_program(self, var_name: str) -> str:
        """An Adam beta-pow accumulator forced to cpu: the device of its parameter."""
        if "beta1_pow_acc" not in var_name and "beta2_pow_acc" not in var_name:
            raise PipelineBuildError(f"PipelineOptimizer: a startup op on cpu must initialise an Adam "
                                     f"beta1_pow_acc / beta2_pow_acc, not {var_name!r}")
        return self._param_device_map[var_name[:var_name.index("_beta")]]

    def _split_startup_program(self, startup_program, device_id: int) -> Program:
        block = startup_program.global_block()
        new = Program()
        for op in block.ops:
            device = op.attr(OP_DEVICE_ATTR) if op.has_attr(OP_DEVICE_ATTR) else ""
            if device == "cpu":
                if op.type != "fill_constant":
                    raise PipelineBuildError(f"PipelineOptimizer: startup op {op.type!r} is on cpu; only "
                                             f"fill_constant may be")
                device = self._get_op_device_for_startup_program(op.output_arg_names[0])
            device = translate_device(device, self._device)
            if device and int(device.split(":")[1]) != device_id:
                continue
            copy_op(new.global_block(), op)._set_attr(OP_DEVICE_ATTR, "")
        self._create_vars(new.global_block(), block)
        return new

    def _add_sub_blocks(self, main_block, program_list: List[Program]) -> None:
        """Each section gets its own copies of the sub-blocks its ops (``conditional_block``) run."""
        main_program = main_block.program
        for prog in program_list:
            for op in list(prog.block(0).ops):
                if not op.has_attr("sub_block"):
                    continue
                origin = main_program.block(op._block_attr_id("sub_block"))
                sub = prog._create_block(parent_idx=0)
                prog._rollback()
                for sub_op in origin.ops:
                    copy_op(sub, sub_op)
                self._create_vars(sub, origin)
                op._set_attr("sub_block", sub)

    def _get_device_info(self, block) -> Optional[str]:
        for op in block.ops:
            return op.attr(OP_DEVICE_ATTR)
        return None
