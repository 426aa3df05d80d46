"""``paddle.distributed.passes``: program-rewriting passes.

Mirrors Paddle's module of the same name: :func:`new_pass` builds a pass
registered with :func:`register_pass`; ``pass.apply(mains, startups, context)``
runs it. Importing this package registers the pipeline scheduler passes
(``pipeline_scheduler_FThenB``, ``_1F1B``, ``_Eager1F1B``, ``_VPP``,
``_ZBH1``, ``_ZBVPP``), ``auto_parallel_gradient_merge_pass`` and the
data-parallel ``all_reduce_mode_multi_devices_pass`` /
``reduce_mode_multi_devices_pass``. Program utilities live in ``pass_utils``.
"""
from .pass_base import PassBase, PassContext, PassManager, PassType, new_pass, register_pass
from . import pipeline_scheduler_pass  # noqa: F401  (registers the scheduler passes)
from . import auto_parallel_gradient_merge  # noqa: F401  (registers auto_parallel_gradient_merge_pass)
from . import data_parallel  # noqa: F401  (registers the all-reduce / reduce multi-devices passes)

__all__ = ["PassBase", "PassContext", "PassManager", "PassType", "new_pass", "register_pass"]
