"""``paddle.distributed.fleet.layers.mpu``: tensor-parallel layers, their ops and random seeds.

Mirrors the package of the same name in Paddle 3.3.1: ``mp_layers``
(ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding,
ParallelCrossEntropy), ``mp_ops`` (the op builders and
``paddle.distributed.split``) and ``random`` (the model-parallel RNG tracker).
"""
from .mp_layers import ColumnParallelLinear, ParallelCrossEntropy, RowParallelLinear, VocabParallelEmbedding
from .random import RNGStatesTracker, dropout, get_rng_state_tracker, model_parallel_random_seed

__all__ = ["ColumnParallelLinear", "ParallelCrossEntropy", "RowParallelLinear", "VocabParallelEmbedding",
           "RNGStatesTracker", "dropout", "get_rng_state_tracker", "model_parallel_random_seed"]
