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

Every schedule function returns a list of :class:`~.action.Action` steps
(``F3``, ``I3.1`` ...; the notation is in :mod:`.action`), which the pass
turns into Paddle's ``Job(type, micro_batch_id)`` list.

``apply_pass(main, startup, name, attrs)`` is Paddle's helper: build the pass,
apply it, return the Plan.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, TYPE_CHECKING, cast

from refimpl.core.errors import InvalidArgument

from ..pass_base import PassContext, new_pass
from .pipeline_1f1b import Pipeline1F1BPass, one_f_one_b_schedule
from .pipeline_eager_1f1b import PipelineEager1F1BPass, eager_1f1b_schedule
from .pipeline_fthenb import PipelineFThenBPass, fthenb_schedule
from .action import Action
from .pipeline_pass_base import PipelinePassBase
from .pipeline_vpp import PipelineVirtualPipelinePass, vpp_schedule
from .pipeline_zero_bubble import (PipelineZeroBubblePipelinePass, PipelineZeroBubbleVirtualPipelinePass,
                                   zbh1_schedule, zbvpp_schedules)

if TYPE_CHECKING:
    from refimpl.executor.plan import Job
    from refimpl.framework.program import Program

SCHEDULES = ("FThenB", "1F1B", "Eager1F1B", "VPP", "ZBH1", "ZBVPP")


def create_job_list(schedule: str, attrs: Dict[str, Any]) -> List[Job]:
    """The job list of ``new_pass("pipeline_scheduler_" + schedule, attrs)``."""
    return cast(PipelinePassBase, new_pass("pipeline_scheduler_" + schedule, attrs)).create_job_list()


def apply_pass(main_program: Program, startup_program: Program, pass_name: str,
               pass_attr: Optional[Dict[str, Any]] = None) -> Any:
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
    "SCHEDULES", "create_job_list", "apply_pass", "Action", "PipelinePassBase",
    "PipelineFThenBPass", "Pipeline1F1BPass", "PipelineEager1F1BPass", "PipelineVirtualPipelinePass",
    "PipelineZeroBubblePipelinePass", "PipelineZeroBubbleVirtualPipelinePass",
    "fthenb_schedule", "one_f_one_b_schedule", "eager_1f1b_schedule", "vpp_schedule",
    "zbh1_schedule", "zbvpp_schedules",
]
