"""``MetaOptimizerFactory``: one instance of every meta-optimizer class, in Paddle's order.

Mirrors ``paddle/distributed/fleet/base/meta_optimizer_factory.py`` of Paddle
3.3.1. Paddle lists the names ending in ``Optimizer`` that its
``meta_optimizers`` package exports, sorted as ``dir()`` sorts them, less
``HybridParallelOptimizer``, ``HeterParallelOptimizer`` and
``DGCMomentumOptimizer``; that order matters, since the strategy compiler
breaks ties by it. refimpl writes the list out (:data:`META_OPTIMIZER_NAMES`,
recorded from Paddle 3.3.1) and takes each class by that name from
``refimpl.distributed.fleet.meta_optimizers``.
"""
from __future__ import annotations

from typing import Any, List, Sequence

#: ``meta_optimizer_factory.meta_optimizer_names`` of Paddle 3.3.1, in its order
META_OPTIMIZER_NAMES = [
    "AMPOptimizer", "ASPOptimizer", "AdaptiveLocalSGDOptimizer", "DGCOptimizer", "FP16AllReduceOptimizer",
    "GradientMergeOptimizer", "LambOptimizer", "LarsOptimizer", "LocalSGDOptimizer", "ParameterServerOptimizer",
    "PipelineOptimizer", "QATOptimizer", "RawProgramOptimizer", "RecomputeOptimizer", "ShardingOptimizer",
    "TensorParallelOptimizer",
]


class MetaOptimizerFactory:
    """Makes the candidate meta-optimizers over the user's optimizer."""

    def _get_valid_meta_optimizers(self, user_defined_optimizer: Any, skip_names: Sequence[str] = ()) -> List[Any]:
        from refimpl.distributed.fleet import meta_optimizers
        return [getattr(meta_optimizers, name)(user_defined_optimizer)
                for name in META_OPTIMIZER_NAMES if name not in skip_names]


__all__: list = []
