"""Parameter-server training: shard plan, program split, sync / async / GEO, save / load, failures, launcher."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.distributed import fleet, ps
from refimpl.distributed.communication import RankFailed
from refimpl.distributed.launch.main import ps_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "train_ps.py")
_spec = importlib.util.spec_from_file_location("train_ps", EXAMPLE)
train_ps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_ps)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(ps.plan, "MIN_BLOCK_SIZE", 64)  # the 8x16 hidden weight is split by rows


def strategy(mode, k=3):
    s = fleet.DistributedStrategy()
    s.a_sync = mode != "sync"
    if mode == "geo":
        s.a_sync_configs = {"k_steps": k}
    return s


def rank_fn(mode, steps=20, opt="sgd", lr=0.2, dirname=None, save=None, fail_worker=None):
    """One rank of a PS job on train_ps's model; a worker returns (eval losses, final params)."""
    s = strategy(mode)
    fleet.init(strategy=s)
    paddle.seed(7)
    make = (lambda: paddle.optimizer.Adam(0.02)) if opt == "adam" else (lambda: paddle.optimizer.SGD(lr))
    optimizer = fleet.distributed_optimizer(make(), s)
    main, startup, test, loss = train_ps.build(lambda: optimizer)
    if fleet.is_server():
        fleet.init_server(dirname)
        return fleet.run_server()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    fleet.init_worker()
    j, w = fleet.worker_index(), fleet.worker_num()
    if j == fail_worker:
        raise RuntimeError(f"worker {j} crashed")
    losses = [train_ps.evaluate(exe, test, loss)]
    for step in range(steps):
        x, y = train_ps.batch(step, train_ps.ROWS * w)
        exe.run(main, feed={"x": x[j * 8:(j + 1) * 8], "y": y[j * 8:(j + 1) * 8]}, fetch_list=[loss])
    fleet.barrier_worker()
    losses.append(train_ps.evaluate(exe, test, loss))
    if save and j == 0:
        fleet.save_persistables(exe, save, main)
    fleet.barrier_worker()
    scope = paddle.static.global_scope()
    params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    fleet.stop_worker()
    return losses, params


def alone(steps, workers, opt="sgd", lr=0.2):
    paddle.seed(7)
    make = (lambda: paddle.optimizer.Adam(0.02)) if opt == "adam" else (lambda: paddle.optimizer.SGD(lr))
    main, startup, _, loss = train_ps.build(make)
    exe, scope = paddle.static.Executor(paddle.CPUPlace()), paddle.static.Scope()
    exe.run(startup, scope=scope)
    for step in range(steps):
        x, y = train_ps.batch(step, train_ps.ROWS * workers)
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


# ---- plan and program split --------------------------------------------------------------------
def test_shard_plan_splits_large_parameters_by_rows():
    plan = ps.ShardPlan([("b", (16,)), ("w", (8, 16)), ("v", (3, 1)), ("u", (16, 1))], 2, min_block_size=64)
    assert [(b.server, b.begin, b.end) for b in plan.blocks["w"]] == [(0, 0, 4), (1, 4, 8)]
    assert all(len(plan.blocks[n]) == 1 for n in "buv")
    assert sorted(b.param for s in range(2) for b in plan.on_server(s)).count("w") == 2
    parts = plan.split("w", np.arange(128.0).reshape(8, 16))
    assert np.array_equal(np.concatenate([parts[0], parts[1]]), np.arange(128.0).reshape(8, 16))


def test_worker_and_server_programs():
    def body(mode):
        s = strategy(mode)
        fleet.init(strategy=s)
        main, _, _, _ = train_ps.build(lambda: fleet.distributed_optimizer(paddle.optimizer.Adam(0.1), s))
        job = fleet.fleet._ps_job
        return [op.type for op in main.global_block().ops], job

    types, job = ps.run_ps_in_process(2, 1, body, "sync")[2]
    assert "adam" not in types and types[-2:] == ["ps_send", "ps_recv"]
    server_ops = [[op.type for op in p.global_block().ops] for p in job.server_programs]
    assert sum(len(o) for o in server_ops) == 5 and all(set(o) == {"adam"} for o in server_ops)  # 4 params + 1 split
    assert "fc_0.w_0.block1" in job.server_vars[1] and "fc_0.w_0_moment1_0.block1" in job.server_vars[1]
    geo_types, _ = ps.run_ps_in_process(1, 1, body, "geo")[1]
    assert geo_types.count("adam") == 4 and geo_types[-1] == "ps_geo"


# ---- training -----------------------------------------------------------------------------------
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_sync_equals_one_rank_on_the_whole_batch(opt):
    res = ps.run_ps_in_process(2, 2, rank_fn, "sync", steps=6, opt=opt, timeout=30)
    assert res[0] == res[1] == 6  # every server applied one update per step
    ref = alone(6, 2, opt)
    for _, params in res[2:]:
        for name, value in ref.items():
            np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", ["sync", "async", "geo"])
def test_modes_converge_and_are_deterministic(mode):
    first = ps.run_ps_in_process(2, 2, rank_fn, mode, steps=30, timeout=30)
    again = ps.run_ps_in_process(2, 2, rank_fn, mode, steps=30, timeout=30)
    for (losses, params), (losses2, params2) in zip(first[2:], again[2:]):
        assert losses[-1] < 0.05 < losses[0]
        assert losses == losses2 and all(np.array_equal(params[n], params2[n]) for n in params)
    updates = {"sync": 30, "async": 60, "geo": 20}[mode]  # geo: 2 workers x 30 / k_steps 3
    assert first[0] == first[1] == updates


def test_save_then_init_server_from_it_restores_exactly(tmp_path):
    res = ps.run_ps_in_process(2, 2, rank_fn, "sync", steps=5, save=str(tmp_path), timeout=30)
    saved = ps.load_npz(str(tmp_path))
    for name, value in res[2][1].items():
        assert np.array_equal(saved[name], value)
    assert any("moment" not in n and n.startswith("learning_rate") for n in saved)
    again = ps.run_ps_in_process(2, 1, rank_fn, "sync", steps=0, dirname=str(tmp_path), timeout=30)
    for name, value in again[2][1].items():
        assert np.array_equal(saved[name], value)


def test_load_model_and_shrink(tmp_path):
    s = strategy("async")

    def job(path):
        fleet.init(strategy=s)
        paddle.seed(7)
        main, startup, test, loss = train_ps.build(lambda: fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), s))
        if fleet.is_server():
            fleet.init_server()
            return fleet.run_server()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        fleet.init_worker()
        fleet.save_persistables(exe, path, main)
        saved = ps.load_npz(path)
        zeros = {k: np.zeros_like(v) for k, v in saved.items()}
        np.savez(os.path.join(path, "zeros.npz"), **zeros)
        fleet.load_model(os.path.join(path, "zeros.npz"), mode=0)
        scope = paddle.static.global_scope()
        zeroed = all(not np.array(scope.find_var(p.name).get_tensor()).any() for p in main.all_parameters())
        fleet.load_model(path, mode=0)
        back = all(np.array_equal(np.array(scope.find_var(p.name).get_tensor()), saved[p.name])
                   for p in main.all_parameters())
        dropped = fleet.shrink(10)
        fleet.save_inference_model(exe, path, ["x"], [loss], main)
        assert os.path.exists(os.path.join(path, "model.pdmodel"))
        fleet.stop_worker()
        return zeroed, back, dropped

    assert ps.run_ps_in_process(2, 1, job, str(tmp_path), timeout=30)[2] == (True, True, 0)


def test_a_dead_worker_stops_run_server_naming_it():
    with pytest.raises(RankFailed) as e:
        ps.run_ps_in_process(1, 2, rank_fn, "sync", fail_worker=1, timeout=5)
    assert e.value.rank == 2 and "worker 1 crashed" in str(e.value)
    server_error = e.value.errors.get(0)
    assert isinstance(server_error, ps.WorkerFailed) and server_error.worker == 1
    assert "worker 1 failed" in str(server_error)


def test_ps_methods_only_warn_outside_ps_mode(caplog):
    def body():
        fleet.init(is_collective=True)
        with pytest.raises(ValueError, match="runtime handler"):  # before minimize, as Paddle 3.3.1
            fleet.init_worker()
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [None, 2])
            loss = paddle.mean(paddle.static.nn.fc(x, 1))
            fleet.distributed_optimizer(paddle.optimizer.SGD(0.1)).minimize(loss)
        fleet.init_worker(), fleet.stop_worker(), fleet.shrink()
        return True

    from refimpl.distributed.communication import run_in_process
    assert run_in_process(2, body) == [True, True]
    assert "collective mode" in caplog.text


# ---- launcher ---------------------------------------------------------------------------------
def test_ps_env_of_the_launcher():
    assert ps_env(0, 2, 3)["TRAINING_ROLE"] == "PSERVER" and ps_env(1, 2, 3)["PADDLE_PORT"] == "6171"
    env = ps_env(4, 2, 3)
    assert env["TRAINING_ROLE"] == "TRAINER" and env["PADDLE_TRAINER_ID"] == "2"
    assert env["PADDLE_PSERVERS_IP_PORT_LIST"] == "127.0.0.1:6170,127.0.0.1:6171"
    assert env["PADDLE_TRAINERS_NUM"] == "3" and env["POD_IP"] == "127.0.0.1"


def launch(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "refimpl.distributed.launch", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.parametrize("where", [["--in-process", "--timeout", "20"], "mpi"])
def test_launcher_runs_train_ps(where, tmp_path):
    if where == "mpi":
        pytest.importorskip("mpi4py")
        where = []
    out = launch("--server_num", "2", "--worker_num", "2", *where, EXAMPLE, "--mode", "sync", "--check",
                 "--save", str(tmp_path), "--threshold", "0.05")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reloaded exactly: True" in out.stdout and out.stdout.count("applied 30 updates") == 2
    geo = launch("--server_num", "1", "--worker_num", "2", *where, EXAMPLE, "--mode", "geo", "--threshold", "0.05")
    assert geo.returncode == 0, geo.stdout + geo.stderr
