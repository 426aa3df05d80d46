"""Gradient accumulation over micro-batches, and the loss scale for their number.

Mirrors ``_insert_loss_scale``, ``_rename_gradient_var_name``, ``_accumulate_gradients``,
``_accumulate_gradients_with_fuse``, ``_insert_accumulate_gradients_with_fuse``,
``_sort_grad_param_by_dtype`` and ``_get_var_size`` of Paddle 3.3.1's
``python/paddle/incubate/optimizer/pipeline.py``: optimize ops read ``{param}@GRAD@MERGED``; after the
backward, each parameter's gradient is added into that persistable var (``sum``), which a
``fill_constant`` of role LRSched zeroes once per mini-batch; ``fp16_allreduce`` accumulates into
``@MERGED@FP16`` and casts back for the update. With ``strategy.fuse_grad_merge`` the gradients and
their merged vars are laid out in ``coalesce_tensor``s (split by dtype and ``fuse_grad_size_in_MB``,
grouped by sharding rank when ``shard`` is given) and one ``sum`` per group accumulates. Differences:
Paddle's asserts are typed errors.
"""
from __future__ import annotations

from functools import reduce
from typing import List, Optional, Tuple

from refimpl.core.dtypes import to_vartype
from refimpl.framework.op_role import OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole

from .devices import GRAD_SUFFIX, PipelineBuildError

__all__ = ["AccumulateMixin"]

_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int16": 2, "int32": 4, "int64": 8,
          "bool": 1, "uint8": 1}


class AccumulateMixin:
    """Gradient merging of :class:`PipelineOptimizer`."""

    def _insert_loss_scale(self, block) -> None:
        """Divide the loss gradient's seed (``fill_constant``) by the number of micro-batches."""
        if self._num_microbatches == 1:
            return
        for op in reversed(block.ops):
            if self._is_loss_grad_op(op):
                if op.type != "fill_constant":
                    raise PipelineBuildError(f"PipelineOptimizer: the loss gradient op must be fill_constant, "
                                             f"but it is {op.type!r}")
                op._set_attr("value", float(op.attr("value")) / self._num_microbatches)
                break

    def _rename_gradient_var_name(self, block) -> None:
        """Optimize ops (but casts and comm syncs) read and write ``{grad}@MERGED``."""
        for op in block.ops:
            if not self._is_optimize_op(op) or op.type in ("cast", "c_sync_comm_stream"):
                continue
            renamed = set()
            for name in op.input_arg_names + op.output_arg_names:
                if GRAD_SUFFIX in name and name not in renamed:
                    self._rename_arg(op, name, name + "@MERGED")
                    renamed.add(name)
            if op.has_attr(OP_ROLE_VAR_ATTR):  # Paddle's OpDesc rename renames op_role_var entries too
                role_var = op.attr(OP_ROLE_VAR_ATTR)
                op._set_attr(OP_ROLE_VAR_ATTR, [n + "@MERGED" if n in renamed else n for n in role_var])

    def _drop_grad_cast(self, block, index: int, op) -> bool:
        """Remove AMP's optimize-role cast of a parameter's fp16 gradient to fp32 (the merge casts)."""
        if not (self._is_optimize_op(op) and op.type == "cast"):
            return False
        in_name, out_name = op.input_arg_names[0], op.output_arg_names[0]
        if out_name.strip("@GRAD") not in self._param_device_map:
            return False
        if in_name.replace(".cast_fp16", "") != out_name:
            raise PipelineBuildError(f"PipelineOptimizer: cast {in_name!r} -> {out_name!r} is not the fp16 -> "
                                     f"fp32 cast of one gradient")
        block._remove_op(index)
        return True

    def _accumulate_gradients(self, block, pp_allreduce_in_optimize: bool = False, strategy=None,
                              shard=None) -> Optional[List[str]]:
        """Accumulate every parameter's gradient into ``@GRAD@MERGED``; the merged names (fused: the
        coalesced names)."""
        fp16 = bool(getattr(strategy, "fp16_allreduce", False)) if strategy else False
        if strategy and strategy.fuse_grad_merge:
            return self._accumulate_gradients_with_fuse(block, fp16, strategy.fuse_grad_size_in_MB, shard)
        merged: List[str] = []
        first_opt = None
        suffix = "@MERGED@FP16" if fp16 else "@MERGED"
        dtype = "float16" if fp16 else None
        for index, op in reversed(tuple(enumerate(list(block.ops)))):
            if self._drop_grad_cast(block, index, op):
                continue
            if self._is_backward_op(op) and first_opt is None:
                first_opt = index + 1
            if not (self._is_backward_op(op) and op.has_attr(OP_ROLE_VAR_ATTR)):
                continue
            role_var = op.attr(OP_ROLE_VAR_ATTR)
            for i in range(0, len(role_var), 2):
                param = role_var[i]
                if not block.has_var(param) or "@BroadCast" in param:
                    continue
                merged.append(self._merge_one(block, first_opt, param, role_var[i + 1], suffix, dtype, fp16))
        if fp16:
            self._cast_merged_back(block, merged)
        return merged

    def _merge_one(self, block, at: int, param: str, grad_name: str, suffix: str, dtype, fp16: bool) -> str:
        param_grad = param + GRAD_SUFFIX
        merged_name = param_grad + suffix
        if not block.has_var(merged_name):
            self._create_var(block, block.vars[param], merged_name, dtype)
        merged = block.var(merged_name)
        merged.persistable = True
        block._insert_op(at, "fill_constant", {}, {"Out": [merged]}, {
            "shape": list(merged.shape), "dtype": to_vartype(merged.dtype), "value": 0.0,
            OP_ROLE_ATTR: OpRole.LRSched})
        offset = 1
        grad = block.vars[grad_name]
        if ("cast_fp16" in grad_name) is not fp16:
            cast = self._create_var(block, block.var(param_grad), param_grad + "@TMP", dtype)
            cast.persistable = False
            block._insert_op(at + offset, "cast", {"X": grad}, {"Out": cast}, {
                "in_dtype": to_vartype(grad.dtype), "out_dtype": to_vartype(cast.dtype), OP_ROLE_ATTR: OpRole.Backward})
            offset += 1
            grad = cast
        block._insert_op(at + offset, "sum", {"X": [merged, grad]}, {"Out": merged}, {OP_ROLE_ATTR: OpRole.Backward})
        return merged_name

    def _cast_merged_back(self, block, merged: List[str]) -> None:
        """fp16_allreduce: each ``@MERGED@FP16`` cast to the fp32 ``@MERGED`` the update reads."""
        first_opt = next((i + 1 for i in range(len(block.ops) - 1, -1, -1) if self._is_backward_op(block.ops[i])),
                         None)
        if first_opt is None:
            raise PipelineBuildError("PipelineOptimizer: fp16_allreduce needs a backward op to merge after")
        for fp16_name in merged:
            grad_name = fp16_name.replace("@FP16", "")
            param = fp16_name.replace("@GRAD@MERGED@FP16", "")
            if not block.has_var(grad_name):
                self._create_var(block, block.vars[param], grad_name)
            fp16_var, grad = block.var(fp16_name), block.var(grad_name)
            grad.persistable = False
            block._insert_op(first_opt, "cast", {"X": fp16_var}, {"Out": grad}, {
                "in_dtype": to_vartype(fp16_var.dtype), "out_dtype": to_vartype(grad.dtype),
                OP_ROLE_ATTR: OpRole.Optimize})

    # ---- fused (strategy.fuse_grad_merge) -------------------------------------------------------
    def _accumulate_gradients_with_fuse(self, main_block, fp16: bool, fused_size: float, shard=None):
        first_opt = None
        pairs: List[Tuple[str, str]] = []
        for index, op in reversed(tuple(enumerate(list(main_block.ops)))):
            if self._drop_grad_cast(main_block, index, op):
                continue
            if self._is_backward_op(op) and first_opt is None:
                first_opt = index + 1
                if first_opt == len(main_block.ops):  # no optimize phase
                    return None
            if self._is_backward_op(op) and op.has_attr(OP_ROLE_VAR_ATTR):
                role_var = op.attr(OP_ROLE_VAR_ATTR)
                for i in range(0, len(role_var), 2):
                    if main_block.has_var(role_var[i]) and "@BroadCast" not in role_var[i]:
                        pairs.append((role_var[i + 1], role_var[i]))
        if not pairs:
            return None
        nranks = shard.worker_num if shard else 1
        by_rank: List[list] = [[] for _ in range(nranks)]
        for pair in pairs:
            root = shard.device(pair[1]) if shard else 0
            if not 0 <= root < nranks:
                raise PipelineBuildError(f"PipelineOptimizer: sharding places parameter {pair[1]!r} on rank "
                                         f"{root}, outside 0..{nranks - 1}")
            by_rank[root].append(pair)
        names: List[str] = []
        for group in by_rank:
            fused, first_opt = self._insert_accumulate_gradients_with_fuse(main_block, fp16, fused_size, group,
                                                                          first_opt)
            names += fused
        return names

    def _sort_grad_param_by_dtype(self, main_block, grad_param_pairs):
        order = {"float16": 0, "float32": 1}
        return sorted(grad_param_pairs, key=lambda p: order.get(main_block.var(p[0]).dtype, 2))

    @staticmethod
    def _get_var_size(var) -> float:
        if any(int(d) == -1 for d in var.shape):
            raise PipelineBuildError(f"PipelineOptimizer: var {var.name!r} has an unknown dim: {list(var.shape)}")
        return reduce(lambda x, y: x * y, var.shape, 1) * _BYTES[var.dtype] / 1024.0 / 1024.0
