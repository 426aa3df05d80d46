"""Which communicator a ring gets under ``mpiexec -n 2`` with the cuda backend (see mpi_nccl_select.py).

Under the simulator NCCL cannot run, so the host-staging MPI communicator
is chosen and collective ops on device tensors work through it; with
``cuda_backend.nccl``'s availability check patched to say yes (and a
stand-in NCCL communicator), a new ring gets the NCCL ring communicator and
device buffers go to it; if one rank cannot, no rank takes NCCL.
"""
import os

import pytest

from test_nccl import _run

HERE = os.path.dirname(os.path.abspath(__file__))


def test_nccl_is_selected_only_when_every_rank_can_run_it():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("patches the simulator's NCCL availability; on a GPU test_nccl.py covers the real path")
    out = _run(os.path.join(HERE, "mpi_nccl_select.py"), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "nccl-select OK" in out.stdout, out.stdout + out.stderr
