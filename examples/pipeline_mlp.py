"""Pipeline-parallel training of an MLP, checked against single-device training.

    python examples/pipeline_mlp.py --schedule 1F1B --ranks 4 --micro-batches 8 --in-process
    mpiexec -n 4 python examples/pipeline_mlp.py --schedule 1F1B --micro-batches 8
    python examples/pipeline_mlp.py --schedule all --ranks 2 --in-process   # every schedule

Each run trains the same model (same initial values, same batches) twice: on
one device on the whole batch, and as a pipeline over the ranks with the
chosen schedule; it prints the losses of both and the largest parameter
difference, and exits non-zero if they differ by more than rounding allows.

The model is float64 by default: the pipeline adds the micro-batches'
gradients in another order than one big batch does, and Adam (which divides
by sqrt(v)) can magnify those last-bit differences where an element's
gradient nearly cancels between steps — in float32 up to about 1e-3 of the
learning rate; in float64 they stay near 1e-15, so the check is sharp.
``--dtype float32`` runs the float32 model and allows 1e-2 of the learning
rate (a schedule that lost a micro-batch would be off by about the rate).
"""
import argparse
import sys

import numpy as np

import refimpl as paddle
from refimpl.distributed.pipeline.partition import even_cuts
from refimpl.distributed.communication import DEFAULT_TIMEOUT
from refimpl.distributed.pipeline.runner import build_pipeline, initial_values, train_in_process, train_rank
from refimpl.framework import Program, unique_name

SCHEDULES = ["FThenB", "1F1B", "Eager1F1B", "VPP", "ZBH1", "ZBVPP"]
LR = 0.01
TOLERANCE = {"float64": {"rtol": 1e-9, "atol": 1e-12}, "float32": {"rtol": 1e-5, "atol": 1e-2 * LR}}


def build(layers, width=16, din=8, dtype="float64"):
    """An MLP: ``layers`` fc+tanh layers of ``width``, then fc to 1; loss mean(y^2); Adam."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        h = paddle.static.data("x", [None, din], dtype)
        for _ in range(layers):
            h = paddle.static.nn.fc(h, width, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        paddle.optimizer.Adam(LR).minimize(loss)
    return main, startup, loss


def single_device(main, startup, loss, feeds, seed):
    paddle.seed(seed)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0]) for f in feeds]
    return losses, {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def compare(schedule, ranks, m, vpp, steps=3, layers=8, seed=0, mpi_rank=None, dtype="float64",
            timeout=DEFAULT_TIMEOUT):
    """Train both ways; return (ok, message). With ``mpi_rank`` this process is one MPI rank."""
    vpp = vpp if schedule in ("VPP", "ZBVPP") else 1
    main, startup, loss = build(layers, dtype=dtype)
    rng = np.random.default_rng(seed)
    feeds = [{"x": rng.standard_normal((2 * m, 8)).astype(dtype)} for _ in range(steps)]
    pl = build_pipeline(main, startup, loss, schedule, ranks, m, vpp, cuts=even_cuts(main, ranks * vpp))
    if mpi_rank is None:
        losses, params = train_in_process(pl, feeds, seed=seed, timeout=timeout)
    else:  # this process is one rank: it checks the losses (last stage) and the parameters it owns
        losses, params = train_rank(pl, mpi_rank, feeds, initial=initial_values(pl, seed))
    ref_losses, ref_params = single_device(main, startup, loss, feeds, seed)
    err = max(float(np.abs(v - ref_params[k]).max()) for k, v in params.items())
    tol = TOLERANCE[dtype]
    ok = all(np.allclose(v, ref_params[k], **tol) for k, v in params.items())
    if losses[0] is not None:
        ok = ok and np.allclose(losses, ref_losses, rtol=tol["rtol"])
    if mpi_rank is not None:
        import refimpl.distributed as dist
        flags = np.array([int(ok), -err], dtype="float64")
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        ok, err = bool(flags[0]), -float(flags[1])
        owner = next(r for r, plan in enumerate(pl.plans) if any(
            pl.loss_name in plan.program(t).global_block().vars for t in plan.job_types()))
        shared = np.array(losses if losses[0] is not None else [0.0] * steps, dtype="float64")
        dist.broadcast(shared, src=owner)
        losses = shared.tolist()
    shown = [round(x, 6) if isinstance(x, float) else x for x in losses]
    msg = (f"{schedule:9s} ranks={ranks} micro-batches={m:2d} vpp={vpp}: pipeline losses "
           f"{shown} single-device {np.round(ref_losses, 6).tolist()} "
           f"max param diff {err:.2e} -> {'OK' if ok else 'MISMATCH'}")
    return ok, msg


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schedule", default="1F1B", choices=SCHEDULES + ["all"])
    p.add_argument("--ranks", type=int, default=None, help="pipeline stages (default: MPI world size, or 2)")
    p.add_argument("--micro-batches", type=int, default=None, help="default: 2 x ranks (ranks for ZBVPP)")
    p.add_argument("--vpp", type=int, default=2, help="chunks per stage for VPP and ZBVPP")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="initial values and batches")
    p.add_argument("--dtype", choices=sorted(TOLERANCE), default="float64", help="the model's dtype")
    p.add_argument("--in-process", action="store_true", help="ranks as threads of this process")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds a rank waits for another before the run stops naming the rank that hung "
                        f"(default {DEFAULT_TIMEOUT:g}; under MPI: $REFIMPL_COMM_TIMEOUT, else {DEFAULT_TIMEOUT:g})")
    p.add_argument("--backend", choices=["numpy", "cuda"], default=None,
                   help="kernels to run on (default: $REFIMPL_BACKEND, else numpy)")
    args = p.parse_args(argv)
    if args.backend:
        paddle.set_backend(args.backend)
    mpi_rank = None
    if not args.in_process:
        import refimpl.distributed as dist
        dist.init_parallel_env(timeout=args.timeout)
        if dist.get_world_size() > 1:
            mpi_rank, args.ranks = dist.get_rank(), dist.get_world_size()
    ranks = args.ranks or 2
    ok_all = True
    for schedule in (SCHEDULES if args.schedule == "all" else [args.schedule]):
        m = args.micro_batches or (ranks if schedule == "ZBVPP" else 2 * ranks)
        ok, msg = compare(schedule, ranks, m, args.vpp, args.steps, seed=args.seed, mpi_rank=mpi_rank,
                          dtype=args.dtype, timeout=args.timeout or DEFAULT_TIMEOUT)
        ok_all &= ok
        if mpi_rank in (None, 0):
            print(msg, flush=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
