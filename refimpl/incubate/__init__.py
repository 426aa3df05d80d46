"""``paddle.incubate``: GradientMergeOptimizer and the ``distributed`` namespace."""
from refimpl.framework import namespace_getattr

from . import distributed, optimizer
from . import asp  # noqa: F401  (paddle.incubate.asp: automatic sparsity)

__getattr__ = namespace_getattr(__name__)   # a paddle.incubate name refimpl lacks: Unimplemented naming it
