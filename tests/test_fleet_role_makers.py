"""Role makers against Paddle 3.3.1 (``fleet.json`` ``role_makers``), plus the MPI-aware role maker."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from oracle import check_exception, load_fleet

from refimpl.core.errors import EnforceNotMet, PreconditionNotMet
from refimpl.distributed import run_in_process
from refimpl.distributed.fleet import MPIRoleMaker, PaddleCloudRoleMaker, Role, UserDefinedRoleMaker
from refimpl.distributed.fleet.base import role_maker as rm_mod

DATA = load_fleet("role_makers")
CASES = DATA["cases"]
KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH")
CLASSES = {"PaddleCloudRoleMaker": PaddleCloudRoleMaker, "UserDefinedRoleMaker": UserDefinedRoleMaker}



def paddle_only_bug(rec):
    """Paddle failed only because it read an attribute it never set: refimpl answers instead."""
    return rec["outcome"] == "exception" and rec["exception"]["type"] == "AttributeError" and \
        "object has no attribute" in rec["exception"]["message"]


@pytest.fixture
def case_env(monkeypatch, tmp_path):
    """Give the process exactly the case's environment (as Paddle's child process had)."""
    def apply(case):
        for key in list(os.environ):
            if key not in KEPT_ENV:
                monkeypatch.delenv(key)
        env = dict(case["env"])
        env.update(case.get("env_extra", {}))
        if "backup_env_file_contents" in case:
            path = tmp_path / "backup_env.json"
            path.write_text(json.dumps(case["backup_env_file_contents"]))
            env["PADDLE_BACKUP_ENV_PATH"] = str(path)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(rm_mod, "_in_dynamic_mode", lambda: not case["static_mode"])
    return apply


def _construct(case):
    kwargs = dict(case["kwargs"])
    if isinstance(kwargs.get("role"), str):
        kwargs["role"] = getattr(Role, kwargs["role"])
    return CLASSES[case["cls"]](**kwargs)


def _call(fn):
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - compared with the recorded outcome
        return "exception", exc


def _same(got, rec):
    if rec["outcome"] == "ok":
        assert got[0] == "ok", f"raised {got[1]!r}"
        value = list(got[1]) if isinstance(got[1], tuple) else got[1]
        assert value == rec["value"] and type(got[1]).__name__ == rec["py_type"], (got[1], rec)
    elif paddle_only_bug(rec):
        assert got[0] == "ok" or isinstance(got[1], EnforceNotMet), f"{got[1]!r} should be a value or typed error"
        assert not (got[0] == "exception" and type(got[1]) is AttributeError)
    else:
        assert got[0] == "exception", f"returned {got[1]!r}, Paddle raised {rec['exception']}"
        check_exception(got[1], rec["exception"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_role_maker_case(case, case_env):
    case_env(case)
    res = case["result"]
    built = _call(lambda: _construct(case))
    _same(built, {"outcome": "ok", "value": built[1], "py_type": type(built[1]).__name__}
          if res["construct"]["outcome"] == "ok" else res["construct"])
    if built[0] != "ok":
        return  # Paddle could not build it either; nothing more was recorded
    rm = built[1]
    if case["explicit_generate_role"]:
        _same(_call(rm._generate_role), dict(res["generate_role"], value=None, py_type="NoneType"))
    for name in DATA["accessors_called_in_order"]:
        _same(_call(getattr(rm, name)), res["accessors"][name])
    unset = DATA["unset_marker"]
    for name, want in res["state_after"].items():
        if want != unset:
            assert getattr(rm, name) == want, name


def test_role_constants():
    assert {k: getattr(Role, k) for k in DATA["role_constants"]} == DATA["role_constants"]


def test_backup_env_file(case_env, tmp_path, monkeypatch):
    case_env({"env": {"PADDLE_TRAINER_ID": "1"}, "static_mode": False})
    path = tmp_path / "env.json"
    path.write_text(json.dumps({"PADDLE_TRAINER_ENDPOINTS": "10.0.0.1:1,10.0.0.2:1"}))
    monkeypatch.setenv("PADDLE_BACKUP_ENV_PATH", str(path))  # undone after the test, unlike os.environ[...]
    rm = PaddleCloudRoleMaker(is_collective=True)
    assert rm._get_trainer_endpoints() == ["10.0.0.1:1", "10.0.0.2:1"] and rm._node_num() == 2


@pytest.mark.parametrize("env, error", [
    ({"PADDLE_WITH_GLOO": "1", "PADDLE_GLOO_RENDEZVOUS": "7"}, "gloo initialized error"),
    ({"PADDLE_WITH_GLOO": "2", "PADDLE_GLOO_RENDEZVOUS": "2"}, "PATH"),
])
def test_gloo_settings_checked_in_static_mode(case_env, env, error):
    case_env({"env": env, "static_mode": True})
    with pytest.raises(ValueError, match=error):
        PaddleCloudRoleMaker(is_collective=True)._generate_role()
    case_env({"env": dict(env, PADDLE_GLOO_FS_PATH="/tmp/x", PADDLE_GLOO_RENDEZVOUS="2"), "static_mode": True})
    PaddleCloudRoleMaker(is_collective=True)._generate_role()


def test_heter_trainer_environment(case_env):
    case_env({"static_mode": False, "env": {
        "TRAINING_ROLE": "HETER_TRAINER", "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:36001",
        "PADDLE_TRAINERS_NUM": "2", "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST": "127.0.0.1:37001,127.0.0.1:37002",
        "PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST": "127.0.0.1:36011", "STAGE_ID": "2", "STAGE_NUM": "2",
        "PADDLE_STAGE_TRAINERS_NUM": "[2, 2]", "HETER_DEVICE_TYPE": "gpu", "FLAGS_selected_gpus": "3",
        "PADDLE_PORT": "37002", "POD_IP": "127.0.0.1"}})
    rm = PaddleCloudRoleMaker()
    assert rm._is_heter_worker() and rm._worker_index() == 3 and rm._heter_worker_num() == 2
    assert rm._get_stage_trainers() == (2, 2) and rm._heter_device() == "gpu:3"
    assert rm._get_heter_worker_endpoint() == "127.0.0.1:37002" and rm._get_previous_trainers() == ["127.0.0.1:36011"]


def _worker_facts():
    rm = MPIRoleMaker()
    total = rm._all_reduce([rm._worker_index(), 1], "sum")
    gathered = rm._all_gather(rm._worker_index() * 10)
    rm._barrier("worker")
    return (rm._rank_source(), rm._worker_index(), rm._worker_num(), rm._is_first_worker(),
            rm._get_trainer_endpoint(), rm._node_num(), total.tolist(), gathered)


def test_mpi_role_maker_in_process(case_env):
    case_env({"env": {"PADDLE_TRAINER_ID": "7"}, "static_mode": False})  # thread ranks win over the env
    got = run_in_process(3, _worker_facts)
    for r, facts in enumerate(got):
        assert facts == ("inprocess", r, 3, r == 0, f"127.0.0.1:{6170 + r}", 1, [3, 3], [0, 10, 20])


def test_mpi_role_maker_env_and_alone(case_env):
    case_env({"env": {"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINER_ENDPOINTS": "a:1,b:1"}, "static_mode": False})
    rm = MPIRoleMaker()
    assert (rm._rank_source(), rm._worker_index(), rm._worker_num(), rm._node_num()) == ("env", 1, 2, 2)
    with pytest.raises(PreconditionNotMet, match="2 worker"):
        rm._barrier("worker")  # this process has no communicators for 2 workers
    case_env({"env": {}, "static_mode": False})
    rm = MPIRoleMaker()
    assert (rm._rank_source(), rm._worker_num(), rm._is_non_distributed()) == ("none", 1, True)
    assert rm._all_reduce(np.array([2.0]), "max").tolist() == [2.0]


_MPI_SCRIPT = """
import sys
from refimpl.distributed.fleet import MPIRoleMaker
rm = MPIRoleMaker()
s = rm._all_reduce([1], "sum")
facts = [rm._rank_source(), rm._worker_index(), rm._worker_num(), rm._get_local_rank(), int(s[0])]
with open(sys.argv[1] + str(rm._worker_index()), "w") as f:
    f.write(" ".join(map(str, facts)))
"""


def test_mpi_role_maker_under_mpiexec(tmp_path):
    pytest.importorskip("mpi4py")
    script = tmp_path / "rm.py"
    script.write_text("import refimpl.distributed as d\nd.init_parallel_env()\n" + _MPI_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "PMI", "OMPI", "PMIX"))}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(["mpiexec", "-n", "2", sys.executable, str(script), str(tmp_path / "rank")], env=env,
                             capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        pytest.skip("no mpiexec")
    assert out.returncode == 0, out.stderr[-2000:]
    got = [(tmp_path / f"rank{r}").read_text().split() for r in range(2)]
    assert got == [["mpi", "0", "2", "0", "2"], ["mpi", "1", "2", "1", "2"]]
