"""``paddle.incubate``: GradientMergeOptimizer and the ``distributed`` namespace."""
from refimpl.framework import namespace_getattr

from . import distributed, optimizer

__getattr__ = namespace_getattr(__name__)   # a paddle.incubate name refimpl lacks: Unimplemented naming it
