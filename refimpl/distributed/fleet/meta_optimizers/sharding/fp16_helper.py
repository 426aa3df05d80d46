"""AMP under ZeRO sharding: drop the loss-scaling pieces of gradients this rank does not own.

Mirrors ``paddle/distributed/fleet/meta_optimizers/sharding/fp16_helper.py`` (``FP16Utils``),
with Paddle's names and signatures, so that the sharding optimizer calls it where Paddle does:

* ``is_fp16_cast_op`` — a forward ``cast`` of a parameter from float32 to float16 (the
  ``p.cast_fp16`` copies AMP makes; sharding broadcasts those instead of the fp32 params);
* ``is_fp32_cast_op`` — an optimize-role ``cast`` from float16 to float32 (the
  ``p.cast_fp16@GRAD`` -> ``p@GRAD`` casts before ``check_finite_and_unscale``);
* ``remove_cast_op`` — remove the fp16 casts of params inside one program segment;
* ``prune_fp16`` — per rank: remove the fp32 grad casts of params it does not own, keep only
  its own grads in ``check_finite_and_unscale`` / ``update_loss_scaling``, and make the found-inf
  flag agree over the rings: ``cast`` to int32, one ``all_reduce`` per ring, ``cast`` back;
* ``sync_amp_check_nan_inf`` — only that last sync (AMP with mp/pp but no sharding).

How it differs: Paddle asserts; here a broken program is a typed error naming the op and
variable. Paddle 3.3.1 passes the reduction as an attr ``op_type`` (MAX), which ``all_reduce``
does not have, so the op it builds keeps ``reduce_type`` 0 (SUM); refimpl records that op
exactly (``reduce_type`` = SUM). The flag is the same either way: any rank's non-zero sum casts
back to ``True``.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.core.reduce_op import ReduceOp
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole

from .utils import is_optimizer_op

__all__ = ["FP16Utils", "strip_grad_suffix", "insert_found_inf_sync"]

# Paddle 3.3.1's all_reduce gets no reduce_type here (see the module docstring): the default, SUM.
FOUND_INF_REDUCE_TYPE = ReduceOp.SUM


def strip_grad_suffix(name: str) -> str:
    """``p@GRAD`` / ``p@GRAD@MERGED`` -> ``p`` (Paddle strips ``@MERGED`` then ``@GRAD``)."""
    return name.removesuffix("@MERGED").removesuffix("@GRAD")


def _single_in_out(op: Any) -> tuple:
    ins, outs = op.input_arg_names, op.output_arg_names
    if len(ins) != 1 or len(outs) != 1:
        raise PreconditionNotMet(f"cast op expects one input and one output, got inputs {ins} "
                                 f"and outputs {outs}")
    return ins[0], outs[0]


def _found_inf_of_update_loss_scaling(block: Any, last: bool) -> tuple:
    """(index, FoundInfinite name) of the last (``last``) or first ``update_loss_scaling`` of
    ``block``; (-1, '') if none. (Paddle's prune_fp16 keeps the first, sync_amp_check_nan_inf the
    last; a program has one.)"""
    found = [(i, op.input("FoundInfinite")[0]) for i, op in enumerate(block.ops) if op.type == "update_loss_scaling"]
    if not found:
        return -1, ""
    return found[-1] if last else found[0]


def insert_found_inf_sync(block: Any, idx: int, inf_var_name: str, ring_ids: Iterable[int]) -> None:
    """Before ``block.ops[idx]``: ``cast`` the bool flag to int32, ``all_reduce`` it on each ring
    (``-1`` skipped) and ``cast`` it back — the three steps both Paddle functions insert."""
    inf_var = block.var(inf_var_name)
    inf_int32 = block.create_var(name=inf_var_name + "@cast_int32", shape=inf_var.shape, dtype="int32")
    role = {OP_ROLE_ATTR: OpRole.Optimize}
    block._insert_op(idx, type="cast", inputs={"X": inf_var}, outputs={"Out": inf_int32},
                     attrs={"in_dtype": to_vartype(inf_var.dtype), "out_dtype": to_vartype("int32"), **role})
    idx += 1
    for ring_id in ring_ids:
        if ring_id == -1:
            continue
        # not overlapped with calculation: the flag gates the update right after it
        block._insert_op(idx, type="all_reduce", inputs={"x": inf_int32}, outputs={"out": inf_int32},
                         attrs={"ring_id": ring_id, "reduce_type": FOUND_INF_REDUCE_TYPE, **role})
        idx += 1
    block._insert_op(idx, type="cast", inputs={"X": inf_int32}, outputs={"Out": inf_var},
                     attrs={"in_dtype": to_vartype("int32"), "out_dtype": to_vartype(inf_var.dtype), **role})


class FP16Utils:
    """Paddle's ``FP16Utils``: static helpers over a block (see the module docstring)."""

    def __init__(self) -> None:
        pass

    @staticmethod
    def is_fp16_cast_op(block: Any, op: Any, params: Iterable[str]) -> bool:
        if op.type != "cast" or is_optimizer_op(op):
            return False
        input_name, output_name = _single_in_out(op)
        if input_name not in params:
            return False
        return block.var(input_name).dtype == "float32" and block.var(output_name).dtype == "float16"

    @staticmethod
    def is_fp32_cast_op(block: Any, op: Any) -> bool:
        if op.type != "cast" or not is_optimizer_op(op):
            return False
        input_name, output_name = _single_in_out(op)
        return block.var(input_name).dtype == "float16" and block.var(output_name).dtype == "float32"

    @staticmethod
    def remove_cast_op(block: Any, params: Iterable[str], segment: Any, offset: int) -> int:
        """Remove the fp16 casts of ``params`` in ``segment`` (ops ``offset + [start, end)``);
        returns minus the number removed, to add to the segment's end index."""
        inserted_op_num = 0
        for op_idx in reversed(range(offset + segment._start_idx, offset + segment._end_idx)):
            if FP16Utils.is_fp16_cast_op(block, block.ops[op_idx], params):
                block._remove_op(op_idx, sync=False)
                inserted_op_num -= 1
        return inserted_op_num

    @staticmethod
    def prune_fp16(block: Any, shard: Any, reduced_grads_to_param: Dict[str, str],
                   ring_ids: List[int]) -> None:
        """Per rank: keep the AMP grad pieces of its own params only, then sync the found-inf flag."""
        FP16Utils._remove_foreign_fp32_casts(block, shard, reduced_grads_to_param)
        FP16Utils._restrict_checks_to_shard(block, shard)
        idx, inf_var_name = _found_inf_of_update_loss_scaling(block, last=False)
        if idx == -1:
            return
        # allreduce over mp, then sharding, then pp (the ring order the caller gives)
        insert_found_inf_sync(block, idx, inf_var_name, ring_ids)

    @staticmethod
    def _remove_foreign_fp32_casts(block: Any, shard: Any, reduced_grads_to_param: Dict[str, str]) -> None:
        for idx in range(len(block.ops) - 1, -1, -1):
            op = block.ops[idx]
            if not FP16Utils.is_fp32_cast_op(block, op):
                continue
            output_name = op.output_arg_names[0]
            param_name = strip_grad_suffix(output_name)
            if param_name not in shard.global_params:
                raise InvalidArgument(f"Output 'Out' of cast op must be a grad of a model param, but "
                                      f"{output_name!r} is not a grad")
            if output_name in reduced_grads_to_param or shard.has_param(param_name):
                continue
            block._remove_op(idx, sync=False)
            block._remove_var(output_name)

    @staticmethod
    def _restrict_checks_to_shard(block: Any, shard: Any) -> None:
        """``check_finite_and_unscale`` / ``update_loss_scaling`` keep exactly this rank's grads."""
        should_check = {p for p, dev in shard.global_param2device.items()
                        if dev == shard.worker_idx} & set(shard.global_params)
        for op in reversed(block.ops):
            if op.type not in ("check_finite_and_unscale", "update_loss_scaling"):
                continue
            kept: List[str] = []
            kept_params = set()
            for input_name in op.input("X"):
                param_name = strip_grad_suffix(input_name)
                if param_name not in shard.global_params:
                    raise InvalidArgument(f"Input 'X' of {op.type} must be grads, but {input_name!r} "
                                          f"is not a grad")
                if shard.has_param(param_name):
                    kept.append(input_name)
                    kept_params.add(param_name)
            op.desc.set_input("X", kept)
            op.desc.set_output("Out", kept)
            if kept_params != should_check:
                raise PreconditionNotMet(
                    f"amp {op.type} of sharding rank {shard.worker_idx}: misses "
                    f"{sorted(should_check - kept_params)} and got unexpected {sorted(kept_params - should_check)}")

    @staticmethod
    def sync_amp_check_nan_inf(block: Any, ring_ids: List[int]) -> None:
        """AMP without sharding (mp / pp only): make the found-inf flag agree over ``ring_ids``."""
        idx, inf_var_name = _found_inf_of_update_loss_scaling(block, last=True)
        if idx == -1:  # no AMP
            return
        insert_found_inf_sync(block, idx, inf_var_name, ring_ids)
