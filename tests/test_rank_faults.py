"""A hung, dead or finished rank is found within one timeout and blamed, not its victims.

In-process ranks (threads) with a 1 s timeout: the run stops about one
timeout after the last rank arrived, with ``RankHung`` naming the rank that
did not come and the ranks that waited for it; the hung thread is left
running as a daemon thread. Then the launcher: its default timeout, its exit
status for a hang, and (under MPI) the rank whose process was killed.
MPI ranks that exit or hang are tested in ``tests/test_mpi.py``.
"""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from refimpl.core.errors import ExecutionTimeout
from refimpl.distributed.communication import RankHung, context, run_in_process
from refimpl.distributed.communication.communicator import EXIT_DIED, EXIT_HUNG
from refimpl.distributed.launch.main import _parser

T = 2.0  # seconds: the timeout of every run here (the old code took 2 T: the bounds below leave room for a loaded machine)


@pytest.fixture()
def release():
    """An event the hung rank waits on; set when the test ends, so no thread outlives it for long."""
    ev = threading.Event()
    yield ev
    ev.set()


def stopped(fn, n):
    t0 = time.monotonic()
    with pytest.raises(RankHung) as info:
        run_in_process(n, fn, timeout=T)
    return info.value, time.monotonic() - t0


def test_a_hung_rank_is_named_within_one_timeout(release):
    def fn():
        r, c = context.current().rank, context.current().comm(0)
        c.all_reduce(np.ones(2))
        if r == 1:
            release.wait(30)  # hangs (until the test ends)
        c.all_reduce(np.ones(2))
    err, took = stopped(fn, 4)
    assert took < 1.75 * T, took
    assert err.rank == 1 and err.hung == [1] and err.waited == [0, 2, 3]
    assert str(err).startswith("(Unavailable) rank 1 hung: did not reach all_reduce on ring 0 (call #2) within 2 s; "
                               "rank(s) [0, 2, 3] waited"), str(err)
    assert "rank 1 failed" not in str(err) and "rank 0 failed" not in str(err)
    assert isinstance(err.error, ExecutionTimeout) and "rank(s) [1] never arrived" in str(err.error)
    assert sorted(err.errors) == [0, 2, 3]  # every victim stopped: one timed out, the others say why
    for r in (0, 2, 3):
        e = err.errors[r]
        assert isinstance(e, ExecutionTimeout) or f"rank {r}: stopped because rank 1 hung" in str(e), str(e)
    hung = [t for t in threading.enumerate() if t.name == "refimpl-rank-1"]
    assert hung and all(t.daemon and t.is_alive() for t in hung)  # left behind, as documented


def test_the_blame_follows_who_waits_for_whom(release):
    def fn():
        r, c = context.current().rank, context.current().comm(0)
        if r == 0:
            c.recv(1)              # waits for rank 1 ...
        elif r in (1, 2):
            c.all_reduce(np.ones(1))  # ... which waits for ranks 0 and 3 here
        else:
            release.wait(30)       # rank 3 hangs
    err, took = stopped(fn, 4)
    assert took < 1.75 * T, took
    assert err.rank == 3 and err.hung == [3] and err.waited == [0, 1, 2]
    assert "rank 3 hung: did not reach all_reduce on ring 0 (call #1)" in str(err), str(err)


def test_a_cycle_is_reported_as_a_deadlock():
    def fn():
        r, c = context.current().rank, context.current().comm(0)
        c.recv(1 - r)
    err, took = stopped(fn, 2)
    assert took < 1.75 * T, took
    assert err.hung == [] and err.waited == [0, 1]
    assert "deadlock: ranks [0, 1] all wait for each other" in str(err), str(err)
    assert "rank 0: recv from peer 1 on ring 0" in str(err) and "rank 1: recv from peer 0 on ring 0" in str(err)


def test_a_rank_that_returned_early_is_named():
    def fn():
        if context.current().rank != 2:
            context.current().comm(0).barrier()
    err, took = stopped(fn, 3)
    assert took < 1.75 * T, took
    assert err.rank == 2
    assert "rank 2 finished without reaching barrier on ring 0 (call #1); rank(s) [0, 1] waited (rank " in str(err)
    assert ": barrier on ring 0 (call #1): timed out after 2 s)" in str(err), str(err)


# ---- the launcher ----------------------------------------------------------------------------
HANG = """
import time
import numpy as np
import refimpl.distributed as dist
dist.init_parallel_env()
dist.all_reduce(np.ones(1))
if dist.get_rank() == 1:
    time.sleep(30)
dist.all_reduce(np.ones(1))
"""

KILL = """
import os, signal, time
import numpy as np
import refimpl.distributed as dist
dist.init_parallel_env()
dist.all_reduce(np.ones(1))
if dist.get_rank() == 1:
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)
dist.all_reduce(np.ones(1))
"""


def launch(tmp_path, script, *args):
    path = tmp_path / "train.py"
    path.write_text(script)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "refimpl.distributed.launch", *args, str(path)],
                         capture_output=True, text=True, timeout=120)
    return out, time.monotonic() - t0


def test_the_launchers_default_timeout_finds_a_hang_within_30_s():
    assert _parser().parse_args(["train.py"]).timeout <= 30


def test_launcher_in_process_hang_names_the_rank_and_exits_124(tmp_path):
    out, took = launch(tmp_path, HANG, "--nproc_per_node", "3", "--in-process", "--timeout", "1")
    assert out.returncode == EXIT_HUNG, out.stderr
    assert "rank 1 hung: did not reach all_reduce on ring 0 (call #2) within 1 s; rank(s) [0, 2] waited" in out.stderr
    assert took < 20  # not the 30 s the hung rank sleeps


def test_launcher_names_a_rank_killed_by_a_signal(tmp_path):
    pytest.importorskip("mpi4py")
    if not hasattr(os, "pidfd_open"):
        pytest.skip("the launcher watches ranks with pidfds (Linux)")
    out, _ = launch(tmp_path, KILL, "--nproc_per_node", "3", "--timeout", "5")
    assert out.returncode == EXIT_DIED, out.stdout + out.stderr  # not Hydra's racy 9 or 255
    assert "refimpl.distributed.launch: rank 1 (pid " in out.stderr and ") died: it ended first" in out.stderr, \
        out.stderr
    assert "rank 0 died" not in out.stderr and "rank 2 died" not in out.stderr
