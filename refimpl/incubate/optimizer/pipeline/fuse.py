"""Fused gradient merging (``strategy.fuse_grad_merge``): coalesced gradients and merged gradients.

Mirrors ``_insert_accumulate_gradients_with_fuse`` of Paddle 3.3.1's
``python/paddle/incubate/optimizer/pipeline.py``: the (grad, param) pairs, fp16 first, are cut into
segments of one dtype and at most ``fused_size`` MB; per segment, at the start of the backward, one
``coalesce_tensor`` lays the gradients out in ``FusedGrad_{first grad}`` and a second (role LRSched, set
to 0) the merged gradients in ``FusedMergedGrad_{first merged}``; after the backward one ``sum`` per
segment adds the first into the second (a cast between when dtypes differ). Differences: the
``FusedGrad_*`` / ``FusedMergedGrad*`` vars get the shape refimpl's ``coalesce_tensor`` infers at build time
(Paddle's compile-time vars keep shape ``[]``; both hold the coalesced length at run time).
"""
from __future__ import annotations

from typing import List, Tuple

from refimpl.core.dtypes import to_vartype
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole

from .devices import GRAD_SUFFIX, PipelineBuildError

__all__ = ["FuseMixin"]


class FuseMixin:
    """The fused variant of gradient merging of :class:`PipelineOptimizer`."""

    def _segments(self, block, fp16: bool, fused_size: float, pairs) -> list:
        suffix = "@MERGED@FP16" if fp16 else "@MERGED"
        dtype = "float16" if fp16 else "float32"
        segments: List[Tuple[list, list, list]] = []
        cur_size, last_dtype = 0.0, None
        for grad, param in pairs:
            real_grad = block.var(grad)
            merged = block.create_var(name=param + GRAD_SUFFIX + suffix, dtype=dtype, shape=real_grad.shape,
                                      persistable=True, stop_gradient=False)
            real_param = block.var(param)
            merged.is_distributed = getattr(real_param, "is_distributed", False)
            size = self._get_var_size(real_grad)
            if not segments or cur_size + size > fused_size or real_grad.dtype != last_dtype:
                segments.append(([real_grad], [real_param], [merged]))
                last_dtype, cur_size = real_grad.dtype, 0.0
            else:
                for part, var in zip(segments[-1], (real_grad, real_param, merged)):
                    part.append(var)
                cur_size += size
        return segments

    def _insert_accumulate_gradients_with_fuse(self, main_block, fp16: bool, fused_size: float,
                                               grad_param_pairs, first_opt_op_idx: int):
        pairs = self._sort_grad_param_by_dtype(main_block, grad_param_pairs)
        segments = self._segments(main_block, fp16, fused_size, pairs)
        fused, fused_merged = [], []
        for grads, _, merged in segments:
            fused.append(main_block.create_var(name=f"FusedGrad_{grads[0].name}", dtype=grads[0].dtype,
                                               persistable=False, stop_gradient=False))
            prefix = "FusedMergedGrad.cast_fp16." if merged[0].dtype == "float16" else "FusedMergedGrad"
            fused_merged.append(main_block.create_var(name=f"{prefix}_{merged[0].name}", dtype=merged[0].dtype,
                                                      persistable=True, stop_gradient=False))
        first_back = next((i for i, op in enumerate(main_block.ops) if self._is_backward_op(op)), None)
        if first_back is None:
            raise PipelineBuildError("PipelineOptimizer: fuse_grad_merge needs a backward op to coalesce before")
        offset = 0
        for (grads, params, merged), fg, fm in zip(segments, fused, fused_merged):
            # user_defined_size_of_dtype 2 for both dtypes: the fused fp16 and fp32 vars get one shape
            common = {"user_defined_size_of_dtype": 2, "copy_data": False, "use_align": True}
            main_block._insert_op(first_back + offset, "coalesce_tensor", {"Input": params},
                                  {"Output": grads, "FusedOutput": fg}, dict(
                                      common, dtype=to_vartype(grads[0].dtype), set_constant=False, constant=0.0,
                                      **{OP_ROLE_ATTR: OpRole.Backward}))
            main_block._insert_op(first_back + offset + 1, "coalesce_tensor", {"Input": params},
                                  {"Output": merged, "FusedOutput": fm}, dict(
                                      common, dtype=to_vartype(merged[0].dtype), set_constant=True, constant=0.0,
                                      **{OP_ROLE_ATTR: OpRole.LRSched}))
            offset += 2
        first_opt_op_idx += offset
        offset = 0
        dtype = "float16" if fp16 else "float32"
        for fg, fm in zip(fused, fused_merged):
            if ("cast_fp16" in fg.name) is not fp16:
                cast = main_block.create_var(name=fg.name + "@TMP", dtype=dtype, persistable=False,
                                             stop_gradient=False)
                main_block._insert_op(first_opt_op_idx + offset, "cast", {"X": fg}, {"Out": cast}, {
                    "in_dtype": to_vartype(fg.dtype), "out_dtype": to_vartype(cast.dtype),
                    OP_ROLE_ATTR: OpRole.Backward})
                offset += 1
                fg = cast
            main_block._insert_op(first_opt_op_idx + offset, "sum", {"X": [fm, fg]}, {"Out": fm},
                                  {OP_ROLE_ATTR: OpRole.Backward})
            offset += 1
        if fp16:  # the update reads fp32 merged gradients
            for grad, param in pairs:
                real_grad = main_block.var(grad)
                half = main_block.var(param + GRAD_SUFFIX + "@MERGED@FP16")
                full = main_block.create_var(name=param + GRAD_SUFFIX + "@MERGED", dtype="float32",
                                             shape=real_grad.shape, persistable=False, stop_gradient=False)
                main_block._insert_op(first_opt_op_idx + offset, "cast", {"X": half}, {"Out": full}, {
                    "in_dtype": to_vartype("float16"), "out_dtype": to_vartype("float32"),
                    OP_ROLE_ATTR: OpRole.Optimize})
                offset += 1
        return [v.name for v in fused_merged], first_opt_op_idx
