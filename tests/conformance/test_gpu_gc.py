"""The GPU garbage collectors free what the CPU one frees, when it frees it; only the release differs.

Both GPU collectors (stream-ordered, and unsafe-fast under
``FLAGS_fast_eager_deletion_mode``) give the same alloc/free event trace
(same var freed after the same op, same bytes), the same live and peak
bytes and the same numbers as the CPU backend, freeing at once
(``FLAGS_eager_delete_tensor_gb=0``) and in threshold batches. And the
stream-ordered one holds dead device memory until the stream has passed it:
observed with a stand-in stream whose events complete only on
``synchronize`` (the simulator's stream is synchronous).
"""
import os

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.tensor import DenseTensor
from refimpl.executor import Memory, Trace
from refimpl.executor.backend import to_host
from refimpl.executor.garbage_collector import GarbageCollector
from refimpl.framework import Program

import cuda_backend
from cuda_backend import garbage_collector as ggc
from harness import assert_same_run, gc_events, place, put
from oracle import array, case_files, load

CASES = [p for p in case_files() if os.path.basename(p).startswith(("00_", "06_"))]  # MLP; gradient merge
MODES = {"stream": False, "fast": True}  # collector -> FLAGS_fast_eager_deletion_mode


@pytest.fixture(autouse=True)
def _restore_flags():
    yield
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0, "FLAGS_fast_eager_deletion_mode": True})


def run_case(d, backend, gb, fast=True, steps=2):
    """Like ``harness.run_recorded`` with a GC threshold and collector mode; also the executor's collector class."""
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gb, "FLAGS_fast_eager_deletion_mode": fast})
    prog = Program.from_dict(d["main"])
    scope = paddle.static.Scope()
    for name, entry in d["initial_persistables"].items():
        put(scope, name, array(entry), backend)
    exe = paddle.static.Executor(place(backend))
    trace, losses, stats, lr = Trace(), [], [], d.get("lr_per_step")
    for step, feed in enumerate(d["feeds"][:steps]):
        if lr:
            put(scope, "learning_rate_0", np.array(lr[step], dtype="float32"), backend)
        out, = exe.run(prog, feed={k: array(v) for k, v in feed.items()}, fetch_list=[d["loss_name"]],
                       scope=scope, trace=trace if step == 0 else None)
        stats.append(exe.memory_stats())  # step 0 traced, the others on the untraced fast path
        losses.append(out)
    final = {n: to_host(scope.find_var(n).get_tensor()._array)
             for n in d["final_persistables"]}
    return {"losses": losses, "final": final, "gc": gc_events(trace), "stats": stats,
            "gc_class": type(exe._last.block.gc)}


@pytest.mark.parametrize("gb", [0.0, 2e-6], ids=["free-at-once", "batched"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("path", CASES, ids=[os.path.basename(p) for p in CASES])
def test_gpu_collectors_give_the_cpu_trace_and_numbers(path, mode, gb):
    d = load(path)
    ref = run_case(d, "numpy", gb)
    got = run_case(d, "cuda", gb, fast=MODES[mode])
    assert ref["gc_class"] is GarbageCollector
    assert got["gc_class"] is (ggc.UnsafeFastGarbageCollector if MODES[mode] else ggc.StreamGarbageCollector)
    assert any(e[0] == "free" for e in ref["gc"])
    assert_same_run(got, ref)


def test_batching_changes_the_trace_the_same_way_on_both_backends():
    d = load(CASES[0])
    at_once, batched = run_case(d, "numpy", 0.0, steps=1), run_case(d, "numpy", 2e-6, steps=1)
    assert at_once["gc"] != batched["gc"]  # the threshold really batches (so the test above compares it)
    assert run_case(d, "cuda", 2e-6, fast=False, steps=1)["gc"] == batched["gc"]


# ---- when the stream-ordered collector releases ------------------------------------------------
class _Stream:
    """A stand-in stream: events recorded on it complete only when it is synchronized."""

    def __init__(self):
        self.syncs = 0
        self.events = []

    def synchronize(self):
        self.syncs += 1
        for e in self.events:
            e.done = True


class _Event:
    def __init__(self):
        self.done = False

    def record(self, stream):
        stream.events.append(self)

    def query(self):
        return self.done


def _dead(names, n=4):
    out = []
    for name in names:
        t = DenseTensor()
        t._array = cuda_backend.to_device(np.ones(n, "float32"))
        out.append((name, t))
    return out


def _collector(cls, threshold=0, **kw):
    mem = Memory()
    mem.reset(64)
    gc = cls(mem, threshold, keep_meta=("m",), **kw)
    freed, released = [], []
    gc.on_free = lambda name, nbytes: freed.append((name, nbytes))
    gc.on_release = released.append
    return gc, mem, freed, released


def test_stream_collector_defers_release_until_the_stream_is_synchronized():
    stream = _Stream()
    gc, mem, freed, released = _collector(ggc.StreamGarbageCollector, stream=stream, new_event=_Event)
    dead = _dead(["a", "m"])
    gc.free(dead)
    # the accounting and the trace callback see the free at once, as on the CPU ...
    assert mem.live == 32 and freed == [("a", 16), ("m", 16)]
    assert dead[0][1]._array is None and dead[1][1]._meta is not None  # "m" keeps its meta
    # ... but the device memory is held until the stream has passed the event
    assert released == [] and gc.held_bytes == 32 and len(stream.events) == 1
    gc.free(_dead(["b"]))
    gc.flush()  # end of a run: polls, does not wait
    assert released == [] and gc.held_bytes == 48
    stream.synchronize()  # the stream passed both events: the next poll releases both, in order
    gc.free(_dead(["c"]))
    assert released == [32, 16] and gc.held_bytes == 16
    gc.synchronize()  # waits for the stream itself, then releases the rest
    assert released == [32, 16, 16] and gc.held_bytes == 0 and gc.released_bytes == 64 and stream.syncs == 2
    assert mem.live == 0


def test_stream_collector_keeps_threshold_batching():
    stream = _Stream()
    gc, mem, freed, released = _collector(ggc.StreamGarbageCollector, threshold=40, stream=stream,
                                          new_event=_Event)
    gc.add(_dead(["a", "b"]))  # 32 bytes < 40: queued, not freed
    assert freed == [] and mem.live == 64 and stream.events == []
    gc.add(_dead(["c"]))  # 48 >= 40: the batch is freed, its memory held behind one event
    assert [n for n, _ in freed] == ["a", "b", "c"] and mem.live == 16 and gc.held_bytes == 48
    assert len(stream.events) == 1 and released == []
    gc.synchronize()
    assert released == [48]


def test_fast_collector_releases_at_once_with_the_cpu_accounting():
    gc, mem, freed, released = _collector(ggc.UnsafeFastGarbageCollector)
    gc.free(_dead(["a", "m"]))
    assert mem.live == 32 and freed == [("a", 16), ("m", 16)] and released == [32] and gc.held_bytes == 0
    gc, mem, freed, released = _collector(ggc.UnsafeFastGarbageCollector, threshold=40)
    gc.add(_dead(["a", "b"]))
    assert released == []
    gc.add(_dead(["c"]))
    assert released == [48] and mem.live == 16


def test_stream_collector_on_the_simulator_stream():
    gc, mem, freed, released = _collector(ggc.StreamGarbageCollector)  # numba's default stream and events
    gc.free(_dead(["a"]))
    gc.free(_dead(["b"]))  # the simulator is synchronous: the first batch is done by now
    assert released == [16] and gc.held_bytes == 16
    gc.synchronize()
    assert released == [16, 16] and gc.held_bytes == 0


def test_flag_selects_the_collector():
    assert paddle.get_flags("FLAGS_fast_eager_deletion_mode") == {"FLAGS_fast_eager_deletion_mode": True}
    from refimpl.executor.backend import collector_class
    assert collector_class("numpy") is GarbageCollector
    assert collector_class("cuda") is ggc.UnsafeFastGarbageCollector
    paddle.set_flags({"FLAGS_fast_eager_deletion_mode": False})
    assert collector_class("cuda") is ggc.StreamGarbageCollector
    assert collector_class("numpy") is GarbageCollector
