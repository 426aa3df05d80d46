"""``python -m refimpl.distributed.launch``: MPI and in-process ranks, PADDLE_* environment, failures."""
import os
import subprocess
import sys

import pytest

from refimpl.distributed.launch import paddle_env

SCRIPT = """
import os, sys
import refimpl.distributed as dist
from refimpl.distributed.communication import has_thread_context
dist.init_parallel_env()
env = "thread" if has_thread_context() else os.environ["PADDLE_TRAINER_ID"] + "/" + os.environ["PADDLE_TRAINERS_NUM"]
print(f"rank {dist.get_rank()} of {dist.get_world_size()} env {env} args {sys.argv[1:]}", flush=True)
if "--fail" in sys.argv and dist.get_rank() == 1:
    raise RuntimeError("rank 1 is broken")
import numpy as np
x = np.ones(2)
dist.all_reduce(x)
"""


@pytest.fixture()
def script(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(SCRIPT)
    return str(p)


def launch(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "refimpl.distributed.launch", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_mpi_ranks_get_paddle_environment(script):
    out = launch("--nproc_per_node", "3", script, "--lr", "0.1")
    assert out.returncode == 0, out.stderr
    for r in range(3):
        assert f"rank {r} of 3 env {r}/3 args ['--lr', '0.1']" in out.stdout


def test_in_process_ranks(script):
    out = launch("--nproc_per_node", "4", "--in-process", script)
    assert out.returncode == 0, out.stderr
    assert all(f"rank {r} of 4 env thread" in out.stdout for r in range(4))


@pytest.mark.parametrize("mode", [[], ["--in-process", "--timeout", "10"]])
def test_a_failing_rank_gives_a_non_zero_exit(script, mode):
    out = launch("--nproc_per_node", "2", *mode, script, "--fail")
    assert out.returncode != 0
    assert "rank 1" in out.stderr


def test_paddle_env_matches_paddles_launcher_shape():
    env = paddle_env(2, 4, 0, 2)
    assert env["PADDLE_TRAINER_ID"] == "2" and env["PADDLE_TRAINERS_NUM"] == "4"
    assert env["PADDLE_TRAINER_ENDPOINTS"].count(",") == 3
    assert env["PADDLE_CURRENT_ENDPOINT"] == env["PADDLE_TRAINER_ENDPOINTS"].split(",")[2]


def test_bad_arguments():
    out = launch("--nproc_per_node", "0", "x.py")
    assert out.returncode != 0 and "nproc_per_node" in out.stderr


@pytest.mark.parametrize("mode", [[], ["--in-process"]])
def test_fleet_hybrid_dp2_pp2_equals_one_device(mode):
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                           "fleet_hybrid.py")
    out = launch("--nproc_per_node", "4", *mode, example, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("match single-device training") == 4, out.stdout
