"""Hybrid DP x PP training with fleet, checked against single-device training.

The fleet workflow of ``python/paddle/distributed/fleet/fleet.py``'s
docstrings: a DistributedStrategy with hybrid_configs
(dp_degree x pp_degree) and pipeline_configs (1F1B, accumulate_steps micro-batches)
— the pipeline's micro-batches are its gradient merge: with ``gradient_merge``
also on, Paddle's strategy compiler keeps RawProgram + GradientMerge and drops
the pipeline, so ``--k-steps`` (default 1) is for that comparison only —, ``fleet.init``, ``fleet.distributed_optimizer``,
``minimize``, then a plain ``exe.run`` loop on every rank. Each data-parallel
replica feeds its own slice of the global batch. At the end every rank checks
its parameters (and the last stage its losses) against one device trained on
the whole batch, and the script exits non-zero on a mismatch.

    python -m refimpl.distributed.launch --nproc_per_node 4 examples/fleet_hybrid.py
    python -m refimpl.distributed.launch --nproc_per_node 4 --in-process examples/fleet_hybrid.py
"""
import argparse
import sys

import numpy as np

import refimpl as paddle
import refimpl.distributed.fleet as fleet
from refimpl.framework import Program, unique_name


def build(pp):
    """An MLP whose layers are marked for ``pp`` stages with device_guard("gpu:k")."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        h = paddle.static.data("x", [None, 8], "float32")
        for i in range(4):
            with paddle.static.device_guard(f"gpu:{i * pp // 4}"):
                h = paddle.static.nn.fc(h, 16, activation="tanh")
        with paddle.static.device_guard(f"gpu:{pp - 1}"):
            loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
    return main, startup, loss


def single_device(batches, k, seed):
    main, startup, loss = build(1)
    with paddle.static.program_guard(main, startup):
        opt = paddle.optimizer.SGD(0.1)
        (paddle.incubate.optimizer.GradientMergeOptimizer(opt, k_steps=k) if k > 1 else opt).minimize(loss)
    paddle.seed(seed)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"x": b}, fetch_list=[loss], scope=scope)[0]) for b in batches]
    return losses, {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dp", type=int, default=2)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--accumulate-steps", type=int, default=4)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--k-steps", type=int, default=1, help="gradient merge steps (1: off)")
    p.add_argument("--schedule", default="1F1B")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--backend", choices=["numpy", "cuda"], default=None,
                   help="kernels to run (default: REFIMPL_BACKEND, else numpy)")
    args = p.parse_args(argv)
    if args.backend:
        paddle.set_backend(args.backend)
    seed = 5

    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": args.dp, "pp_degree": args.pp}
    strategy.pipeline = True
    strategy.pipeline_configs = {"accumulate_steps": args.accumulate_steps,
                                 "micro_batch_size": args.micro_batch_size, "schedule_mode": args.schedule}
    if args.k_steps > 1:
        strategy.gradient_merge = True
        strategy.gradient_merge_configs = {"k_steps": args.k_steps, "avg": True}
    fleet.init(is_collective=True, strategy=strategy)

    main_prog, startup, loss = build(args.pp)
    with paddle.static.program_guard(main_prog, startup):
        opt = fleet.distributed_optimizer(paddle.optimizer.SGD(0.1))
        opt.minimize(loss)
    paddle.seed(seed)
    exe = paddle.static.Executor()
    exe.run(startup)

    rows = args.accumulate_steps * args.micro_batch_size  # one replica's batch
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((args.dp * rows, 8)).astype("float32") for _ in range(args.steps)]
    hcg = fleet.get_hybrid_communicate_group()
    d = hcg.get_data_parallel_rank()
    losses = []
    for b in batches:
        out = exe.run(main_prog, feed={"x": b[d * rows:(d + 1) * rows]}, fetch_list=[loss])
        losses.append(None if out[0] is None else float(np.mean(out[0])))

    ref_losses, ref_params = single_device(batches, args.k_steps, seed)
    scope = paddle.static.global_scope()
    mine = [n for n in ref_params if main_prog._pipeline_opt.has_var(n)]
    ok = all(np.allclose(np.array(scope.find_var(n).get_tensor()), ref_params[n], rtol=1e-5, atol=1e-6)
             for n in mine)
    # the last stage of each replica has the loss; their mean is the single-device loss
    mine_losses = np.array(losses if losses[0] is not None else [0.0] * args.steps, dtype="float64")
    total = fleet.all_reduce(mine_losses, mode="sum")
    ok = ok and np.allclose(total / args.dp, ref_losses, rtol=1e-5)
    status = fleet.all_reduce(np.array([0.0 if ok else 1.0]), mode="sum")
    print(f"rank {fleet.worker_index()}: stage {hcg.get_stage_id()} replica {d}, parameters {mine} "
          f"{'match' if ok else 'DIFFER FROM'} single-device training", flush=True)
    return 0 if status[0] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
