"""Parameter-server training of a small regression model (example 2 of ``fleet.py``'s docstrings).

    python -m refimpl.distributed.launch --server_num 2 --worker_num 2 examples/train_ps.py --mode sync --check
    python -m refimpl.distributed.launch --server_num 2 --worker_num 2 --in-process examples/train_ps.py --mode geo

Every rank builds the same program and calls ``fleet.distributed_optimizer
(...).minimize(loss)``, which splits it: servers (``fleet.is_server()``)
call ``init_server`` and ``run_server``; workers call ``init_worker``, train
on their slice of each global batch and call ``stop_worker``. Modes:
``sync`` (``a_sync=False``), ``async`` (``a_sync=True``), ``geo``
(``a_sync=True`` with ``a_sync_configs={"k_steps": K}``).

Each worker prints its loss on a fixed evaluation batch before and after
training (``worker J eval loss A -> B``); each server prints how many
updates it applied. ``--check`` (sync) makes worker 0 train the same model
alone on the whole global batches and exit non-zero unless every parameter
matches within rtol 1e-5. ``--save DIR``: worker 0 saves the persistables
gathered from the servers, loads them back and checks they round-trip.
``--threshold T``: a worker exits non-zero if its final eval loss is >= T.
"""
import argparse
import sys

import numpy as np

import refimpl as paddle
from refimpl.distributed import fleet, ps
from refimpl.framework import Program, unique_name

DIN, HIDDEN, ROWS = 8, 16, 8  # features, hidden width, rows per worker per step
W_TRUE = np.linspace(-1.0, 1.0, DIN).astype("float32").reshape(DIN, 1)


def build(opt_fn):
    """fc(tanh) -> fc, mean squared error; returns (main, startup, test program, loss)."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, DIN], "float32")
        y = paddle.static.data("y", [None, 1], "float32")
        h = paddle.static.nn.fc(x, HIDDEN, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1) - y))
        test = main.clone(for_test=True)
        opt_fn().minimize(loss)
    return main, startup, test, loss


def batch(step, rows):
    rng = np.random.RandomState(1000 + step)
    x = rng.uniform(-1, 1, (rows, DIN)).astype("float32")
    return x, (x @ W_TRUE).astype("float32")


def strategy_for(args):
    s = fleet.DistributedStrategy()
    s.a_sync = args.mode != "sync"
    if args.mode == "geo":
        s.a_sync_configs = {"k_steps": args.k_steps}
    return s


def train_alone(args, workers):
    """Worker 0's reference: the same model on one rank, on the whole global batches."""
    paddle.seed(args.seed)
    main, startup, _, loss = build(lambda: paddle.optimizer.SGD(args.lr))
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    for step in range(args.steps):
        x, y = batch(step, ROWS * workers)
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def evaluate(exe, test, loss):
    x, y = batch(-1, 256)
    return float(exe.run(test, feed={"x": x, "y": y}, fetch_list=[loss])[0])


def run_worker(args, main, startup, test, loss):
    exe = paddle.static.Executor()
    exe.run(startup)
    fleet.init_worker()
    j, workers = fleet.worker_index(), fleet.worker_num()
    before = evaluate(exe, test, loss)
    for step in range(args.steps):
        x, y = batch(step, ROWS * workers)
        exe.run(main, feed={"x": x[j * ROWS:(j + 1) * ROWS], "y": y[j * ROWS:(j + 1) * ROWS]}, fetch_list=[loss])
    fleet.barrier_worker()
    after = evaluate(exe, test, loss)
    print(f"worker {j} eval loss {before:.6f} -> {after:.6f}", flush=True)
    ok = after < args.threshold if args.threshold else True
    if args.check and j == 0:
        ok &= check_against_alone(args, main, workers)
    if args.save and j == 0:
        ok &= check_save_load(args, exe, main)
    fleet.stop_worker()
    return ok


def check_against_alone(args, main, workers):
    scope = paddle.static.global_scope()
    ref = train_alone(args, workers)
    worst = max(float(np.max(np.abs(np.array(scope.find_var(n).get_tensor()) - r) / (np.abs(r) + 1e-6)))
                for n, r in ref.items())
    print(f"sync check: max relative difference to one rank on the whole batch {worst:.3g}", flush=True)
    return all(np.allclose(np.array(scope.find_var(n).get_tensor()), r, rtol=1e-5, atol=1e-7)
               for n, r in ref.items())


def check_save_load(args, exe, main):
    path = fleet.save_persistables(exe, args.save, main)
    saved = ps.load_npz(args.save)
    scope = paddle.static.global_scope()
    for p in main.all_parameters():  # spoil the servers' copies, then load them back
        scope.var(p.name).get_tensor().set(np.zeros_like(saved[p.name]))
    fleet.load_model(args.save, mode=0)
    same = all(np.array_equal(np.array(scope.find_var(p.name).get_tensor()), saved[p.name])
               for p in main.all_parameters())
    print(f"saved {len(saved)} persistables to {path}; reloaded exactly: {same}", flush=True)
    return same


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["sync", "async", "geo"], default="sync")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--k_steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--min_block_size", type=int, default=64, help="split parameters this large by rows")
    p.add_argument("--threshold", type=float, default=0.0)
    p.add_argument("--check", action="store_true")
    p.add_argument("--save", default=None)
    p.add_argument("--backend", choices=["numpy", "cuda"], default=None,
                   help="kernels the workers run (default: REFIMPL_BACKEND, else numpy)")
    args = p.parse_args(argv)
    if args.backend:
        paddle.set_backend(args.backend)
    ps.plan.MIN_BLOCK_SIZE = args.min_block_size

    strategy = strategy_for(args)
    fleet.init(strategy=strategy)
    paddle.seed(args.seed)
    optimizer = fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=args.lr), strategy)
    main_prog, startup, test, loss = build(lambda: optimizer)
    print(f"rank: {'server' if fleet.is_server() else 'worker'}, worker num {fleet.worker_num()}, "
          f"server endpoints {fleet.server_endpoints(to_string=True)}", flush=True)
    if fleet.is_server():
        fleet.init_server()
        print(f"server {fleet.server_index()} applied {fleet.run_server()} updates", flush=True)
        return 0
    return 0 if run_worker(args, main_prog, startup, test, loss) else 1


if __name__ == "__main__":
    sys.exit(main())
