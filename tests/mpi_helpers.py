"""Running a test file as ranks under ``mpiexec`` (the ``mpich`` wheel's, else the one on PATH)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(script, args, n=4, timeout=300):
    """Run ``script args...`` as ``n`` processes under ``mpiexec``, with a clean PADDLE_ / MPI environment and
    the repository and ``tests/`` on PYTHONPATH; fails the test on a non-zero exit (printing the output)."""
    pytest.importorskip("mpi4py")
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if exe is None:
        pytest.fail("mpi4py is installed but mpiexec is not on PATH (pip install mpich)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "PMI", "OMPI", "PMIX"))}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "tests"), env.get("PYTHONPATH", "")])
    p = subprocess.run([exe, "-n", str(n), sys.executable, os.path.abspath(script), *map(str, args)],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def run_under_mpiexec(script, what, tmp_path, timeout=300):
    """Run ``script`` as 4 processes under ``mpiexec`` (its ``__main__`` is one rank of case ``what``, saving
    ``rank<r>.npz`` into ``tmp_path``); returns each rank's arrays."""
    run_script(script, [what, tmp_path], timeout=timeout)
    return [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(4)]
