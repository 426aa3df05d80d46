"""Sharding inside a pipeline (``sharding_configs['pp_degree'] > 1``): each stage's optimizer job sharded.

Paddle 3.3.1's ``ShardingOptimizer`` with ``pp_degree > 1``
(``paddle/distributed/fleet/meta_optimizers/sharding_optimizer.py``) lets
``PipelineOptimizer`` cut the program into section programs, then shards each
stage's parameters over that stage's sharding group (the ranks of one stage
that differ only in sharding rank; rank order mp -> sharding -> pp -> dp) and
sums the gradients over the sharding ring, then over the dp ring.

refimpl runs its own pipeline Plan (``refimpl/distributed/pipeline``), not
Paddle's section programs, so sharding is applied to this rank's optimizer
job, the one place a pipeline step sees the gradients whole (accumulated over
the micro-batches into ``{param}@GRAD@MERGE``):

1. every merge buffer of the stage is summed over the sharding ring and
   scaled by ``1 / sharding_degree`` (the pipeline's own sync then averages it
   over the dp ring), so AMP's checks and clipping, if any, see the sums;
2. the update ops of parameters another rank of the group owns are removed,
   and so are their accumulators' initialisations in startup: each rank keeps
   1/``sharding_degree`` of the stage's optimizer state (owners as
   ``Shard``: contiguous runs of roughly equal bytes);
3. after the updates, each parameter is broadcast from its owner.

With ``ClipGradByGlobalNorm`` the inner optimizer builds no clip ops (the
pipeline would cut them across stages); :func:`clip_merged_gradients` writes
them into the optimizer job instead, after AMP's ops, the norm summed over
the sharding, mp and pipe groups, each parameter counted once.

Difference from Paddle: the parameters (and the forward and backward jobs)
stay whole on every rank of a stage: this is ZeRO-1 (optimizer state), the
shape of Paddle's ``_dp_as_optimizer_sharding``, not the per-segment
parameter broadcasts of Paddle's sharding x pp programs.
"""
from __future__ import annotations

from typing import Any, Callable, List, Sequence

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.passes.gradient_accumulation import MERGE_SUFFIX
from refimpl.framework.op_role import OpRole

from .shard import Shard
from .utils import OP_ROLE_KEY


def stage_params(program: Any) -> List[str]:
    """The parameters the optimizer job updates, in the order of its update ops."""
    names: List[str] = []
    for op in program.global_block().ops:
        if op.role() & OpRole.Optimize and "Param" in op.input_names:
            for n in op.input("Param"):
                if n not in names:
                    names.append(n)
    return names


def shard_optimizer_job(program: Any, startup: Any, sharding_rank: int, sharding_degree: int,
                        sharding_ring: int) -> Shard:
    """Shard ``program`` (this rank's optimizer job) over its stage's sharding group, in place (see the
    module docstring); returns the owner assignment."""
    block = program.global_block()
    params = stage_params(program)
    if not params:
        raise InvalidArgument("sharding x pipeline: this stage's optimizer job updates no parameter")
    shard = Shard()
    shard.setup([(block.var(n), None) for n in params], sharding_rank, sharding_degree)
    _sum_merge_buffers(block, params, sharding_degree, sharding_ring)
    for idx in range(len(block.ops) - 1, -1, -1):
        op = block.ops[idx]
        if op.role() & OpRole.Optimize and "Param" in op.input_names and \
                not all(shard.has_param(n) for n in op.input("Param")):
            block._remove_op(idx, sync=False)
    for n in params:
        block.append_op(type="broadcast", inputs={"x": [n]}, outputs={"out": [n]},
                        attrs={"ring_id": sharding_ring, "root": shard.device(n), OP_ROLE_KEY: OpRole.Optimize})
    _prune_startup_state(startup.global_block(), shard, params)
    return shard


def clip_merged_gradients(program: Any, clip_norm: float, clipped: Callable[[str], bool],
                          counted: Callable[[str], bool], rings: Sequence[int]) -> None:
    """``ClipGradByGlobalNorm`` on the accumulated gradients of ``program`` (this rank's optimizer job), in place.

    Paddle's clip ops (``squared_l2_norm`` per gradient, ``sum``, ``sqrt``,
    ``elementwise_max`` with ``clip_norm``, ``elementwise_div``,
    ``elementwise_mul``) put after AMP's ops and before the first update: the
    squares of the gradients this rank updates and ``counted(param)`` admits
    are summed, then all-reduced over each of ``rings`` -- Paddle's
    ``GradientClipHelper.sync_global_norm`` over the sharding, mp and pp rings
    -- so that every parameter of the model is counted exactly once (the
    caller's ``counted`` drops, on mp ranks but the first, the parameters the
    model-parallel ranks replicate). The gradients of the update ops whose
    parameter is ``clipped`` (``need_clip``) are then scaled; the others are
    neither counted nor scaled, as in Paddle.
    """
    block = program.global_block()
    ops = list(block.ops)
    updates = [op for op in ops if op.role() & OpRole.Optimize and "Param" in op.input_names
               and op.input("Param")]
    at = ops.index(updates[0]) if updates else next(
        (i for i, op in enumerate(ops) if op.type == "broadcast"), len(ops))
    grads = [(op.input("Param")[0], op.input("Grad")[0]) for op in updates if clipped(op.input("Param")[0])]
    dtype = block.var(grads[0][1] if grads else stage_params(program)[0]).dtype
    role = {OP_ROLE_KEY: OpRole.Optimize}

    def tmp(name: str) -> str:
        block.create_var(name=name, shape=[1], dtype=dtype)
        return name

    def put(op_type: str, ins: dict, outs: dict, attrs: dict) -> None:
        nonlocal at
        block._insert_op(at, type=op_type, inputs=ins, outputs=outs, attrs=dict(role, **attrs))
        at += 1

    base = "gradient_clip_global_norm"
    squares = [tmp(f"{base}.zero")]
    put("fill_constant", {}, {"Out": [squares[0]]}, {"shape": [1], "dtype": to_vartype(dtype), "value": 0.0})
    for p, g in grads:
        if counted(p):
            squares.append(tmp(f"{g}@SQUARED_L2_NORM"))
            put("squared_l2_norm", {"X": [g]}, {"Out": [squares[-1]]}, {})
    total = tmp(f"{base}.sum")
    put("sum", {"X": squares}, {"Out": [total]}, {})
    for ring in rings:
        put("c_allreduce_sum", {"X": [total]}, {"Out": [total]}, {"ring_id": ring, "use_calc_stream": True})
    norm, max_norm, biggest, ratio = (tmp(f"{base}.{k}") for k in ("sqrt", "clip_norm", "max", "scale"))
    put("sqrt", {"X": [total]}, {"Out": [norm]}, {})
    put("fill_constant", {}, {"Out": [max_norm]}, {"shape": [1], "dtype": to_vartype(dtype),
                                                   "value": float(clip_norm)})
    put("elementwise_max", {"X": [max_norm], "Y": [norm]}, {"Out": [biggest]}, {"axis": -1})
    put("elementwise_div", {"X": [max_norm], "Y": [biggest]}, {"Out": [ratio]}, {"axis": -1})
    for _, g in grads:
        put("elementwise_mul", {"X": [g], "Y": [ratio]}, {"Out": [g]}, {"axis": -1})


def _sum_merge_buffers(block: Any, params: Sequence[str], degree: int, ring: int) -> None:
    at = 0
    for n in params:
        merge = n + MERGE_SUFFIX
        if merge not in block.vars:
            raise InvalidArgument(f"sharding x pipeline: the optimizer job has no accumulated gradient {merge!r}")
        block._insert_op(at, type="all_reduce", inputs={"x": [merge]}, outputs={"out": [merge]},
                         attrs={"ring_id": ring, "reduce_type": 0, OP_ROLE_KEY: OpRole.Optimize})
        block._insert_op(at + 1, type="scale", inputs={"X": [merge]}, outputs={"Out": [merge]},
                         attrs={"scale": 1.0 / degree, OP_ROLE_KEY: OpRole.Optimize})
        at += 2


def _prune_startup_state(block: Any, shard: Shard, params: Sequence[str]) -> None:
    """Remove the initialisation of the accumulators of this stage's parameters another rank owns."""
    def dropped(name: str) -> bool:
        return (name not in shard.global_params and shard.is_opti_var(name) and not shard.has_opt_var(name)
                and shard._base_param(name) in params)
    for idx in range(len(block.ops) - 1, -1, -1):
        if any(dropped(n) for n in block.ops[idx].output_arg_names):
            block._remove_op(idx, sync=False)
    for name in [n for n in block.vars if dropped(n)]:
        block._remove_var(name)


__all__ = ["clip_merged_gradients", "shard_optimizer_job", "stage_params"]
