"""PlanExecutor: run a Plan (a job list) on one rank over micro-batch scopes.

Mirrors what Paddle's ``StandaloneExecutor`` does with a ``Plan``: one kid
scope of the given scope per micro-batch, the full-batch feeds split along
dim 0 into those scopes, then every job runs its job type's program in its
micro-batch's scope (persistables stay in the given scope), with eager
deletion inside the job except for the job's ``skip_gc_vars`` (the vars a
later job reads) and the fetch targets. Each (job type, micro-batch) is
prepared once and cached. Fetched values come back stacked per micro-batch.
"""
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.bfloat16 import as_paddle_host
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.core.place import Place
from refimpl.core.scope import Scope, global_scope

from .backend import default_place, to_device, to_host
from .feed_fetch import check_feed, name_of
from .garbage_collector import Memory, gc_threshold_bytes
from .gc_plan import no_need_buffer_inputs
from .memory_categories import TRACKED
from .plan import Plan
from .prepared import PreparedBlock, prepare_flags
from .trace import Trace


def split_feed(feed: Optional[dict], num_micro_batches: int) -> List[Dict[str, np.ndarray]]:
    """Split every full-batch feed array along dim 0 into equal micro-batches."""
    parts = {}
    for name, value in (feed or {}).items():
        arr = np.asarray(value)
        if arr.ndim == 0 or arr.shape[0] % num_micro_batches:
            raise InvalidArgument(f"feed {name!r}: batch of {arr.shape[0] if arr.ndim else 0} rows cannot be "
                                  f"split into {num_micro_batches} equal micro-batches")
        parts[name] = np.split(arr, num_micro_batches, axis=0)
    return [{n: p[m] for n, p in parts.items()} for m in range(num_micro_batches)]


class PlanExecutor:
    """Runs one rank's Plan; create one per rank (it caches prepared jobs)."""

    def __init__(self, place: Optional[Place] = None, rank: Optional[int] = None) -> None:
        self.place = place if place is not None else default_place()
        self.rank = rank
        self.memory = Memory()
        self._cache = {}

    def _scopes(self, plan, scope, n):
        key = ("scopes", id(plan), id(scope))
        scopes = self._cache.get(key)
        if scopes is None:
            scopes = self._cache[key] = [scope.new_scope() for _ in range(n)]
        return scopes

    def _prepared(self, plan, job, scopes, scope, fetch_names):
        threshold = gc_threshold_bytes()
        skip = tuple(job.skip_gc_vars()) + tuple(fetch_names)
        key = (id(plan), job.type(), job.micro_batch_id(), skip, threshold, prepare_flags())
        hit = self._cache.get(key)
        program = plan.program(job.type())
        if hit is None or hit[0] is not program or hit[1] != program._version:
            keep = {n for t in plan.job_types() for op in plan.program(t).global_block().ops
                    for n in no_need_buffer_inputs(op)}
            block = PreparedBlock(program, 0, scopes[job.micro_batch_id()], scope, self.place.backend,
                                  skip, threshold, memory=self.memory, keep_meta=keep)
            hit = self._cache[key] = (program, program._version, block)
        return hit[2]

    def run(self, plan: Plan, feed: Optional[dict] = None, fetch_list: Optional[Sequence[Any]] = None,
            scope: Optional[Scope] = None, trace: Optional[Trace] = None,
            timings: Optional[Dict[str, float]] = None) -> List[np.ndarray]:
        """Run every job of ``plan`` once; return the fetched vars, stacked per micro-batch.

        ``timings``, a dict, gets the wall seconds spent in each job type added to it.
        """
        scope = scope if scope is not None else global_scope()
        n = plan.micro_batch_num()
        scopes = self._scopes(plan, scope, n)
        fetch_names = [f if isinstance(f, str) else f.name for f in (fetch_list or [])]
        for m, micro in enumerate(split_feed(_checked_feed(plan, feed), n)):
            for name, arr in micro.items():
                scopes[m].var(name).get_tensor()._array = to_device(arr, self.place.backend)
        blocks = [self._prepared(plan, job, scopes, scope, fetch_names) for job in plan.job_list()]
        self.memory.reset(*scope_bytes(scope, scopes, self.memory.tracked))
        for job, block in zip(plan.job_list(), blocks):
            if trace is not None:
                trace.add("job", op_type=job.type(), rank=self.rank, job=job.micro_batch_id(), extra="begin")
            t0 = time.perf_counter() if timings is not None else 0.0
            block.run(trace, rank=self.rank, job=f"{job.type()}#{job.micro_batch_id()}")
            if timings is not None:
                timings[job.type()] = timings.get(job.type(), 0.0) + time.perf_counter() - t0
            if trace is not None:
                trace.add("job", op_type=job.type(), rank=self.rank, job=job.micro_batch_id(), extra="end")
        return [fetch_stacked(name, scopes) for name in fetch_names]

    def memory_stats(self) -> Dict[str, Any]:
        """This rank's bytes, in total and by category: the keys of ``Executor.memory_stats``."""
        return self.memory.stats()


def fetch_stacked(name: str, scopes: Sequence[Scope]) -> np.ndarray:
    """The value of ``name`` in every micro-batch scope, stacked (host copies; a bfloat16 value as its
    uint16 bit patterns, as ``Executor.run`` and Paddle fetch it)."""
    vals = []
    for m, s in enumerate(scopes):
        v = s.find_var(name)
        if v is None or v.get_tensor()._array is None:
            raise PreconditionNotMet(f"fetch {name!r}: micro-batch {m} holds no value after the plan ran "
                                     f"(is it computed on this rank's stage?)")
        vals.append(as_paddle_host(to_host(v.get_tensor()._array)))
    return np.stack(vals)


def _checked_feed(plan, feed):
    """``feed`` checked as ``Executor.run`` checks it, each var against the first job program that
    declares it (a rank that does not read a feed, e.g. a later pipeline stage, takes it unchecked)."""
    if not feed:
        return feed
    if not isinstance(feed, dict):
        raise InvalidArgument(f"feed must be a dict {{name: array}}, got {type(feed).__name__}")
    out = {name_of(k): v for k, v in feed.items()}
    unchecked = set(out)
    for t in plan.job_types():
        program = plan.program(t)
        mine = unchecked & set(program.global_block().vars)
        out.update(check_feed(program, {k: out[k] for k in mine}))
        unchecked -= mine
    return out


def scope_bytes(scope: Scope, scopes: Sequence[Scope],
                tracked: Callable[[str], Optional[int]]) -> Tuple[int, List[int]]:
    """(total bytes, bytes per counted memory category) held in the scopes."""
    seen, total, by_cat = set(), 0, [0] * TRACKED
    for s in [scope] + list(scopes):
        for name in s.local_var_names():
            a = s.find_local_var(name).tensor._array
            if a is not None and id(a) not in seen:
                seen.add(id(a))
                total += a.nbytes
                c = tracked(name)
                if c is not None:
                    by_cat[c] += a.nbytes
    return total, by_cat
