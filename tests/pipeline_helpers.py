"""What a pipelined program's rank holds, for tests of both of refimpl's pipelines.

fleet's pipeline meta-optimizer leaves refimpl's ``PipelineRun`` (its Plan) in ``program._pipeline_opt``;
Paddle's legacy pipeline (``paddle.incubate.optimizer.PipelineOptimizer``, driven by ``ShardingOptimizer``
with ``pp_degree > 1``) leaves Paddle's dict, whose ``section_program`` is this rank's stage.
"""


def stage_holds(main, name: str) -> bool:
    """Whether this rank's stage of the pipelined ``main`` declares var ``name``."""
    opt = main._pipeline_opt
    if isinstance(opt, dict):
        return name in opt["section_program"].global_block().vars
    return opt.has_var(name)


def stage_of(main) -> int:
    """This rank's pipeline stage."""
    opt = main._pipeline_opt
    return opt["pipeline_stage"] if isinstance(opt, dict) else opt.stage
