"""Checks of ``ShardingOptimizer`` for sharding inside tensor and pipeline parallelism (refimpl additions).

Paddle 3.3.1's ``ShardingOptimizer``
(``paddle/distributed/fleet/meta_optimizers/sharding_optimizer.py``) only
asserts on the degrees; these checks run at ``minimize`` before anything is
built, raise typed errors naming the option and its value, and give the same
message on every rank (they read only the program and the strategy):

* :func:`check_model_parallel_ops`: the model-parallel ops of the forward
  (``paddle.distributed.split``'s, on ring 0) must have been built for
  ``mp_degree`` ranks. Paddle would build such a program and fail, or compute
  with the wrong shards, when it runs.
* :func:`check_pipeline_configs`: with ``pp_degree > 1`` Paddle's assert on
  the gradient scale strategy ('avg'), and Unimplemented for pure bf16 AMP,
  whose section programs refimpl has not checked against Paddle's.
* :func:`check_every_param_clipped`: with a global-norm clip and sharded
  optimizer state, a parameter the clip leaves out (``need_clip=False``)
  fails Paddle's assert in ``prune_gradient_clip`` on the rank owning it
  (the others go on and wait for it); refimpl refuses on every rank.
"""
from __future__ import annotations

from typing import Any

from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented
from refimpl.ops.model_parallel_ops import RING_OPS

from .rings import MP_RING_ID


def check_model_parallel_ops(loss: Any, mp_degree: int) -> None:
    """InvalidArgument when a ring-0 op of ``loss``'s program was built for another model-parallel degree."""
    where = f"sharding_configs['mp_degree'] = {mp_degree}"
    for i, op in enumerate(loss.block.program.global_block().ops):
        if op.type == "c_embedding":
            rows, vocab = op.block._find_var_recursive(op.input("W")[0]).shape[0], int(op.attr("vocab_size"))
            if vocab >= 0 and rows * mp_degree != vocab:
                raise InvalidArgument(f"{where}, but op {i} (c_embedding) looks up a vocabulary of {vocab} rows "
                                      f"in a shard of {rows}: it was built for {vocab // max(rows, 1)} "
                                      "model-parallel ranks")
            continue
        if op.type not in RING_OPS or int(op.attr("ring_id")) != MP_RING_ID:
            continue
        if mp_degree == 1:
            raise InvalidArgument(f"{where}, but op {i} ({op.type}) communicates over ring 0, the "
                                  "model-parallel ring, which exists only with mp_degree > 1")
        if op.has_attr("nranks") and int(op.attr("nranks")) != mp_degree:
            raise InvalidArgument(f"{where}, but op {i} ({op.type}) was built for nranks = "
                                  f"{op.attr('nranks')} model-parallel ranks (split's num_partitions)")


def check_pipeline_configs(configs: Any, pp: int, strategy: Any, optimizer: Any) -> None:
    """What Paddle asserts for sharding x pp, and Unimplemented for pure bf16, which refimpl has not checked
    against Paddle there."""
    scale = strategy.gradient_scale_configs["scale_strategy"]
    if scale != "avg":   # Paddle asserts it for the pipeline
        raise InvalidArgument(f"gradient_scale_configs['scale_strategy'] = {scale!r} with sharding_configs"
                              f"['pp_degree'] = {pp}: for pipeline mode the gradient scale mode should be 'avg'")
    if strategy.amp and strategy.amp_configs["use_pure_bf16"]:
        raise Unimplemented(f"amp_configs['use_pure_bf16'] = True with sharding_configs['pp_degree'] = {pp}: not "
                            "implemented in refimpl's sharding x pipeline (fp16 O1 and pure fp16 are)")


__all__ = ["check_model_parallel_ops", "check_pipeline_configs"]


def check_every_param_clipped(loss: Any, optimizer: Any) -> None:
    """PreconditionNotMet naming the trainable parameters a ``ClipGradByGlobalNorm`` leaves out."""
    from refimpl.nn.clip import ClipGradByGlobalNorm
    if not isinstance(getattr(optimizer, "_grad_clip", None), ClipGradByGlobalNorm):
        return
    left_out = sorted(p.name for p in loss.block.program.all_parameters()
                      if p.trainable and not p.stop_gradient and getattr(p, "need_clip", True) is False)
    if left_out:
        raise PreconditionNotMet(
            f"gradient clip under sharding: the parameters {left_out} are not clipped (need_clip=False); Paddle "
            "3.3.1's prune_gradient_clip asserts on the ranks owning them: clip every parameter, or none")
