"""VPP: the interleaved (virtual-pipeline) 1F1B schedule of Megatron-LM.

Mirrors ``pipeline_scheduler_pass/pipeline_vpp.py`` (pass name
``pipeline_scheduler_VPP``). Each of the ``p`` stages holds ``v`` model
chunks (``vpp_degree``); chunk ``c`` of stage ``s`` is virtual stage
``c * p + s``. A stage runs ``m * v`` forward steps and ``m * v`` backward
steps. Forward steps walk the chunks in groups of ``p`` micro-batches
(chunk 0 for micro-batches 0..p-1, chunk 1 for the same, ...); backward steps
walk the chunks in reverse order. When ``m`` is not a multiple of ``p`` the
last, partial round uses groups of ``m % p``. :func:`vpp_chunk_of_step` is
that mapping, kept exactly as Paddle computes it.

The stage warms up with ``2 * (p - s - 1) + (v - 1) * p`` forward steps (all
steps when ``m == p``), alternates forward/backward, then drains.

``split_backward`` (only when ``m == p``) splits each backward into its
input-gradient half ``backward_b<c>`` in the schedule and its weight-gradient
half ``backward_w<c>``, all run at the end, last chunk first.

The IR flag selects between Paddle's two code paths. With the new IR (the
default) and no split, every forward is preceded by ``recv_forward<c>`` and
every drain backward followed by ``send_backward<c>``, the warm-up is one step
longer, and a steady step is ``backward, recv_forward, send_backward,
forward``; under the old IR a steady step is ``forward, backward``. The
optimizer job keeps the default micro-batch id 0, as in Paddle.
"""
from __future__ import annotations

from typing import List

from ..pass_base import register_pass
from .action import Action
from .pipeline_pass_base import PipelinePassBase, optimizer_step, schedule_assert


def vpp_chunk_of_step(step: int, forward: bool, num_micro_batches: int, pp_degree: int,
                      vpp_degree: int) -> int:
    """The model chunk that forward (or backward) step ``step`` works on."""
    round_size = pp_degree * vpp_degree
    full_rounds_end = (num_micro_batches // pp_degree) * round_size
    group = pp_degree if step <= full_rounds_end else num_micro_batches % pp_degree
    chunk = (step % round_size) // group
    return chunk if forward else vpp_degree - 1 - chunk


def vpp_warmup_steps(num_micro_batches: int, pp_degree: int, pp_stage: int, vpp_degree: int) -> int:
    total = num_micro_batches * vpp_degree
    if num_micro_batches == pp_degree:
        return total
    return min(2 * (pp_degree - pp_stage - 1) + (vpp_degree - 1) * pp_degree, total)


def vpp_schedule(num_micro_batches: int, pp_degree: int, pp_stage: int, vpp_degree: int,
                 split_backward: bool = False, with_comm_jobs: bool = True) -> List[Action]:
    """Stage ``pp_stage``'s actions. ``with_comm_jobs``: the new-IR job list."""
    m, p, v = num_micro_batches, pp_degree, vpp_degree
    schedule_assert(m >= p, note=f"VPP needs num_micro_batches >= pp_degree (got {m} < {p})")
    split = split_backward and m == p
    comm = with_comm_jobs and not split
    total = m * v
    warmup = vpp_warmup_steps(m, p, pp_stage, v)
    if comm:
        warmup = min(total, warmup + 1)
    next_fwd_mb, next_bwd_mb = [0] * v, [0] * v

    def forward(step):
        chunk = vpp_chunk_of_step(step, True, m, p, v)
        mb, next_fwd_mb[chunk] = next_fwd_mb[chunk], next_fwd_mb[chunk] + 1
        return [Action("recv_forward", mb, chunk)] * comm + [Action("forward", mb, chunk)]

    def backward(step):
        chunk = vpp_chunk_of_step(step, False, m, p, v)
        mb, next_bwd_mb[chunk] = next_bwd_mb[chunk], next_bwd_mb[chunk] + 1
        kind = "backward_b" if split else "backward"
        return [Action(kind, mb, chunk)] + [Action("send_backward", mb, chunk)] * comm

    steps = []
    for step in range(warmup):
        steps += forward(step)
    for step in range(total - warmup):
        fwd, bwd = forward(warmup + step), backward(step)
        if comm:  # backward, recv_forward, send_backward, forward
            steps += [bwd[0], fwd[0], bwd[1], fwd[1]]
        else:
            steps += fwd + bwd
    for step in range(total - warmup, total):
        steps += backward(step)
    if split:
        for chunk in reversed(range(v)):
            steps += [Action("backward_w", mb, chunk) for mb in range(m)]
    steps.append(optimizer_step())
    return steps


@register_pass("pipeline_scheduler_VPP")
class PipelineVirtualPipelinePass(PipelinePassBase):
    def _schedule(self):
        m, p, s, v = self._require("num_micro_batches", "pp_degree", "pp_stage", "vpp_degree")
        return vpp_schedule(m, p, s, v, bool(self.get_attr("split_backward", False)),
                            with_comm_jobs=self._in_pir_mode)
