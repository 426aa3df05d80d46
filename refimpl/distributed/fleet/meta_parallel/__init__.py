"""``paddle.distributed.fleet.meta_parallel``: the tensor-parallel layers and RNG tracker, static mode.

Mirrors the names Paddle 3.3.1's ``meta_parallel`` package re-exports from
``parallel_layers`` (which re-exports ``fleet/layers/mpu``). Its dygraph
wrappers (``TensorParallel``, ``PipelineParallel``, ``PipelineLayer`` ...)
are not implemented: refimpl is static-only; asking for one raises
Unimplemented naming it.
"""
from refimpl.distributed.fleet.layers.mpu import (ColumnParallelLinear, ParallelCrossEntropy, RNGStatesTracker,
                                                  RowParallelLinear, VocabParallelEmbedding, get_rng_state_tracker,
                                                  model_parallel_random_seed)

__all__ = ["ColumnParallelLinear", "ParallelCrossEntropy", "RNGStatesTracker", "RowParallelLinear",
           "VocabParallelEmbedding", "get_rng_state_tracker", "model_parallel_random_seed"]

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
