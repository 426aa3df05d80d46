"""The ``refimpl demo`` walk-through: one MLP, start to finish.

It uses only the public API, the same way a user script would: build the
program under ``program_guard``, print it, run the startup program, then
train with ``Executor.run`` while a progress bar shows the loss. At the end
it prints the loss curve in a few numbers and what eager deletion did
(tensors freed per step, live and peak bytes).
"""
import sys
import time

import numpy as np

import refimpl as paddle
from refimpl.executor import Trace


def build(din, hidden, classes):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            x = paddle.static.data("x", [None, din], "float32")
            label = paddle.static.data("label", [None, 1], "int64")
            h = paddle.static.nn.fc(x, hidden, activation="relu")
            h = paddle.static.nn.fc(h, hidden, activation="relu")
            logits = paddle.static.nn.fc(h, classes)
            loss = paddle.nn.functional.cross_entropy(logits, label)
            paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    return main, startup, loss


def synthetic(rng, batch, din, classes, w_true):
    x = rng.standard_normal((batch, din)).astype("float32")
    label = np.argmax(x @ w_true, axis=1).astype("int64")[:, None]
    return x, label


def _bar(i, n, loss, width=30, out=sys.stdout):
    """A progress bar redrawn in place on a terminal; a plain line every 10% elsewhere."""
    done = int(width * i / n)
    line = f"  [{'#' * done}{'.' * (width - done)}] step {i:4d}/{n}  loss {loss:8.4f}"
    if getattr(out, "isatty", lambda: False)():
        out.write("\r" + line)
    elif i == n or i % max(1, n // 10) == 0:
        out.write(line + "\n")
    out.flush()


def run_demo(steps=200, batch=32, hidden=64, seed=0, gc_gb=0.0, show_program=True, out=sys.stdout):
    din, classes = 16, 4
    paddle.seed(seed)
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    main, startup, loss = build(din, hidden, classes)
    if show_program:
        print("=== the main program (Paddle-style text) ===", file=out)
        print(main, file=out)
    print(f"\n=== training: {steps} steps, batch {batch}, MLP {din}-{hidden}-{hidden}-{classes}, "
          f"Momentum, FLAGS_eager_delete_tensor_gb={gc_gb} ===", file=out)
    exe = paddle.static.Executor()
    scope = paddle.static.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal((din, classes)).astype("float32")
    losses, t0 = [], time.perf_counter()
    for i in range(1, steps + 1):
        x, y = synthetic(rng, batch, din, classes, w_true)
        trace = Trace() if i == steps else None
        (lv,) = exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope, trace=trace)
        losses.append(float(lv))
        _bar(i, steps, float(np.mean(losses[-10:])), out=out)
    elapsed = time.perf_counter() - t0
    print("\n", file=out)
    marks = sorted({0, steps // 4, steps // 2, 3 * steps // 4, steps - 1})
    print("loss: " + "  ".join(f"step {m + 1}: {losses[m]:.4f}" for m in marks), file=out)
    stats = exe.memory_stats()
    frees = trace.of_kind("free")
    n_ops = len(trace.of_kind("op"))
    print(f"speed: {elapsed / steps * 1e3:.3f} ms per step ({n_ops} ops per step)", file=out)
    print(f"garbage collection: {len(frees)} tensors freed per step "
          f"({sum(e.nbytes for e in frees)} bytes); live after step {stats['live_bytes']} bytes, "
          f"peak {stats['peak_bytes']} bytes", file=out)
    return 0
