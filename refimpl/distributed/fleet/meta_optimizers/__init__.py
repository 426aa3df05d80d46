"""Fleet's static-graph meta-optimizers and strategy compiler."""
from .distributed_optimizer import DistributedOptimizer
from .pipeline_optimizer import PipelineRun, apply_pipeline
from .meta_optimizer_base import MetaOptimizerBase
