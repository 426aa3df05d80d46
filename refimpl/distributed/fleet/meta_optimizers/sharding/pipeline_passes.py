"""Sharding inside a pipeline (``pp_degree > 1``): Paddle's legacy section program, then sharding's passes.

Mirrors the pipeline parts of ``paddle/distributed/fleet/meta_optimizers/sharding_optimizer.py``
(Paddle 3.3.1), as a mixin of refimpl's ``ShardingOptimizer``:

- ``_pipeline_inner_minimize`` (the pp branch of Paddle's ``_inner_opt_minimize``): the program gets
  Paddle's ``_pipeline_opt`` dict (ring 20 for the first stage pair, global ring 3, ``use_sharding``)
  and goes through the legacy ``PipelineOptimizer`` (``refimpl/incubate/optimizer/pipeline/``),
  whose ``minimize`` splits it into one section program per stage; this rank's section
  (``program_list[pp_rank]``) and the split startup become the programs every later pass edits,
  its optimizer ops' gradients renamed to ``@GRAD@MERGED``;
- ``_init_pipeline_comm`` / ``_init_pair_comm``: ring 4 over this rank's pipe, then one two-rank
  ring per stage pair this stage is in (the pair's first stage is that ring's rank 0);
- ``_apply_opt_sharding_pass``: with ``_dp_as_optimizer_sharding`` (sharding 1, dp > 1) the dp ranks
  split the optimizer state as a sharding group would, every parameter kept;
- ``_insert_allreduce_for_pp``: the update ops (and fp16 casts) of other sharding ranks' parameters
  go, the pipeline accumulates each gradient over the micro-batches into ``@GRAD@MERGED``
  (``PipelineOptimizer._accumulate_gradients``), averaged by ``_avg_grad_merge_after_sum`` when
  ``scale_gradient``; then, once per step in the optimizer: optimizer sharding's ``reduce`` of each
  merged gradient to its dp owner and ``broadcast`` of each updated parameter back (fused into
  ``coalesce_tensor`` buffers with ``fuse_all_reduce_ops``), or pure dp's ``all_reduce``.

refimpl additions: ``_bind_pipeline_rings`` binds the pipe and pair rings (with the other rings of
``ShardingGroups.world_rings``) to refimpl's world groups, once the pairs are known; the section
program of the first rank of each stage is marked as the one saving the stage's shared state
(``persistables.SAVES_SHARED_STATE_ATTR``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument
from refimpl.framework.op_role import OpRole
from refimpl.framework.program import default_startup_program

from .. import program_rings
from ..collective_helper import init_communicator
from .persistables import SAVES_SHARED_STATE_ATTR
from .utils import (OP_ROLE_KEY, get_first_optimize_op_idx, insert_allreduce_ops, insert_broadcast_param_ops,
                    insert_reduce_ops, is_optimizer_op, is_update_op, rename_input)

#: Paddle's ``_pipeline_opt['ring_id']`` (the first pair ring) and ``['global_ring_id']`` under sharding
PIPELINE_PAIR_RING, PIPELINE_GLOBAL_RING = 20, 3

ParamsGrads = List[Tuple[Any, Any]]


class PipelineShardingMixin:
    """The pp-specific passes of ``ShardingOptimizer`` (see the module docstring)."""

    # The state of ShardingOptimizer this mixin reads and writes (set in its __init__ and minimize).
    user_defined_strategy: Any
    role_maker: Any
    inner_opt: Any
    _groups: Any
    _main_program: Any
    _startup_program: Any
    _shard: Any
    _params: Any
    _reduced_grads_to_param: Dict[str, str]
    _optimizer_sharding: bool
    _gradient_merge_acc_step: int
    current_endpoint: str
    mp_degree: int
    sharding_degree: int
    sharding_rank: int
    sharding_ring_id: int
    pp_degree: int
    pp_rank: int
    pp_ring_id: int
    pp_group_endpoints: List[str]
    dp_degree: int
    dp_rank: int
    dp_ring_id: int
    mp_ring_id: int
    hybrid_dp: bool
    hybrid_dp_mode: Optional[str]
    pp_allreduce_in_optimize: bool
    scale_gradient: bool
    pipeline_pair: List[Tuple[int, int]]
    pp_ring_map: Dict[int, int]
    _build_shard: Any
    _prune_main_program: Any
    _prune_startup_program: Any

    # ---- the section program ------------------------------------------------------------------
    def _pipeline_inner_minimize(self, loss: Any, startup_program: Optional[Any], parameter_list: Any,
                                 no_grad_set: Any) -> Tuple[List[Any], ParamsGrads]:
        from refimpl.incubate.optimizer.pipeline import PipelineOptimizer
        configs = self.user_defined_strategy.pipeline_configs
        pp_optimizer = PipelineOptimizer(self.inner_opt, self._gradient_merge_acc_step)
        self._pp_optimizer = pp_optimizer
        global_rank = self.role_maker._worker_index()
        main_program = loss.block.program
        main_program._pipeline_opt = {
            "schedule_mode": configs["schedule_mode"], "micro_batch_size": configs["micro_batch_size"],
            "local_rank": self.pp_rank, "global_rank": global_rank, "use_sharding": True,
            "ring_id": PIPELINE_PAIR_RING, "global_ring_id": PIPELINE_GLOBAL_RING, "mp_degree": self.mp_degree,
            "mp_rank": global_rank % self.mp_degree, "scale_gradient": self.scale_gradient}
        optimize_ops, params_grads, program_list, self.pipeline_pair, self.pp_ring_map = pp_optimizer.minimize(
            loss, startup_program, parameter_list, no_grad_set)
        if len(program_list) != self.pp_degree:
            raise InvalidArgument(f"sharding_configs['pp_degree'] = {self.pp_degree}, but the program's "
                                  f"device_guard stages make {len(program_list)} section programs")
        startup = startup_program if startup_program is not None else default_startup_program()
        self._startup_program = startup._pipeline_opt["startup_program"]
        self._main_program = program_list[self.pp_rank]
        block = self._main_program.global_block()
        params_grads = [(p, g) for p, g in params_grads if block.has_var(p.name)]  # this stage's
        pp_optimizer._rename_gradient_var_name(block)
        # refimpl's save rule (persistables.py): the first rank of each stage saves its shared state
        setattr(self._main_program, SAVES_SHARED_STATE_ATTR,
                max(self._groups.sharding_rank, 0) == 0 and max(self._groups.mp_rank, 0) == 0
                and max(self._groups.dp_rank, 0) == 0)
        self._bind_pipeline_rings()
        return optimize_ops, params_grads

    def _bind_pipeline_rings(self) -> None:
        """Every ring of the program, pipe and pairs included, bound to refimpl's world groups."""
        program_rings.bind_rings(self._groups.world_rings(self.pipeline_pair, self.pp_ring_map))

    # ---- communicators ------------------------------------------------------------------------
    def _init_pipeline_comm(self) -> None:
        init_communicator(self._startup_program, self.current_endpoint, self.pp_group_endpoints, self.pp_rank,
                          self.pp_ring_id, sync=False)
        for pair in self.pipeline_pair:
            if self.pp_rank in pair:
                self._init_pair_comm(pair, self.pp_ring_map[pair[0] * 1000 + pair[1]])

    def _init_pair_comm(self, pair: Sequence[int], ring_id: int) -> None:
        endpoints = [self.pp_group_endpoints[pair[0]], self.pp_group_endpoints[pair[1]]]
        init_communicator(self._startup_program, self.current_endpoint, endpoints,
                          0 if self.pp_rank == pair[0] else 1, ring_id, sync=False)

    # ---- optimizer sharding over dp -------------------------------------------------------------
    def _apply_opt_sharding_pass(self, params_grads: ParamsGrads) -> None:
        """dp as optimizer sharding: the dp ranks own the optimizer state as a sharding group would."""
        if not self._optimizer_sharding:
            return
        main_block, startup_block = self._main_program.global_block(), self._startup_program.global_block()
        self._build_shard(params_grads, self.dp_rank, self.dp_degree)
        for param, grad in params_grads:  # (Paddle's note: or the pruning drops the casts)
            self._reduced_grads_to_param[grad.name] = param.name
        self._prune_main_program(main_block, self._shard, [self.mp_ring_id, self.pp_ring_id, self.dp_ring_id])
        self._prune_startup_program(startup_block, self._shard)

    # ---- the merged gradients' communication ----------------------------------------------------
    def _insert_allreduce_for_pp(self, params_grads: ParamsGrads) -> None:
        if self.pp_degree == 1:
            return
        strategy = self.user_defined_strategy
        block = self._main_program.global_block()
        if self.sharding_degree > 1:
            self._drop_foreign_updates(block)
        if self._optimizer_sharding:  # (Paddle: fp16_allreduce is not supported with optimizer sharding)
            strategy.fp16_allreduce = False
        shard = self._shard if self._optimizer_sharding else None
        # (None: a section without optimizer ops, as Paddle's fused merge answers; nothing to communicate)
        merged: List[str] = self._pp_optimizer._accumulate_gradients(block, strategy=strategy, shard=shard) or []
        len_of_ops = len(block.ops)
        if self.scale_gradient:
            self._avg_grad_merge_after_sum(block, merged)
        first_opt = get_first_optimize_op_idx(block)
        if first_opt is None:
            raise InvalidArgument(f"sharding x pp: the section program of stage {self.pp_rank} has no backward op")
        if self.pp_allreduce_in_optimize:
            merged = insert_reduce_ops(block, first_opt, self.sharding_ring_id, merged, self._shard,
                                       OpRole.Optimize, use_calc_stream=True, rank=self.sharding_rank)
            first_opt += len(block.ops) - len_of_ops
            len_of_ops = len(block.ops)
        if self._optimizer_sharding:
            merged = insert_reduce_ops(block, first_opt, self.dp_ring_id, merged, self._shard, OpRole.Optimize,
                                       use_calc_stream=True, rank=self.dp_rank, strategy=strategy)
            optimize_cast = strategy.sharding_configs["optimize_cast"]
            # (fused after optimize_cast's renames, in _apply_optimize_offload_pass, when that is on)
            owned = insert_broadcast_param_ops(block, len(block.ops), self.dp_ring_id,
                                               [p.name for p, _ in params_grads], self._shard, OpRole.Optimize,
                                               use_calc_stream=True, rank=self.dp_rank,
                                               strategy=None if optimize_cast else strategy)
            if not strategy.fuse_grad_merge and not optimize_cast and len(merged) != len(owned):
                raise InvalidArgument(f"optimizer sharding: dp rank {self.dp_rank} owns the gradients {merged} "
                                      f"but the parameters {owned}")
        elif self.hybrid_dp and self.hybrid_dp_mode == "pp_hybrid_dp":
            insert_allreduce_ops(block, first_opt, self.dp_ring_id, merged, OpRole.Optimize,
                                 use_calc_stream=True, user_defined_strategy=strategy)

    def _drop_foreign_updates(self, block: Any) -> None:
        """Sharding x pp: the update ops of parameters another sharding rank owns, and the casts of the
        parameters this rank no longer has."""
        for idx in range(len(block.ops) - 1, -1, -1):
            op = block.ops[idx]
            if is_update_op(op) and not self._shard.has_param(op.attr("op_role_var")[0]):
                block._remove_op(idx)
        for idx in range(len(block.ops) - 1, -1, -1):
            op = block.ops[idx]
            if op.type != "cast":
                continue
            name = op.input_arg_names[0]
            if name in self._params and name not in block.vars:
                block._remove_op(idx)

    def _avg_grad_merge_after_sum(self, block: Any, merged: Sequence[str]) -> None:
        """``scale_gradient``: the merged sums become means over the micro-batches -- by scaling the loss
        scaling of dynamic AMP (``check_finite_and_unscale`` reads ``<scale>@TMP``), else by a ``scale`` of
        each merged gradient before the first optimizer op."""
        strategy = self.user_defined_strategy
        steps = self._gradient_merge_acc_step
        if strategy.amp and strategy.amp_configs["use_dynamic_loss_scaling"]:
            for idx, op in enumerate(block.ops):
                if op.type != "check_finite_and_unscale":
                    continue
                name = op.input("Scale")[0]
                scale = block.var(name)
                tmp = block.create_var(name=name + "@TMP", shape=scale.shape, dtype=scale.dtype)
                block._insert_op(idx, type="scale", inputs={"X": [scale]}, outputs={"Out": [tmp]},
                                 attrs={"scale": steps, "bias": 0.0, "bias_after_scale": False,
                                        OP_ROLE_KEY: OpRole.Optimize})
                rename_input(op, name, tmp.name)
                return
            return
        first = next((i for i, op in enumerate(block.ops)
                      if is_optimizer_op(op) and op.type != "c_sync_comm_stream"), None)
        if first is None:
            raise InvalidArgument("sharding x pp with scale_gradient: the section program has no optimizer op")
        for grad in merged:
            block._insert_op(first, type="scale", inputs={"X": [grad]}, outputs={"Out": [grad]},
                             attrs={"scale": 1.0 / steps, "bias": 0.0, "bias_after_scale": False,
                                    OP_ROLE_KEY: OpRole.Optimize})


__all__ = ["PipelineShardingMixin", "PIPELINE_PAIR_RING", "PIPELINE_GLOBAL_RING"]
