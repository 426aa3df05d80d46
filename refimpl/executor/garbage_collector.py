"""Memory accounting and the garbage collector that frees dead tensors.

Mirrors Paddle's ``GarbageCollector`` family under eager deletion
(``paddle/fluid/framework/garbage_collector.h``). After each op the run loop
hands the collector the tensors the plan says are dead
(``gc_plan.eager_deletion_vars``); :func:`gc_threshold_bytes` turns
``FLAGS_eager_delete_tensor_gb`` into the collector's setting:

* ``< 0``: no collector at all (nothing freed);
* ``== 0``: they are freed at once;
* ``> 0``: they are queued, and the whole queue is freed as soon as the
  queued bytes reach the threshold (and at the end of a run).

Freeing a tensor means: count its bytes off :class:`Memory`, drop its array
(a tensor some later op reads as no-need-buffer keeps its shape and dtype),
tell the trace, and give the array to :meth:`GarbageCollector._retire`, which
is where device collectors (``cuda_backend.garbage_collector``) decide when
the memory really goes back. :meth:`GarbageCollector.releaser` hands the run
loop the one call it makes after an op; for the CPU collector freeing at once
that call is a tight loop (the fast path), kept here beside the general one.

``Memory`` counts the bytes held by the variables a run touches, per
variable (two variables that share a buffer count twice, as a per-variable
estimate does); ``peak`` is the high-water mark of a run. It also splits them
by what they hold (``memory_categories``: parameters, gradients, optimizer
state, activations, communication, other), each write and free moving one
more counter, bound at prepare time.
"""
import operator
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from refimpl import flags
from refimpl.core.tensor import DenseTensor

from .memory_categories import CATEGORIES, OTHER, TRACKED, classify

_array_of = operator.attrgetter("_array")
Dead = Sequence[Tuple[str, DenseTensor]]  # (name, tensor) pairs the plan frees after one op


def gc_threshold_bytes() -> int:
    """``FLAGS_eager_delete_tensor_gb`` as a collector threshold: -1 (no GC), 0 (at once) or bytes."""
    gb = flags.flag("FLAGS_eager_delete_tensor_gb")
    return -1 if gb < 0 else int(gb * (1 << 30))


class Memory:
    """Live and peak bytes of the variables a run touches, in total and by category.

    ``live`` / ``peak`` are the totals. ``by_cat[c]`` holds the live bytes of category ``c``
    (``memory_categories``: parameters, gradients, optimizer state, activations, communication)
    and ``max_by_cat[c]`` its high-water mark; ``at_peak`` is ``by_cat`` as it was when the total
    last reached its peak. Category ``other`` is not counted as it changes: it is the total minus
    the counted ones, which also absorbs the bytes of ops that store their outputs themselves and
    count only the total (feed, read, print). ``category`` maps a var name to its category, learnt
    from each prepared program (the first program to name a var decides).

    ``at_peak`` is copied lazily: a write that makes a new peak only sets ``peak_open`` (``by_cat``
    is the peak's split for as long as the total does not drop), and whatever lowers the total
    first calls :meth:`close_peak` while ``peak_open`` is set (the collectors' frees, a write that
    shrinks a tensor, :meth:`add`); :meth:`stats` closes it too.
    """

    __slots__ = ("live", "peak", "by_cat", "max_by_cat", "at_peak", "peak_open", "category", "_learnt")

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self.by_cat = [0] * TRACKED
        self.max_by_cat = [0] * TRACKED
        self.at_peak = [0] * TRACKED
        self.peak_open = False
        self.category: Dict[str, int] = {}
        self._learnt: set = set()

    def reset(self, live: int, by_cat: Optional[Sequence[int]] = None) -> None:
        self.live = self.peak = live
        self.by_cat[:] = by_cat if by_cat is not None else [0] * TRACKED
        self.max_by_cat[:] = self.by_cat
        self.peak_open = True  # the start is the peak so far: at_peak is by_cat until the total drops

    def close_peak(self, c: Optional[int] = None, d: int = 0) -> None:
        """Copy the peak's split into ``at_peak`` now that the total drops (``c``, ``d``: a write of
        ``d`` bytes to category ``c`` already counted in ``by_cat``, taken back out of the copy)."""
        self.at_peak[:] = self.by_cat
        if c is not None:
            self.at_peak[c] -= d
        self.peak_open = False

    def holders(self, tensors: Mapping[str, DenseTensor]) -> "Holders":
        """``tensors`` (name -> tensor) grouped by counted category, for :meth:`reset_from` (made
        once when a program is prepared, so a run's start costs no lookup per name)."""
        groups: Dict[int, list] = {}
        for name, t in tensors.items():
            groups.setdefault(self.category.get(name, OTHER), []).append(t)
        return Holders(len(tensors), tuple((c, tuple(ts)) for c, ts in groups.items()))

    def reset_from(self, holders: "Holders") -> None:
        """Start a run from what the tensors of ``holders`` (:meth:`holders`) hold now."""
        live, by_cat = 0, [0] * TRACKED
        for c, ts in holders.groups:
            n = 0
            for a in map(_array_of, ts):
                if a is not None:
                    n += a.nbytes
            live += n
            if c != OTHER:
                by_cat[c] = n
        self.reset(live, by_cat)

    def learn(self, program: Any) -> None:
        """Take the categories of ``program``'s vars (once per program version)."""
        key = (id(program), getattr(program, "_version", 0))
        if key in self._learnt:
            return
        self._learnt.add(key)
        for name, c in classify(program).items():
            self.category.setdefault(name, c)

    def tracked(self, name: str) -> Optional[int]:
        """The counted category of ``name``, or None when it counts as ``other``."""
        c = self.category.get(name, OTHER)
        return None if c == OTHER else c

    def add(self, c: Optional[int], delta: int) -> None:
        """``delta`` more bytes in category ``c`` (None: other): the slow path of ops that store
        their outputs themselves; the run loop's writers do the same inline (``op_runner.writer``)."""
        if delta < 0 and self.peak_open:
            self.close_peak()
        live = self.live + delta
        self.live = live
        if c is not None:
            v = self.by_cat[c] + delta
            self.by_cat[c] = v
            if v > self.max_by_cat[c]:
                self.max_by_cat[c] = v
        if live > self.peak:
            self.peak = live
            self.peak_open = True

    def stats(self) -> Dict[str, Any]:
        """The totals and the categories (see ``Executor.memory_stats``)."""
        if self.peak_open:
            self.close_peak()
        live = dict(zip(CATEGORIES, self.by_cat))
        live["other"] = self.live - sum(self.by_cat)
        at_peak = dict(zip(CATEGORIES, self.at_peak))
        at_peak["other"] = self.peak - sum(self.at_peak)
        most: Dict[str, Optional[int]] = dict(zip(CATEGORIES, self.max_by_cat))
        most["other"] = None
        return {"live_bytes": self.live, "peak_bytes": self.peak, "live_by_category": live,
                "peak_by_category": at_peak, "max_by_category": most}


class Holders:
    """A block's tensors grouped by counted category (``Memory.holders``); ``count`` is how many
    tensors the block had then (a block that resolves more later gets new holders)."""

    __slots__ = ("count", "groups")

    def __init__(self, count: int, groups: Tuple[Tuple[int, Tuple[DenseTensor, ...]], ...]) -> None:
        self.count, self.groups = count, groups


class GarbageCollector:
    """Frees dead tensors now (threshold 0) or in batches of ``threshold`` bytes.

    ``keep_meta`` names the tensors some later op reads as no-need-buffer:
    only those keep their shape and dtype when freed.
    """

    # whether the run loop may fold the frees into the op's own call (see ``releaser``); a device
    # collector that must see every free says False
    FUSABLE = True

    def __init__(self, memory: Memory, threshold_bytes: int = 0, keep_meta: Iterable[str] = ()) -> None:
        self.memory = memory
        self.threshold = threshold_bytes
        self.keep_meta = set(keep_meta)
        self.pending: list = []
        self.pending_bytes = 0
        self.on_free: Optional[Callable[[str, int], None]] = None  # callback(name, nbytes), set while tracing

    # ---- what the run loop calls ------------------------------------------------------------
    def releaser(self, dead: Dead) -> Optional[Callable[[], None]]:
        """The call that releases ``dead`` right after its op ran (None when there is nothing to free).

        Freeing at once on the CPU, it is the fast path: a loop over the pre-split tensors, no trace
        callback, nothing retired (dropping the last reference frees a NumPy array). Otherwise it
        goes through :meth:`add`, which queues or frees and retires.
        """
        if not dead:
            return None
        if self.threshold > 0 or not self.FUSABLE:
            return lambda: self.add(dead)
        mem = self.memory
        by_cat = mem.by_cat
        keep = self.keep_meta
        # each dead tensor with the category counter its bytes come off (-1: ``other``, the total only)
        cats = [(n, t, mem.category.get(n, OTHER)) for n, t in dead]
        cats = [(n, t, -1 if c == OTHER else c) for n, t, c in cats]
        plain_other = tuple(t for n, t, c in cats if n not in keep and c < 0)
        plain_counted = tuple((t, c) for n, t, c in cats if n not in keep and c >= 0)
        meta = tuple((t, c) for n, t, c in cats if n in keep)
        if len(dead) == 1 and not meta:  # the most common case: one tensor dies
            if plain_other:
                one = plain_other[0]

                def release_one() -> None:
                    a = one._array
                    if a is not None:
                        if mem.peak_open:
                            mem.close_peak()
                        mem.live -= a.nbytes
                        one._array = None
                return release_one
            one, c1 = plain_counted[0]

            def release_one_counted() -> None:
                a = one._array
                if a is not None:
                    if mem.peak_open:
                        mem.close_peak()
                    n = a.nbytes
                    mem.live -= n
                    by_cat[c1] -= n
                    one._array = None
            return release_one_counted

        def release() -> None:
            if mem.peak_open:
                mem.close_peak()
            live = mem.live
            for t in plain_other:
                a = t._array
                if a is not None:
                    live -= a.nbytes
                    t._array = None
            for t, c in plain_counted:
                a = t._array
                if a is not None:
                    n = a.nbytes
                    live -= n
                    by_cat[c] -= n
                    t._array = None
            for t, c in meta:
                a = t._array
                if a is not None:
                    live -= a.nbytes
                    if c >= 0:
                        by_cat[c] -= a.nbytes
                    t._clear()  # keeps shape and dtype: a later op reads them as no-need-buffer
            mem.live = live
        return release

    def add(self, tensors: Dead) -> None:
        """``tensors``: (name, DenseTensor) pairs that are dead now."""
        if self.threshold <= 0:
            self.free(tensors)
            return
        for item in tensors:
            a = item[1]._array
            if a is not None:
                self.pending.append(item)
                self.pending_bytes += a.nbytes
        if self.pending_bytes >= self.threshold:
            self.flush()

    def flush(self) -> None:
        """Free everything queued (the end of a run, or the threshold reached)."""
        if self.pending:
            items, self.pending, self.pending_bytes = self.pending, [], 0
            self.free(items)

    def free(self, tensors: Dead) -> None:
        """Detach dead tensors (accounting, trace callback) and hand their arrays to ``_retire``."""
        mem, keep, on_free = self.memory, self.keep_meta, self.on_free
        if mem.peak_open:
            mem.close_peak()
        live, by_cat, category = mem.live, mem.by_cat, mem.category
        retired = []
        for name, t in tensors:
            a = t._array
            if a is None:
                continue
            live -= a.nbytes
            c = category.get(name, OTHER)
            if c != OTHER:
                by_cat[c] -= a.nbytes
            if name in keep:
                t._clear()
            else:
                t._array = None
            if on_free is not None:
                on_free(name, a.nbytes)
            retired.append(a)
        mem.live = live
        if retired:
            self._retire(retired)

    def _retire(self, arrays: list) -> None:
        """Give the memory back. On the CPU dropping the last reference does it; device
        collectors (``cuda_backend.garbage_collector``) decide when."""
