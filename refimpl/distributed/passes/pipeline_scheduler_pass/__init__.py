"""The pipeline scheduler passes (``paddle.distributed.passes.pipeline_scheduler_pass``).

One module per schedule; each registers ``pipeline_scheduler_<name>``:

=============  ==========================================  =====================
name           module                                      pure schedule function
=============  ==========================================  =====================
FThenB         :mod:`.pipeline_fthenb`                     ``fthenb_schedule``
1F1B           :mod:`.pipeline_1f1b`                       ``one_f_one_b_schedule``
Eager1F1B      :mod:`.pipeline_eager_1f1b`                 ``eager_1f1b_schedule``
VPP            :mod:`.pipeline_vpp`                        ``vpp_schedule``
ZBH1, ZBVPP    :mod:`.pipeline_zero_bubble`                ``zbh1_schedule``, ``zbvpp_schedules``
=============  ==========================================  =====================

``apply_pass(main, startup, name, attrs)`` is Paddle's helper: build the pass,
apply it, return the Plan.
"""
import os

from refimpl.core.errors import InvalidArgument

from ..pass_base import PassContext, new_pass
from .pipeline_1f1b import Pipeline1F1BPass, one_f_one_b_schedule
from .pipeline_eager_1f1b import PipelineEager1F1BPass, eager_1f1b_schedule
from .pipeline_fthenb import PipelineFThenBPass, fthenb_schedule
from .pipeline_pass_base import Action, PipelinePassBase, job_type
from .pipeline_vpp import PipelineVirtualPipelinePass, vpp_schedule
from .pipeline_zero_bubble import (PipelineZeroBubblePipelinePass, PipelineZeroBubbleVirtualPipelinePass,
                                   zbh1_schedule, zbvpp_schedules)

SCHEDULES = ("FThenB", "1F1B", "Eager1F1B", "VPP", "ZBH1", "ZBVPP")


def create_job_list(schedule, attrs):
    """The job list of ``new_pass("pipeline_scheduler_" + schedule, attrs)``."""
    return new_pass("pipeline_scheduler_" + schedule, attrs).create_job_list()


def apply_pass(main_program, startup_program, pass_name, pass_attr=None):
    if pass_name not in SCHEDULES:
        raise InvalidArgument(f"pipeline scheduler only support FThenB, 1F1B, Eager1F1B, VPP and ZBH1, "
                              f"but receive {pass_name}")
    pass_attr = dict(pass_attr or {})
    if pass_name == "1F1B":
        pass_attr["enable_backward_forward_overlap"] = int(os.environ.get("FLAGS_1f1b_backward_forward_overlap", 0))
    context = PassContext()
    new_pass("pipeline_scheduler_" + pass_name, pass_attr).apply([main_program], [startup_program], context)
    return context.get_attr("plan")


__all__ = [
    "SCHEDULES", "create_job_list", "apply_pass", "Action", "job_type", "PipelinePassBase",
    "PipelineFThenBPass", "Pipeline1F1BPass", "PipelineEager1F1BPass", "PipelineVirtualPipelinePass",
    "PipelineZeroBubblePipelinePass", "PipelineZeroBubbleVirtualPipelinePass",
    "fthenb_schedule", "one_f_one_b_schedule", "eager_1f1b_schedule", "vpp_schedule",
    "zbh1_schedule", "zbvpp_schedules",
]
