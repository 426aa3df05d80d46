"""Static ZeRO sharding's parts (``paddle.distributed.fleet.meta_optimizers.sharding``).

Mirrors the package of that name in Paddle 3.3.1: ``shard`` (parameter ->
owner), ``prune`` (which ops each rank keeps), ``utils`` (the op-insertion
helpers) and ``fuse_helper`` (their fused variants), the AMP / gradient-clip / weight-decay / offload helpers, and
refimpl's splits of Paddle's 2200-line ``sharding_optimizer.py``:
``rings`` (the groups and ring ids), ``segments`` (the program split and the
broadcast / reduce insertion), ``prune_program`` (pruning of each rank's
main and startup programs), ``gradient_merge`` (sharding's own gradient
merge), ``config_checks`` (the checks of sharding inside tensor / pipeline
parallelism) and ``pipeline_passes`` (sharding x pp: Paddle's legacy pipeline
section program and the passes that edit it). The meta-optimizer itself is ``..sharding_optimizer``.
"""
