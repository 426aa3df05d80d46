"""The event trace: what a run did, as a list of small records.

Everything observable goes through it: op runs, tensor allocations and frees
(with bytes), GC frees, sends/receives and job boundaries. It is off unless a
``Trace`` is passed to ``Executor.run(..., trace=t)`` (or set on the
executor), and costs nothing then: the executor runs a separate, plain loop.
Peak memory can be recomputed from the records, and ``to_chrome`` writes a
Chrome-trace / Perfetto JSON (optionally with a counter per memory category,
``memory_categories``).
"""
from __future__ import annotations

import collections
import json
from typing import Any, Dict, List, Optional

Event = collections.namedtuple("Event", "kind block op op_type var nbytes rank job extra")
Event.__new__.__defaults__ = (None,) * 9


class Trace:
    """An append-only list of :data:`Event` records."""

    def __init__(self):
        self.events = []

    def add(self, kind: str, **kw: Any) -> None:
        self.events.append(Event(kind, **kw))

    def __iter__(self):
        return iter(self.events)

    def __len__(self):
        return len(self.events)

    def of_kind(self, kind: str) -> List[Event]:
        return [e for e in self.events if e.kind == kind]

    def frees_by_op(self, block: int = 0) -> Dict[int, List[str]]:
        """{op index: sorted names freed after it} for one block (from ``free`` events)."""
        out = {}
        for e in self.events:
            if e.kind == "free" and e.block == block:
                out.setdefault(e.op, []).append(e.var)
        return {k: sorted(v) for k, v in out.items()}

    def peak_bytes(self, start: int = 0) -> int:
        live = peak = start
        for e in self.events:
            if e.kind == "alloc":
                live += e.nbytes
            elif e.kind == "free":
                live -= e.nbytes
            peak = max(peak, live)
        return peak

    def to_chrome(self, path: Optional[str] = None, categories: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
        """Chrome-trace JSON (one slice per op, counters for live bytes).

        With ``categories`` ({var name: category index}, ``memory_categories.classify(program)``) a
        second counter, ``live bytes by category``, splits the bytes the run allocated into
        parameters, gradients, optimizer state, activations, communication and other."""
        from .memory_categories import CATEGORIES, OTHER
        out, t, live = [], 0, 0
        by_cat = [0] * len(CATEGORIES)
        for e in self.events:
            if e.kind == "op":
                out.append({"name": e.op_type, "ph": "X", "ts": t, "dur": 1,
                            "pid": e.rank or 0, "tid": e.block or 0,
                            "args": {"op": e.op, "job": e.job}})
                t += 1
            elif e.kind in ("alloc", "free"):
                delta = e.nbytes if e.kind == "alloc" else -e.nbytes
                live += delta
                out.append({"name": "live bytes", "ph": "C", "ts": t, "pid": e.rank or 0,
                            "args": {"bytes": live}})
                if categories is not None:
                    by_cat[categories.get(e.var, OTHER)] += delta
                    out.append({"name": "live bytes by category", "ph": "C", "ts": t, "pid": e.rank or 0,
                                "args": dict(zip(CATEGORIES, by_cat))})
        doc = {"traceEvents": out}
        if path:
            with open(path, "w") as f:
                json.dump(doc, f)
        return doc
