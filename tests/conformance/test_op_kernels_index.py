"""Cuda kernels of ``refimpl/ops/index_ops.py`` against their NumPy kernels (see kernel_check.py)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(1)
f32, f64, i64 = V.f32, V.f64, V.i64


def ints(*values):
    return np.array(values, np.int64)


X3 = f32(2, 5, 3)
C3 = V.boolean(2, 5, 3)
CMP_X, CMP_Y = f32(2, 3), f32(3)
CMP_Y2 = np.where(V.boolean(2, 3), CMP_X, f32(2, 3))  # equal elements occur
NO_T = [None, None, [], []]  # slice's Starts/Ends tensors left empty

CASES = [
    *[(op, [CMP_X, CMP_Y2], {}) for op in ("greater_than", "greater_equal", "less_equal", "not_equal")],
    *[(op, [CMP_X, CMP_Y], {}) for op in ("greater_than", "greater_equal", "less_equal", "not_equal")],
    ("greater_than", [i64(2, 3), i64(2)], {"axis": 0}),
    ("greater_than", [CMP_X, np.array(0.0, np.float32)], {}),
    ("range", [ints(0), ints(11), ints(2)], {}),
    ("range", [ints(5), ints(-4), ints(-3)], {}),
    ("range", [np.array([0.5], np.float32), np.array([2.0], np.float32), np.array([0.1], np.float32)], {}),
    ("tril_triu", [f32(2, 4, 5)], {"lower": True}),
    ("tril_triu", [f32(4, 5)], {"lower": False, "diagonal": 1}),
    ("tril_triu", [i64(3, 3)], {"lower": True, "diagonal": -1}),
    ("tril_triu_grad", [f32(3, 4)], {"lower": True}),
    ("where", [C3, X3, f32(2, 5, 3)], {}),
    ("where", [V.boolean(4), i64(4), i64(4)], {}),
    ("where_grad", [C3, X3, X3, f32(2, 5, 3)], {}),
    ("where_grad", [C3, X3, X3, f32(2, 5, 3)], {"need": (True, False)}),
    ("slice", [X3, *NO_T], {"axes": [1, 2], "starts": [1, -2], "ends": [4, 100]}),
    ("slice", [X3, *NO_T], {"axes": [1], "starts": [2], "ends": [3], "decrease_axis": [1]}),
    ("slice", [X3, ints(0, 1), None, [], [ints(2), ints(3)]], {"axes": [0, 1], "starts": [9, 9], "ends": [9, 9]}),
    ("slice_grad", [X3, *NO_T, f32(2, 3, 2)], {"axes": [1, 2], "starts": [1, -2], "ends": [4, 100]}),
    ("slice_grad", [X3, *NO_T, f32(2, 3)], {"axes": [1], "starts": [2], "ends": [3], "decrease_axis": [1]}),
    ("gather", [X3, ints(4, 0, 4, 2), None], {"axis": 1}),
    ("gather", [X3, ints(1), ints(0)], {"axis": 2}),
    ("gather", [X3, np.array([2, 0], np.int32), None], {"axis": -1}),
    ("gather_grad", [X3, ints(4, 0, 4, 2), f32(2, 4, 3), None], {"axis": 1}),
    ("gather_grad", [X3, ints(1, 1, 0), f32(3, 5, 3), None], {}),
    ("squeeze2", [f32(1, 3, 1, 2)], {"axes": [0, -2]}),
    ("squeeze2", [f32(1, 3, 1)], {}),
    ("squeeze2_grad", [np.empty((0, 1, 3, 1), np.float32), f32(3)], {}),
    ("unsqueeze2", [f32(3, 2), None, []], {"axes": [0, -1]}),
    ("unsqueeze2", [f32(3, 2), ints(1), []], {}),
    ("unsqueeze2_grad", [np.empty((0, 3, 2), np.float32), f32(1, 3, 2), None, []], {}),
    ("stack", [[f32(2, 3), f32(2, 3), f32(2, 3)]], {"axis": 1}),
    ("stack", [[i64(4), i64(4)]], {"axis": -1}),
    ("stack_grad", [[f32(2, 3), f32(2, 3)], f32(2, 3, 2)], {"axis": -1}),
    ("expand_v2", [f32(1, 3), None, []], {"shape": [2, 4, -1]}),
    ("expand_v2", [f32(2, 1), ints(2, 3), []], {}),
    ("expand_v2_grad", [f32(1, 3), f32(4, 3), None, []], {"shape": [4, 3]}),
    ("expand_v2_grad", [f32(2, 1), f32(2, 3), None, []], {"shape": [2, 3]}),
    ("expand_v2_grad", [f32(3), f32(2, 4, 3), None, []], {"shape": [2, 4, 3]}),
    ("gather_nd", [X3, ints(1, 2, 0, -1, 1, 2).reshape(3, 2)], {}),
    ("gather_nd", [X3, ints(1, 0).reshape(2, 1)], {}),
    ("gather_nd", [X3, ints(0, 4, 2, 1, 0, 0).reshape(2, 1, 3)], {}),
    ("gather_nd_grad", [X3, ints(1, 2, 0, -1, 1, 2).reshape(3, 2), f32(3, 3)], {}),
    ("gather_nd_grad", [X3, ints(1, 0, 1).reshape(3, 1), f32(3, 5, 3)], {}),
    ("tile", [f32(2, 3), None, []], {"repeat_times": [2, 1, 2]}),
    ("tile", [i64(3), ints(2, 2), []], {}),
    ("tile_grad", [f32(2, 3), f32(2, 2, 6), None, []], {"repeat_times": [2, 1, 2]}),
    ("tile_grad", [f32(1), f32(3, 50), None, []], {"repeat_times": [3, 50]}),
    ("tile_grad", [f32(2, 1), f32(4, 3), None, [ints(2), ints(3)]], {}),
]


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
