"""The MPI communicator under ``mpiexec -n 2``: collectives, ops in programs, failures.

Each test runs this file as a script under ``mpiexec`` (the ``mpich`` wheel's
Hydra; it runs as root and oversubscribes a small machine without extra
flags) with a subprocess timeout, so nothing can hang. The script part is at
the bottom: ``python tests/test_mpi.py CASE``.
"""
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def launch(case, n=2, timeout=60, flags=()):
    pytest.importorskip("mpi4py")
    exe = mpiexec()
    if exe is None:
        pytest.fail("mpi4py is installed but mpiexec is not on PATH (pip install mpich)")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    p = subprocess.run([exe, *flags, "-n", str(n), sys.executable, os.path.abspath(__file__), case],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    return p, time.monotonic() - t0


def test_collectives_groups_and_mismatches():
    p, _ = launch("collectives")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(line for line in p.stdout.splitlines() if line.startswith("OK")) == ["OK 0", "OK 1"]


def test_collectives_on_three_ranks():
    p, _ = launch("collectives", n=3)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(line for line in p.stdout.splitlines() if line.startswith("OK")) == ["OK 0", "OK 1", "OK 2"]


def test_program_with_collective_ops():
    p, _ = launch("program")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("OK") == 2


def test_failing_rank_ends_the_job_naming_rank_and_error():
    p, took = launch("fail")
    assert p.returncode != 0
    assert "refimpl: rank 1 failed: ValueError: boom" in p.stderr, p.stderr
    assert took < 30


def test_receive_timeout_aborts_the_job():
    p, took = launch("timeout")
    assert p.returncode != 0
    assert "rank 0: recv from peer 1 on ring 0: timed out after 1 s" in p.stderr, p.stderr
    assert took < 20


def test_hybrid_ranks_two_processes_of_two_threads():
    p, _ = launch("hybrid")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(line for line in p.stdout.splitlines() if line.startswith("OK")) == ["OK 0", "OK 1"]


def test_hybrid_failing_thread_rank_ends_the_job():
    p, took = launch("hybrid_fail")
    assert p.returncode != 0
    assert "rank 2 failed: ValueError: boom" in p.stderr, p.stderr
    assert took < 30


# ---- a rank that exits or hangs: named, and a fixed exit status (a raise: 1, tested above) ----
# (Hydra's -disable-auto-cleanup lets the other ranks outlive a dead one and name it; the launcher
# passes it. A rank killed by a signal is named by the launcher: tests/test_rank_faults.py.)
@pytest.mark.parametrize("fault, code, message", [
    ("exit", 125, r"refimpl: rank 1 died: its process \(pid \d+ on .*\) ended while rank [023]: all_reduce on ring 0 "
                  r"waited for it"),
    ("hang", 124, r"refimpl: rank 1 hung: rank [023]: all_reduce on ring 0: timed out after 2 s waiting for it; "
                  r"rank\(s\) \[0, 2, 3\] waited; rank 1 is busy outside communication"),
])
def test_a_faulty_rank_of_four_is_named_with_a_fixed_exit_status(fault, code, message):
    p, took = launch(f"fault_{fault}", n=4, flags=["-disable-auto-cleanup"])
    assert p.returncode == code, p.stdout + p.stderr
    assert re.search(message, p.stderr), p.stderr
    assert "rank 0 hung" not in p.stderr and "rank 2 died" not in p.stderr
    assert took < 30


def test_control_messages_travel_as_buffers():
    p, _ = launch("control", n=3)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(line for line in p.stdout.splitlines() if line.startswith("OK")) == ["OK 0", "OK 1", "OK 2"]


def test_benchmark_launches_itself_under_mpiexec():
    pytest.importorskip("mpi4py")
    env = dict(os.environ, PYTHONPATH=ROOT)
    for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "collectives.py"), "--quick", "--max-mb", "1",
                        "--layers", "4"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 MB" in p.stdout and "speed-up" in p.stdout and "2 ranks" in p.stdout


# ---- the script run by mpiexec ------------------------------------------------------------
def _data(rank, dtype, shape=(4, 3)):
    return (np.random.default_rng(rank).standard_normal(shape) * 4).astype(dtype)


def _reduce(n, dtype, op, shape=(4, 3)):
    f = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply, "avg": np.add}[op]
    acc = _data(0, dtype, shape)
    for r in range(1, n):
        acc = f(acc, _data(r, dtype, shape))
    if op == "avg":
        acc = acc / np.asarray(n, acc.dtype) if acc.dtype.kind == "f" else (acc / n).astype(acc.dtype)
    return acc.astype(dtype)


def _case_collectives(dist, ctx):
    from refimpl.core.errors import InvalidArgument
    r, n, c = ctx.rank, ctx.world_size, ctx.comm(0)
    for dtype in ["float32", "float64", "int32", "int64", "float16", "bool"]:
        for op in (["sum", "max", "min", "prod", "avg"] if dtype != "bool" else ["sum"]):
            got = c.all_reduce(_data(r, dtype), op)
            np.testing.assert_allclose(got, _reduce(n, dtype, op), rtol=1e-6 if dtype != "float16" else 1e-3)
        x = _data(r, dtype, (2 * n, 3))
        np.testing.assert_array_equal(c.broadcast(x, root=n - 1), _data(n - 1, dtype, (2 * n, 3)))
        np.testing.assert_array_equal(c.all_gather(x), np.concatenate([_data(k, dtype, (2 * n, 3)) for k in range(n)]))
        total = _reduce(n, dtype, "sum", (2 * n, 3))
        np.testing.assert_allclose(c.reduce_scatter(x), total[2 * r:2 * r + 2], rtol=1e-3)
        np.testing.assert_allclose(c.reduce(x, root=0), total if r == 0 else x, rtol=1e-3)
    y = np.ones(5, "float32")
    assert c.all_reduce(y, out=y) is y and y[0] == n
    np.testing.assert_array_equal(c.all_gather(np.array(r)), np.arange(n))
    z = np.array(float(r + 1))  # 0-d tensors keep their shape (a scalar loss term between stages)
    assert c.all_reduce(z).shape == c.broadcast(z, 0).shape == c.reduce(z, 0).shape == ()
    c.send(z, (r + 1) % n)
    got = c.recv((r - 1) % n)
    assert got.shape == () and float(got) == float((r - 1) % n + 1)
    for k in range(3):  # ring send/recv, several in flight
        c.send(np.full(3, 10 * r + k, "int64"), (r + 1) % n)
    assert [int(c.recv((r - 1) % n, [3], "int64")[0]) for _ in range(3)] == [10 * ((r - 1) % n) + k for k in range(3)]
    g = dist.new_group([1, 0])
    assert g.id == 10 and g.ranks == [0, 1]
    if g.is_member():
        np.testing.assert_array_equal(ctx.comm(10).all_reduce(np.array([r + 1])), [3])
    for bad in ["shape", "dtype", "call"]:
        x = np.zeros(3 + (bad == "shape" and r == 1), "float64" if bad == "dtype" and r == 1 else "float32")
        try:
            c.broadcast(x, 0) if bad == "call" and r == 1 else c.all_reduce(x)
            raise AssertionError(f"{bad}: no error")
        except InvalidArgument as exc:
            assert "rank 1" in str(exc), str(exc)
    c.barrier()


def _case_program(dist, ctx):
    import refimpl as paddle
    from refimpl.executor import Trace
    from refimpl.framework import Program, unique_name
    r = ctx.rank
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 3], "float32")
        y = x * 1.0
        dist.all_reduce(y, op=dist.ReduceOp.AVG)
        z = main.global_block().create_var(name="z", shape=[4, 3], dtype="float32")
        dist.send(x, dst=1 - r)
        dist.recv(z, src=1 - r)
    trace = Trace()
    exe = paddle.static.Executor(paddle.CPUPlace())
    got_y, got_z = exe.run(main, feed={"x": _data(r, "float32")}, fetch_list=[y, z], trace=trace)
    np.testing.assert_allclose(got_y, _reduce(2, "float32", "avg"), rtol=1e-6)
    np.testing.assert_array_equal(got_z, _data(1 - r, "float32"))
    assert [(e.kind, e.var, e.nbytes) for e in trace if e.kind in ("send", "recv")] == [("send", "x", 48), ("recv", "z", 48)]


def _case_fail(dist, ctx):
    if ctx.rank == 1:
        time.sleep(0.2)
        raise ValueError("boom")
    ctx.comm(0).recv(1)  # blocks until the job is aborted


def _case_timeout(dist, ctx):
    from refimpl.distributed.communication import init_mpi
    init_mpi(timeout=1.0)
    if ctx.rank == 0:
        ctx.comm(0).recv(1)
    else:
        time.sleep(60)


def _hybrid_rank():
    import refimpl as paddle
    import refimpl.distributed as dist
    from refimpl.distributed.communication import context
    from refimpl.framework import Program, unique_name
    dist.init_parallel_env()
    r, n = dist.get_rank(), dist.get_world_size()
    assert n == 4 and context.current().backend == "hybrid"
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 3], "float32")
        y = x * 1.0
        dist.all_reduce(y)
        parts = []
        dist.all_gather(parts, x)
        z = main.global_block().create_var(name="z", shape=[4, 3], dtype="float32")
        dist.send(x, dst=(r + 1) % n)  # ring: crosses processes between ranks 1 -> 2 and 3 -> 0
        dist.recv(z, src=(r - 1) % n)
    exe = paddle.static.Executor(paddle.CPUPlace())
    got = exe.run(main, feed={"x": _data(r, "float32")}, fetch_list=[y, z] + parts, scope=paddle.static.Scope())
    np.testing.assert_allclose(got[0], _reduce(4, "float32", "sum"), rtol=1e-6)
    np.testing.assert_array_equal(got[1], _data((r - 1) % n, "float32"))
    for k in range(n):
        np.testing.assert_array_equal(got[2 + k], _data(k, "float32"))
    c = context.current().comm(0)
    np.testing.assert_array_equal(c.reduce_scatter(np.arange(8.0) * (r + 1)), (np.arange(8.0) * 10)[2 * r:2 * r + 2])
    np.testing.assert_array_equal(c.broadcast(np.array([r]), root=3), [3])
    g = dist.new_group([1, 2])
    if g.is_member():
        assert context.current().comm(g.id).all_reduce(np.array([r]))[0] == 3
    return r


def _case_hybrid(dist, ctx):
    from refimpl.distributed.communication import run_hybrid
    assert run_hybrid(2, _hybrid_rank, timeout=20) == [2 * ctx.rank, 2 * ctx.rank + 1]


def _case_hybrid_fail(dist, ctx):
    from refimpl.distributed.communication import context, run_hybrid

    def fn():
        if context.current().rank == 2:
            raise ValueError("boom")
        context.current().comm(0).all_reduce(np.ones(1))
    run_hybrid(2, fn, timeout=20)


def _case_fault(fault):
    def run(dist, ctx):
        import signal
        from refimpl.distributed.communication import init_mpi
        init_mpi(timeout=2.0)
        c = ctx.comm(0)
        c.all_reduce(np.ones(2))
        if ctx.rank == 1:
            time.sleep(0.2)
            if fault == "raise":
                raise ValueError("boom")
            if fault == "exit":
                os._exit(3)
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # hang
        c.all_reduce(np.ones(2))
    return run


def _case_control(dist, ctx):
    """Host names, the NCCL id and the NCCL agreement: buffers only (no pickle), bytes intact."""
    from refimpl.distributed.communication.mpi_nccl import all_agree
    from refimpl.distributed.communication.mpi_monitor import allgather_text
    from refimpl.distributed.fleet.base.mpi_role_maker import MPIRoleMaker
    r, n, world = ctx.rank, ctx.world_size, ctx.world
    texts = ["", "h\u00f6st-\u00e9\u4e2d" * 3, "x" * 1000][:n]
    assert allgather_text(world.world_comm, texts[r]) == texts
    assert all_agree(world, world.world_comm, True, "test") is True
    assert all_agree(world, world.world_comm, r != n - 1, "test") is False
    role = MPIRoleMaker()
    assert role._rank_source() == "mpi" and role._worker_index() == r and role._worker_num() == n
    assert len(set(role._get_trainer_endpoints())) == n
    try:
        from cuda_backend.nccl import NcclUniqueId, broadcast_unique_id
    except ImportError:  # no numba: the CUDA backend is not installed
        return
    import ctypes
    uid = NcclUniqueId()
    if r == 0:  # zeros first and in the middle: the id must arrive whole, not cut at a NUL
        raw = bytes([0, 7, 0, 0]) + bytes(range(1, 125))
        ctypes.memmove(ctypes.addressof(uid), raw, 128)
    got = broadcast_unique_id(world.world_comm, uid)
    assert bytes(bytearray(got)) == bytes([0, 7, 0, 0]) + bytes(range(1, 125))


def main(case):
    import refimpl.distributed as dist
    dist.init_parallel_env()
    from refimpl.distributed.communication import context
    ctx = context.current()
    assert ctx.backend == "mpi", ctx
    {"collectives": _case_collectives, "program": _case_program, "fail": _case_fail, "timeout": _case_timeout,
     "hybrid": _case_hybrid, "hybrid_fail": _case_hybrid_fail, "control": _case_control,
     **{f"fault_{f}": _case_fault(f) for f in ("raise", "exit", "kill", "hang")}}[case](dist, ctx)
    sys.stdout.flush()
    os.write(1, f"OK {ctx.rank}\n".encode())  # one write: the ranks' lines must not interleave


if __name__ == "__main__":
    main(sys.argv[1])
