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
* :func:`check_pipeline_configs`: with ``pp_degree > 1`` the options that
  refimpl's optimizer-job sharding (``pipeline_sharding.py``) does not write
  (offload / cast, a clip other than
  ``ClipGradByGlobalNorm``, pure fp16 / bf16 AMP).
"""
from __future__ import annotations

from typing import Any, List

from refimpl.core.errors import InvalidArgument, Unimplemented
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
    """Unimplemented for the sharding x pp options refimpl does not write (see ``pipeline_sharding.py``)."""
    for key in ("optimize_offload", "optimize_cast", "_dp_as_optimizer_sharding"):
        if configs[key]:
            raise Unimplemented(f"sharding_configs['{key}'] = True with pp_degree = {pp}: not implemented in "
                                "refimpl's sharding x pipeline")
    scale = strategy.gradient_scale_configs["scale_strategy"]
    if scale != "avg":   # Paddle asserts it for the pipeline
        raise InvalidArgument(f"gradient_scale_configs['scale_strategy'] = {scale!r} with sharding_configs"
                              f"['pp_degree'] = {pp}: for pipeline mode the gradient scale mode should be 'avg'")
    clips = [o._grad_clip for o in optimizer_chain(optimizer) if getattr(o, "_grad_clip", None) is not None]
    for clip in clips:
        if type(clip).__name__ != "ClipGradByGlobalNorm":
            raise Unimplemented(f"sharding_configs['pp_degree'] = {pp} with grad_clip {type(clip).__name__}: "
                                "refimpl's sharding x pipeline clips by the global norm only "
                                "(ClipGradByGlobalNorm)")
    if strategy.amp:
        amp = strategy.amp_configs
        for key in ("use_pure_fp16", "use_pure_bf16"):
            if amp[key]:
                raise Unimplemented(f"amp_configs['{key}'] = True with sharding_configs['pp_degree'] = {pp}: "
                                    "refimpl's sharding x pipeline runs fp16 O1 dynamic loss scaling only")


def global_norm_clip(optimizer: Any) -> Any:
    """The ``ClipGradByGlobalNorm`` of ``optimizer``'s chain (None when it clips nothing)."""
    for o in optimizer_chain(optimizer):
        if getattr(o, "_grad_clip", None) is not None:
            return o._grad_clip
    return None


def optimizer_chain(optimizer: Any) -> List[Any]:
    """``optimizer`` and the optimizers it wraps (``inner_opt`` / ``_optimizer``)."""
    out: List[Any] = []
    while optimizer is not None and all(optimizer is not o for o in out):
        out.append(optimizer)
        optimizer = getattr(optimizer, "inner_opt", None) or getattr(optimizer, "_optimizer", None)
    return out


__all__ = ["check_model_parallel_ops", "check_pipeline_configs", "global_norm_clip", "optimizer_chain"]
