"""Each rank's main and startup programs pruned to what its shard needs.

Mirrors ``_prune_main_program`` and ``_prune_startup_program`` of
``paddle/distributed/fleet/meta_optimizers/sharding_optimizer.py`` (Paddle
3.3.1), as a mixin of refimpl's ``ShardingOptimizer``.

Main program: the weight-decay ops, AMP casts / checks and gradient-clip
pieces of non-owned parameters go first (the helpers of this package), then
:class:`ProgramDeps` from the dp-allreduced gradients removes every op whose
outputs are all optimizer state of another rank (its update op, and what
fed only that), and the vars nothing writes any more. Startup program: an op
writing any var this rank does not keep is removed, then those vars.

Differences: Paddle 3.3.1 starts the dependencies from every summing
``all_reduce``, and so, under tensor parallelism (``mp_degree > 1``), from the
backward ``all_reduce`` on the model-parallel ring that is a ``c_identity``'s
gradient (Paddle 2.x's ``c_allreduce_sum`` of it carried
``use_model_parallel=True`` and was left out). From that activation gradient
the walk reaches the gradients of the parameters before it, and for those
another rank owns it removes their ``reduce`` and the backward ops computing
them, leaving a ``c_sync_comm_stream`` that names removed vars: the program
cannot run (and the owners would miss this rank's share). refimpl leaves the
model-parallel ring's backward ``all_reduce`` out, as Paddle 2.x did; every
other program is Paddle's. And Paddle would prune a ``conditional_block``
reachable from the gradients through ``self._is_amp_subblock``, which Paddle
3.3.1 does not define (an AttributeError there); refimpl leaves such a block
as it is.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Set

from refimpl.core.reduce_op import ReduceOp

from .fp16_helper import FP16Utils
from .gradient_clip_helper import GradientClipHelper
from .prune import ProgramDeps
from .utils import is_backward_op, is_optimizer_op
from .weight_decay_helper import WeightDecayHelper

#: ops the pruning never removes (Paddle's list)
_KEPT = ("all_reduce", "c_sync_comm_stream", "c_calc_comm_stream", "c_gen_nccl_id", "c_gen_bkcl_id",
         "c_gen_xccl_id", "c_comm_init", "send_v2", "recv_v2")


class PruneMixin:
    """The per-rank pruning of the sharded programs (see the module docstring)."""

    # The state of ShardingOptimizer this mixin reads (set in its __init__ and minimize).
    _params: Set[str]
    _reduced_grads_to_param: Dict[str, str]
    _optimizer_sharding: bool

    def _prune_main_program(self, block: Any, shard: Any, rings: Sequence[int]) -> None:
        WeightDecayHelper().prune_weight_decay(block, shard)
        # the found-inf flag is combined over the whole model-parallel group (Paddle's note)
        FP16Utils.prune_fp16(block, shard, self._reduced_grads_to_param, list(rings))
        GradientClipHelper(None).prune_gradient_clip(block, shard, list(rings))
        reduced_grads: List[str] = []
        mp_ring = getattr(self, "mp_ring_id", -1)
        for op in block.ops:
            if op.type == "all_reduce" and int(op.attr("reduce_type")) == int(ReduceOp.SUM):
                if mp_ring >= 0 and int(op.attr("ring_id")) == mp_ring and is_backward_op(op):
                    continue  # the gradient of a c_identity (see the module docstring), not a reduced grad
                outs = op.desc.output_arg_names()
                reduced_grads.append(outs[0])
        pruned_opti_vars = [n for n in list(block.vars) if shard.is_opti_var(n) and not shard.has_opt_var(n)]
        deps = ProgramDeps(block, reduced_grads, pruned_opti_vars)
        deps._should_removed_var.update(deps._end_vars)
        reserved = self._params if self._optimizer_sharding else None
        for idx in range(len(block.ops) - 1, -1, -1):
            op = block.ops[idx]
            if op.type in _KEPT or op.type == "conditional_block":
                continue
            if deps.should_remove_op(idx):
                deps.remove_op(idx, reserved)
        # sharding with fp16_allreduce: an optimizer concat keeps only the inputs this rank has
        for op in block.ops:
            if op.type == "concat" and is_optimizer_op(op):
                op.desc.set_input("X", [n for n in op.desc.input("X") if block.has_var(n)])

    def _prune_startup_program(self, block: Any, shard: Any) -> None:
        for idx in range(len(block.ops) - 1, -1, -1):
            for name in block.ops[idx].desc.output_arg_names():
                if shard.has_var(name) or (self._optimizer_sharding and shard.is_param(name)):
                    continue
                block._remove_op(idx, sync=False)  # (Paddle: one var this rank drops removes the op)
                break
        for name in list(block.vars):
            if shard.has_var(name) or (self._optimizer_sharding and shard.is_param(name)):
                continue
            block._remove_var(name)


__all__ = ["PruneMixin"]
