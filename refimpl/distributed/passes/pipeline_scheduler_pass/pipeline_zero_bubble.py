"""Zero-bubble schedules: ZB-H1 and the zero-bubble V schedule (ZBVPP).

Mirrors ``pipeline_scheduler_pass/pipeline_zero_bubble.py`` (pass names
``pipeline_scheduler_ZBH1`` and ``pipeline_scheduler_ZBVPP``). Both split a
backward into ``backward_b`` (gradient of the input, which the previous
stage waits for) and ``backward_w`` (gradient of the weights, which nobody
waits for) and use the W jobs to fill pipeline bubbles.

**ZB-H1** is 1F1B where stage ``s`` delays the W half of its first ``s``
backwards to the end of the step (see :func:`zbh1_schedule`).

**ZBVPP** places ``v`` chunks per stage in a "V" (chunk 0 flows down the
stages, chunk 1 back up, ...) with a greedy list scheduler driven by a cost
model (``program_runtimes`` = [forward, backward_b, backward_w, loss,
communication]) and a memory model: :class:`VScheduleCreator`, which plans
all stages at once on a simulated clock per stage. The pass tries the eight
combinations of three heuristics and keeps the schedule that finishes first
(the earliest tried on ties).

The memory model: ``program_mem_usages[s][job]`` (net change of stage ``s``'s
memory after the job), ``program_max_mem_usages[s][job]`` (peak extra memory
while it runs), ``base_memory[s]`` and a limit. Paddle 3.3.1 never fills these
(see the oracle's JOBLISTS.md), so refimpl reads them from the attrs
``injected_mem_usage_per_job``, ``injected_max_mem_usage_per_job`` (``{kind:
value}``, the same for every stage and chunk), ``injected_base_memory`` and
``injected_max_memory`` (None = no limit); absent attrs mean zero memory and
no limit. A memory estimator may instead set the three instance lists.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Dict, List, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument, OutOfRange, PreconditionNotMet

from ..pass_base import register_pass
from .action import Action
from .pipeline_pass_base import (PipelinePassBase, ScheduleKeyError, ScheduleValueError, optimizer_step,
                                 schedule_assert)

JOB_KINDS = ("forward", "backward_b", "backward_w")
# Paddle's default ``program_runtimes`` of the ZBVPP pass: forward, backward_b, backward_w, loss, communication
DEFAULT_PROGRAM_RUNTIMES = (61, 72, 71, 34, 3)


def zbh1_schedule(num_micro_batches: int, pp_degree: int, pp_stage: int) -> List[Action]:
    """ZB-H1 for one stage: 1F1B with ``pp_stage`` W jobs moved to the end."""
    m, p, s = num_micro_batches, pp_degree, pp_stage
    schedule_assert(p <= m, "Num of micro batches should larger than or equal to pp degree.")
    steps = [Action("forward", mb) for mb in range(p - s)]
    fwd, bwd = p - s, 0
    for _ in range(s):  # input-gradient only: these stages' W jobs wait till the end
        steps += [Action("backward_b", bwd), Action("forward", fwd)]
        fwd, bwd = fwd + 1, bwd + 1
    for _ in range(m - p):
        steps += [Action("backward", bwd), Action("forward", fwd)]
        fwd, bwd = fwd + 1, bwd + 1
    for _ in range(p - s - 1):
        steps.append(Action("backward", bwd))
        bwd += 1
    if s > 0:
        steps += [Action("backward_b", bwd), Action("backward_w", bwd)]
    else:
        steps.append(Action("backward", bwd))
    steps += [Action("backward_w", mb) for mb in range(s)]
    steps.append(optimizer_step())
    return steps


class _ZeroBubbleBase(PipelinePassBase):
    def __init__(self):
        super().__init__()
        self.set_attr("enable_optimizer_post_validation", 0)


@register_pass("pipeline_scheduler_ZBH1")
class PipelineZeroBubblePipelinePass(_ZeroBubbleBase):
    def _schedule(self):
        return zbh1_schedule(*self._require("num_micro_batches", "pp_degree", "pp_stage"))


class _JobTable(dict):
    """``{job name: value}``; an unknown job name raises a KeyError as Paddle's dicts do."""

    def __missing__(self, key):
        raise ScheduleKeyError(key)


def per_job_table(per_kind: Dict[str, Any], vpp_degree: int) -> Dict[str, Any]:
    """``{"forward": a, ...}`` -> ``{"forward0": a, "forward1": a, ...}``."""
    return _JobTable({f"{kind}{c}": per_kind.get(kind, 0) for kind in JOB_KINDS for c in range(vpp_degree)})


def zbvpp_schedules(pp_degree: int, num_micro_batches: int, vpp_degree: int,
                    program_runtimes: Dict[str, float], mem_usages: Optional[Dict[str, float]] = None,
                    max_mem_usages: Optional[Dict[str, float]] = None,
                    base_memory: Optional[Sequence[float]] = None,
                    max_memory: Optional[Sequence[float]] = None) -> List[List[Action]]:
    """Every stage's ZBVPP actions (without the optimizer): a list per stage.

    ``mem_usages`` / ``max_mem_usages``: per stage, ``{job name: memory}``;
    ``base_memory``: per stage; ``max_memory``: the limit (None: none).
    """
    p, m, v = pp_degree, num_micro_batches, vpp_degree
    schedule_assert(m % p == 0, note=f"ZBVPP needs num_micro_batches % pp_degree == 0 (got {m} % {p})")
    schedule_assert(m <= p, "zbvpp now only supports accumulate steps <= pp degree. It will cause "
                            "gradient exploitation when accumulate steps > pp degree.")
    names = ("forward", "backward_b", "backward_w", "loss", "communication")
    if len(program_runtimes) != len(names):
        raise InvalidArgument(f"ZBVPP program_runtimes must be [{', '.join(names)}], got {program_runtimes!r}")
    runtimes = dict(zip(names, program_runtimes))
    zeros = [per_job_table({}, v) for _ in range(p)]
    creator = VScheduleCreator(p, m, v, mem_usages or zeros, max_mem_usages or zeros,
                               base_memory or [0] * p, runtimes, max_memory)
    best: Any = None
    best_end: Any = None
    for fill_w_before_b in (True, False):
        for fill_w_before_f in (True, False):
            for fill_loss_stage in (True, False):
                schedule, end, _ = creator.create_v_schedule(
                    fill_w_before_f=fill_w_before_f, fill_w_before_b=fill_w_before_b,
                    fill_loss_stage=fill_loss_stage)
                if best is None or max(end) < max(best_end):
                    best, best_end = schedule, end
    return [[Action(kind, mb, chunk) for kind, chunk, mb in stage] for stage in best]


@register_pass("pipeline_scheduler_ZBVPP")
class PipelineZeroBubbleVirtualPipelinePass(PipelineZeroBubblePipelinePass):
    def __init__(self):
        super().__init__()
        self.set_attr("program_runtimes", list(DEFAULT_PROGRAM_RUNTIMES))
        self.set_attr("memory_limit_times", -1)  # recorded, unused (as in Paddle 3.3.1)
        # per stage, filled by a memory estimator; empty -> the injected_* attrs
        self.program_mem_usages = []
        self.program_max_mem_usages = []
        self.base_memory = []

    def _get_max_memory(self):
        return self.get_attr("injected_max_memory")

    def _memory_model(self, pp_degree, vpp_degree):
        if self.program_mem_usages:
            return ([_JobTable(t) for t in self.program_mem_usages],
                    [_JobTable(t) for t in self.program_max_mem_usages], list(self.base_memory))
        usage = per_job_table(self.get_attr("injected_mem_usage_per_job") or {}, vpp_degree)
        peak = per_job_table(self.get_attr("injected_max_mem_usage_per_job") or {}, vpp_degree)
        base = self.get_attr("injected_base_memory") or 0
        return ([_JobTable(usage) for _ in range(pp_degree)],
                [_JobTable(peak) for _ in range(pp_degree)], [base] * pp_degree)

    def all_stage_schedules(self) -> List[List[Action]]:
        """Every stage's actions (the scheduler plans all stages together)."""
        m, p, v = self._require("num_micro_batches", "pp_degree", "vpp_degree")
        usage, peak, base = self._memory_model(p, v)
        return zbvpp_schedules(p, m, v, self._require("program_runtimes")[0],
                               usage, peak, base, self._get_max_memory())

    def _schedule(self):
        stage, p = self._require("pp_stage", "pp_degree")
        if not 0 <= stage < p:
            raise OutOfRange(f"{self.name}: pp_stage {stage} is not a stage of pp_degree {p}")
        return self.all_stage_schedules()[stage] + [optimizer_step()]


_DIRECTION = {0: "down", 1: "up"}  # chunk parity -> the way its forwards flow


class VScheduleCreator:
    """The ZBVPP list scheduler: all stages, one simulated clock per stage.

    Jobs are ``(kind, chunk, stage, micro_batch)``. A forward of an even chunk
    waits for the same forward on the stage above (``stage - 1``), of an odd
    chunk on the stage below; backwards flow the other way. Every wait costs
    ``communication``. The scheduler

    1. warms up: forward0 on every stage, then forwards of each next chunk,
       filling each stage's idle time before it with forwards of earlier chunks
       (:meth:`_fill_forwards_until`), then forwards until the first backward_b0;
    2. repeats a step of "one backward_b, then one forward" per stage,
       slotting pending W jobs (``backward_w`` of an earlier backward_b) into
       idle time, and wherever memory runs short;
    3. flushes the remaining W jobs.

    ``create_v_schedule`` reruns itself with the stage bubbles of the previous
    run as "approved" bubbles while that lowers the largest bubble, keeping
    the run that finishes earliest.
    """

    def __init__(self, num_stage: int, num_micro_batch: int, num_model_chunks: int,
                 program_mem_usages: Any, program_max_mem_usages: Any,
                 base_memory: Sequence[float], program_runtime: Any,
                 max_memory: Optional[Sequence[float]] = None) -> None:
        self.P, self.M, self.V = num_stage, num_micro_batch, num_model_chunks
        self.usage, self.peak, self.base = program_mem_usages, program_max_mem_usages, base_memory
        self.rt = program_runtime
        self.limit = float("inf") if max_memory is None else max_memory
        self.loss_stage = 0 if num_model_chunks % 2 == 0 else num_stage - 1

    def _reset(self):
        names = [f"{kind}{c}" for kind in ("forward", "backward_w", "backward_b") for c in range(self.V)]
        self.count = [_JobTable(dict.fromkeys(names, 0)) for _ in range(self.P)]
        self.end = {}                              # (kind, chunk, stage, mb) -> finish time
        self.now = [0] * self.P                    # each stage's clock
        self.mem = list(self.base)
        self.pending_w = [deque() for _ in range(self.P)]   # (chunk, mb) awaiting backward_w
        self.order = [[] for _ in range(self.P)]   # (kind, chunk, mb) per stage
        self.bubble = [0] * self.P                 # idle time since the stage's first forward

    def create_v_schedule(self, fill_w_before_f: bool = True, fill_w_before_b: bool = True,
                          fill_loss_stage: bool = True,
                          approved_bubbles: Optional[Sequence[int]] = None
                          ) -> Tuple[List[List[Tuple[str, int, int]]], Any, Any]:
        """Returns ``(per-stage [(kind, chunk, mb)], finish times, largest bubble)``."""
        self._reset()
        approved = [-1] * self.P if approved_bubbles is None else approved_bubbles
        self._warm_up()
        self._steady_and_drain(fill_w_before_f, fill_w_before_b, fill_loss_stage, approved)
        result = (self.order, list(self.end.values()), max(self.bubble))
        if max(approved) < 0 or result[2] < max(approved):
            retry = self.create_v_schedule(fill_w_before_f, fill_w_before_b, fill_loss_stage, self.bubble)
            if max(retry[1]) < max(result[1]):
                return retry
        return result

    # -- cost model and dependencies ------------------------------------
    def _runtime(self, kind, stage, chunk):
        extra = self.rt["loss"] if stage == self.loss_stage and chunk == self.V - 1 else 0
        return self.rt[kind] + extra

    def _upstream(self, kind, chunk, stage):
        flows_down = (chunk % 2 == 0) == (kind == "forward")
        return stage - 1 if flows_down else stage + 1

    def _dep_end(self, kind, chunk, stage, mb):
        """Finish time of the job this one waits for: 0 if none, -1 if not placed yet."""
        src = self._upstream(kind, chunk, stage)
        if not 0 <= src < self.P:
            return 0
        return self.end.get((kind, chunk, src, mb), -1)

    def _count(self, stage, kind, chunks=None):
        return sum(self.count[stage][f"{kind}{c}"] for c in (range(self.V) if chunks is None else chunks))

    def _fits_memory(self, kind, chunk, stage):
        return self.mem[stage] + self.peak[stage][f"{kind}{chunk}"] <= self.limit

    def _fits_before(self, kind, chunk, stage, deadline):
        dep = self._dep_end(kind, chunk, stage, self.count[stage][f"{kind}{chunk}"])
        start = max(self.now[stage], dep + self.rt["communication"])
        return start + self._runtime(kind, stage, chunk) <= deadline

    def _can_schedule(self, kind, chunk, stage):
        """Micro-batches left, the previous chunk ahead, the upstream job placed."""
        count = self.count[stage]
        mb = count[f"{kind}{chunk}"]
        if mb >= self.M:
            return False
        if kind == "forward" and chunk > 0:
            ahead = count[f"forward{chunk - 1}"]
        elif kind == "backward_b":
            ahead = count[f"backward_b{chunk + 1}"] if chunk + 1 < self.V else count[f"forward{self.V - 1}"]
        else:
            ahead = mb + 1
        return ahead > mb and self._dep_end(kind, chunk, stage, mb) >= 0

    def _max_bubble(self, stage, approved):
        return max(max(self.bubble), max(approved) - approved[stage])

    # -- placing jobs ---------------------------------------------------
    def _put(self, kind, chunk, stage):
        name = f"{kind}{chunk}"
        runtime = self._runtime(kind, stage, chunk)
        finish = self.now[stage] + runtime
        mb = self.count[stage][name]
        if mb >= self.M:
            raise ScheduleValueError(f"Job {name} exceeds the limit of micro batches.")
        if not self._fits_memory(kind, chunk, stage):
            raise ScheduleValueError(f"Job {name} exceeds the memory limit at stage {stage}.")
        self._check_chunk_order(kind, chunk, stage, mb)
        if kind != "backward_w":
            dep = self._dep_end(kind, chunk, stage, mb)
            if dep < 0:
                raise ScheduleValueError(
                    f"Job {name}_{mb} at stage {stage} depends on unscheduled job {name}_{mb} "
                    f"at stage {self._upstream(kind, chunk, stage)}.")
            finish = max(finish, dep + self.rt["communication"] + runtime)
        if self.count[stage]["forward0"] > 0:
            self.bubble[stage] += finish - self.now[stage] - runtime
        self.end[(kind, chunk, stage, mb)] = finish
        self.now[stage] = finish
        self.mem[stage] += self.usage[stage][name]
        self.order[stage].append((kind, chunk, mb))
        if kind == "backward_b":
            self.pending_w[stage].append((chunk, mb))
        self.count[stage][name] += 1

    def _check_chunk_order(self, kind, chunk, stage, mb):
        """A micro-batch's forwards go chunk 0, 1, ...; its backward_bs the other
        way; its backward_w follows its backward_b."""
        if kind == "forward" and chunk > 0:
            need, where = ("forward", chunk - 1), ""
        elif kind == "backward_b" and chunk < self.V - 1:
            need, where = ("backward_b", chunk + 1), ""
        elif kind == "backward_w":
            need, where = ("backward_b", chunk), f" at stage {stage}"
        else:
            return
        if self.end.get((*need, stage, mb), -1) < 0:
            raise ScheduleValueError(f"Job {kind}{chunk}_{mb}{where} depends on unfinished "
                                     f"{need[0]}{need[1]}_{mb} job.")

    def _put_w(self, stage):
        if not self.pending_w[stage]:
            raise ScheduleValueError("No pending backward_w job.")
        chunk, _ = self.pending_w[stage].popleft()
        self._put("backward_w", chunk, stage)

    # -- phase 1: warm-up -----------------------------------------------
    def _warm_up(self):
        for stage in range(self.P):
            self._put("forward", 0, stage)
        self._fill_forwards_until("forward", 1, [0], "down")
        for chunk in range(2, self.V):
            self._fill_forwards_until("forward", chunk, list(range(chunk)), _DIRECTION[(chunk - 1) % 2])
        self._fill_forwards_until("backward_b", 0, list(range(self.V)), _DIRECTION[(self.V - 1) % 2],
                                  place_end_job=False)

    def _fill_forwards_until(self, kind, chunk, fill_chunks, direction, place_end_job=True):
        """Walk the stages in ``direction``; before each one's ``kind<chunk>`` job
        is due, fill its idle time with forwards of ``fill_chunks``."""
        stages = list(range(self.P))
        if direction == "down":
            stages.reverse()
        last_kind, last_chunk, last_mb = self.order[stages[0]][-1]
        due = self.end[(last_kind, last_chunk, stages[0], last_mb)]
        if place_end_job:
            self._put(kind, chunk, stages[0])
        for stage in stages[1:]:
            start_chunk = (self.order[stage][-1][1] + 1) % len(fill_chunks)
            due += self.rt["communication"] + self._runtime(kind, stage, chunk)
            self._fill_bubble_with_forwards(stage, fill_chunks, start_chunk, due, direction)
            if place_end_job:
                self._put(kind, chunk, stage)

    def _forward_fits(self, chunk, stage, chunks, deadline, min_forwards):
        return self._can_schedule("forward", chunk, stage) and (
            self._count(stage, "forward", chunks) < min_forwards
            or self._fits_before("forward", chunk, stage, deadline))

    def _fill_bubble_with_forwards(self, stage, chunks, chunk, deadline, direction):
        if direction == "up":  # stages below catch up with stage 0's forward count
            min_forwards, stages = self._count(0, "forward", chunks), range(self.P - 1, stage - 1, -1)
        else:
            min_forwards, stages = 0, range(0, stage + 1)
        idle = 0
        while self._may_fill(chunks, stages, deadline, min_forwards):
            room = self.limit - self.mem[stage] - self.peak[stage][f"backward_b{chunk}"]
            room -= sum(self.peak[stage][f"forward{c}"] for c in range(1, self.V)
                        if self.count[stage][f"forward{c}"] == 0)
            if room < self.peak[stage][f"forward{chunk}"]:
                break
            placed = False
            for s in stages:
                if self._forward_fits(chunk, s, chunks, deadline, min_forwards):
                    self._put("forward", chunk, s)
                    placed = True
            chunk = (chunk + 1) % len(chunks)
            idle = 0 if placed else idle + 1
            if idle >= len(chunks):  # a full turn placed nothing: would loop forever
                raise PreconditionNotMet(f"ZBVPP scheduler cannot fill stage {stage}'s warm-up with forwards "
                                         f"of chunks {chunks} (Paddle would not terminate here)")

    def _may_fill(self, chunks, stages, deadline, min_forwards):
        stage = stages[-1]
        if self._count(stage, "forward", chunks) < min_forwards:
            return True
        left = any(self.count[stage][f"forward{c}"] < self.M for c in chunks)
        can = any(self._forward_fits(c, s, chunks, deadline, min_forwards) for c in chunks for s in stages)
        return self._fits_memory("forward", chunks[-1], stage) and left and can

    # -- phase 2 and 3: steady state, drain ------------------------------
    def _steady_and_drain(self, w_before_f, w_before_b, fill_loss_stage, approved):
        order = range(self.P) if self.V % 2 == 0 else range(self.P - 1, -1, -1)
        while self._count(self.loss_stage, "backward_b") < self.V * self.M:
            placed = sum(map(len, self.order))
            for stage in range(self.P):
                while not self._fits_memory("backward_b", 0, stage):
                    if not self.pending_w[stage]:
                        raise ScheduleValueError(f"No pending backward_w job and backward_b0 job exceeds "
                                                 f"the memory limit at stage {stage}.")
                    self._put_w(stage)
            for stage in order:
                chunk = next((c for c in range(self.V) if self._can_schedule("backward_b", c, stage)), None)
                if chunk is not None:
                    self._place_with_ws("backward_b", chunk, stage, w_before_b, fill_loss_stage, approved)
            for stage in order:
                chunk = next((c for c in reversed(range(self.V)) if self._can_schedule("forward", c, stage)), None)
                if chunk is not None:
                    while not self._fits_memory("forward", chunk, stage):
                        if not self.pending_w[stage]:
                            raise ScheduleValueError("No pending backward_w job and forward job exceeds "
                                                     "the memory limit.")
                        self._put_w(stage)
                    self._place_with_ws("forward", chunk, stage, w_before_f, False, approved)
            if sum(map(len, self.order)) == placed:
                raise PreconditionNotMet("ZBVPP scheduler placed no job in a whole step "
                                         "(Paddle would not terminate here)")
        for stage in range(self.P):
            while self.pending_w[stage]:
                self._put_w(stage)

    def _place_with_ws(self, kind, chunk, stage, w_first, fill_loss_stage, approved):
        """Place ``kind<chunk>`` on ``stage``, first running pending W jobs that
        fit in the wait for its input (or, with ``w_first``, one W job when the
        wait is longer than the stage's bubble budget)."""
        wait_end = self._dep_end(kind, chunk, stage, self.count[stage][f"{kind}{chunk}"]) \
            + self.rt["communication"]
        pending = self.pending_w[stage]

        def w_fits(scale):
            return pending and wait_end >= self.now[stage] + self._runtime("backward_w", stage, pending[0][0]) * scale

        while w_fits(1):
            self._put_w(stage)
        if fill_loss_stage and stage == self.loss_stage:
            while w_fits(0.2):
                self._put_w(stage)
        budget = self._max_bubble(stage, approved) - self.bubble[stage]
        if pending and wait_end - self.now[stage] > budget and w_first:
            self._put_w(stage)
        self._put(kind, chunk, stage)
