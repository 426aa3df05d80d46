"""Benchmark: GPT-mini's training step under each fleet strategy, against plain data parallelism.

For every strategy of ``examples/fleet_strategies.py`` (recompute, AMP fp16 / bf16, LAMB, LARS,
DGC, LocalSGD, adaptive LocalSGD, FP16 allreduce, gradient merge), GPT-mini trains for a few
steps on ``--ranks`` in-process ranks; printed per strategy: the step time (the slowest rank's
mean over the steps after the first) and the peak bytes a rank held during a step
(``exe.memory_stats()``, the largest rank) and the most bytes of activations it held at once,
each also as a ratio to plain data parallelism
(``RawProgramOptimizer`` alone) measured in the same run. A strategy refimpl cannot run prints
``not available: <error>``. No time is asserted anywhere: the ratios are for reading.

    python benchmarks/strategies.py             # 2 ranks, GPT-mini at batch 8 x seq 32, dim 64
    python benchmarks/strategies.py --quick     # tiny sizes, 3 steps
"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import fleet_strategies as fs  # noqa: E402

FULL = dict(vocab=64, seq=32, dim=64, heads=4, layers=2)
QUICK = dict(vocab=32, seq=8, dim=16, heads=2, layers=2)


def measure(opts, nranks, steps, rows_per_rank):
    """(mean step seconds of the slowest rank, peak bytes of the largest rank, its activations' most, applied)."""
    batches = fs.make_batches("gpt", nranks, steps, rows_per_rank)
    results = fs.run_all_ranks("gpt", opts, batches, nranks)
    return max(r[2] for r in results), max(r[1] for r in results), max(r[4] for r in results), results[0][3]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny GPT-mini, 3 steps")
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args(argv)
    fs.GPT.update(QUICK if args.quick else FULL)
    steps, rows = (3, 2) if args.quick else (6, 8)
    print(f"GPT-mini {fs.GPT}, {rows} rows per rank, {args.ranks} in-process ranks, {steps} steps; "
          f"NumPy {np.__version__}, {os.cpu_count()} CPUs")
    base_time, base_peak, base_acts, _ = measure({}, args.ranks, steps, rows)
    print(f"{'data parallel':34s} step {base_time * 1e3:8.2f} ms  peak/rank {base_peak / 1024:9.1f} KiB  "
          f"activations {base_acts / 1024:8.1f} KiB  (the baseline)")
    for opts in fs.ALL[1:]:
        name = fs.describe(opts)
        try:
            t, peak, acts, applied = measure(opts, args.ranks, steps, rows)
        except Exception as exc:  # noqa: BLE001 - reported, the other strategies still run
            print(f"{name:34s} {fs.not_available(exc)}")
            continue
        print(f"{name:34s} step {t * 1e3:8.2f} ms  ratio {t / base_time:5.2f}x  peak/rank {peak / 1024:9.1f} KiB  "
              f"ratio {peak / base_peak:5.2f}x  activations {acts / 1024:8.1f} KiB  ratio "
              f"{acts / max(base_acts, 1):5.2f}x  {applied}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
