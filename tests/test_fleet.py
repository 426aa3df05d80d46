"""``fleet.init`` and the ``Fleet`` API: argument checks, accessors, all_reduce, collective_perf, groups.

Ranks run as threads (``run_in_process``) and, once, as ``mpiexec -n 2``
processes (``python tests/test_fleet.py mpi`` is the script each runs).
"""
import copy
import importlib
import json
import logging
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import refimpl.distributed.fleet as fleet
from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented
from refimpl.distributed import run_in_process
from refimpl.distributed.fleet import DistributedStrategy, Fleet, ParallelMode, UserDefinedRoleMaker
from refimpl.distributed.fleet.base import topology as tp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
fleet_mod = importlib.import_module("refimpl.distributed.fleet.fleet")
LOGGER = logging.getLogger("refimpl.distributed.fleet")
COMM_TYPES = ["allreduce", "reduce", "broadcast", "allgather", "reduce_scatter"]


@pytest.fixture(autouse=True)
def keep_log_level():
    level = LOGGER.level
    yield
    LOGGER.setLevel(level)


def strategy(**hybrid):
    s = DistributedStrategy()
    if hybrid:
        s.hybrid_configs = hybrid
    return s


def messages(caplog, level=logging.WARNING):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER.name and r.levelno == level]


# ---- argument checks --------------------------------------------------------------------------
def test_module_functions_are_the_instance_methods():
    assert isinstance(fleet.fleet, Fleet) and fleet_mod.fleet is fleet.fleet
    for name in ("init", "worker_index", "worker_num", "is_first_worker", "distributed_optimizer", "minimize",
                 "get_hybrid_communicate_group", "collective_perf", "all_reduce", "barrier_worker"):
        assert getattr(fleet, name) == getattr(fleet.fleet, name), name
    assert fleet.rank == fleet.fleet.worker_index and fleet.world_size == fleet.fleet.worker_num


def test_init_argument_checks():
    f = Fleet()
    with pytest.raises(ValueError, match=r"`is_collective` should be instance of `bool`, but got <class 'str'>") as e:
        f.init(is_collective="yes")
    assert isinstance(e.value, InvalidArgument)
    with pytest.raises(ValueError, match=r"`role_maker` should be subclass of `RoleMakerBase`, but got <class 'dict'>"):
        f.init(role_maker={})
    with pytest.raises(AttributeError, match="`strategy` should be an instance of `DistributedStrategy`"):
        f.init(strategy={"dp_degree": 2})
    with pytest.raises(AssertionError, match="level's type must be str or int"):
        f.init(log_level=1.5)
    with pytest.raises(ValueError, match="Unknown level"):
        f.init(log_level="chatty")
    f.init(log_level="debug")
    assert LOGGER.level == logging.DEBUG and fleet.get_log_level_name() == "DEBUG"


def test_not_initialized():
    f = Fleet()
    # (distributed_optimizer before init is accepted, as in Paddle; see test_fleet_surface.py)
    for call in (f.worker_index, f.is_first_worker, f.barrier_worker, lambda: f.all_reduce(1),
                 lambda: f.minimize(None)):
        with pytest.raises(AttributeError, match="call fleet.init") as e:
            call()
        assert isinstance(e.value, PreconditionNotMet)
    with pytest.raises(AssertionError, match="no hybrid communicate group"):
        f.get_hybrid_communicate_group()
    with pytest.raises(AssertionError, match="no hybrid parallel topology"):
        f.get_hybrid_parallel_topology()
    with pytest.raises(AttributeError, match="'Fleet' object has no attribute 'bogus'"):
        f.bogus


def test_strategy_is_deep_copied_and_role_maker_kept():
    f, s = Fleet(), strategy(pp_degree=1)
    rm = UserDefinedRoleMaker(is_collective=True, current_id=0, worker_endpoints=["127.0.0.1:6170"])
    assert f.init(role_maker=rm, strategy=s) is f
    s.hybrid_configs = {"dp_degree": 8}
    assert f._user_defined_strategy is not s and f._user_defined_strategy.hybrid_configs["dp_degree"] == -1
    assert f._role_maker is rm and f._is_collective is True and f.worker_num() == 1


def test_minimize_checks():
    f = Fleet().init(is_collective=True)
    with pytest.raises(NotImplementedError, match='Class "Optimizer" cannot be used directly') as e:
        f.minimize(object())
    assert isinstance(e.value, Unimplemented)
    with pytest.raises(ValueError, match="loss can be list only in PS mode"):
        f.minimize([object()])


@pytest.mark.parametrize("hybrid, exc, text", [
    ({"pp_degree": 2, "order": ["dp", "pp", "bogus"]}, KeyError, "The order of hybrid_config setting is incorrect"),
    ({"pp_degree": 2, "mp_degree": -1}, AssertionError, "mp_degree should be greater or equal to 0"),
    ({"cp_degree": 2}, NotImplementedError, "cp_degree"),
])
def test_hybrid_config_checks(hybrid, exc, text):
    with pytest.raises(exc, match=text):
        Fleet().init(is_collective=True, strategy=strategy(**hybrid))
    if exc is KeyError:
        with pytest.raises(AssertionError):
            Fleet().init(is_collective=True, strategy=strategy(**hybrid))


# ---- accessors -------------------------------------------------------------------------------
def _accessors():
    fleet.barrier_worker()
    return {"index": fleet.worker_index(), "num": fleet.worker_num(), "first": fleet.is_first_worker(),
            "nodes": fleet.node_num(), "local": fleet.local_rank(), "worker": fleet.is_worker(),
            "eps": fleet.worker_endpoints(), "eps_s": fleet.worker_endpoints(to_string=True),
            "servers": fleet.server_num(), "server_index": fleet.server_index(), "server": fleet.is_server(),
            "server_eps": fleet.server_endpoints(), "server_eps_s": fleet.server_endpoints(to_string=True)}


def test_accessors_on_four_in_process_ranks():
    def body():
        fleet.init(is_collective=True)
        out = _accessors()
        cg = fleet.get_hybrid_communicate_group()
        g = cg.get_group("global")
        out["global"] = (g.rank, g.id, g.ranks)
        with pytest.raises(AssertionError):
            fleet.fleet.get_hybrid_parallel_topology()
        out["same_role_maker"] = fleet.fleet._role_maker is fleet.fleet._role_maker
        return out, id(fleet.fleet._role_maker)

    res = run_in_process(4, body)
    eps = [f"127.0.0.1:{6170 + r}" for r in range(4)]
    for r, (out, _) in enumerate(res):
        assert out == {"index": r, "num": 4, "first": r == 0, "nodes": 1, "local": str(r), "worker": True,
                       "eps": eps, "eps_s": ",".join(eps), "servers": 0, "server_index": r, "server": False,
                       "server_eps": [], "server_eps_s": "", "global": (r, 0, [0, 1, 2, 3]),
                       "same_role_maker": True}
    assert len({rm for _, rm in res}) == 4  # one fleet state per rank


def test_parameter_server_mode_without_servers():
    def body():
        fleet.init()
        assert fleet.collective_perf("allreduce", size_and_time={64: 1}) is None
        fleet.stop_worker()  # non-distributed: only a warning
        return fleet.is_worker(), fleet.worker_num(), fleet.fleet._is_collective

    assert run_in_process(2, body) == [(True, 1, False)] * 2


def test_accessors_under_mpiexec(tmp_path):
    pytest.importorskip("mpi4py")
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if exe is None:
        pytest.skip("no mpiexec")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "PMI", "OMPI", "PMIX"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([exe, "-n", "2", sys.executable, os.path.abspath(__file__), "mpi", str(tmp_path)],
                       capture_output=True, text=True, timeout=90, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r, out in enumerate(got):
        assert out["index"] == r and out["num"] == 2 and out["first"] == (r == 0) and out["worker"]
        assert len(out["eps"]) == 2 and out["eps_s"] == ",".join(out["eps"]) and out["servers"] == 0
        assert out["sum"] == [1.0, 2.0] and out["max"] == 1 and sorted(out["perf"]) == ["64"]


def _mpi_script(outdir):
    fleet.init(is_collective=True)
    out = _accessors()
    out["sum"] = fleet.all_reduce(np.array([fleet.worker_index(), 1.0])).tolist()
    out["max"] = int(fleet.all_reduce(fleet.worker_index(), "max"))
    out["perf"] = fleet.collective_perf("allreduce", round=2, size_and_time={64: 10.0})
    with open(os.path.join(outdir, f"rank{fleet.worker_index()}.json"), "w") as f:
        json.dump(out, f)


# ---- all_reduce ------------------------------------------------------------------------------
def test_all_reduce_modes():
    def body():
        fleet.init(is_collective=True)
        r = fleet.worker_index()
        x = np.array([[r, 1], [2 * r, -r]], dtype=np.float32)
        out = {m: fleet.all_reduce(x, m) for m in ("sum", "mean", "max", "min", "prod", "SUM")}
        out["scalar"] = fleet.all_reduce(r + 1)
        out["list"] = fleet.all_reduce([r, 1])
        with pytest.raises(ValueError, match="mode must be one of"):
            fleet.all_reduce(x, "median")
        return out

    for out in run_in_process(4, body):
        xs = np.array([[[r, 1], [2 * r, -r]] for r in range(4)], dtype=np.float32)
        np.testing.assert_array_equal(out["sum"], xs.sum(0))
        np.testing.assert_array_equal(out["SUM"], xs.sum(0))
        np.testing.assert_allclose(out["mean"], xs.mean(0))
        np.testing.assert_array_equal(out["max"], xs.max(0))
        np.testing.assert_array_equal(out["min"], xs.min(0))
        np.testing.assert_array_equal(out["prod"], xs.prod(0))
        assert out["scalar"].shape == () and out["scalar"] == 10 and out["list"].tolist() == [6, 4]


# ---- collective_perf -------------------------------------------------------------------------
def _perf_all(s, sizes, **init):
    def body():
        fleet.init(is_collective=True, strategy=s, **init)
        return {t: fleet.collective_perf(t, round=2, size_and_time=sizes) for t in COMM_TYPES}
    return run_in_process(4, body)


def test_collective_perf_all_types_dp2_mp2(caplog):
    sizes = {64: 10.0, 0: 1.0, -8: 1.0, 12: -1, 4096: 0}
    res = _perf_all(strategy(dp_degree=2, mp_degree=2), sizes)
    for out in res:
        for t in COMM_TYPES:  # 0 and -8 are skipped; 12 bytes (3 floats) cannot be split over 2 ranks
            want = [64, 4096] if t == "reduce_scatter" else [64, 12, 4096]
            assert sorted(out[t]) == sorted(want), (t, out[t])
            assert all(v >= 0 for v in out[t].values())
    info, warn = messages(caplog, logging.INFO), messages(caplog)
    for test, name in [("AllReduceTest", "AllReduce"), ("ReduceTest", "Reduce"), ("BroadcastTest", "Broadcast"),
                       ("AllgatherTest", "Allgather"), ("ReduceScatterTest", "ReduceScatter")]:
        assert sum(m.startswith(f"[{test}] nbytes 64B test result: ") for m in info) == 4, test
        assert sum(m.startswith(f"[Perf Warning] {name} Test Timeout! ") and m.endswith("> 0")
                   for m in warn) == 4, name  # only the 4096B size, threshold 0
    assert warn.count("Size for collective performance check should be positive, but got 0") == 20
    assert warn.count("Size for collective performance check should be positive, but got -8") == 20
    assert warn.count("the shape of input[3] can't be divided exactly by reduce_scatter parallelism[2], "
                      "test stopped!") == 4


def test_collective_perf_without_model_group(caplog):
    """dp2 x pp2: the model group has one rank; without hybrid configs the data group is every worker."""
    for s in (strategy(dp_degree=2, pp_degree=2), strategy()):
        caplog.clear()
        for out in _perf_all(s, {64: 10.0}):
            assert out == {"allreduce": {64: out["allreduce"][64]}, "reduce": {64: out["reduce"][64]},
                           "broadcast": {64: out["broadcast"][64]}, "allgather": {}, "reduce_scatter": {}}
        warn = messages(caplog)
        assert warn.count("allgather_perf is invalid, group invalid!") == 4
        assert warn.count("reduce_scatter_perf is invalid, group invalid!") == 4


def test_collective_perf_checks(caplog):
    f = Fleet().init(is_collective=True)
    assert f.collective_perf("allreduce") == {} and f.collective_perf("allreduce", size_and_time={64: 1}) == {}
    assert "allreduce_perf is invalid, group invalid!" in messages(caplog)  # one worker: nothing to time
    with pytest.raises(KeyError, match="unknown comm_type 'alltoall'"):
        f.collective_perf("alltoall", size_and_time={64: 1})
    with pytest.raises(ValueError, match="round must be a positive int"):
        f.collective_perf("allreduce", round=0, size_and_time={64: 1})
    with pytest.raises(TypeError, match="message size '64' is not an int"):
        f.collective_perf("allreduce", size_and_time={"64": 1})
    with pytest.raises(TypeError, match="time threshold None"):
        f.collective_perf("allreduce", size_and_time={64: None})
    caplog.clear()
    assert Fleet().init().collective_perf("allreduce", size_and_time={64: 1}) is None
    assert messages(caplog) == ["fleet.collective_perf is only for collective mode, will return with no test acted."]


# ---- groups ----------------------------------------------------------------------------------
def test_hybrid_dp2_pp2_groups(caplog):
    def body():
        fleet.init(is_collective=True, strategy=strategy(dp_degree=2, pp_degree=2))
        hcg, topo = fleet.get_hybrid_communicate_group(), fleet.fleet.get_hybrid_parallel_topology()
        assert tp.get_hybrid_communicate_group() is hcg and hcg.topology() is topo
        again = copy.copy(hcg)
        fleet.init(is_collective=True, strategy=strategy(dp_degree=-1, pp_degree=2))  # same topology: kept
        assert fleet.get_hybrid_communicate_group() is hcg and again.get_stage_id() == hcg.get_stage_id()
        return (hcg.get_data_parallel_group().ranks, hcg.get_pipe_parallel_group().ranks, hcg.get_stage_id(),
                hcg.get_data_parallel_rank(), hcg.get_model_parallel_world_size(), hcg.get_parallel_mode(),
                topo.get_hybrid_group_names(), [topo.get_dim(n) for n in topo.get_hybrid_group_names()],
                (fleet.fleet.dp_degree, fleet.fleet.pp_degree))

    res = run_in_process(4, body)
    for r, got in enumerate(res):
        assert got == ([r % 2, r % 2 + 2], [r // 2 * 2, r // 2 * 2 + 1], r % 2, r // 2, 1,
                       ParallelMode.PIPELINE_PARALLEL, ["data", "pipe", "sharding", "sep", "context", "model"],
                       [2, 2, 1, 1, 1, 1], (2, 2))
    assert messages(caplog).count("The dygraph hybrid parallel environment has been initialized.") == 4


def test_static_model_parallel_groups():
    def body(kind, degree):
        s = DistributedStrategy()
        if kind in ("tp", "both"):
            s.tensor_parallel = True
            s.tensor_parallel_configs = {"tensor_parallel_degree": degree}
        if kind in ("sharding", "both"):
            s.sharding = True
            s.sharding_configs = {"mp_degree": 2}
        fleet.init(is_collective=True, strategy=s)
        cg = fleet.get_hybrid_communicate_group()
        return cg.get_group("global").id, cg.get_model_parallel_rank(), cg.get_model_parallel_group().ranks

    assert run_in_process(4, body, "tp", 2) == [(0, 0, [0, 1]), (0, 1, [0, 1]), (0, 0, [2, 3]), (0, 1, [2, 3])]
    assert run_in_process(4, body, "sharding", 0)[3] == (3, 1, [2, 3])  # sharding: global ring 3
    assert run_in_process(4, body, "both", 2)[2] == (3, 0, [2, 3])
    for kind, degree, text in [("both", 4, r"must equal"), ("tp", 3, "cannot be split")]:
        with pytest.raises(Exception, match=text) as e:
            run_in_process(4, body, kind, degree)
        assert isinstance(e.value.error, AssertionError)


# ---- distributed_optimizer / minimize --------------------------------------------------------
class _StandIn:
    def __init__(self, inner_optimizer, strategy, fleet):
        self.inner, self.strategy, self.fleet = inner_optimizer, strategy, fleet

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        return ["op"], [(loss, startup_program, parameter_list, no_grad_set)]


@pytest.fixture
def stand_in(monkeypatch):
    mod = types.ModuleType("refimpl.distributed.fleet.meta_optimizers")
    mod.DistributedOptimizer = _StandIn
    monkeypatch.setitem(sys.modules, mod.__name__, mod)


def test_distributed_optimizer_and_minimize(stand_in, caplog):
    f, inner = Fleet(), object()
    f.init(is_collective=True, strategy=strategy(pp_degree=1))
    opt = f.distributed_optimizer(inner)
    assert isinstance(opt, _StandIn) and opt.inner is inner and opt.fleet is f
    assert opt.strategy is f._user_defined_strategy and f.user_defined_optimizer is inner and f._context == {}
    assert f.minimize("loss", "startup", ["w"], {"b"}) == (["op"], [("loss", "startup", ["w"], {"b"})])
    assert messages(caplog) == []
    s = strategy(dp_degree=4)
    opt2 = f.distributed_optimizer(inner, strategy=s)
    assert opt2.strategy is not s and opt2.strategy.hybrid_configs["dp_degree"] == 4
    assert "It is recommended to use DistributedStrategy in fleet.init()." in messages(caplog)[0]
    with pytest.raises(AttributeError, match="`strategy` should be an instance"):
        f.distributed_optimizer(inner, strategy="s")
    assert f._final_strategy() == {} and "call minimize function before _final_strategy" in messages(caplog)[-1]
    opt2._get_applied_meta_list = lambda: ["PipelineOptimizer"]  # the optimizer's own report
    assert f._get_applied_meta_list() == ["PipelineOptimizer"]
    f._context = {"applied_meta_list": ["GradientMergeOptimizer"]}  # Paddle's place comes first
    assert f._get_applied_meta_list() == ["GradientMergeOptimizer"]


def test_distributed_optimizer_real_class():
    from refimpl.distributed.fleet.meta_optimizers import DistributedOptimizer
    from refimpl.optimizer import SGD
    f, sgd = Fleet().init(is_collective=True), SGD(0.1)
    opt = f.distributed_optimizer(sgd)
    assert isinstance(opt, DistributedOptimizer) and opt.inner_opt is sgd and opt.fleet is f
    assert f._get_applied_meta_list() == []


def test_distributed_optimizer_per_rank(stand_in):
    def body():
        fleet.init(is_collective=True)
        opt = fleet.distributed_optimizer(fleet.worker_index())
        return opt.inner, fleet.minimize("loss")[1][0][0], fleet.fleet._distributed_optimizer is opt

    assert run_in_process(3, body) == [(r, "loss", True) for r in range(3)]


if __name__ == "__main__" and sys.argv[1:2] == ["mpi"]:
    _mpi_script(sys.argv[2])
