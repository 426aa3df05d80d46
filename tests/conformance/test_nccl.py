"""cuda_backend.nccl under ``mpiexec -n 2``: NCCL on a GPU, the host-staged MPI fallback otherwise.

Each collective (all_reduce sum/max, broadcast, all_gather, reduce_scatter,
send/recv) on device arrays is checked against the NumPy answer by
``python -m cuda_backend.nccl`` on every rank; and data parallel with the
CUDA kernels on two MPI trainers equals one device.
"""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = here if os.path.exists(here) else shutil.which("mpiexec")
    if found is None:
        pytest.fail("mpiexec not found: install the test extra (mpich)")
    return found


def _run(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([_mpiexec(), "-n", "2", sys.executable, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_collectives_on_device_buffers_under_mpiexec():
    out = _run("-m", "cuda_backend.nccl")
    assert out.returncode == 0, out.stdout + out.stderr
    kind = "mpi-staged" if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else ""
    assert f"nccl self-test OK ({kind}" in out.stdout, out.stdout + out.stderr


def test_data_parallel_on_two_mpi_trainers_with_cuda_kernels():
    out = _run(os.path.join("examples", "dp_mlp.py"), "--backend", "cuda", "--places", "1", "--steps", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "-> OK" in out.stdout, out.stdout + out.stderr
