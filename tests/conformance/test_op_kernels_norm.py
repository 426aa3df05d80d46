"""Cuda kernels of ``refimpl/ops/norm_ops.py`` against their NumPy kernels (see kernel_check.py)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(1)
f32, f64, i64 = V.f32, V.f64, V.i64

CASES = []


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
