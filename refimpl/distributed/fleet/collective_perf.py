"""Fleet's collective performance check (``fleet.collective_perf``).

Mirrors ``python/paddle/distributed/fleet/fleet.py``'s ``collective_perf`` and its per-type
``allreduce_perf``, ``reduce_perf``, ``broadcast_perf``, ``allgather_perf``
and ``reduce_scatter_perf``: time a collective for each message size on the
data-parallel (or model-parallel) group, log the time per iteration, warn when
it is over the size's threshold; bad sizes and non-collective mode are
handled as that ``fleet.py`` handles them. Unlike Paddle 3.3.1 (whose body is
commented out) it runs, and it also returns ``{nbytes: seconds}``.
"""
from __future__ import annotations

import functools
import logging
import numbers
import time
from typing import Dict, Optional

import numpy as np

from refimpl.core.errors import InvalidArgument, NotFound

from .base.compat_errors import InvalidArgumentType
from .base import topology as tp

logger = logging.getLogger("refimpl.distributed.fleet")

_PERF = {  # comm type -> (test name in the log, name in the timeout warning, group kind)
    "allreduce": ("AllReduceTest", "AllReduce", "data"),
    "reduce": ("ReduceTest", "Reduce", "data"),
    "broadcast": ("BroadcastTest", "Broadcast", "data"),
    "allgather": ("AllgatherTest", "Allgather", "model"),
    "reduce_scatter": ("ReduceScatterTest", "ReduceScatter", "model"),
}


class CollectivePerf:
    """Mixed into :class:`~refimpl.distributed.fleet.fleet.Fleet`."""

    _is_collective: bool  # the Fleet's

    def collective_perf(self, comm_type: str, round: int = 50,
                        size_and_time: Dict[int, float] = {}) -> Optional[Dict[int, float]]:  # noqa: B006 - Paddle's signature
        """Time ``comm_type`` for each ``{nbytes: threshold seconds}``; return ``{nbytes: seconds/iter}``."""
        if not self._is_collective:
            logger.warning("fleet.collective_perf is only for collective mode, will return with no test acted.")
            return None
        if comm_type not in _PERF:
            raise NotFound(f"collective_perf: unknown comm_type {comm_type!r}; expected one of {list(_PERF)}")
        if isinstance(round, bool) or not isinstance(round, numbers.Integral) or round < 1:
            raise InvalidArgument(f"collective_perf: round must be a positive int, got {round!r}")
        results = {}
        for size, time_threshold in dict(size_and_time).items():
            results.update(self._collective_perf_impl(round=round, context={comm_type: [size, time_threshold]}))
        return results

    def _collective_perf_impl(self, round=50, context={}, hcg=None):  # noqa: B006
        from refimpl.distributed import collective
        hcg = self.get_hybrid_communicate_group() if hcg is None else hcg
        if isinstance(hcg, tp.HybridCommunicateGroup):
            dp, sharding = hcg.get_data_parallel_group(), hcg.get_sharding_parallel_group()
            data_group = dp if dp.nranks > 1 else sharding if sharding.nranks > 1 else None
            groups = {"data": data_group, "model": hcg.get_model_parallel_group()}
        else:  # static groups only: every worker does data parallelism (Paddle's default topology)
            groups = {"data": collective._get_group(None), "model": None}
        results = {}
        for comm_type, (nbytes, threshold) in context.items():
            if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral):
                raise InvalidArgumentType(f"collective_perf: message size {nbytes!r} is not an int number of bytes")
            if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
                raise InvalidArgumentType(f"collective_perf: time threshold {threshold!r} for {nbytes}B "
                                          f"is not a number of seconds")
            if nbytes <= 0:
                logger.warning("Size for collective performance check should be positive, but got %s", nbytes)
                return results
            x = np.zeros(int(nbytes) // 4, dtype=np.float32)
            group = groups[_PERF[comm_type][2]]
            self._perf(comm_type, 10, x, group, nbytes, -1, warmup=True)
            ret = self._perf(comm_type, round, x, group, nbytes, threshold)
            if ret is not None:
                results[int(nbytes)] = ret
        return results

    def _perf(self, comm_type, iteration, x, group, perf_size, perf_threshold_time, warmup=False):
        """Time ``iteration`` calls of one collective on ``group``; log the result (None if not run)."""
        from refimpl.distributed import collective
        if group is None or group.nranks <= 1:
            if not warmup:
                logger.warning("%s_perf is invalid, group invalid!", comm_type)
            return None
        collective.barrier()
        p = group.nranks
        if comm_type == "reduce_scatter":
            if x.shape[0] % p != 0:
                if not warmup:
                    logger.warning("the shape of input[%d] can't be divided exactly by reduce_scatter "
                                   "parallelism[%d], test stopped!", x.shape[0], p)
                return None
            out = np.empty(x.shape[0] // p, dtype=x.dtype)
        run = {"allreduce": lambda: collective.all_reduce(x, group=group),
               "reduce": lambda: collective.reduce(x, dst=min(group.ranks), group=group),
               "broadcast": lambda: collective.broadcast(x, src=min(group.ranks), group=group),
               "allgather": lambda: collective.all_gather([], x, group=group),
               "reduce_scatter": lambda: collective.reduce_scatter(out, x, group=group)}[comm_type]
        start = time.perf_counter()
        for _ in range(iteration):
            run()
        ret = (time.perf_counter() - start) / iteration
        if warmup:
            return ret
        test, name, _ = _PERF[comm_type]
        logger.info("[%s] nbytes %sB test result: %s s/iter", test, perf_size, ret)
        if perf_threshold_time > -1 and ret > perf_threshold_time:
            logger.warning("[Perf Warning] %s Test Timeout! %s > %s", name, ret, perf_threshold_time)
        return ret

    # Paddle's per-type methods: (iteration, x, group, perf_size, perf_threshold_time[, warmup])
    allreduce_perf = functools.partialmethod(_perf, "allreduce")
    reduce_perf = functools.partialmethod(_perf, "reduce")
    broadcast_perf = functools.partialmethod(_perf, "broadcast")
    allgather_perf = functools.partialmethod(_perf, "allgather")
    reduce_scatter_perf = functools.partialmethod(_perf, "reduce_scatter")
