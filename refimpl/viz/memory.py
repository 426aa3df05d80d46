"""Memory timeline of a run, drawn from its event :class:`~refimpl.executor.Trace`.

Paddle has no direct counterpart: its memory tooling is the profiler's
memory view (``paddle.profiler`` with ``profile_memory=True``), which records
allocator events of real devices. Here the timeline comes from the same
``alloc`` / ``free`` records the executor writes for every run (see
``refimpl/executor/trace.py``), so it shows exactly what the eager-deletion
plan and the garbage collector did, op by op:

* ``live after op``: bytes held once the op's outputs exist (the high-water
  mark of that step);
* ``live after frees``: bytes held once the collector freed what the plan
  says is dead after that op (equal to the above when nothing was freed).

Bytes are counted per variable, as the executor's ``Memory`` does; the
persistables and feeds held before the run are not in the trace: pass the
starting level as ``start``, or the level after the run as ``end``
(``Executor.memory_stats()["live_bytes"]``) and the start is worked out, so
that the timeline's peak is the executor's ``peak_bytes``.

What the bytes hold (parameters, gradients, optimizer state, activations, communication buffers,
other: ``refimpl/executor/memory_categories.py``) is shown by :func:`format_categories` (from
``Executor.memory_stats()``) and :func:`category_peaks` (from a trace).
"""
from dataclasses import dataclass, field


@dataclass
class Step:
    """One op of the run and what happened to memory around it."""
    index: int                 # position in the run (0, 1, ...)
    block: int
    op: int                    # op index in its block
    op_type: str
    rank: object = None
    allocated: int = 0         # bytes its outputs added
    live_after_op: int = 0
    live_after_free: int = 0
    freed: list = field(default_factory=list)   # [(var, bytes)] freed after it

    @property
    def freed_bytes(self):
        return sum(n for _, n in self.freed)


@dataclass
class MemoryTimeline:
    steps: list
    start: int = 0

    @property
    def peak(self):
        return max([s.live_after_op for s in self.steps] + [self.start])

    @property
    def total_freed(self):
        return sum(s.freed_bytes for s in self.steps)

    def freed_vars(self):
        """{step index: [names freed after it]} for the steps that freed something."""
        return {s.index: [v for v, _ in s.freed] for s in self.steps if s.freed}


def memory_timeline(trace, start=0, rank=None, end=None):
    """Build the per-op timeline from ``trace`` (only ``rank``'s events if given).

    With ``end`` (bytes live after the run) the starting level is
    ``end`` minus the net bytes the trace allocated, and ``start`` is ignored.

    Frees recorded after an op belong to that op (that is where the collector
    ran them); frees before the first op belong to no step and only lower the
    starting level.
    """
    if end is not None:
        net = sum(e.nbytes if e.kind == "alloc" else -e.nbytes for e in trace
                  if e.kind in ("alloc", "free") and (rank is None or e.rank == rank))
        start = end - net
    steps, live = [], start
    for e in trace:
        if rank is not None and e.rank != rank:
            continue
        if e.kind == "op":
            steps.append(Step(len(steps), e.block, e.op, e.op_type, e.rank,
                              live_after_op=live, live_after_free=live))
        elif e.kind == "alloc":
            live += e.nbytes
            if steps:
                steps[-1].allocated += e.nbytes
                steps[-1].live_after_op = steps[-1].live_after_free = live
        elif e.kind == "free":
            live -= e.nbytes
            if steps:
                steps[-1].freed.append((e.var, e.nbytes))
                steps[-1].live_after_free = live
            else:
                start = live
    return MemoryTimeline(steps, start)


def format_timeline(timeline, max_rows=None):
    """A plain-text table: one row per op (live bytes after it, what was freed)."""
    steps = timeline.steps[:max_rows]
    width = max([24] + [len(s.op_type) for s in steps])   # the op column fits the longest op type
    rows = [f"{'#':>4}  {'op':<{width}} {'alloc':>9} {'live':>10} {'after GC':>10}  freed"]
    for s in steps:
        freed = ", ".join(v for v, _ in s.freed)
        rows.append(f"{s.index:>4}  {s.op_type:<{width}} {s.allocated:>9} {s.live_after_op:>10} "
                    f"{s.live_after_free:>10}  {freed}")
    rows.append(f"peak {timeline.peak} bytes, {timeline.total_freed} bytes freed by GC")
    return "\n".join(rows)


def format_categories(stats):
    """A plain-text table of ``Executor.memory_stats()``'s categories: the bytes held at the end of
    the run, at its peak, and each category's own high-water mark."""
    from refimpl.executor.memory_categories import CATEGORIES
    rows = [f"{'memory':<16} {'live':>10} {'at peak':>10} {'max':>10}"]
    for c in CATEGORIES:
        most = stats["max_by_category"][c]
        rows.append(f"{c:<16} {stats['live_by_category'][c]:>10} {stats['peak_by_category'][c]:>10} "
                    f"{'-' if most is None else most:>10}")
    rows.append(f"{'total':<16} {stats['live_bytes']:>10} {stats['peak_bytes']:>10}")
    return "\n".join(rows)


def category_peaks(trace, categories, rank=None):
    """{category: the most bytes the trace's ``alloc``/``free`` records held at once in it}.

    ``categories`` maps var names to category indices (``memory_categories.classify(program)``);
    the bytes held before the run are not in the trace, so this is the part the run allocated."""
    from refimpl.executor.memory_categories import CATEGORIES, OTHER
    live = [0] * len(CATEGORIES)
    most = [0] * len(CATEGORIES)
    for e in trace:
        if e.kind not in ("alloc", "free") or (rank is not None and e.rank != rank):
            continue
        c = categories.get(e.var, OTHER)
        live[c] += e.nbytes if e.kind == "alloc" else -e.nbytes
        most[c] = max(most[c], live[c])
    return dict(zip(CATEGORIES, most))


def memory_png(trace_or_timeline, path, start=0, rank=None, end=None, title=None, dpi=110):
    """Draw the timeline into ``path`` (PNG) and return the MemoryTimeline.

    A step line of live bytes after each op, a lighter one after the frees,
    and a red marker under every op after which the collector freed tensors.
    Needs matplotlib.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("the memory timeline needs matplotlib: pip install matplotlib "
                          "(or use format_timeline for text)") from e
    tl = trace_or_timeline if isinstance(trace_or_timeline, MemoryTimeline) else \
        memory_timeline(trace_or_timeline, start, rank, end)
    n = len(tl.steps)
    fig = Figure(figsize=(min(4 + 0.25 * n, 16), 3.6))
    ax = fig.subplots()
    xs = [s.index for s in tl.steps]
    ax.step(xs, [s.live_after_op for s in tl.steps], where="post", color="#4c78a8",
            label="live after op")
    ax.fill_between(xs, [s.live_after_free for s in tl.steps], step="post", color="#9ecae9",
                    alpha=0.6, label="live after GC frees")
    freed = [s for s in tl.steps if s.freed]
    if freed:
        ax.scatter([s.index for s in freed], [s.live_after_free for s in freed], marker="v",
                   color="#d62728", zorder=3, label="GC frees")
    if 0 < n <= 48:
        ax.set_xticks(xs)
        ax.set_xticklabels([s.op_type for s in tl.steps], rotation=90, fontsize=6)
    ax.set_xlabel("op (execution order)")
    ax.set_ylabel("bytes")
    ax.set_title(title or f"peak {tl.peak} bytes, {tl.total_freed} bytes freed")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return tl
