"""FThenB ("GPipe"): every forward, then every backward, then the optimizer.

Mirrors ``pipeline_scheduler_pass/pipeline_fthenb.py`` (pass name
``pipeline_scheduler_FThenB``). The job list is the same on every stage and
depends only on ``num_micro_batches``; each stage holds the activations of
all micro-batches at its peak.
"""
from __future__ import annotations

from typing import List

from ..pass_base import register_pass
from .action import Action
from .pipeline_pass_base import PipelinePassBase, optimizer_step


def fthenb_schedule(num_micro_batches: int) -> List[Action]:
    """``F0 .. F(m-1), B0 .. B(m-1), optimizer``."""
    steps = [Action("forward", mb) for mb in range(num_micro_batches)]
    steps += [Action("backward", mb) for mb in range(num_micro_batches)]
    steps.append(optimizer_step())
    return steps


@register_pass("pipeline_scheduler_FThenB")
class PipelineFThenBPass(PipelinePassBase):
    def _schedule(self):
        (num_micro_batches,) = self._require("num_micro_batches")
        return fthenb_schedule(num_micro_batches)
