"""Ops that need the executor: conditional_block, feed, fetch.

Mirrors Paddle's ``conditional_block`` (run a sub-block in a kid scope when
``Cond`` holds), and the ``feed``/``fetch`` ops its executor puts around a
program (copy column ``col`` of the feed list into ``Out``; copy ``X`` into
column ``col`` of the fetch list). Instead of a kernel each registers a
``prepare(ctx, op)`` hook; ``ctx`` is the executor's PreparedBlock, which
resolves variables and prepares sub-blocks. The feed and fetch lists are
``ctx.run_ctx["feed"]`` / ``["fetch"]``. Transfers go through ``refimpl.core.device``
(the executor has loaded ``ctx.backend`` before any hook runs).
"""
import numpy as np

from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.core.device import to_device, to_host

from .registry import register_op


def _prepare_conditional_block(ctx, op):
    skip = op.attr("skip_eager_deletion_vars") if op.has_attr("skip_eager_deletion_vars") else ()
    sub = ctx.prepare_sub_block(op.attr("sub_block").idx, skip)
    conds = [ctx.tensor(n) for n in op.input("Cond")]
    scalar = op.attr("is_scalar_condition")

    def run():
        if scalar:
            c = conds[0]._array
            if c is None or c.size != 1:
                raise PreconditionNotMet(f"conditional_block: Cond {op.input('Cond')[0]!r} must hold one "
                                         f"value when is_scalar_condition is set")
            go = bool(to_host(c).reshape(-1)[0])
        else:
            go = all(t._array is not None and t._array.size > 0 for t in conds)
        if go:
            sub.run(ctx.run_ctx.get("trace"))
    return run


register_op("conditional_block", ["Cond*", "Input*"], ["Out*", "Scope"],
            {"sub_block": None, "is_scalar_condition": False},
            prepare=_prepare_conditional_block)


def _prepare_feed(ctx, op):
    out = ctx.tensor(op.output("Out")[0])
    col = op.attr("col")
    mem = ctx.memory

    def run():
        feeds = ctx.run_ctx.get("feed_list") or []
        if col >= len(feeds):
            raise InvalidArgument(f"feed op: column {col} of the feed list is missing")
        a = to_device(np.asarray(feeds[col]), ctx.backend)
        old = out._array
        out._array = a
        mem.live += a.nbytes - (old.nbytes if old is not None else 0)
    return run


def _prepare_fetch(ctx, op):
    src = ctx.tensor(op.input("X")[0])
    col = op.attr("col")

    def run():
        fetched = ctx.run_ctx.setdefault("fetch_list", {})
        if src._array is None:
            raise PreconditionNotMet(f"fetch op: {op.input('X')[0]!r} holds no value")
        fetched[col] = to_host(src._array)
    return run


register_op("feed", ["X"], ["Out"], {"col": 0}, prepare=_prepare_feed)
register_op("fetch", ["X"], ["Out"], {"col": 0}, prepare=_prepare_fetch)
register_op("fetch_v2", ["X"], ["Out"], {"col": 0, "deepcopy": True}, prepare=_prepare_fetch)
