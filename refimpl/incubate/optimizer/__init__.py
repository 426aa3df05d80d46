"""``paddle.incubate.optimizer``: GradientMergeOptimizer, RecomputeOptimizer, LarsMomentumOptimizer, PipelineOptimizer."""
from .gradient_merge import GradientMergeOptimizer
from .recompute import *  # noqa: F401,F403  (RecomputeOptimizer)
from .lars_momentum import *  # noqa: F401,F403  (LarsMomentumOptimizer)
from .pipeline import PipelineOptimizer  # noqa: F401  (Paddle's legacy static pipeline builder)

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
