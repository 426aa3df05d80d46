"""Data-parallel training of an MLP with CompiledProgram, checked against one device.

    python examples/dp_mlp.py --places 4                       # 4 in-process places, AllReduce, fused
    python examples/dp_mlp.py --places 4 --reduce Reduce --no-fuse
    python examples/dp_mlp.py --places 4 --hierarchical 2      # 4 ranks as 2 nodes x 2
    python examples/dp_mlp.py --places 2 --all                 # every strategy above
    mpiexec -n 2 python examples/dp_mlp.py --places 2          # 2 trainers x 2 places = 4 ranks

Each run trains the same model (same initial values, same global batches)
twice: on one device on the whole batch, and data-parallel over
``trainers x places`` ranks, each rank on its slice. It prints the losses of
both, the largest relative parameter difference over every place's copy,
and the number of allreduce-type ops rank 0 ran per step; it exits non-zero
if anything differs by more than rtol 1e-5.
"""
import argparse
import sys

import numpy as np

import refimpl as paddle
from refimpl.executor import Trace
from refimpl.framework import Program, unique_name

COLLECTIVES = ("c_allreduce_sum", "c_reduce_sum")


def build(layers=3, width=16, din=8):
    """``layers`` fc+tanh layers of ``width``, then fc to 1; loss mean(y^2); Adam."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        h = paddle.static.data("x", [None, din], "float32")
        for _ in range(layers):
            h = paddle.static.nn.fc(h, width, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        paddle.optimizer.Adam(0.01).minimize(loss)
    return main, startup, loss


def strategy(reduce="AllReduce", fuse=True, hierarchical=0, trainers=1, trainer_id=0, fuse_mb=32):
    bs = paddle.static.BuildStrategy()
    bs.reduce_strategy = getattr(paddle.static.BuildStrategy.ReduceStrategy, reduce)
    bs.fuse_all_reduce_ops = fuse
    bs.fuse_grad_size_in_MB = fuse_mb
    bs.num_trainers, bs.trainer_id = trainers, trainer_id
    if hierarchical:
        bs.use_hierarchical_allreduce = True
        bs.hierarchical_allreduce_inter_nranks = hierarchical
    return bs


def init(startup, seed):
    paddle.seed(seed)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    return exe, scope


def single_device(main, startup, loss, feeds, seed=0):
    exe, scope = init(startup, seed)
    losses = [float(exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0]) for f in feeds]
    return losses, {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def data_parallel(main, startup, loss, feeds, places, bs, seed=0):
    """Train on ``places`` places (this trainer's slice of each batch); return
    (this trainer's mean losses, every place's parameters, collectives per step on its first place)."""
    exe, scope = init(startup, seed)
    compiled = paddle.static.CompiledProgram(main, bs, places=[exe.place] * places)
    losses, trace = [], Trace()
    for step, f in enumerate(feeds):
        x = f["x"]
        rows = x.shape[0] // bs.num_trainers
        local = {"x": x[bs.trainer_id * rows:(bs.trainer_id + 1) * rows]}
        out = exe.run(compiled, feed=local, fetch_list=[loss], scope=scope, trace=trace if step == 0 else None)
        losses.append(float(np.mean(out[0])))
    first = bs.trainer_id * places
    ncoll = sum(1 for e in trace.events if e.kind == "op" and e.op_type in COLLECTIVES and e.rank == first)
    params = [{p.name: np.array(s.find_var(p.name).get_tensor()) for p in main.all_parameters()}
              for s in compiled.local_scopes()]
    compiled.close()
    return losses, params, ncoll


def compare(places, bs, steps=3, batch=4, seed=0):
    """Train both ways; return (ok, message) for this trainer."""
    main, startup, loss = build()
    nranks = places * bs.num_trainers
    rng = np.random.default_rng(seed)
    feeds = [{"x": rng.standard_normal((nranks * batch, 8)).astype("float32")} for _ in range(steps)]
    ref_losses, ref = single_device(main, startup, loss, feeds, seed)
    losses, params, ncoll = data_parallel(main, startup, loss, feeds, places, bs, seed)
    err = max(float(np.abs(v - ref[k]).max() / max(np.abs(ref[k]).max(), 1e-12))
              for ps in params for k, v in ps.items())
    ok = all(np.allclose(v, ref[k], rtol=1e-5, atol=1e-6) for ps in params for k, v in ps.items())
    if bs.num_trainers > 1:  # the global loss is the mean of the trainers' losses; agree on ok/err
        import refimpl.distributed as dist
        buf = np.array(losses + [float(ok), -err], dtype="float64")
        parts = np.zeros((bs.num_trainers, buf.size), "float64")
        parts[bs.trainer_id] = buf
        dist.all_reduce(parts)
        losses = list(parts[:, :steps].mean(axis=0))
        ok, err = bool(parts[:, steps].min()), float(-parts[:, steps + 1].min())
    ok = ok and np.allclose(losses, ref_losses, rtol=1e-5)
    name = bs.reduce_strategy.name + (" fused" if bs.fuse_all_reduce_ops else " unfused") + (
        f" hierarchical {bs.hierarchical_allreduce_inter_nranks}x{nranks // bs.hierarchical_allreduce_inter_nranks}"
        if bs.use_hierarchical_allreduce else "")
    msg = (f"{name:32s} trainers={bs.num_trainers} places={places}: losses {np.round(losses, 6).tolist()} "
           f"single-device {np.round(ref_losses, 6).tolist()} max rel param diff {err:.1e} "
           f"collectives/step {ncoll} -> {'OK' if ok else 'MISMATCH'}")
    return ok, msg


def configs(args, nranks):
    if not args.all:
        return [dict(reduce=args.reduce, fuse=args.fuse, hierarchical=args.hierarchical)]
    out = [dict(reduce=r, fuse=f, hierarchical=0) for r in ("AllReduce", "Reduce") for f in (False, True)]
    if nranks % 2 == 0 and nranks > 2:
        out += [dict(reduce="AllReduce", fuse=f, hierarchical=2) for f in (False, True)]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--places", type=int, default=2, help="places (thread ranks) per trainer")
    p.add_argument("--reduce", default="AllReduce", choices=["AllReduce", "Reduce"])
    p.add_argument("--no-fuse", dest="fuse", action="store_false", help="one allreduce per gradient")
    p.add_argument("--hierarchical", type=int, default=0, metavar="INTER", help="ranks per node (0: flat)")
    p.add_argument("--all", action="store_true", help="every strategy (Reduce/AllReduce, fused or not, 2xN)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--backend", choices=["numpy", "cuda"], default=None,
                   help="kernels to run on (default: $REFIMPL_BACKEND, else numpy)")
    args = p.parse_args(argv)
    if args.backend:
        paddle.set_backend(args.backend)
    import refimpl.distributed as dist
    dist.init_parallel_env()  # joins the MPI job under mpiexec: each process is a trainer
    trainers, trainer_id = dist.get_world_size(), dist.get_rank()
    ok_all = True
    for cfg in configs(args, trainers * args.places):
        ok, msg = compare(args.places, strategy(trainers=trainers, trainer_id=trainer_id, **cfg), args.steps)
        ok_all &= ok
        if trainer_id == 0:
            print(msg, flush=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
