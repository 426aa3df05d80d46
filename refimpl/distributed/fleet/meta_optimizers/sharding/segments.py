"""Static sharding's program split and its communication: segments, broadcasts, reduces, syncs.

Mirrors ``collect_segment``, ``_split_program`` and ``_add_broadcast_allreduce``
of ``paddle/distributed/fleet/meta_optimizers/sharding_optimizer.py`` (Paddle
3.3.1), as a mixin of refimpl's ``ShardingOptimizer``.

``_split_program`` walks the forward and backward ops backwards, cutting a new
:class:`ProgramSegment` once the current one's parameters pass
``segment_broadcast_MB`` (or at each ``segment_anchors`` var: its gradient in
the backward, the var itself in the forward). Each parameter a segment reads
gets its broadcast var: the parameter itself on its owner, a fresh
``<param>@BroadCast_N`` elsewhere (zero-filled first, then overwritten by the
owner's ``broadcast``); the ops of the segment read that var. Each backward op's
``op_role_var`` pairs name the gradients to ``reduce`` to their owners.

``_add_broadcast_allreduce`` then writes, for segment ``i`` (counting from
the program's start), before its first op: the ``broadcast`` of segment
``i+1``'s vars and the ``reduce`` of segment ``i-1``'s gradients (so
communication of the next segment overlaps this one's compute), and at its end
the ``c_sync_comm_stream`` / ``c_sync_calc_stream`` that order them; the first
segment's broadcasts go before the whole program. With hybrid dp each owned
gradient is then ``all_reduce``d on the dp ring; with sharding's gradient
merge it is added into its ``@GradientMerge`` buffer instead.

Departure from Paddle 3.3.1: the ops before the first segment that read no
broadcast var (the walk's last stretch) are never made a segment, so an AMP
``cast`` there of a parameter to ``<param>.cast_fp16`` -- AMP casts a weight
shared by two layers once, before the program's first op -- is never removed
by ``remove_cast_op``. Paddle keeps it; on a rank that does not own that
parameter the parameter is pruned, and the program reads a var it does not
have. refimpl removes such casts of parameters another rank owns (their
``cast_fp16`` output is read on this rank only through its broadcast vars);
the owner's program is Paddle's.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from refimpl.core.errors import InvalidArgument
from refimpl.framework import unique_name
from refimpl.framework.op_role import OpRole

from .fp16_helper import FP16Utils
from .shard import ProgramSegment, Shard
from .utils import (OP_ROLE_VAR_KEY, get_var_size, insert_allreduce_ops, insert_broadcast_ops, insert_cast_ops,
                    insert_fill_constant_ops, insert_reduce_ops, insert_sync_calc_op, insert_sync_comm_ops,
                    is_backward_op, rename_input)


def _role(op: Any) -> int:
    return int(op.attr("op_role"))


class SegmentsMixin:
    """The segment split and the communication it needs (see the module docstring)."""

    # The state of ShardingOptimizer this mixin reads and writes (set in its __init__ and minimize).
    user_defined_strategy: Any
    _main_program: Any
    _startup_program: Any
    _shard: Shard
    _segments: List[ProgramSegment]
    _params: Set[str]
    _broadcast_vars: Set[str]
    _reduced_grads_to_param: Dict[str, str]
    _sharding_segment_strategy: str
    _broadcast_MB: float
    _forward_remain_anchors: List[str]
    _backward_remain_anchors: List[str]
    sharding_ring_id: int
    dp_ring_id: int
    pp_degree: int
    pp_allreduce_in_optimize: bool
    hybrid_dp: bool
    hybrid_dp_mode: Optional[str]
    gradient_merge_mode: str
    _gradient_merge_acc_step: int
    # from GradientMergeMixin (sharding/gradient_merge.py)
    create_persistable_gradients_and_insert_merge_ops: Callable[[Any, Any, int, Sequence[str], Any], None]

    def collect_segment(self, segment: ProgramSegment, op_idx: int, block: Any) -> ProgramSegment:
        segment._start_idx = op_idx + 1
        self._segments.insert(0, segment)
        new_segment = ProgramSegment(block)
        new_segment._end_idx = op_idx + 1
        return new_segment

    # ---- the split -------------------------------------------------------------------------------
    def _split_program(self, block: Any) -> None:
        last_backward_op_idx = 0
        for op_idx in range(len(block.ops) - 1, -1, -1):
            if _role(block.ops[op_idx]) != OpRole.Optimize:
                last_backward_op_idx = op_idx + 1
                break
        segment = ProgramSegment(block)
        segment._end_idx = last_backward_op_idx
        for op_idx in reversed(range(last_backward_op_idx)):
            op = block.ops[op_idx]
            if self._sharding_segment_strategy == "segment_broadcast_MB":
                if segment._param_mem >= self._broadcast_MB:
                    segment = self.collect_segment(segment, op_idx, block)
            else:
                segment = self._cut_at_anchor(segment, op_idx, op, block)
            self._find_broadcast_vars(segment, op)
            self._find_reduce_vars(segment, op)
            if FP16Utils.is_fp16_cast_op(block, op, self._params):
                fp32_param, fp16_param = op.desc.input_arg_names()[0], op.desc.output_arg_names()[0]
                if self._shard.has_param(fp32_param):
                    segment._cast_ops[fp16_param] = fp32_param
        if segment._param_mem > 0:
            segment._start_idx = 0
            self._segments.insert(0, segment)
        if self._sharding_segment_strategy == "segment_anchors":
            left = self._forward_remain_anchors + self._backward_remain_anchors
            if left:
                raise InvalidArgument(f"sharding_configs['segment_anchors']: anchors {left} were not met both "
                                      "as a forward op's output and as a backward op's (gradient) input")

    def _cut_at_anchor(self, segment: ProgramSegment, op_idx: int, op: Any, block: Any) -> ProgramSegment:
        role = _role(op)
        if role == OpRole.Backward:
            for name in op.desc.input_arg_names():
                # Paddle's naive AMP rule: the anchor's gradient is read as <anchor>.cast_fp16@GRAD
                if self.user_defined_strategy.amp:
                    if ".cast_fp16@GRAD" not in name:
                        continue
                    name = name[:name.find(".cast_fp16@GRAD")]
                if name in self._backward_remain_anchors:
                    segment = self.collect_segment(segment, op_idx, block)
                    if name in self._forward_remain_anchors:
                        raise InvalidArgument(f"sharding_configs['segment_anchors']: anchor [{name}] met twice")
                    self._backward_remain_anchors.remove(name)
                    self._forward_remain_anchors.append(name)
        elif role == OpRole.Forward:
            for name in op.desc.output_arg_names():
                if name in self._forward_remain_anchors:
                    segment = self.collect_segment(segment, op_idx, block)
                    self._forward_remain_anchors.remove(name)
        return segment

    def _find_broadcast_vars(self, segment: ProgramSegment, op: Any) -> None:
        for name in op.desc.input_arg_names():
            if name not in self._broadcast_vars:
                continue
            if name in segment._param2broadcast:  # reuse the segment's broadcast var
                broadcast_name = segment._param2broadcast[name]
                if name != broadcast_name:
                    rename_input(op, name, broadcast_name)
                continue
            if self._shard.has_param(name):
                broadcast_name = name
            else:
                broadcast_name = unique_name.generate(name + "@BroadCast")
                segment._fill_constant_vars.append(broadcast_name)
            segment._param2broadcast[name] = broadcast_name
            segment._broadcast_vars.append((broadcast_name, self._shard.device(name)))
            segment._param_mem += get_var_size(self._main_program.global_block().var(name))

    def _find_reduce_vars(self, segment: ProgramSegment, op: Any) -> None:
        if self.pp_degree > 1 and self.pp_allreduce_in_optimize:
            return  # the pipeline's merged gradients are reduced in the optimizer instead (Paddle's option)
        if not (is_backward_op(op) and OP_ROLE_VAR_KEY in op.attr_names):
            return
        pairs = list(op.all_attrs()[OP_ROLE_VAR_KEY] or [])
        for param, grad in zip(pairs[0::2], pairs[1::2]):
            segment._allreduce_vars.append(grad)
            if grad in self._reduced_grads_to_param:
                raise InvalidArgument(f"sharding: gradient {grad!r} is produced twice (a shared parameter?)")
            self._reduced_grads_to_param[grad] = param

    # ---- the communication -------------------------------------------------------------------------
    @property
    def _sharding_gm(self) -> bool:
        return self.gradient_merge_mode == "sharding_gm" and self._gradient_merge_acc_step > 1

    @property
    def _sharding_hybrid_dp(self) -> bool:
        return self.hybrid_dp and self.hybrid_dp_mode == "sharding_hybrid_dp"

    def _add_broadcast_allreduce(self, block: Any) -> None:
        if len(self._segments) < 1:
            return
        self._fix_last_segment_end(block)
        last = self._segments[-1]
        if last._allreduce_vars:
            self._reduce_last_segment(block, last)
        for idx in reversed(range(len(self._segments))):
            self._add_segment_comm(block, idx)
        first = self._segments[0]
        if first._broadcast_vars:
            insert_sync_comm_ops(block, first._start_idx, self.sharding_ring_id,
                                 [name for name, _ in first._broadcast_vars])
            insert_broadcast_ops(block, first._start_idx, self.sharding_ring_id, first._broadcast_vars)
        fill_constant_vars: List[str] = []
        cast_ops: Dict[str, str] = {}
        for seg in self._segments[:2]:
            fill_constant_vars += seg._fill_constant_vars
            cast_ops.update(seg._cast_ops)
        calc_dep_vars = fill_constant_vars + list(cast_ops)
        if calc_dep_vars:
            insert_sync_calc_op(block, first._start_idx, [calc_dep_vars[-1]])
        if fill_constant_vars:
            insert_fill_constant_ops(block, first._start_idx, fill_constant_vars)
        if cast_ops:
            insert_cast_ops(block, first._start_idx, cast_ops)
        self._drop_foreign_casts_before(block, first._start_idx)

    def _drop_foreign_casts_before(self, block: Any, end: int) -> None:
        """Remove the AMP casts of parameters another rank owns from ``block.ops[:end]``.

        Those ops precede every segment (a stretch reading no broadcast var is never made one), so
        ``remove_cast_op`` never sees them; their outputs are read through the broadcast vars only,
        and their inputs are pruned from this rank (see the module docstring)."""
        for op_idx in reversed(range(end)):
            op = block.ops[op_idx]
            if FP16Utils.is_fp16_cast_op(block, op, self._params) and \
                    not self._shard.has_param(op.desc.input_arg_names()[0]):
                block._remove_op(op_idx, sync=False)

    def _fix_last_segment_end(self, block: Any) -> None:
        """Pull the last segment's end back to after gradient-merge sums / @TMP casts (Paddle's rule)."""
        last = self._segments[-1]
        new_end = last._end_idx
        for idx in range(last._end_idx - 1, last._start_idx - 1, -1):
            op = block.ops[idx]
            if op.type in ("fill_constant", "sum") and "MERGED" in op.output_arg_names[0]:
                new_end = idx + 1
            elif op.type == "cast" and "@TMP" in op.output_arg_names[0]:
                new_end = idx + 1
        last._end_idx = new_end

    def _reduce_last_segment(self, block: Any, last: ProgramSegment) -> None:
        """The gradients of the program's last segment (the backward's first) are reduced at its end."""
        owned = self._shard.filter_grads(last._allreduce_vars)
        if not self._sharding_gm:
            if self._sharding_hybrid_dp and owned:
                insert_sync_comm_ops(block, last._end_idx, self.dp_ring_id, owned)
                insert_allreduce_ops(block, last._end_idx, self.dp_ring_id, owned,
                                     user_defined_strategy=self.user_defined_strategy)
        else:
            self.create_persistable_gradients_and_insert_merge_ops(block, self._startup_program.global_block(),
                                                                   last._end_idx, owned, self._shard)
        insert_sync_comm_ops(block, last._end_idx, self.sharding_ring_id, last._allreduce_vars)
        insert_reduce_ops(block, last._end_idx, self.sharding_ring_id, last._allreduce_vars, self._shard,
                          op_role=OpRole.Backward)

    def _add_segment_comm(self, block: Any, idx: int) -> None:
        segs, segment = self._segments, self._segments[idx]
        allreduce_vars = segs[idx - 1]._allreduce_vars if idx > 0 else []
        broadcast_vars = segs[idx + 1]._broadcast_vars if idx < len(segs) - 1 else []
        fill_constant_vars = segs[idx + 2]._fill_constant_vars if idx < len(segs) - 2 else []
        cast_ops = segs[idx + 2]._cast_ops if idx < len(segs) - 2 else {}
        self._use_broadcast_vars(block, segment)
        segment._end_idx += FP16Utils.remove_cast_op(block, self._params, segment, 0)
        owned = self._shard.filter_grads(allreduce_vars)
        broadcast_names = [name for name, _ in broadcast_vars]
        # at the segment's end: wait for the communication it started
        if not self._sharding_gm:
            if self._sharding_hybrid_dp and owned:
                insert_sync_comm_ops(block, segment._end_idx, self.dp_ring_id, owned)
                insert_sync_comm_ops(block, segment._end_idx, self.sharding_ring_id, broadcast_names)
            else:
                insert_sync_comm_ops(block, segment._end_idx, self.sharding_ring_id,
                                     allreduce_vars + broadcast_names)
        else:
            insert_sync_comm_ops(block, segment._end_idx, self.sharding_ring_id, broadcast_names)
        calc_dep_vars = fill_constant_vars + list(cast_ops) + segment._allreduce_vars
        if calc_dep_vars:
            insert_sync_calc_op(block, segment._end_idx, [calc_dep_vars[-1]])
        insert_fill_constant_ops(block, segment._end_idx, fill_constant_vars)
        insert_cast_ops(block, segment._end_idx, cast_ops)
        # at the segment's start: the next segment's broadcasts, the previous one's reduces
        if self._sharding_gm:
            self.create_persistable_gradients_and_insert_merge_ops(block, self._startup_program.global_block(),
                                                                   segment._start_idx, owned, self._shard)
        insert_broadcast_ops(block, segment._start_idx, self.sharding_ring_id, broadcast_vars)
        if not self._sharding_gm:
            if self._sharding_hybrid_dp and owned:
                insert_allreduce_ops(block, segment._start_idx, self.dp_ring_id, owned,
                                     user_defined_strategy=self.user_defined_strategy)
                insert_sync_comm_ops(block, segment._start_idx, self.sharding_ring_id, allreduce_vars)
        else:
            insert_sync_comm_ops(block, segment._start_idx, self.sharding_ring_id, allreduce_vars)
        if allreduce_vars:
            insert_reduce_ops(block, segment._start_idx, self.sharding_ring_id, allreduce_vars, self._shard,
                              op_role=OpRole.Backward)

    def _use_broadcast_vars(self, block: Any, segment: ProgramSegment) -> None:
        """The segment's ops read the broadcast vars; those of non-owned parameters are created."""
        for op_idx in reversed(range(segment._start_idx, segment._end_idx)):
            op = block.ops[op_idx]
            for name in op.desc.input_arg_names():
                target = segment._param2broadcast.get(name)
                if target is not None and target != name:
                    rename_input(op, name, target)
        main = self._main_program.global_block()
        for param, broadcast_name in segment._param2broadcast.items():
            if param != broadcast_name:
                src = main.var(param)
                block.create_var(name=broadcast_name, shape=src.shape, dtype=src.dtype, persistable=False)


__all__ = ["SegmentsMixin"]
