"""Benchmark: the cost of building a program grows linearly with its size.

An N-layer MLP (fc + relu per layer, loss ``mean(square(y))``, Adam) goes
through every build-time step, each timed on its own:

* ``build``: the forward program; ``minimize``: ``append_backward`` and the
  Adam update ops;
* ``gc plan``: the eager-deletion plan (``executor.eager_deletion_vars``);
* ``split_program``: cut into four parts (``pass_utils.split_program``);
* ``clone``: ``Program.clone`` of main and startup; ``grad merge``:
  ``accumulate_gradients`` into ``@GRAD@MERGE`` buffers on that clone;
* ``skip_gc_vars``: the clone cut into forward / backward / optimizer
  programs, and ``pass_utils.set_skip_gc_vars`` for their FThenB jobs;
* ``prepare``: what the Executor's first ``run`` builds and caches, the
  ``PreparedProgram`` (every op's kernel, variable holders, frees, checks).

For N = 100, 1,000 and 3,000 layers it prints seconds and µs per op, and the
ratio µs per op at the largest N / at the smallest N (1.0 is linear; the
goal is at most 1.5): first with Python's cyclic garbage collector paused
while a step is timed (``timeit``'s convention; the step's own work), then
with it on, in one run (what a user waits: a full collection walks every
live object, so its cost per op grows with the heap, not with the step's
code). Before each step the garbage of the earlier ones is collected,
untimed. With the GC paused, each size takes the best of two runs (100:
three; ``--quick``: one), which keeps other load on the machine out. A last
table times the six pipeline scheduler passes
(``new_pass("pipeline_scheduler_" + name, attrs).create_job_list()``) at
P = 8 stages with M = 8, 16 and 128 micro-batches, per job (ZBVPP refuses
M > P, as Paddle does).

    python benchmarks/build_scaling.py            # N = 100, 1,000, 3,000 (1 to 2 minutes)
    python benchmarks/build_scaling.py --quick    # N = 20, 200 (a few seconds; for the tests)
"""
import argparse
import gc
import time


import refimpl as paddle
from refimpl.core.errors import EnforceNotMet
from refimpl.distributed.passes import new_pass, pass_utils
from refimpl.distributed.passes.gradient_accumulation import accumulate_gradients
from refimpl.distributed.passes.pipeline_programs import _program_for_fthenb_and_1f1b
from refimpl.executor import eager_deletion_vars
from refimpl.executor.executor import PreparedProgram
from refimpl.executor.garbage_collector import gc_threshold_bytes

WIDTH = 4
SCHEDULES = ("FThenB", "1F1B", "Eager1F1B", "VPP", "ZBH1", "ZBVPP")
MICRO_BATCHES = 4
PHASES = ("build", "minimize", "gc plan", "split_program", "clone", "grad merge", "skip_gc_vars", "prepare")


def _timed(fn, pause_gc=False):
    """(seconds, result) of ``fn()``; with ``pause_gc`` as ``timeit`` does: collector off while timed."""
    gc.collect()  # collecting the garbage of the earlier steps is not this step's cost
    if pause_gc:
        gc.disable()
    try:
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out
    finally:
        if pause_gc:
            gc.enable()


def build(layers):
    """The forward program of an ``layers``-layer MLP (fresh names)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        h = paddle.static.data("x", [None, WIDTH], "float32")
        for _ in range(layers):
            h = paddle.static.nn.fc(h, WIDTH, activation="relu")
        loss = paddle.mean(paddle.square(h))
    return main, startup, loss


def minimize(main, startup, loss):
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        paddle.optimizer.Adam(learning_rate=0.01).minimize(loss)


def _skip_gc_vars(main):
    progs = _program_for_fthenb_and_1f1b(main)
    jobs = new_pass("pipeline_scheduler_FThenB",
                    {"num_micro_batches": MICRO_BATCHES, "pp_degree": 2, "pp_stage": 1}).create_job_list()
    return pass_utils.set_skip_gc_vars(MICRO_BATCHES, ["forward", "backward", "optimizer"], progs, jobs)


def _prepare(main, startup, loss, pause_gc):
    """Seconds of the Executor's prepare: building the ``PreparedProgram`` its first ``run`` caches
    (kernels, variable holders, frees and checks of every op), timed alone."""
    scope = paddle.static.Scope()
    paddle.static.Executor().run(startup, scope=scope)
    threshold = gc_threshold_bytes()
    seconds, _ = _timed(lambda: PreparedProgram(main, scope, ("x",), (loss.name,), "numpy", threshold), pause_gc)
    return seconds


def measure(layers, pause_gc=False):
    """({phase: seconds}, number of ops of the minimized program)."""
    t = {}

    def phase(name, fn):
        t[name], out = _timed(fn, pause_gc)
        return out
    main, startup, loss = phase("build", lambda: build(layers))
    phase("minimize", lambda: minimize(main, startup, loss))
    ops = len(main.global_block().ops)
    phase("gc plan", lambda: eager_deletion_vars(main, [loss.name]))
    phase("split_program", lambda: pass_utils.split_program(main, [ops * k // 4 for k in range(1, 4)]))
    merged, merged_startup = phase("clone", lambda: (main.clone(), startup.clone()))
    phase("grad merge", lambda: accumulate_gradients(merged, merged_startup, MICRO_BATCHES))
    phase("skip_gc_vars", lambda: _skip_gc_vars(merged))
    t["prepare"] = _prepare(main, startup, loss, pause_gc)
    return t, ops


def best_of(runs, layers, pause_gc=False):
    """The fastest time of each phase over ``runs`` fresh builds."""
    best = None
    for _ in range(runs):
        gc.collect()  # no garbage of the previous run left to collect
        t, ops = measure(layers, pause_gc)
        best = t if best is None else {k: min(best[k], t[k]) for k in t}
    return best, ops


def _schedule_attrs(name, p, m):
    attrs = {"num_micro_batches": m, "pp_degree": p, "pp_stage": 0}
    if name == "VPP":
        attrs.update(vpp_degree=2, split_backward=False)
    if name == "ZBVPP":
        attrs.update(vpp_degree=2, program_runtimes=[61, 72, 71, 34, 3], memory_limit_times=-1,
                     injected_mem_usage_per_job={"forward": 0, "backward_b": 0, "backward_w": 0},
                     injected_max_mem_usage_per_job={"forward": 0, "backward_b": 0, "backward_w": 0},
                     injected_base_memory=0, injected_max_memory=None)
    return attrs


def measure_schedules(p, micro_batches, runs=3):
    """[(schedule, M, best seconds, jobs)] for every schedule at ``p`` stages (jobs None: refused)."""
    rows = []
    for name in SCHEDULES:
        for m in micro_batches:
            try:
                times = [_timed(lambda: new_pass("pipeline_scheduler_" + name,
                                                 _schedule_attrs(name, p, m)).create_job_list())
                         for _ in range(runs)]
            except EnforceNotMet:  # e.g. ZBVPP refuses M > P, as Paddle does
                rows.append((name, m, None, None))
                continue
            rows.append((name, m, min(s for s, _ in times), len(times[0][1])))
    return rows


def _ratio(first, last):
    return f"{last / first:.2f}" if first > 0 else "-"


def _schedule_table(rows, micro_batches):
    print(f"{'schedule':<10}" + "".join(f"{f'M={m}':>24}" for m in micro_batches) + f"{'ratio':>8}")
    for name in SCHEDULES:
        mine = [r for r in rows if r[0] == name]
        cells = [f"{s:.4f} s ({s / jobs * 1e6:6.1f})" if jobs else "refused" for _, _, s, jobs in mine]
        per_job = [s / jobs for _, _, s, jobs in mine if jobs]
        ratio = _ratio(per_job[0], per_job[-1]) if len(per_job) > 1 else "-"
        print(f"{name:<10}" + "".join(f"{c:>24}" for c in cells) + f"{ratio:>8}")
    print("ratio = µs per job at the largest M / at the smallest M the schedule accepts")


def _build_table(title, results, sizes):
    print(f"Build scaling, {title}: N-layer MLP (width {WIDTH}) with Adam; seconds (µs per op)")
    print(f"{'phase':<14}" + "".join(f"{f'N={n} ({ops} ops)':>26}" for n, _, ops in results) + f"{'ratio':>8}")
    for phase in PHASES:
        cells = [f"{t[phase]:.3f} s ({t[phase] / ops * 1e6:7.1f})" for _, t, ops in results]
        per_op = [t[phase] / ops for _, t, ops in results]
        print(f"{phase:<14}" + "".join(f"{c:>26}" for c in cells) + f"{_ratio(per_op[0], per_op[-1]):>8}")
    print(f"ratio = µs per op at N={sizes[-1]} / µs per op at N={sizes[0]} (goal: <= 1.5)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (N = 20, 200; M = 8, 16)")
    args = ap.parse_args(argv)
    sizes = (20, 200) if args.quick else (100, 1000, 3000)
    micro_batches = (8, 16) if args.quick else (8, 16, 128)
    for title, pause_gc in (("cyclic GC paused while timed, as timeit does", True),
                            ("cyclic GC on, one run", False)):
        runs = {n: 1 if args.quick or not pause_gc else 3 if n <= 100 else 2 for n in sizes}
        results = [(n,) + best_of(runs[n], n, pause_gc) for n in sizes]
        _build_table(title, results, sizes)
        print()
    print("Pipeline scheduler passes, P=8: create_job_list() seconds (µs per job)")
    _schedule_table(measure_schedules(8, micro_batches, 1 if args.quick else 3), micro_batches)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
