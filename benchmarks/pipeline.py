"""Benchmark: one pipelined training step on in-process ranks vs the single-device step.

An MLP (8 fc layers, width 512, batch 256) trained with 1F1B on 4 in-process
ranks and 8 micro-batches, against the same model on one device, in the same
run. Printed: ms per step for both, the ratio, and where the pipelined time
goes per rank (forward / backward / optimizer jobs; a job's time includes
waiting for its neighbour's data). In-process ranks are threads of one Python
process: NumPy's matrix products release the GIL and can overlap, the
interpreter work cannot, so the ratio shows the cost of the schedule (more,
smaller kernels and the hand-offs), not a multi-device speed-up.

    python benchmarks/pipeline.py [--quick] [--schedule ZBH1]
"""
import argparse
import os
import sys
import time

import numpy as np

import refimpl as paddle
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.pipeline.runner import build_pipeline, initial_values, train_rank

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from pipeline_mlp import build, even_cuts  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--schedule", default="1F1B")
    args = p.parse_args()
    steps = 2 if args.quick else 6
    ranks, m, width, din, batch, layers = 4, 8, 512, 512, 256, 8
    main_prog, startup, loss = build(layers, width, din, dtype="float32")
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((batch, din)).astype("float32")}

    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    paddle.seed(0)
    exe.run(startup, scope=scope)
    exe.run(main_prog, feed=feed, fetch_list=[loss], scope=scope)  # warm up
    t0 = time.perf_counter()
    for _ in range(steps):
        exe.run(main_prog, feed=feed, fetch_list=[loss], scope=scope)
    t_single = (time.perf_counter() - t0) / steps

    pl = build_pipeline(main_prog, startup, loss, args.schedule, ranks, m, cuts=even_cuts(main_prog, ranks))
    init = initial_values(pl, 0)
    timings = [dict() for _ in range(ranks)]

    def rank_fn():
        r = context.current().rank
        train_rank(pl, r, [feed], initial=init)  # warm up (prepares every job)
        t = time.perf_counter()
        train_rank(pl, r, [feed] * steps, initial=init, timings=timings[r])
        return time.perf_counter() - t
    wall = max(run_in_process(ranks, rank_fn, timeout=600)) / steps
    print(f"single device: {t_single * 1e3:8.2f} ms/step   {args.schedule} on {ranks} in-process ranks, "
          f"{m} micro-batches: {wall * 1e3:8.2f} ms/step   ratio {wall / t_single:5.2f}")
    for r, t in enumerate(timings):
        kinds = {}
        for job_type, sec in t.items():
            kind = job_type.rstrip("0123456789")
            kinds[kind] = kinds.get(kind, 0.0) + sec / steps
        parts = "  ".join(f"{k} {v * 1e3:7.2f} ms" for k, v in sorted(kinds.items()))
        print(f"  rank {r}: {parts}")


if __name__ == "__main__":
    main()
