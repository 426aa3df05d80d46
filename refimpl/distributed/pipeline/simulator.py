"""Pipeline schedule simulator: the job lists of all ranks -> a timeline.

Paddle has no public module for this. Its nearest relative is the cost-model
bookkeeping inside ``VScheduleCreator`` (``pipeline_zero_bubble.py``), which
times jobs while it *builds* the ZBVPP schedule; PyTorch's
``torch.distributed.pipelining.schedules`` has a one-process simulator that
finds deadlocks. This module takes finished job lists (what every Paddle
scheduler pass returns from ``_create_job_list()``, one list per rank) and
answers: when does each job run, how long is each rank idle, how many
micro-batches' activations does each rank hold, and can the order complete
at all.

The model, rule by rule:

* A job is an :class:`~refimpl.distributed.passes.pipeline_scheduler_pass.action.Action`
  (``F3``, ``I3.1`` ...), parsed from Paddle's job type ``<kind><chunk>``
  (``forward``, ``backward_b1``, ...; no suffix means chunk 0). Chunk ``c``
  of rank ``s`` is virtual stage ``c*P + s`` ("interleaved", VPP). ZBVPP
  places odd chunks in reverse ("vshape": ``c*P + P-1-s``), so the loss
  sits on stage 0 when V is even.
* ``forward`` on virtual stage v needs ``forward`` of v-1 (same micro-batch).
* ``backward`` / ``backward_b`` on v needs the ``forward`` on v and the input
  gradient of v+1: the end of its ``backward``/``backward_b``, or of its
  ``send_backward`` job when the list has one.
* ``backward_w`` needs the ``backward_b`` of the same chunk and micro-batch.
* ``recv_forward`` waits like the ``forward`` it precedes; it and
  ``send_backward`` cost nothing (markers for the communication).
* A dependency produced on another rank adds the ``comm`` latency; a rank
  runs its list strictly in order, one job at a time.
* A full ``backward`` costs ``backward_b + backward_w`` unless the cost model
  sets ``backward`` itself ("W folded into B").

Unlike a real run nothing is computed; unlike Paddle's scheduler nothing is
reordered: the simulator only executes the given order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.distributed.passes.pipeline_scheduler_pass.action import (  # noqa: F401  (KINDS: re-exported)
    JOB_TYPE_HELP, KINDS, MARKERS, Action, job_pair, parse_job_type)

STAGE_MAPS = ("interleaved", "vshape")


class ScheduleError(InvalidArgument):
    """The job lists are malformed: a missing, duplicated or misordered job."""


class ScheduleDeadlock(PreconditionNotMet):
    """Some rank waits on a job that can never run.

    ``rank`` and ``job`` name the first stuck rank and the job it is stuck at;
    ``stuck`` lists ``(rank, job, waiting_for)`` for every stuck rank.
    """

    def __init__(self, message: str, stuck: Any) -> None:
        super().__init__(message)
        self.stuck = stuck
        self.rank, self.job, self.waiting_for = stuck[0]


def parse_job(job: Any) -> Action:
    """A Job, ``(type, micro_batch_id)`` pair or Action -> :class:`Action`;
    an unknown job type raises :class:`ScheduleError`."""
    if isinstance(job, Action):
        return job
    job_type, micro_batch = job_pair(job)
    try:
        kind, chunk = parse_job_type(job_type)
    except InvalidArgument:
        raise ScheduleError(f"unknown job type {job_type!r} ({JOB_TYPE_HELP})") from None
    try:
        return Action(kind, int(micro_batch), chunk)
    except (InvalidArgument, TypeError, ValueError) as e:
        raise ScheduleError(f"job {job_type!r} has a bad micro-batch id {micro_batch!r}: {e}") from None


def virtual_stage(rank: int, chunk: int, pp_degree: int, stage_map: str = "interleaved") -> int:
    """The virtual stage (position in the model) of chunk ``chunk`` on ``rank``."""
    if stage_map == "vshape" and chunk % 2:
        return chunk * pp_degree + (pp_degree - 1 - rank)
    return chunk * pp_degree + rank


def stage_owner(stage: int, pp_degree: int, stage_map: str = "interleaved") -> Tuple[int, int]:
    """Inverse of :func:`virtual_stage`: ``(rank, chunk)``."""
    chunk, pos = divmod(stage, pp_degree)
    if stage_map == "vshape" and chunk % 2:
        return pp_degree - 1 - pos, chunk
    return pos, chunk


def stage_map_for(schedule: str) -> str:
    """The chunk placement a Paddle schedule uses."""
    return "vshape" if schedule == "ZBVPP" else "interleaved"


@dataclass
class CostModel:
    """Duration of each kind of job, and the latency of one transfer.

    Every field is a number or a sequence with one number per rank.
    ``backward`` (a full backward) defaults to ``backward_b + backward_w``;
    ``loss`` is added to the forward of the last virtual stage.
    """
    forward: object = 1
    backward_b: object = 1
    backward_w: object = 0
    backward: object = None
    comm: object = 0
    optimizer: object = 0
    loss: object = 0

    def _get(self, name, rank):
        value = getattr(self, name)
        return value[rank] if isinstance(value, (list, tuple)) else value

    def duration(self, action: Action, rank: int, is_last_stage: bool = False) -> float:
        kind = action.kind
        if kind in MARKERS:
            return 0
        if kind == "backward" and self.backward is None:
            return self._get("backward_b", rank) + self._get("backward_w", rank)
        cost = self._get(kind, rank)
        if kind == "forward" and is_last_stage:
            cost = cost + self._get("loss", rank)
        return cost

    def latency(self, rank: int) -> float:
        return self._get("comm", rank)


@dataclass
class TimedJob:
    rank: int
    index: int          # position in the rank's job list
    action: Action
    stage: int          # virtual stage (-1 for the optimizer)
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Simulation:
    pp_degree: int
    vpp_degree: int
    num_micro_batches: int
    timeline: list                      # per rank: list of TimedJob, in list order
    makespan: object
    busy: list                          # per rank: total job time
    bubble_ratios: list                 # per rank: idle / makespan
    bubble_ratio: float                 # all ranks: idle / (P * makespan)
    peak_in_flight: list                # per rank: most chunk-micro-batches held
    stage_map: str = "interleaved"

    def idle(self, rank: int) -> float:
        return self.makespan - self.busy[rank]


def _as_lists(job_lists):
    return [[parse_job(j) for j in jobs] for jobs in job_lists]


def _num_micro_batches(lists):
    return 1 + max((a.micro_batch for jobs in lists for a in jobs if a.kind != "optimizer"),
                   default=-1)


def check_job_lists(job_lists: Sequence[Sequence[Any]], pp_degree: int, vpp_degree: int = 1,
                    num_micro_batches: Optional[int] = None) -> List[List[Action]]:
    """Validate the job lists of all ranks; return them parsed (lists of Action).

    Per rank, every (chunk, micro-batch) has exactly one ``forward`` and either
    one ``backward`` or one ``backward_b`` and one ``backward_w``, in that
    order; communication markers appear at most once, for every micro-batch
    of their chunk or for none, the ``recv_forward`` before its forward and
    the ``send_backward`` after its backward; the optimizer, if any, is last.
    As every rank then holds every (chunk, micro-batch), each recv has the
    forward that sends to it and each send the backward that receives it.
    Raises :class:`ScheduleError` listing the problems.
    """
    if len(job_lists) != pp_degree:
        raise ScheduleError(f"got job lists of {len(job_lists)} ranks for pp_degree {pp_degree}")
    lists = _as_lists(job_lists)
    if num_micro_batches is None:
        num_micro_batches = _num_micro_batches(lists)
    problems = []
    for rank, jobs in enumerate(lists):
        problems += _check_rank(rank, jobs, vpp_degree, num_micro_batches)
    if problems:
        shown = problems[:12] + ([f"... and {len(problems) - 12} more"] if len(problems) > 12 else [])
        raise ScheduleError("invalid pipeline job lists:\n  " + "\n  ".join(shown))
    return lists


def _check_rank(rank, jobs, vpp_degree, num_micro_batches):
    problems, where = [], {}
    for i, a in enumerate(jobs):
        if a.kind == "optimizer":
            if i != len(jobs) - 1:
                problems.append(f"rank {rank}: optimizer at position {i} is not the last job")
            continue
        if not (0 <= a.model_chunk < vpp_degree and 0 <= a.micro_batch < num_micro_batches):
            problems.append(f"rank {rank}: job {a} is outside {vpp_degree} chunk(s) x "
                            f"{num_micro_batches} micro-batches")
        elif a.key in where:
            problems.append(f"rank {rank}: job {a} appears twice (positions {where[a.key]} and {i})")
        else:
            where[a.key] = i
    for chunk in range(vpp_degree):
        for kind in MARKERS:
            n = sum((kind, chunk, m) in where for m in range(num_micro_batches))
            if 0 < n < num_micro_batches:
                problems.append(f"rank {rank}: {kind}{chunk} appears for {n} of "
                                f"{num_micro_batches} micro-batches (a send without its recv)")
        for m in range(num_micro_batches):
            problems += _check_unit(rank, chunk, m, where)
    return problems


def _check_unit(rank, chunk, m, where):
    """One (chunk, micro-batch) on one rank: each phase once, in order."""
    def pos(kind):
        return where.get((kind, chunk, m))
    name = f"rank {rank}: chunk {chunk} micro-batch {m}"
    f, b, bb, bw = pos("forward"), pos("backward"), pos("backward_b"), pos("backward_w")
    if f is None:
        return [f"{name} has no forward"]
    if b is not None and (bb is not None or bw is not None):
        return [f"{name} has both a full backward and a split one"]
    if b is None and (bb is None or bw is None):
        return [f"{name} has no backward" if bb is None and bw is None else
                f"{name} has only {'backward_b' if bw is None else 'backward_w'} of a split backward"]
    grad = b if b is not None else bb
    out = []
    if grad < f:
        out.append(f"{name}: backward at {grad} comes before its forward at {f}")
    if bw is not None and bw < bb:
        out.append(f"{name}: backward_w at {bw} comes before backward_b at {bb}")
    recv, send = pos("recv_forward"), pos("send_backward")
    if recv is not None and recv > f:
        out.append(f"{name}: recv_forward at {recv} comes after its forward at {f}")
    if send is not None and send < grad:
        out.append(f"{name}: send_backward at {send} comes before its backward at {grad}")
    return out


class _Layout(NamedTuple):
    """Where every chunk lives, and which gradients travel by send_backward job."""
    pp_degree: int
    stage_map: str
    last: int                   # the last virtual stage
    has_send: frozenset         # {(virtual stage, micro-batch)} sent by a send_backward job

    def stage(self, rank, a):
        return -1 if a.kind == "optimizer" else virtual_stage(rank, a.model_chunk, self.pp_degree,
                                                               self.stage_map)

    def owner(self, stage):
        return stage_owner(stage, self.pp_degree, self.stage_map)[0]


def _dependencies(a, rank, layout):
    """What ``a`` waits for: list of ``(key, producer_rank)``.

    Keys: ``("F", v, m)`` forward done, ``("B", v, m)`` backward_b (or full
    backward) done, ``("G", v, m)`` input gradient of v available to v-1.
    """
    v, m = layout.stage(rank, a), a.micro_batch
    if a.kind == "optimizer":
        return []
    if a.kind in ("forward", "recv_forward"):
        return [] if v == 0 else [(("F", v - 1, m), layout.owner(v - 1))]
    if a.kind in ("backward", "backward_b"):
        deps = [(("F", v, m), rank)]
        if v < layout.last:
            deps.append((("G", v + 1, m), layout.owner(v + 1)))
        return deps
    return [(("B", v, m), rank)]    # backward_w and send_backward


def _produces(a, v, layout):
    """The keys a finished job makes available."""
    m = a.micro_batch
    if a.kind == "forward":
        return [("F", v, m)]
    if a.kind in ("backward", "backward_b"):
        return [("B", v, m)] + ([] if (v, m) in layout.has_send else [("G", v, m)])
    if a.kind == "send_backward":
        return [("G", v, m)]
    return []


def simulate(job_lists: Sequence[Sequence[Any]], pp_degree: int, vpp_degree: int = 1,
             costs: Optional[CostModel] = None, stage_map: str = "interleaved",
             num_micro_batches: Optional[int] = None, check: bool = True,
             ignore_markers: bool = False) -> Simulation:
    """Run the job lists of all ranks against a cost model; return a Simulation.

    Raises :class:`ScheduleError` for malformed lists (when ``check``) and
    :class:`ScheduleDeadlock` when the order cannot complete. The
    communication markers block (a ``recv_forward`` waits for its sender, a
    peer's backward waits for the ``send_backward``), as stream-ordered
    send/recv do; ``ignore_markers=True`` drops them instead.
    """
    if stage_map not in STAGE_MAPS:
        raise InvalidArgument(f"stage_map must be one of {STAGE_MAPS}, got {stage_map!r}")
    if check:
        lists = check_job_lists(job_lists, pp_degree, vpp_degree, num_micro_batches)
    else:
        lists = _as_lists(job_lists)
    if ignore_markers:
        lists = [[a for a in jobs if a.kind not in MARKERS] for jobs in lists]
    has_send = frozenset((virtual_stage(r, a.model_chunk, pp_degree, stage_map), a.micro_batch)
                         for r, jobs in enumerate(lists) for a in jobs if a.kind == "send_backward")
    layout = _Layout(pp_degree, stage_map, pp_degree * vpp_degree - 1, has_send)
    timeline, pos, done = _run(lists, layout, costs or CostModel())
    if any(p < len(jobs) for p, jobs in zip(pos, lists)):
        _raise_deadlock(lists, pos, done, layout)
    return _summarize(lists, timeline, pp_degree, vpp_degree, stage_map)


def _run(lists, layout, costs):
    """Sweep the ranks, starting each rank's next job as soon as its inputs
    exist; stop when no rank can move. Start times do not depend on the sweep
    order: a job starts at max(its rank's clock, inputs' end + latency)."""
    done, timeline = {}, [[] for _ in lists]
    clock, pos = [0] * len(lists), [0] * len(lists)
    progress = True
    while progress:
        progress = False
        for rank, jobs in enumerate(lists):
            while pos[rank] < len(jobs):
                a = jobs[pos[rank]]
                deps = _dependencies(a, rank, layout)
                if any(key not in done for key, _ in deps):
                    break
                ready = max([done[k] + (costs.latency(p) if p != rank else 0) for k, p in deps],
                            default=0)
                v = layout.stage(rank, a)
                start = max(clock[rank], ready)
                end = start + costs.duration(a, rank, v == layout.last)
                timeline[rank].append(TimedJob(rank, pos[rank], a, v, start, end))
                for key in _produces(a, v, layout):
                    done[key] = end
                clock[rank], pos[rank], progress = end, pos[rank] + 1, True
    return timeline, pos, done


def _raise_deadlock(lists, pos, done, layout):
    producers = {key: (rank, a) for rank, jobs in enumerate(lists) for a in jobs
                 for key in _produces(a, layout.stage(rank, a), layout)}
    stuck, lines = [], []
    for rank, jobs in enumerate(lists):
        if pos[rank] == len(jobs):
            continue
        a = jobs[pos[rank]]
        key = next(k for k, _ in _dependencies(a, rank, layout) if k not in done)
        who = producers.get(key)
        stuck.append((rank, a, who))
        head = f"rank {rank} is stuck at job {pos[rank]} ({a}): it waits for"
        if who is None:
            lines.append(f"{head} {_describe(key)}, which no rank's job list produces")
        elif who[0] == rank:
            lines.append(f"{head} {who[1]}, which comes later in its own list")
        else:
            blocker = lists[who[0]][pos[who[0]]]
            lines.append(f"{head} {who[1]} on rank {who[0]}, which is itself stuck "
                         f"at job {pos[who[0]]} ({blocker})")
    raise ScheduleDeadlock("pipeline schedule deadlocks:\n  " + "\n  ".join(lines), stuck)


def _describe(key):
    what = {"F": "the forward", "B": "the backward", "G": "the input gradient"}[key[0]]
    return f"{what} of virtual stage {key[1]}, micro-batch {key[2]}"


def peak_in_flight(actions: Iterable[Action]) -> int:
    """Most (chunk, micro-batch) activations one rank holds at once: a forward
    adds one, the backward that finishes the micro-batch (a full ``backward``
    or the ``backward_w`` of a split one) frees it."""
    held = peak = 0
    for a in actions:
        if a.kind == "forward":
            held += 1
            peak = max(peak, held)
        elif a.kind in ("backward", "backward_w"):
            held -= 1
    return peak


def _summarize(lists, timeline, pp_degree, vpp_degree, stage_map):
    makespan = max((t.end for jobs in timeline for t in jobs), default=0)
    busy = [sum(t.duration for t in jobs) for jobs in timeline]
    ratios = [(makespan - b) / makespan if makespan else 0.0 for b in busy]
    overall = sum(makespan - b for b in busy) / (len(busy) * makespan) if makespan else 0.0
    return Simulation(pp_degree, vpp_degree, _num_micro_batches(lists), timeline, makespan, busy, ratios, overall,
                      [peak_in_flight(jobs) for jobs in lists], stage_map)
