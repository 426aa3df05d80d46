"""Fleet's static-graph meta-optimizers (``paddle.distributed.fleet.meta_optimizers``).

One module per meta-optimizer, as in Paddle 3.3.1; the strategy compiler
(``..base.strategy_compiler``) takes them by the class names of
``..base.meta_optimizer_factory``. A class whose module does not define it
yet stands in as :func:`_missing`: it applies when its switch is on and then
raises Unimplemented naming itself.
"""
from typing import Any

from refimpl.core.errors import Unimplemented

from .meta_optimizer_base import MetaOptimizerBase
from .amp_optimizer import AMPOptimizer
from .gradient_merge_optimizer import GradientMergeOptimizer
from .lamb_optimizer import LambOptimizer
from .lars_optimizer import LarsOptimizer
from .pipeline_optimizer import PipelineOptimizer, PipelineRun, apply_pipeline
from .ps_optimizer import ParameterServerOptimizer
from .raw_program_optimizer import RawProgramOptimizer
from .recompute_optimizer import RecomputeOptimizer
from .sharding_optimizer import ShardingOptimizer
from .tensor_parallel_optimizer import TensorParallelOptimizer
from .asp_optimizer import ASPOptimizer
from .unsupported_optimizers import QATOptimizer
from . import dgc_optimizer, fp16_allreduce_optimizer, localsgd_optimizer


def _missing(name: str, module: str, switch: str) -> Any:
    """A stand-in for ``module.name`` while that module does not define it."""
    def _can_apply(self: Any) -> bool:
        return bool(self.role_maker._is_collective and getattr(self.user_defined_strategy, switch))

    def _check_configs(self: Any, loss: Any) -> None:
        raise Unimplemented(f"DistributedStrategy.{switch} is set, but {module}.{name} is not implemented yet")

    def _disable_strategy(self: Any, dist_strategy: Any) -> None:
        setattr(dist_strategy, switch, False)

    def _enable_strategy(self: Any, dist_strategy: Any, context: Any = None) -> None:
        return

    return type(name, (MetaOptimizerBase,), {"_can_apply": _can_apply, "_check_configs": _check_configs,
                                             "_disable_strategy": _disable_strategy,
                                             "_enable_strategy": _enable_strategy, "minimize_impl": _check_configs})


def _take(module: Any, name: str, switch: str) -> Any:
    return getattr(module, name, None) or _missing(name, module.__name__, switch)


DGCOptimizer = _take(dgc_optimizer, "DGCOptimizer", "dgc")
DGCMomentumOptimizer = getattr(dgc_optimizer, "DGCMomentumOptimizer", None)
LocalSGDOptimizer = _take(localsgd_optimizer, "LocalSGDOptimizer", "localsgd")
AdaptiveLocalSGDOptimizer = _take(localsgd_optimizer, "AdaptiveLocalSGDOptimizer", "adaptive_localsgd")
FP16AllReduceOptimizer = _take(fp16_allreduce_optimizer, "FP16AllReduceOptimizer", "fp16_allreduce")

from .distributed_optimizer import DistributedOptimizer  # noqa: E402

__all__ = ["MetaOptimizerBase", "AMPOptimizer", "ASPOptimizer", "AdaptiveLocalSGDOptimizer", "DGCOptimizer",
           "FP16AllReduceOptimizer", "GradientMergeOptimizer", "LambOptimizer", "LarsOptimizer",
           "LocalSGDOptimizer", "ParameterServerOptimizer", "PipelineOptimizer", "QATOptimizer",
           "RawProgramOptimizer", "RecomputeOptimizer", "ShardingOptimizer", "TensorParallelOptimizer",
           "DistributedOptimizer", "PipelineRun", "apply_pipeline"]
