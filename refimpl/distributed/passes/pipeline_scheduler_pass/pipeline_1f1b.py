"""1F1B: one forward, one backward in the steady phase.

Mirrors ``pipeline_scheduler_pass/pipeline_1f1b.py`` (pass name
``pipeline_scheduler_1F1B``). Stage ``s`` of ``p`` warms up with ``p - s``
forwards, then each steady step runs the backward of the oldest in-flight
micro-batch and the forward of the next one, then drains the backwards. The
receive of a forward's input (``recv_forward``) and the send of a backward's
input gradient (``send_backward``) are jobs of their own, so the executor can
overlap them with compute:

    warm-up:  recv_forward i, forward i
    steady:   backward j, recv_forward i, send_backward j, forward i
    drain:    backward j, send_backward j

Paddle 3.3.1 builds this list only under the new IR
(``FLAGS_enable_pir_api``, the default); with the flag off it raises
NotImplementedError, and so does refimpl. The constructor sets the attr
``enable_backward_forward_overlap`` to 0, as Paddle's does.
"""
from __future__ import annotations

from typing import List

from ..pass_base import register_pass
from .action import Action
from .pipeline_pass_base import PipelinePassBase, ScheduleUnimplemented, optimizer_step, schedule_assert


def one_f_one_b_schedule(num_micro_batches: int, pp_degree: int, pp_stage: int) -> List[Action]:
    schedule_assert(pp_degree <= num_micro_batches,
                    "Num of micro batches should larger than or equal to pp degree.")
    warmup = pp_degree - pp_stage
    steps = []
    for mb in range(warmup):
        steps += [Action("recv_forward", mb), Action("forward", mb)]
    for j in range(num_micro_batches - warmup):
        i = warmup + j
        steps += [Action("backward", j), Action("recv_forward", i),
                  Action("send_backward", j), Action("forward", i)]
    for j in range(num_micro_batches - warmup, num_micro_batches):
        steps += [Action("backward", j), Action("send_backward", j)]
    steps.append(optimizer_step())
    return steps


@register_pass("pipeline_scheduler_1F1B")
class Pipeline1F1BPass(PipelinePassBase):
    def __init__(self):
        super().__init__()
        self.set_attr("enable_backward_forward_overlap", 0)

    def _schedule(self):
        if not self._in_pir_mode:
            exc = ScheduleUnimplemented("_create_job_list() only support PIR now.")
            if hasattr(exc, "add_note"):
                exc.add_note("Paddle 3.3.1 has no 1F1B job list with FLAGS_enable_pir_api off")
            raise exc
        return one_f_one_b_schedule(*self._require("num_micro_batches", "pp_degree", "pp_stage"))
