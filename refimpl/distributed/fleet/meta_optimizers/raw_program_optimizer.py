"""``RawProgramOptimizer``: data parallelism written into the program, as Paddle 3.3.1 writes it.

Mirrors ``paddle/distributed/fleet/meta_optimizers/raw_program_optimizer.py``
of Paddle 3.3.1 (legacy IR, the CUDA build). Applies in collective mode
unless tensor parallel or sharding is on, while ``without_graph_optimization``
(default True) holds; it may wrap recompute, AMP, gradient merge, LAMB,
LARS, DGC and LocalSGD. ``minimize`` runs the inner optimizer, then, with
more than one worker:

* startup: ring 0 brought up (``c_gen_nccl_id``, ``c_comm_init``, the
  ``fill_constant`` / ``all_reduce`` / ``c_sync_calc_stream`` barrier, see
  ``collective_helper``), then a ``broadcast`` of every parameter from rank 0
  and a ``c_sync_comm_stream``;
* main: ``scale(loss@GRAD, 1/nranks)`` after the loss-gradient op; then

  - inside a gradient-merge block (``grad_merge_cond_name``): one
    ``all_reduce`` per merged gradient, between ``c_sync_calc_stream`` and
    ``c_sync_comm_stream``, before the block's optimizer ops;
  - with ``fuse_all_reduce_ops`` and ``fuse_grad_size_in_num > 1`` (the
    defaults: True, 8): gradients grouped per dtype into segments of at
    most ``fuse_grad_size_in_num``, a ``coalesce_tensor`` per segment
    (``copy_data=False``, before the first backward op, its
    ``FusedOutput_<grad>`` buffer), one ``all_reduce`` of the buffer after
    the segment's last gradient, and a ``depend`` per gradient after it;
  - else an ``all_reduce`` after each op that produces a gradient.

Differences: the build-strategy passes Paddle applies to the program here
(``apply_build_strategy``) add no op for these programs and are not run;
the ``FLAGS_sync_before_allreduce`` variant of the fused layout is not
written (Unimplemented when that environment variable is set).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import Unimplemented
from refimpl.core.reduce_op import ReduceOp
from refimpl.framework import unique_name
from refimpl.framework.op_role import OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole
from refimpl.framework.program import default_startup_program

from .collective_helper import broadcast_params, init_communicator
from .meta_optimizer_base import MetaOptimizerBase, ParamsGrads

GRAD_MERGE_COND_NAME = "grad_merge_cond_name"
_BACKWARD = {OP_ROLE_ATTR: OpRole.Backward}


def is_backward_op(op: Any) -> bool:
    return bool(int(op.all_attrs().get(OP_ROLE_ATTR, 0)) & OpRole.Backward)


def is_optimizer_op(op: Any) -> bool:
    return bool(int(op.all_attrs().get(OP_ROLE_ATTR, 0)) & OpRole.Optimize)


def is_loss_grad_op(op: Any) -> bool:
    return int(op.all_attrs().get(OP_ROLE_ATTR, 0)) == (OpRole.Backward | OpRole.Loss)


def _role_var_pairs(op: Any) -> List[Tuple[str, str]]:
    names = list(op.all_attrs().get(OP_ROLE_VAR_ATTR) or [])
    return list(zip(names[0::2], names[1::2]))


class RawProgramOptimizer(MetaOptimizerBase):
    """Allreduce-based data parallelism in the program (see the module docstring)."""

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.meta_optimizers_white_list = ["RecomputeOptimizer", "AMPOptimizer", "GradientMergeOptimizer",
                                           "LambOptimizer", "LarsOptimizer", "DGCOptimizer", "LocalSGDOptimizer"]
        self.meta_optimizers_black_list = []
        self.global_ring_id = 0

    def _set_basic_info(self, loss: Any, role_maker: Any, user_defined_optimizer: Any,
                        user_defined_strategy: Any) -> None:
        super()._set_basic_info(loss, role_maker, user_defined_optimizer, user_defined_strategy)
        self.without_graph_optimization = user_defined_strategy.without_graph_optimization
        self.fuse_all_reduce_ops = user_defined_strategy.fuse_all_reduce_ops
        self.fuse_grad_size_in_num = user_defined_strategy.fuse_grad_size_in_num
        self.calc_comm_same_stream = user_defined_strategy._calc_comm_same_stream
        self.sync_before_allreduce = os.environ.get("FLAGS_sync_before_allreduce")

    def _can_apply(self) -> bool:
        s = self.user_defined_strategy
        if not self.role_maker._is_collective or s.tensor_parallel or s.sharding:
            return False
        return bool(self.without_graph_optimization)

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.without_graph_optimization = False

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.without_graph_optimization = True

    # ---- minimize ------------------------------------------------------------------
    def minimize_impl(self, loss: Any, startup_program: Optional[Any] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Any], ParamsGrads]:
        rm = self.role_maker
        self.endpoints = list(rm._get_trainer_endpoints())
        self.rank, self.nranks = rm._worker_index(), rm._worker_num()
        self.current_endpoint = self.endpoints[self.rank] if self.rank < len(self.endpoints) else None
        self.startup_program = startup_program or default_startup_program()
        self.main_program = loss.block.program
        optimize_ops, params_grads = self.inner_opt.minimize(loss, self.startup_program, parameter_list,
                                                             no_grad_set)
        if self.nranks == 1:
            return optimize_ops, params_grads
        init_communicator(self.startup_program, self.current_endpoint, self.endpoints, self.rank,
                          self.global_ring_id, self.global_ring_id, True)
        broadcast_params(self.startup_program, self.global_ring_id)
        self._transpile_main_program(loss)
        return optimize_ops, params_grads

    def _transpile_main_program(self, loss: Any) -> None:
        self._insert_loss_grad_ops()
        merge_block = self._find_gradient_merge_block()
        if merge_block is not None:
            self._insert_allreduce_ops_for_gm(merge_block)
        elif self.fuse_all_reduce_ops and self.fuse_grad_size_in_num > 1:
            if self.sync_before_allreduce:
                raise Unimplemented("RawProgramOptimizer: FLAGS_sync_before_allreduce="
                                    f"{self.sync_before_allreduce!r} (its fused layout) is not implemented")
            self._allreduce_fusion_program()
        else:
            self._insert_allreduce_ops()

    def _insert_loss_grad_ops(self) -> None:
        """Scale ``loss@GRAD`` by 1/nranks, so the summed gradients are the mean over the workers."""
        block = self.main_program.global_block()
        for idx in reversed(range(len(block.ops))):
            op = block.ops[idx]
            if is_loss_grad_op(op):
                g = block.var(op.output_arg_names[0])
                block._insert_op(idx + 1, type="scale", inputs={"X": g}, outputs={"Out": g},
                                 attrs={"scale": 1.0 / self.nranks, **_BACKWARD})

    def _param_grads(self, ops: Sequence[Any]) -> List[Tuple[Any, Any]]:
        block = self.main_program.global_block()
        out = []
        for op in ops:
            if is_backward_op(op):
                for p, g in _role_var_pairs(op):
                    if not getattr(block.var(p), "is_distributed", False):
                        out.append((block.var(p), block.var(g)))
        return out

    def _insert_allreduce_ops(self) -> None:
        block = self.main_program.global_block()
        for idx in reversed(range(len(block.ops))):
            op = block.ops[idx]
            if not is_backward_op(op):
                continue
            for p, g in _role_var_pairs(op):
                if getattr(block.var(p), "is_distributed", False):
                    continue
                grad = block.var(g)
                block._insert_op(idx + 1, type="all_reduce", inputs={"x": grad}, outputs={"out": grad},
                                 attrs={"ring_id": self.global_ring_id, "reduce_type": ReduceOp.SUM, **_BACKWARD})

    # ---- gradient merge --------------------------------------------------------------
    def _find_gradient_merge_block(self) -> Optional[Any]:
        block = self.main_program.global_block()
        conds = {op.attr(GRAD_MERGE_COND_NAME) for op in block.ops if op.has_attr(GRAD_MERGE_COND_NAME)}
        if not conds:
            return None
        if len(conds) > 1:
            raise Unimplemented(f"RawProgramOptimizer: multiple gradient merge conditions found: {sorted(conds)}")
        cond = conds.pop()
        blocks = [op.attr("sub_block") for op in block.ops
                  if op.type == "conditional_block" and (op.inputs.get("Cond") or [None])[0] == cond]
        if len(blocks) != 1:
            raise Unimplemented(f"RawProgramOptimizer: expected one gradient merge block for {cond!r}, "
                                f"found {len(blocks)}")
        return blocks[0]

    def _insert_allreduce_ops_for_gm(self, gm_block: Any) -> None:
        first = 0
        for i in reversed(range(len(gm_block.ops))):
            if is_backward_op(gm_block.ops[i]):
                first = i + 1
                break
        grads = [g for _, g in self._param_grads(self.main_program.global_block().ops)]
        if not grads:
            return
        gm_block._insert_op(first, type="c_sync_calc_stream", inputs={"X": grads[0]}, outputs={"Out": grads[0]},
                            attrs=dict(_BACKWARD))
        for n, g in enumerate(grads, start=1):
            gm_block._insert_op(first + n, type="all_reduce", inputs={"x": g}, outputs={"out": g},
                                attrs={"ring_id": self.global_ring_id, "reduce_type": ReduceOp.SUM, **_BACKWARD})
        gm_block._insert_op(first + len(grads) + 1, type="c_sync_comm_stream", inputs={"X": grads},
                            outputs={"Out": grads}, attrs={"ring_id": self.global_ring_id, **_BACKWARD})

    # ---- fused allreduce ---------------------------------------------------------------
    def _outputs_span(self, first_backward_idx: int) -> Dict[str, Tuple[int, int]]:
        """var name -> (first, last) index of the backward ops writing it, up to the first optimizer op."""
        block = self.main_program.global_block()
        span: Dict[str, Tuple[int, int]] = {}
        for idx, op in enumerate(block.ops[first_backward_idx:], start=first_backward_idx):
            if is_optimizer_op(op):
                break
            for name in op.output_arg_names:
                if name != "@EMPTY@":
                    span[name] = (span[name][0], idx) if name in span else (idx, idx)
        return span

    def _segments(self, param_grads: List[Tuple[Any, Any]]) -> List[Tuple[List[Any], List[Any]]]:
        by_dtype: Dict[Any, List[Tuple[List[Any], List[Any]]]] = {}
        for p, g in param_grads:
            groups = by_dtype.setdefault(g.dtype, [([], [])])
            if len(groups[-1][1]) == self.fuse_grad_size_in_num:
                groups.append(([], []))
            groups[-1][0].append(g)
            groups[-1][1].append(p)
        return [seg for groups in by_dtype.values() for seg in groups if seg[0]]

    def _allreduce_fusion_program(self) -> None:
        block = self.main_program.global_block()
        first_bw = next((i for i, op in enumerate(block.ops) if is_backward_op(op)), -1)
        segments = self._segments(self._param_grads(block.ops))
        if not segments:
            return
        span = self._outputs_span(first_bw)
        segments.sort(key=lambda seg: max(span[g.name][1] for g in seg[0]))
        fused: List[Any] = [None] * len(segments)
        for i in reversed(range(len(segments))):
            grads = segments[i][0]
            fused[i] = block.create_var(name=unique_name.generate(f"FusedOutput_{grads[0].name}"),
                                        dtype=grads[0].dtype, persistable=False, stop_gradient=True)
            after = max(span[g.name][1] for g in grads)
            block._insert_op(after + 1, type="all_reduce", inputs={"x": fused[i]}, outputs={"out": fused[i]},
                             attrs={"ring_id": self.global_ring_id, "reduce_type": ReduceOp.SUM, **_BACKWARD})
        if not self.calc_comm_same_stream:
            idx = 0
            for i, (grads, _) in enumerate(segments):
                while not (block.ops[idx].type == "all_reduce" and fused[i].name in block.ops[idx].input_arg_names):
                    idx += 1
                for g in grads:
                    block._insert_op(idx + 1, type="depend", inputs={"X": g, "Dep": fused[i]}, outputs={"Out": g})
                    idx += 1
        span = self._outputs_span(first_bw)
        before = min([first for first, _ in span.values()] + [len(block.ops)])
        for i in reversed(range(len(segments))):  # all at the same place: segment 0 ends up first
            grads, params = segments[i]
            block._insert_op(before, type="coalesce_tensor", inputs={"Input": params},
                             outputs={"Output": grads, "FusedOutput": fused[i]},
                             attrs={"copy_data": False, "use_align": True, "dtype": to_vartype(grads[0].dtype),
                                    **_BACKWARD})


__all__ = ["RawProgramOptimizer"]
