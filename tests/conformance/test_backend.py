"""The backend switch, the kernel coverage and an elementwise program that must agree bit for bit."""
import os
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
import cuda_backend
from refimpl.core.errors import InvalidArgument
from refimpl.executor import Trace
from refimpl.framework import Program, unique_name

from harness import gc_events, place

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_registered_op_has_a_cuda_kernel():
    cuda_backend.require()
    assert cuda_backend.missing_kernels() == []


def _elementwise_program():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 6], "float32")
        y = paddle.static.data("y", [6], "float32")
        h = paddle.nn.functional.relu(paddle.scale(x * y + x, 0.5, 0.25)) - y / (x * x + 1.0)
        out = paddle.sqrt(paddle.square(h) + 2.0)
    return main, out


def _run_elementwise(backend):
    main, out = _elementwise_program()
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((5, 6)).astype("float32"), "y": rng.standard_normal(6).astype("float32")}
    trace = Trace()
    exe = paddle.static.Executor(place(backend))
    got, = exe.run(main, feed=feed, fetch_list=[out], scope=paddle.static.Scope(), trace=trace)
    return got, gc_events(trace), exe.memory_stats()


def test_elementwise_only_program_is_bitwise_identical():
    ref, got = _run_elementwise("numpy"), _run_elementwise("cuda")
    assert got[0].dtype == ref[0].dtype and got[0].shape == ref[0].shape
    assert got[0].tobytes() == ref[0].tobytes()
    assert got[1] == ref[1] and got[2] == ref[2]


def _run_elementwise_on(exe):
    main, out = _elementwise_program()
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((5, 6)).astype("float32"), "y": rng.standard_normal(6).astype("float32")}
    got, = exe.run(main, feed=feed, fetch_list=[out], scope=paddle.static.Scope())
    return got, type(exe._last.block.gc).__module__


def test_set_backend_is_the_default_of_executors_without_a_place():
    try:
        paddle.set_backend("cuda")
        assert paddle.get_backend() == "cuda" and isinstance(paddle.static.Executor().place, paddle.CUDAPlace)
        assert paddle.CPUPlace().backend == "numpy"  # a place keeps its own backend
        on_default, default_gc = _run_elementwise_on(paddle.static.Executor())
        on_cpu, cpu_gc = _run_elementwise_on(paddle.static.Executor(paddle.CPUPlace()))
    finally:
        paddle.set_backend("numpy")
    assert default_gc.startswith("cuda_backend.") and cpu_gc == "refimpl.executor.garbage_collector"
    assert isinstance(paddle.static.Executor().place, paddle.CPUPlace)
    ref = _run_elementwise("numpy")[0]
    assert on_default.tobytes() == ref.tobytes() and on_cpu.tobytes() == ref.tobytes()
    with pytest.raises(InvalidArgument, match="unknown backend"):
        paddle.set_backend("tpu")


def test_ranks_on_threads_keep_the_backend_of_their_own_executor():
    """Two in-process ranks, one on each backend, at the same time: each runs its own kernels."""
    from refimpl.distributed.communication import run_in_process
    places = [paddle.CPUPlace(), paddle.CUDAPlace(0)]
    results = run_in_process(2, lambda: _run_elementwise_on(
        paddle.static.Executor(places[paddle.distributed.get_rank()])))
    assert results[0][1] == "refimpl.executor.garbage_collector"
    assert results[1][1].startswith("cuda_backend.")
    assert results[0][0].tobytes() == results[1][0].tobytes()


def _no_device_env(**extra):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", **extra)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
                    reason="on a GPU machine CUDA is available, so there is no error to see")
def test_cuda_without_gpu_or_simulator_is_a_clear_typed_error():
    code = ("import refimpl as p\n"
            "try:\n    p.set_backend('cuda')\n"
            "except p.core.errors.Unavailable as e:\n    print(type(e).__name__, '|', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_no_device_env(), capture_output=True, text=True,
                         timeout=120)
    assert "CudaUnavailable |" in out.stdout, out.stdout + out.stderr
    assert "NUMBA_ENABLE_CUDASIM=1" in out.stdout


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="needs the no-GPU case")
def test_refimpl_backend_env_fails_on_first_run_with_the_same_error():
    code = ("import refimpl as p\nfrom refimpl.framework import Program\n"
            "try:\n    p.static.Executor().run(Program())\n"
            "except p.core.errors.Unavailable as e:\n    print(type(e).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_no_device_env(REFIMPL_BACKEND="cuda"),
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "CudaUnavailable", out.stdout + out.stderr


def test_benchmark_profile_charges_time_to_each_launched_kernel(capsys):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import mlp_step
    finally:
        sys.path.pop(0)
    from cuda_backend import ew
    from cuda_backend.ops_math import f_add, f_neg
    x = cuda_backend.to_device(np.arange(6, dtype=np.float32))
    mlp_step.profile_cuda_step(lambda: (ew.run_n(f_add, [x, x]), ew.run1(f_neg, x)))
    out = capsys.readouterr().out
    assert "f_add:<f4" in out and "f_neg:<f4" in out and "all launches" in out


def test_print_op_prints_the_same_on_both_backends(capsys):
    """``print`` is an executor op (no per-backend kernel): device values are read back and printed alike."""
    texts = {}
    for backend in ("numpy", "cuda"):
        main, startup = Program(), Program()
        with paddle.static.program_guard(main, startup), unique_name.guard():
            x = paddle.static.data("x", [None, 3], "float32")
            y = paddle.static.Print(x * 2.0, message="doubled", summarize=4)
        exe = paddle.static.Executor(place(backend))
        got, = exe.run(main, feed={"x": np.arange(6, dtype="float32").reshape(2, 3)}, fetch_list=[y])
        np.testing.assert_array_equal(got, np.arange(6, dtype="float32").reshape(2, 3) * 2)
        texts[backend] = capsys.readouterr().out
    assert "  - place: Place(gpu:0)\n" in texts["cuda"]
    assert texts["cuda"].replace("Place(gpu:0)", "Place(cpu)") == texts["numpy"]
    assert "  - data: [0.000000 2.000000 4.000000 6.000000]\n" in texts["numpy"]
