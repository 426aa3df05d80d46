"""``paddle.incubate.optimizer``: GradientMergeOptimizer."""
from .gradient_merge import GradientMergeOptimizer
