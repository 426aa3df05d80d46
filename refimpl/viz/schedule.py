"""Pictures of a simulated pipeline schedule: ASCII grid, Gantt PNG, Chrome trace.

Paddle has no counterpart (its pipeline passes only log job lists); the
ASCII grid follows the idea of PyTorch's ``_format_pipeline_order`` in
``torch.distributed.pipelining.schedules`` (rank x time step), but is drawn
from a timed :class:`~refimpl.distributed.pipeline.simulator.Simulation`, so
a job that costs two steps fills two cells and idle time shows as ``.``.

Cell labels are the actions' own text (see
:mod:`refimpl.distributed.passes.pipeline_scheduler_pass.action`): ``F3``
forward of micro-batch 3, ``B3`` backward, ``W3`` weight-gradient half,
``O`` the optimizer; with virtual stages the chunk follows a dot (``F3.1``).
Two differences keep the grid short: the input-gradient half ``backward_b``
(``I3`` in the notation) is drawn ``B3``, as in the zero-bubble papers'
pictures, and the optimizer has no micro-batch number.
Communication markers take no time and appear only in the Chrome trace.
"""
import json
import math
from fractions import Fraction

from refimpl.distributed.passes.pipeline_scheduler_pass.action import Action

_COLOR = {"forward": ("#4c78a8", "#9ecae9", "#2b5d8a", "#c6dbef"),
          "backward": ("#54a24b", "#a1d99b", "#2f7a2f", "#c7e9c0"),
          "backward_b": ("#f58518", "#ffbf79", "#c45f00", "#fdd0a2"),
          "backward_w": ("#b279a2", "#d6a5c9", "#8a4f7d", "#e7cbe0"),
          "optimizer": ("#9d9d9d",)}


def job_label(action: Action, vpp_degree: int = 1) -> str:
    """The grid/trace label of one job: ``F3``, ``B1``, ``W2``, ``F3.1``, ``O``.

    The chunk is shown when the schedule has several (``vpp_degree > 1``)."""
    if action.kind == "optimizer":
        return "O"
    kind = "backward" if action.kind == "backward_b" else action.kind
    return str(Action(kind, action.micro_batch, action.model_chunk if vpp_degree > 1 else None))


def _timed_jobs(sim):
    """Every job that takes time, over all ranks."""
    return [t for jobs in sim.timeline for t in jobs if t.duration > 0]


def grid_step(sim, max_steps=200):
    """The time one grid column stands for: the largest step dividing every start
    and duration (1 under unit costs); if that needs more than ``max_steps``
    columns, the shortest job's duration (or coarser), and the grid is approximate."""
    values = [Fraction(v).limit_denominator(10 ** 6)
              for t in _timed_jobs(sim) for v in (t.start, t.duration)]
    values = [v for v in values if v > 0]
    if not values:
        return 1
    denom = math.lcm(*(v.denominator for v in values))
    step = Fraction(math.gcd(*(int(v * denom) for v in values)), denom)
    if sim.makespan / step > max_steps:
        step = min(v for t in _timed_jobs(sim) for v in [Fraction(t.duration)])
        step = max(step, Fraction(sim.makespan) / max_steps)
    return int(step) if step.denominator == 1 else float(step)


def grid_is_exact(sim, step):
    """Whether every job starts and ends on a column boundary of ``step``."""
    return all(abs(v / step - round(v / step)) < 1e-9
               for t in _timed_jobs(sim) for v in (t.start, t.end))


def ascii_grid(sim, step=None, max_steps=200):
    """Rank x time-step grid of a Simulation, as one string (no trailing newline).

    A job fills the columns of its time span: its label, then ``-`` cells.
    When costs are not multiples of ``step`` spans are rounded, never letting
    two jobs of one rank share a column (so late jobs may drift right)."""
    step = step or grid_step(sim, max_steps)
    labels = [job_label(t.action, sim.vpp_degree) for t in _timed_jobs(sim)]
    rows = [_grid_row(jobs, step, sim.vpp_degree) for jobs in sim.timeline]
    ncols = max([len(r) for r in rows] + [1])
    width = max([len(s) for s in labels] + [len(str(ncols - 1)), 1])
    name_w = len(f"rank {len(rows) - 1}")
    lines = [f"{'step':<{name_w}} | " + " ".join(f"{c:>{width}}" for c in range(ncols))]
    for rank, cells in enumerate(rows):
        cells = [("-" * width if c == "-" else c) for c in cells] + ["."] * (ncols - len(cells))
        lines.append(f"{f'rank {rank}':<{name_w}} | " + " ".join(f"{c:>{width}}" for c in cells))
    return "\n".join(lines)


def _grid_row(jobs, step, vpp_degree):
    cells = []
    for t in jobs:
        if t.duration <= 0:
            continue
        first = max(int(round(t.start / step)), len(cells))
        last = max(first + 1, int(round(t.end / step)))
        cells += ["."] * (first - len(cells))
        cells += [job_label(t.action, vpp_degree)] + ["-"] * (last - first - 1)
    return cells


def summary(sim, activation_bytes=1):
    """Plain-text report: makespan, bubble ratios, peak held activations."""
    lines = [f"makespan: {_num(sim.makespan)}   overall bubble ratio: {sim.bubble_ratio:.4f}",
             f"{'rank':>4}  {'busy':>8}  {'idle':>8}  {'bubble':>7}  {'peak in-flight':>14}  "
             f"{'peak bytes':>12}"]
    for r in range(sim.pp_degree):
        peak = sim.peak_in_flight[r]
        lines.append(f"{r:>4}  {_num(sim.busy[r]):>8}  {_num(sim.idle(r)):>8}  "
                     f"{sim.bubble_ratios[r]:>7.4f}  {peak:>14}  {peak * activation_bytes:>12}")
    if sim.vpp_degree > 1:
        lines.append(f"(in-flight counts chunk-micro-batches: {sim.vpp_degree} chunks per rank)")
    return "\n".join(lines)


def _num(x):
    return f"{x:g}" if isinstance(x, float) else str(x)


def _color(action):
    shades = _COLOR.get(action.kind, ("#cccccc",))
    return shades[action.model_chunk % len(shades)]


def gantt_png(sim, path, title=None, dpi=120):
    """Draw a Gantt chart (one row per rank) into ``path`` (PNG); needs matplotlib."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError as e:
        raise ImportError("the Gantt chart needs matplotlib: pip install matplotlib "
                          "(or use the ASCII grid / Chrome trace)") from e
    span = float(sim.makespan) or 1.0
    most_jobs = max([sum(t.duration > 0 for t in jobs) for jobs in sim.timeline] + [1])
    fig = Figure(figsize=(min(4 + most_jobs * 0.5, 30), 1.4 + 0.5 * sim.pp_degree))
    ax = fig.subplots()
    for t in _timed_jobs(sim):
        y = sim.pp_degree - 1 - t.rank
        ax.broken_barh([(float(t.start), float(t.duration))], (y - 0.4, 0.8),
                       facecolors=_color(t.action), edgecolors="white", linewidth=0.5)
        if float(t.duration) >= span / (2.5 * most_jobs):
            ax.text(float(t.start) + float(t.duration) / 2, y, job_label(t.action, sim.vpp_degree),
                    ha="center", va="center", fontsize=7)
    ax.set_yticks(range(sim.pp_degree))
    ax.set_yticklabels([f"rank {r}" for r in reversed(range(sim.pp_degree))])
    ax.set_xlim(0, span)
    ax.set_xlabel("time (cost units)")
    kinds = sorted({t.action.kind for t in _timed_jobs(sim)}, key=list(_COLOR).index)
    ax.legend(handles=[Patch(color=_COLOR[k][0], label=k) for k in kinds],
              loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=len(kinds) or 1, fontsize=7)
    ax.set_title(title or f"bubble ratio {sim.bubble_ratio:.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path


def chrome_trace(sim, us_per_unit=1000.0):
    """The Simulation as a Chrome trace dict (chrome://tracing, Perfetto):
    one process per rank, one complete (``"X"``) event per job and an instant
    (``"i"``) event per communication marker. One cost unit = ``us_per_unit`` us."""
    events = []
    for rank in range(sim.pp_degree):
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"name": f"rank {rank}"}})
    for jobs in sim.timeline:
        for t in jobs:
            a = t.action
            args = {"job_type": a.job_type, "micro_batch": a.micro_batch, "chunk": a.model_chunk,
                    "virtual_stage": t.stage, "index": t.index}
            ev = {"name": job_label(a, sim.vpp_degree), "cat": a.kind, "pid": t.rank, "tid": 0,
                  "ts": float(t.start) * us_per_unit, "args": args}
            if t.duration > 0:
                ev.update(ph="X", dur=float(t.duration) * us_per_unit)
            else:
                ev.update(ph="i", s="t", name=str(a))
            events.append(ev)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"makespan": float(sim.makespan), "bubble_ratio": sim.bubble_ratio}}


def write_chrome_trace(sim, path, us_per_unit=1000.0):
    with open(path, "w") as f:
        json.dump(chrome_trace(sim, us_per_unit), f)
    return path
