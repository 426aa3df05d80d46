"""Benchmark: GPT-mini's training step under each fleet strategy, against plain data parallelism.

For every strategy of ``examples/fleet_strategies.py`` (recompute, AMP fp16 / bf16, LAMB, LARS,
DGC, LocalSGD, adaptive LocalSGD, FP16 allreduce, gradient merge), GPT-mini is built twice on
each of ``--ranks`` in-process ranks: with that strategy, and with plain data parallelism
(``RawProgramOptimizer`` alone), the baseline. The two train side by side, their steps
alternating (which goes first alternates too), so that a load on the machine that comes and
goes hits both alike; the first ``WARMUP`` steps of each are not timed. A step's time is the
slowest rank's; a program's time per step is the best (smallest) mean over ``WINDOW``
consecutive timed steps -- a window as long as the period of gradient merge and LocalSGD
(k = 2), so that each window holds one update step and one step without. Printed per strategy:
that time and its ratio to the baseline's time from the same side-by-side run; the peak bytes a
rank held during a step (``exe.memory_stats()``, the largest rank) and the most bytes of
activations it held at once, with their ratios (memory does not vary between runs). The
baseline row shows the best of its times over all the runs. A strategy refimpl cannot run
prints ``not available: <error>``. No time is asserted anywhere: the ratios are for reading.

A second table does the same for ZeRO sharding and tensor parallelism (``--tp`` / ``--sharding`` /
``--dp`` of the example): sharding 2 and TP 2 on 2 ranks, TP 2 x DP 2, sharding 2 x DP 2 and TP 2 x
sharding 2 on 4,
each side by side with plain data parallelism on the same ranks and the same global batch (a TP
group's ranks share a slice of it, so each trains on twice the rows of a data-parallel rank). Besides
the step time and the peak, it prints the parameter and optimizer-state bytes a rank holds after a
step (the largest rank's) against data parallelism's: ~1/2 under TP 2 and sharding 2, ~1/4 under both.
At the same global batch a TP rank's activations (most of the peak here) cover twice a data-parallel
rank's rows at part of the width, so its peak stays near data parallelism's.

    python benchmarks/strategies.py             # 2 ranks, GPT-mini at batch 8 x seq 32, dim 64
    python benchmarks/strategies.py --quick     # tiny sizes, fewer steps
    python benchmarks/strategies.py --parallel-only   # only the sharding / tensor-parallel table
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import fleet_strategies as fs  # noqa: E402

FULL = dict(vocab=64, seq=32, dim=64, heads=4, layers=2)
QUICK = dict(vocab=32, seq=8, dim=16, heads=2, layers=2)


WARMUP, WINDOW = 1, 2
#: (the example's options, ranks) of the second table
PARALLEL = [({"sharding": 2}, 2), ({"tp": 2}, 2), ({"tp": 2, "dp": 2}, 4), ({"sharding": 2, "dp": 2}, 4),
            ({"tp": 2, "sharding": 2}, 4)]


def rings():
    """This rank's ring table (ring id -> (ranks, communicator)). A tensor-parallel or sharding
    program binds the ring ids it uses to its own groups as it is built (``program_rings.bind_rings``),
    so each program here keeps the table it was built with and runs with it: the collective kernels
    look their ring up when they run."""
    from refimpl.distributed.communication import context
    return context.current().snapshot_rings()


def use_rings(table):
    from refimpl.distributed.communication import context
    context.current().restore_rings(table)


def side_by_side_rank(opts, batches, nranks):
    """On this rank: the baseline and the strategy trained with alternating steps; per program
    (baseline first) its step seconds, peak bytes, most activation bytes, applied meta-optimizers and
    parameter / optimizer-state bytes held after the last step."""
    import refimpl as paddle
    rank = paddle.distributed.get_rank()
    runs = []
    for o in ({}, opts):
        main, startup, loss, applied, _ = fs.build_program("gpt", o, True)
        paddle.seed(fs.SEED)
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        exe.run(startup, scope=scope)
        runs.append({"main": main, "loss": loss, "scope": scope, "exe": exe, "applied": applied, "rings": rings(),
                     "slice": fs.data_slice(o, rank, nranks), "times": [], "peak": 0, "acts": 0})
    for i, batch in enumerate(batches):
        for run in (runs if i % 2 == 0 else runs[::-1]):
            use_rings(run["rings"])
            feed = fs.rank_slice(batch, *run["slice"])
            t0 = time.perf_counter()
            run["exe"].run(run["main"], feed=feed, fetch_list=[run["loss"]], scope=run["scope"])
            run["times"].append(time.perf_counter() - t0)
            run["peak"], run["acts"] = (max(x, y) for x, y in zip((run["peak"], run["acts"]),
                                                                  fs.memory_peaks(run["exe"])))
    live = [r["exe"].memory_stats()["live_by_category"] for r in runs]
    return [(r["times"], r["peak"], r["acts"], r["applied"], m["parameters"], m["optimizer_state"])
            for r, m in zip(runs, live)]


def best_window(step_times):
    """The smallest mean over ``WINDOW`` consecutive timed steps."""
    timed = step_times[WARMUP:]
    return min(float(np.mean(timed[i:i + WINDOW])) for i in range(len(timed) - WINDOW + 1))


def measure(opts, nranks, steps, rows_per_rank):
    """[baseline, strategy]: each (step seconds, peak bytes of the largest rank, its activations' most,
    applied meta-optimizers), trained side by side."""
    from refimpl.distributed.communication import run_in_process
    opts = fs.layout(dict(opts), nranks)
    batches = fs.make_batches("gpt", nranks, steps, rows_per_rank)
    ranks = run_in_process(nranks, side_by_side_rank, opts, batches, nranks, timeout=600)
    out = []
    for j in range(2):
        slowest = np.max([r[j][0] for r in ranks], axis=0)  # a step's time: the slowest rank's
        out.append((best_window(list(slowest)), max(r[j][1] for r in ranks), max(r[j][2] for r in ranks),
                    ranks[0][j][3], max(r[j][4] for r in ranks), max(r[j][5] for r in ranks)))
    return out


def parallel_table(steps, rows):
    """The second table's lines (see the module docstring)."""
    lines = ["sharding and tensor parallelism, each against data parallelism on the same ranks:"]
    for opts, nranks in PARALLEL:
        name = f"{fs.describe(opts)} ({nranks} ranks)"
        try:
            b, (t, peak, _, applied, params, opt) = measure(opts, nranks, steps, rows)
        except Exception as exc:  # noqa: BLE001 - reported, the other rows still run
            lines.append(f"{name:34s} {fs.not_available(exc)}")
            continue
        lines.append(f"{name:34s} step {t * 1e3:8.2f} ms  ratio {t / b[0]:5.2f}x  peak/rank {peak / 1024:9.1f} KiB  "
                     f"ratio {peak / b[1]:5.2f}x  parameters/rank {params / 1024:7.1f} KiB  ratio "
                     f"{params / b[4]:5.2f}x  optimizer state/rank {opt / 1024:7.1f} KiB  ratio {opt / b[5]:5.2f}x  "
                     f"{applied}  (data parallel: {b[0] * 1e3:.2f} ms, {b[1] / 1024:.1f} KiB)")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny GPT-mini, 5 steps")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None, help="steps per program (default 9; --quick: 5)")
    ap.add_argument("--parallel-only", action="store_true", help="only the sharding / tensor-parallel table")
    args = ap.parse_args(argv)
    fs.GPT.update(QUICK if args.quick else FULL)
    steps, rows = (args.steps or (5 if args.quick else 9)), (2 if args.quick else 8)
    if steps < WARMUP + WINDOW:
        ap.error(f"--steps must be at least {WARMUP + WINDOW}, got {steps}")
    print(f"GPT-mini {fs.GPT}, {rows} rows per rank, {args.ranks} in-process ranks, {steps} steps per program "
          f"({WARMUP} untimed; best mean of {WINDOW} steps); NumPy {np.__version__}, {os.cpu_count()} CPUs")
    t0 = time.perf_counter()
    lines, base = [], None
    for opts in ([] if args.parallel_only else fs.ALL[1:]):
        name = fs.describe(opts)
        try:
            b, (t, peak, acts, applied, _, _) = measure(opts, args.ranks, steps, rows)
        except Exception as exc:  # noqa: BLE001 - reported, the other strategies still run
            lines.append(f"{name:34s} {fs.not_available(exc)}")
            continue
        base = b if base is None or b[0] < base[0] else base
        lines.append(f"{name:34s} step {t * 1e3:8.2f} ms  ratio {t / b[0]:5.2f}x  peak/rank {peak / 1024:9.1f} KiB  "
                     f"ratio {peak / b[1]:5.2f}x  activations {acts / 1024:8.1f} KiB  ratio "
                     f"{acts / max(b[2], 1):5.2f}x  {applied}")
    if base is not None:
        print(f"{'data parallel':34s} step {base[0] * 1e3:8.2f} ms  peak/rank {base[1] / 1024:9.1f} KiB  "
              f"activations {base[2] / 1024:8.1f} KiB  (the baseline)")
    print("\n".join(lines + parallel_table(steps, rows)))
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
