"""Run the same thing on both backends and compare what matters.

``run_recorded(d, backend)`` replays an oracle case (recorded initial
persistables, feeds and learning rates) on one backend and returns the
losses, the final persistables (as host arrays), the GC part of the event
trace of the first step, and the executor's memory stats. The CUDA run
starts with its persistables on the device (as ``tensor.set(value,
CUDAPlace)`` would put them), so the alloc/free events are comparable one
for one.
"""
import numpy as np

import refimpl as paddle
from refimpl.executor import Trace
from refimpl.executor.backend import to_device, to_host
from refimpl.framework import Program

from oracle import array


def place(backend):
    return paddle.CUDAPlace(0) if backend == "cuda" else paddle.CPUPlace()


def gc_events(trace, drop_moves=False):
    """The alloc/free records of a trace, as plain tuples (what the backends must agree on).

    ``drop_moves`` leaves out zero-byte allocs: a persistable that was set on
    the host (``tensor.set``) and that an optimizer hands back on the device
    is a new value of the same size, which the NumPy run updates in place.
    """
    return [(e.kind, e.block, e.op, e.var, e.nbytes, e.rank, e.job) for e in trace.events
            if e.kind == "free" or (e.kind == "alloc" and not (drop_moves and e.nbytes == 0))]


def put(scope, name, value, backend):
    scope.var(name).get_tensor()._array = to_device(np.array(value, copy=True), backend)


def run_recorded(d, backend, steps=None):
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})
    prog = Program.from_dict(d["main"])
    scope = paddle.static.Scope()
    for name, entry in d["initial_persistables"].items():
        put(scope, name, array(entry), backend)
    exe = paddle.static.Executor(place(backend))
    trace = Trace()
    losses, lr = [], d.get("lr_per_step")
    feeds = d["feeds"][:steps] if steps else d["feeds"]
    stats = None
    for step, feed in enumerate(feeds):
        if lr:
            put(scope, "learning_rate_0", np.array(lr[step], dtype="float32"), backend)
        out, = exe.run(prog, feed={k: array(v) for k, v in feed.items()}, fetch_list=[d["loss_name"]],
                       scope=scope, trace=trace if step == 0 else None)
        if step == 0:
            stats = exe.memory_stats()
        losses.append(out)
    final = {n: to_host(scope.find_var(n).get_tensor()._array) for n in d["final_persistables"]}
    return {"losses": losses, "final": final, "gc": gc_events(trace), "stats": stats, "program": prog}


def assert_same_run(got, ref):
    """Two runs (dicts of :func:`run_recorded`'s kind) agree: the same GC events and memory stats,
    losses and final persistables within :func:`assert_close`."""
    assert got["gc"] == ref["gc"]
    assert got["stats"] == ref["stats"]
    for step, (g, w) in enumerate(zip(got["losses"], ref["losses"])):
        assert_close(g, w, what=f"loss of step {step}")
    for name, w in ref["final"].items():
        assert_close(got["final"][name], w, what=name)


def assert_close(got, want, rtol=1e-6, atol=1e-7, what=""):
    """Equal within rtol (atol only absorbs values that are zero up to rounding)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)
