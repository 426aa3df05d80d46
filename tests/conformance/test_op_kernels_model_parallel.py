"""Cuda kernels of the tensor-parallel ops (``model_parallel_ops.py``) against their NumPy kernels."""
import pytest

from kernel_check import Inputs, check_case, params

V = Inputs(43)
f32, f64 = V.f32, V.f64

CASES: list = []


@pytest.mark.parametrize("op_type,inputs,attrs", params(CASES))
def test_model_parallel_kernel_matches_numpy(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
