"""Benchmark: refimpl's MPI all_reduce against raw mpi4py, and fused against unfused.

Part 1 (2 ranks, float32, 1 KB .. 64 MB): ``comm.all_reduce(x, out=y)``
through refimpl's MPI communicator against ``MPI.Comm.Allreduce(x, y)`` on
the same buffers, interleaved, median of the repeats. ``ratio`` = raw time
/ refimpl time (1.0 = no overhead). Also shown: refimpl without its
shape/dtype check (``check_meta=False``) and with a fresh output array per
call (what the ``c_allreduce_sum`` op does).

Part 2: the gradients of a model with many small parameters (an MLP of
``--layers`` 64x64 fc layers: 2 tensors per layer), all-reduced one by one
(one ``c_allreduce_sum`` op per gradient) against fused (one
``coalesce_tensor`` + one ``c_allreduce_sum``), both as programs run by the
executor, and as bare communicator calls.

    python benchmarks/collectives.py            # launches itself: mpiexec -n 2
    python benchmarks/collectives.py --quick    # fewer repeats, up to 16 MB
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def relaunch(argv, nranks=2):
    exe = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = exe if os.path.exists(exe) else shutil.which("mpiexec")
    if exe is None:
        sys.exit("mpiexec not found: pip install mpi4py mpich")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.call([exe, "-n", str(nranks), sys.executable, os.path.abspath(__file__)] + argv, env=env)


def timed(raw, variants, reps, barrier):
    """Median seconds per call of ``raw`` and each variant, interleaved rep by rep (all ranks in step)."""
    fns = [raw] + list(variants)
    times = [[] for _ in fns]
    for fn in fns:  # warm up
        fn()
    for k in range(reps):
        for j in range(len(fns)):  # rotate the order so no variant always follows the same one
            i = (j + k) % len(fns)
            fn = fns[i]
            barrier()
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times]


def bench_sizes(ctx, mpi_comm, max_mb, quick, out):
    comm = ctx.comm(0)
    world = ctx.world
    out("all_reduce, float32, 2 ranks: raw mpi4py Allreduce vs refimpl (ratio = raw / refimpl)")
    out(f"{'size':>8} {'raw ms':>9} {'refimpl ms':>11} {'ratio':>6} {'no check':>9} {'ratio':>6} "
        f"{'fresh out':>10} {'ratio':>6}")
    size = 1024
    while size <= max_mb * (1 << 20):
        x = np.random.default_rng(ctx.rank).standard_normal(size // 4).astype("float32")
        y = np.empty_like(x)

        def unchecked():
            world.check_meta = False
            comm.all_reduce(x, out=y)
            world.check_meta = True

        reps = max(5, min(200, int((64 << 20) / size))) // (3 if quick else 1) + 3
        raw, ref, nochk = timed(lambda: mpi_comm.Allreduce(x, y), [lambda: comm.all_reduce(x, out=y), unchecked],
                                reps, mpi_comm.Barrier)
        # apart: freeing a fresh array each call would slow the next call of any variant
        fresh = timed(lambda: comm.all_reduce(x), [], reps, mpi_comm.Barrier)[0]
        label = f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB"
        out(f"{label:>8} {raw * 1e3:9.3f} {ref * 1e3:11.3f} {raw / ref:6.2f} {nochk * 1e3:9.3f} {raw / nochk:6.2f} "
            f"{fresh * 1e3:10.3f} {raw / fresh:6.2f}")
        size *= 4


def grad_program(grads, fused):
    """A program that all-reduces ``grads`` (fed) one op each, or fused into one buffer."""
    import refimpl as paddle
    from refimpl.framework import Program
    main = Program()
    b = main.global_block()
    vs = [b.create_var(name=f"g{i}", shape=list(g.shape), dtype="float32") for i, g in enumerate(grads)]
    for v in vs:
        v.is_data = True
    if fused:
        f = b.create_var(name="fused", shape=[-1], dtype="float32")
        b.append_op(type="coalesce_tensor", inputs={"Input": vs}, outputs={"Output": vs, "FusedOutput": [f]},
                    attrs={"dtype": 5, "copy_data": True, "use_align": False})
        b.append_op(type="c_allreduce_sum", inputs={"X": [f]}, outputs={"Out": [f]})
    else:
        for v in vs:
            b.append_op(type="c_allreduce_sum", inputs={"X": [v]}, outputs={"Out": [v]})
    exe = paddle.static.Executor()
    scope = paddle.static.Scope()
    feed = {f"g{i}": g for i, g in enumerate(grads)}
    fetch = [v.name for v in vs[-1:]]
    return lambda: exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def bench_fused(ctx, mpi_comm, layers, quick, out):
    comm = ctx.comm(0)
    rng = np.random.default_rng(ctx.rank)
    grads = [rng.standard_normal(s).astype("float32") for _ in range(layers) for s in [(64, 64), (64,)]]
    total = sum(g.nbytes for g in grads)
    buf = np.empty(sum(g.size for g in grads), "float32")

    def unfused():
        for g in grads:
            comm.all_reduce(g)

    def fused():
        pos = 0
        for g in grads:
            buf[pos:pos + g.size] = g.ravel()
            pos += g.size
        comm.all_reduce(buf, out=buf)
        return np.split(buf, np.cumsum([g.size for g in grads])[:-1])

    reps = 10 if quick else 40
    t_unf, t_fus, p_unf, p_fus = timed(unfused, [fused, grad_program(grads, False), grad_program(grads, True)],
                                       reps, mpi_comm.Barrier)
    out(f"\n{len(grads)} gradients ({layers} fc layers of 64x64 + bias), {total / 1e6:.2f} MB in all")
    out(f"{'':>22} {'unfused ms':>11} {'fused ms':>9} {'speed-up':>9}")
    out(f"{'communicator calls':>22} {t_unf * 1e3:11.3f} {t_fus * 1e3:9.3f} {t_unf / t_fus:9.1f}x")
    out(f"{'programs (executor)':>22} {p_unf * 1e3:11.3f} {p_fus * 1e3:9.3f} {p_unf / p_fus:9.1f}x")


def child(args):
    from mpi4py import MPI
    from refimpl.distributed.communication import init_mpi
    ctx = init_mpi()
    raw = MPI.COMM_WORLD.Dup()

    def out(line):
        if ctx.rank == 0:
            print(line, flush=True)
    out(f"MPI: {MPI.Get_library_version().splitlines()[0].strip()}, {ctx.world_size} ranks, "
        f"{os.cpu_count()} CPUs")
    bench_sizes(ctx, raw, min(16, args.max_mb) if args.quick else args.max_mb, args.quick, out)
    bench_fused(ctx, raw, args.layers, args.quick, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, sizes up to 16 MB")
    ap.add_argument("--max-mb", type=int, default=64, help="largest all_reduce size in MB (default 64)")
    ap.add_argument("--layers", type=int, default=100, help="fc layers of the many-small-gradients model")
    ap.add_argument("--nranks", type=int, default=2, help="ranks when launching itself (default 2)")
    args = ap.parse_args()
    if not any(k in os.environ for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")):
        sys.exit(relaunch(sys.argv[1:], args.nranks))
    child(args)


if __name__ == "__main__":
    main()
