"""Global-norm gradient clipping under ZeRO sharding and model parallelism.

Mirrors ``paddle/distributed/fleet/meta_optimizers/sharding/gradient_clip_helper.py``
(``GradientClipHelper``), with Paddle's names and signatures. The ops of
``ClipGradByGlobalNorm`` carry the name scope ``/gradient_clip``: per grad a
``squared_l2_norm``, one ``sum`` of the squares, then ``sqrt``, ``fill_constant``,
``elementwise_max``, ``elementwise_div``, and per grad the ``elementwise_mul`` by the clip factor.

* ``prune_gradient_clip`` (sharding): each rank keeps the square / multiply ops of the grads it
  owns, sums only its own squares (a ``fill_constant`` 0 when it owns none), and ``all_reduce``\\ s
  that partial sum over the rings (mp, sharding, pp), so every rank gets the global norm.
* ``sync_global_norm`` (no sharding; mp / pp): on mp ranks >= 1 the squares of params that are
  not split (no ``is_distributed``) are dropped — rank 0 counts them once — then the sum is
  ``all_reduce``\\ d over the rings.

How it differs: Paddle 3.3.1's ``prune_gradient_clip`` names ``ReduceOp.Sum``, which does not
exist, so it raises ``AttributeError`` whenever a sharded program has a global-norm clip (and its
legacy IR cannot build ``ClipGradByGlobalNorm`` at all); refimpl builds the clip as Paddle 2.6.2
did and inserts the ``all_reduce`` Paddle means (``reduce_type`` SUM), the op that
``sync_global_norm`` inserts. Paddle's final assert is a typed error naming the rank's params.
"""
from __future__ import annotations

from typing import Any, List, Optional, Set

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import PreconditionNotMet
from refimpl.core.reduce_op import ReduceOp
from refimpl.framework.op_role import OP_NAMESCOPE_ATTR, OP_ROLE_ATTR, OpRole

from .fp16_helper import strip_grad_suffix

__all__ = ["GradientClipHelper"]

CLIP_NAMESCOPE = "/gradient_clip"
# the name scope Paddle gives the all_reduce of the squared-norm sum
ALLREDUCE_NAMESCOPE = "/gradient_clip_model_parallelism"


class GradientClipHelper:
    """Paddle's ``GradientClipHelper`` (see the module docstring)."""

    def __init__(self, mp_ring_id: Optional[int]) -> None:
        self.mp_ring_id = mp_ring_id

    def _is_gradient_clip_op(self, op: Any) -> bool:
        return op.has_attr(OP_NAMESCOPE_ATTR) and str(op.attr(OP_NAMESCOPE_ATTR)).startswith(CLIP_NAMESCOPE)

    # ---- sharding ---------------------------------------------------------------------------
    def prune_gradient_clip(self, block: Any, shard: Any, ring_ids: List[int]) -> None:
        """Keep the clip pieces of this rank's params; all-reduce its partial sum of squares.

        Removed: ``squared_l2_norm`` / ``elementwise_mul`` of foreign grads (and what only they
        feed); kept: ``sum``, ``sqrt``, ``elementwise_max``, ``elementwise_div``.
        """
        deprecated_vars, deprecate_op_idx, own_params, sum_idx = self._foreign_clip_ops(block, shard)
        self._check_every_param_clipped(block, shard)
        # Paddle's note: a rank with nothing to drop and no sum has no clip at all; returning
        # early on a rank that does hold the sum would leave the others' all_reduce unmatched
        if not deprecated_vars and sum_idx == -1:
            return
        for idx in range(len(block.ops) - 1, -1, -1):
            op = block.ops[idx]
            if not self._is_gradient_clip_op(op):
                continue
            if idx in deprecate_op_idx:
                block._remove_op(idx, sync=False)
                continue
            if op.type == "sum":
                kept = [n for n in op.input_arg_names if n not in deprecated_vars]
                sum_res = self._set_sum_inputs(block, idx, op, kept)
                self._insert_allreduce(block, ring_ids, idx, sum_res)
        should_have = {p for p, dev in shard.global_param2device.items()
                       if dev == shard.worker_idx} & set(shard.global_params)
        if own_params != should_have:
            raise PreconditionNotMet(
                f"gradient clip of sharding rank {shard.worker_idx}: misses "
                f"{sorted(should_have - own_params)} and got unexpected {sorted(own_params - should_have)}")
        for name in deprecated_vars:
            block._remove_var(name)

    def _check_every_param_clipped(self, block: Any, shard: Any) -> None:
        """A parameter the clip leaves out (``need_clip=False``) fails Paddle's final assert on the rank
        owning it (the others go on, and would wait for it); refimpl refuses on every rank alike."""
        clipped = {strip_grad_suffix(n) for op in block.ops if self._is_gradient_clip_op(op) and op.type != "sum"
                   for n in op.input_arg_names}
        if not clipped:
            return
        left_out = sorted(p for p in shard.global_params if p not in clipped)
        if left_out:
            owners = sorted({shard.global_param2device[p] for p in left_out})
            raise PreconditionNotMet(
                f"gradient clip under sharding: the parameters {left_out} are not clipped (need_clip=False); "
                f"Paddle 3.3.1's prune_gradient_clip asserts on their owners (sharding rank(s) {owners}): "
                "clip every parameter, or none")

    def _foreign_clip_ops(self, block: Any, shard: Any) -> tuple:
        """(vars only foreign grads feed, indices of their ops, own params seen, last sum index)."""
        deprecated_vars: Set[str] = set()
        deprecate_op_idx: Set[int] = set()
        own_params: Set[str] = set()
        sum_idx = -1
        for idx, op in enumerate(block.ops):
            if not self._is_gradient_clip_op(op):
                continue
            if op.type == "sum":
                sum_idx = idx
                continue
            deprecate = False
            for input_name in op.input_arg_names:
                if input_name in deprecated_vars:
                    deprecate = True
                param_name = strip_grad_suffix(input_name)
                if shard.is_param(param_name) and not shard.has_param(param_name):
                    deprecate = True
                elif shard.is_param(param_name):
                    own_params.add(param_name)
            if deprecate:
                deprecate_op_idx.add(idx)
                deprecated_vars.update(n for n in op.output_arg_names if n not in op.input_arg_names)
        return deprecated_vars, deprecate_op_idx, own_params, sum_idx

    @staticmethod
    def _set_sum_inputs(block: Any, idx: int, op: Any, kept: List[str]) -> str:
        """Give the clip's ``sum`` the inputs ``kept``; with none (more ranks than grads), a
        ``fill_constant`` 0 of the same var in its place, which adds nothing to the norm."""
        op.desc.set_input("X", kept)
        outs = op.output_arg_names
        if len(outs) != 1:
            raise PreconditionNotMet(f"the gradient clip's sum op must have one output, got {outs}")
        sum_res = outs[0]
        if not kept:
            sum_var = block.var(sum_res)
            namescope = op.attr(OP_NAMESCOPE_ATTR)
            block._remove_op(idx, sync=False)
            fill = block._insert_op(idx, type="fill_constant", inputs={}, outputs={"Out": sum_res},
                                    attrs={"shape": list(sum_var.shape), "dtype": to_vartype(sum_var.dtype),
                                           "value": 0.0, OP_ROLE_ATTR: OpRole.Optimize})
            fill._set_attr(OP_NAMESCOPE_ATTR, namescope)
        return sum_res

    # ---- mp / pp without sharding ---------------------------------------------------------------
    def sync_global_norm(self, block: Any, ring_ids: List[int], mp_rank: int) -> None:
        """All-reduce the squared-norm sum over ``ring_ids``; on mp ranks >= 1 first drop the
        squares of params every mp rank holds whole (not ``is_distributed``)."""
        sum_ops = [op for op in block.ops if self._is_gradient_clip_op(op) and op.type == "sum"]
        if not sum_ops:  # not ClipGradByGlobalNorm
            return
        removed_idx: Set[int] = set()
        removed_vars: Set[str] = set()
        for idx, op in enumerate(block.ops):
            if not self._is_gradient_clip_op(op):
                continue
            if op.type == "sum":
                break
            for input_name in op.input_arg_names:
                var = block.var(input_name)
                if mp_rank >= 1 and not getattr(var, "is_distributed", False):
                    removed_idx.add(idx)
                    removed_vars.update(op.output_arg_names)
        for idx in sorted(removed_idx, reverse=True):
            block._remove_op(idx, sync=False)
        for name in removed_vars:
            block._remove_var(name)
        for idx, op in enumerate(block.ops):
            if not (self._is_gradient_clip_op(op) and op.type == "sum"):
                continue
            sum_res = op.output_arg_names[0]
            if mp_rank >= 1:
                kept = [n for n in op.input_arg_names if n not in removed_vars]
                if kept:
                    op.desc.set_input("X", kept)
                else:
                    self._set_sum_inputs(block, idx, op, kept)
            self._insert_allreduce(block, ring_ids, idx, sum_res)
            break

    @staticmethod
    def _insert_allreduce(block: Any, ring_ids: List[int], idx: int, var: str) -> None:
        """After ``block.ops[idx]``: an ``all_reduce`` (SUM) of ``var`` per ring, ``-1`` skipped;
        on the calculation stream, not overlapped with it."""
        for ring_id in ring_ids:
            if ring_id == -1:
                continue
            idx += 1
            block._insert_op(idx, type="all_reduce", inputs={"x": var}, outputs={"out": var},
                             attrs={"ring_id": ring_id, OP_NAMESCOPE_ATTR: ALLREDUCE_NAMESCOPE,
                                    "reduce_type": ReduceOp.SUM, OP_ROLE_ATTR: OpRole.Optimize})

