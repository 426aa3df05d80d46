"""Eager1F1B: 1F1B with a longer warm-up, so sends overlap with compute.

Mirrors ``pipeline_scheduler_pass/pipeline_eager_1f1b.py`` (pass name
``pipeline_scheduler_Eager1F1B``). Stage ``s`` of ``p`` runs
``2 * (p - s) - 1`` forwards before its first backward (plain 1F1B runs
``p - s``), then alternates backward/forward, then drains the backwards.
Paddle refuses a configuration whose warm-up is longer than the number of
micro-batches (so the condition depends on the stage). As in Paddle, the
optimizer job keeps the default micro-batch id 0.
"""
from __future__ import annotations

from typing import List

from ..pass_base import register_pass
from .action import Action
from .pipeline_pass_base import PipelinePassBase, optimizer_step, schedule_assert


def eager_1f1b_schedule(num_micro_batches: int, pp_degree: int, pp_stage: int) -> List[Action]:
    warmup = 2 * (pp_degree - pp_stage) - 1
    schedule_assert(
        warmup <= num_micro_batches,
        "Num of micro batches should larger than 2 * (pp_degree - pp_stage) - 1.",
        note=f"Eager1F1B stage {pp_stage} of {pp_degree} warms up with {warmup} forwards "
             f"but there are only {num_micro_batches} micro-batches")
    steps = [Action("forward", mb) for mb in range(warmup)]
    for i in range(num_micro_batches - warmup):
        steps.append(Action("backward", i))
        steps.append(Action("forward", warmup + i))
    for mb in range(num_micro_batches - warmup, num_micro_batches):
        steps.append(Action("backward", mb))
    steps.append(optimizer_step())
    return steps


@register_pass("pipeline_scheduler_Eager1F1B")
class PipelineEager1F1BPass(PipelinePassBase):
    def _schedule(self):
        return eager_1f1b_schedule(*self._require("num_micro_batches", "pp_degree", "pp_stage"))
