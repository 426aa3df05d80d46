"""Every oracle program gives the same answers and the same GC behaviour on both backends.

For each recorded case (``../shared/oracle/programs`` and ``tests/oracle_extra``),
run from the recorded initial persistables on the recorded feeds with the
NumPy kernels and with the CUDA kernels: the alloc/free events of the first
step are identical (same var freed after the same op, same bytes), so are
the live and peak bytes, and the losses and final persistables agree within
rtol 1e-6 (atol 1e-7 for values that are zero up to rounding; matmul sums in
a different order than NumPy's BLAS).
"""
import glob
import os

import pytest

from harness import assert_same_run, run_recorded
from oracle import EXTRA, case_files, load

ALL = case_files() + sorted(glob.glob(os.path.join(EXTRA, "*.json")))


@pytest.mark.parametrize("path", ALL, ids=[os.path.basename(p) for p in ALL])
def test_same_numbers_and_gc_on_both_backends(path):
    d = load(path)
    assert_same_run(run_recorded(d, "cuda"), run_recorded(d, "numpy"))
