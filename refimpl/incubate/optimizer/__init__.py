"""``paddle.incubate.optimizer``: GradientMergeOptimizer."""
from .gradient_merge import GradientMergeOptimizer

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
