"""Benchmark: one training step of an MLP, refimpl's executor vs hand-written NumPy.

The model: ``layers`` fc layers (relu between them), loss = mean(square(y)),
SGD. The baseline is the same step written directly in NumPy (forward,
backward, in-place SGD), measured in the same run. Printed per size: ms per
step for both, the ratio, the interpreter overhead per op in µs, and the
step time with GC off (FLAGS_eager_delete_tensor_gb=-1) vs on.

    python benchmarks/mlp_step.py            # all sizes
    python benchmarks/mlp_step.py --quick    # fewer repeats
    python benchmarks/mlp_step.py --backend cuda   # medium and large: CUDA kernels vs refimpl CPU

With ``--backend cuda`` each size is run by refimpl on the NumPy kernels and
on the CUDA kernels (``Executor(CUDAPlace(0))``) in the same process; the
fetch of the loss synchronises every step.
"""
import argparse
import time

import numpy as np

import refimpl as paddle

SIZES = {  # name: (input dim, hidden, layers, batch)
    "tiny": (16, 16, 4, 4),
    "medium": (784, 1024, 3, 64),
    "large": (1024, 4096, 2, 256),
}


def build(din, hidden, layers):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        h = x = paddle.static.data("x", [None, din], "float32")
        for i in range(layers):
            h = paddle.static.nn.fc(h, hidden, activation="relu" if i < layers - 1 else None)
        loss = paddle.mean(paddle.square(h))
        paddle.optimizer.SGD(learning_rate=0.01).minimize(loss)
    return main, startup, loss, x


def numpy_step(params, x, lr):
    """The floor: the same training step, hand-written."""
    hs, acts = [x], []
    h = x
    n = len(params)
    for i, (w, b) in enumerate(params):
        a = h @ w + b
        acts.append(a)
        h = np.maximum(a, 0) if i < n - 1 else a
        hs.append(h)
    loss = np.mean(h * h)
    d = h * np.float32(2.0 / h.size)
    for i in range(n - 1, -1, -1):
        w, b = params[i]
        db = d.sum(axis=0)
        dw = hs[i].T @ d
        if i > 0:
            d = (d @ w.T) * (acts[i - 1] > 0)
        w -= lr * dw
        b -= lr * db
    return loss


def timed(fn, steps):
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps


def runner(main, startup, loss, x, gc_gb, place=None):
    """A prepared, warmed-up training step under one GC setting."""
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(place or paddle.CPUPlace())
    exe.run(startup, scope=scope)

    def step():
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
        exe.run(main, feed={"x": x}, fetch_list=[loss], scope=scope)
    step()
    return step


def bench(name, quick):
    din, hidden, layers, batch = SIZES[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, din)).astype("float32")
    main, startup, loss, _ = build(din, hidden, layers)
    params = [(rng.standard_normal((din if i == 0 else hidden, hidden)).astype("float32") * np.float32(0.05),
               np.zeros(hidden, "float32")) for i in range(layers)]
    lr = np.float32(0.01)
    fns = {"on": runner(main, startup, loss, x, 0.0), "off": runner(main, startup, loss, x, -1.0),
           "numpy": lambda: numpy_step(params, x, lr)}
    steps = {"tiny": 2000, "medium": 20, "large": 5}[name] // (4 if quick else 1)
    best = {k: float("inf") for k in fns}
    for _ in range(3 if quick else 7):  # interleaved, so drift hits every variant alike
        for k, fn in fns.items():
            best[k] = min(best[k], timed(fn, steps))
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})
    n_ops = len(main.global_block().ops)
    t_on, t_off, t_np = best["on"], best["off"], best["numpy"]
    print(f"{name:7s} {din}-{hidden}x{layers} batch {batch:3d}: refimpl {t_on * 1e3:8.3f} ms  "
          f"numpy {t_np * 1e3:8.3f} ms  ratio {t_on / t_np:5.2f}  "
          f"overhead {(t_on - t_np) / n_ops * 1e6:6.2f} us/op ({n_ops} ops)  "
          f"GC off {t_off * 1e3:8.3f} ms (on/off {t_on / t_off:5.3f})")
    return t_on, t_np, t_off


class KernelTimes:
    """A launch hook: synchronizes before every launch and charges the time since the last one to it.

    One profiled step says which kernels (launch overhead included) a CUDA step spends its time in.
    """

    def __init__(self, cuda):
        from cuda_backend.compile_check import name_of, recipe
        self.cuda, self.last, self.t0, self.times = cuda, None, 0.0, {}
        self.name = lambda kernel: name_of(recipe(kernel)).split(":", 1)[1]  # the kernel's name, less its module

    def __call__(self, kernel, args):
        self.cuda.synchronize()
        self.lap(time.perf_counter())
        self.last = self.name(kernel)

    def lap(self, now):
        if self.last is not None:
            self.times[self.last] = self.times.get(self.last, 0.0) + now - self.t0
        self.t0 = now


def profile_cuda_step(fn):
    from numba import cuda
    from cuda_backend.device import LAUNCH_HOOKS
    times = KernelTimes(cuda)
    LAUNCH_HOOKS.append(times)
    try:
        fn()
        cuda.synchronize()
        times.lap(time.perf_counter())
    finally:
        LAUNCH_HOOKS.remove(times)
    total = sum(times.times.values())
    top = sorted(times.times.items(), key=lambda kv: -kv[1])[:8]
    print("  kernels (synchronized, one step): " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in top)
          + f"; all launches {total * 1e3:.2f} ms")


def bench_cuda(name, quick, profile=False):
    """refimpl on the CUDA kernels vs refimpl on the NumPy kernels, same model, same run."""
    din, hidden, layers, batch = SIZES[name]
    x = np.random.default_rng(0).standard_normal((batch, din)).astype("float32")
    main, startup, loss, _ = build(din, hidden, layers)
    fns = {"cpu": runner(main, startup, loss, x, 0.0),
           "cuda": runner(main, startup, loss, x, 0.0, paddle.CUDAPlace(0))}
    steps = {"tiny": 200, "medium": 20, "large": 5}[name] // (4 if quick else 1) or 1
    best = {k: float("inf") for k in fns}
    for _ in range(2 if quick else 5):
        for k, fn in fns.items():
            best[k] = min(best[k], timed(fn, steps))
    print(f"{name:7s} {din}-{hidden}x{layers} batch {batch:3d}: refimpl cpu {best['cpu'] * 1e3:9.3f} ms  "
          f"cuda {best['cuda'] * 1e3:9.3f} ms  speedup {best['cpu'] / best['cuda']:6.2f}x")
    if profile:
        profile_cuda_step(fns["cuda"])
    return best["cpu"], best["cuda"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--backend", choices=["numpy", "cuda"], default="numpy",
                   help="cuda: compare the CUDA kernels with refimpl CPU (default sizes medium, large)")
    p.add_argument("--profile", action="store_true",
                   help="with --backend cuda: also time one step kernel by kernel (synchronized)")
    p.add_argument("sizes", nargs="*", default=None)
    args = p.parse_args()
    if args.backend == "cuda":
        import cuda_backend
        cuda_backend.require()
        print(f"cuda backend ({'simulator' if cuda_backend.simulated() else 'GPU'}) vs refimpl cpu")
        for name in args.sizes or ["medium", "large"]:
            bench_cuda(name, args.quick, args.profile)
        return
    args.sizes = args.sizes or list(SIZES)
    print("reference: Paddle 3.3.1's CPU executor takes 0.81 ms on the tiny step, the NumPy floor 0.08 ms")
    for name in args.sizes:
        bench(name, args.quick)


if __name__ == "__main__":
    main()
