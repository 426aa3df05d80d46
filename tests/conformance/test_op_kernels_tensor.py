"""Cuda kernels of the tensor ops (eye, strided_slice, shape, assign_value, fill_constant_batch_size_like,
the logical ops, is_empty, bmm, broadcasting matmul_v2, accuracy) against their NumPy kernels
(see kernel_check.py)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params

V = Inputs(17)
f32, f64, i64 = V.f32, V.f64, V.i64


def ints(*values):
    return np.array(values, np.int64)


X3 = f32(3, 5, 4)
NO_T = [None, [], None, [], None, []]  # strided_slice's Starts/Ends/Strides tensors left empty
SS = {"axes": [1, 2], "starts": [4, 0], "ends": [-6, 4], "strides": [-2, 3]}  # reversed and strided
TOPK = np.array([[3, 1], [1, 2], [4, 3], [0, 1], [2, 2]], np.int64)

CASES = [
    ("size", [X3], {}),
    ("share_data", [X3], {}),
    ("memcpy", [X3], {"dst_place_type": 0}),
    ("memcpy", [i64(2, 3)], {"dst_place_type": 1}),
    ("eye", [], {"num_rows": 3, "num_columns": 5, "dtype": 5}),
    ("eye", [], {"num_rows": 4, "num_columns": -1, "dtype": 3}),
    ("eye", [], {"num_rows": 0, "num_columns": 2, "dtype": 5}),
    ("strided_slice", [X3, *NO_T], SS),
    ("strided_slice", [X3, *NO_T], {"axes": [0], "starts": [1], "ends": [2], "strides": [1],
                                    "decrease_axis": [0]}),
    ("strided_slice", [X3, *NO_T], {"axes": [2, 2], "starts": [0, -1], "ends": [4, -100], "strides": [1, -1]}),
    ("strided_slice", [X3, *NO_T], {"axes": [1], "starts": [3], "ends": [1], "strides": [1]}),  # empty
    # empty going backwards (Python's slice.indices gives start -1), and Paddle 3.3.1's +-2**31 bounds
    ("strided_slice", [X3, *NO_T], {"axes": [1], "starts": [-7], "ends": [-7], "strides": [-1]}),
    ("strided_slice", [X3, *NO_T], {"axes": [1, 2], "starts": [2147483647, -1], "ends": [-2147483648, -1],
                                    "strides": [-2, -1]}),
    ("strided_slice", [i64(6), ints(5), [], None, [ints(0)], ints(-2), []], {"axes": [0], "starts": [0],
                                                                             "ends": [9], "strides": [1]}),
    ("strided_slice_grad", [X3, f32(3, 3, 2), *NO_T], SS),
    ("strided_slice_grad", [X3, f32(5, 4), *NO_T], {"axes": [0], "starts": [1], "ends": [2], "strides": [1],
                                                   "decrease_axis": [0]}),
    ("strided_slice_grad", [X3, f32(3, 5, 4), *NO_T], {"axes": [2], "starts": [-1], "ends": [-100],
                                                      "strides": [-1]}),
    ("strided_slice_grad", [X3, f32(3, 0, 4), *NO_T], {"axes": [1], "starts": [-6], "ends": [-1],
                                                      "strides": [-3]}),
    ("shape", [X3], {}),
    ("shape", [np.zeros((0, 2), np.float64)], {}),
    ("shape", [np.array(1.0, np.float32)], {}),
    ("assign_value", [None], {"shape": [2, 2], "dtype": 5, "values": [1.5, -2.0, 0.1, 3.0]}),
    ("assign_value", [None], {"shape": [3], "dtype": 3, "values": [1, -2, 2 ** 40]}),
    ("assign_value", [None], {"shape": [2], "dtype": 0, "values": [True, False]}),
    ("assign_value", [None], {"shape": [], "dtype": 2, "values": [3]}),
    ("assign_value", [f32(2, 3)], {}),
    ("fill_constant_batch_size_like", [f32(5, 3)], {"shape": [-1, 2], "value": 1.5}),
    ("fill_constant_batch_size_like", [f32(2, 7)], {"shape": [4, 1, 3], "input_dim_idx": 1,
                                                   "output_dim_idx": 2, "dtype": 3, "value": -2.5}),
    ("fill_constant_batch_size_like", [f32(4, 2)], {"shape": [-1], "dtype": 6, "str_value": "0.1"}),
    ("logical_and", [V.boolean(2, 3), V.boolean(2, 3)], {}),
    ("logical_and", [np.array([0.0, -0.0, 1.5, np.nan], np.float32), np.array([1.0, 1.0, 0.0, 2.0], np.float32)],
     {}),
    ("logical_or", [V.boolean(2, 3), V.boolean(3)], {}),
    ("logical_or", [i64(4, lo=-1, hi=2), i64(4, lo=-1, hi=2)], {}),
    ("logical_xor", [V.boolean(2, 1, 3), V.boolean(4, 1)], {}),
    ("logical_xor", [V.boolean(0, 3), V.boolean(3)], {}),
    ("is_empty", [f32(2, 3)], {}),
    ("is_empty", [np.zeros((2, 0), np.float32)], {}),
    ("bmm", [f32(2, 3, 4), f32(2, 4, 5)], {}),
    ("bmm", [f64(3, 1, 6), f64(3, 6, 2)], {}),
    ("bmm", [f32(2, 3, 0), f32(2, 0, 2)], {}),
    ("bmm_grad", [f32(2, 3, 4), f32(2, 4, 5), f32(2, 3, 5)], {}),
    ("bmm_grad", [f64(3, 2, 6), f64(3, 6, 2), f64(3, 2, 2)], {"need": (False, True)}),
    # matmul_v2 broadcasting over batch dims, and its grads summed over the broadcast dims
    ("matmul_v2", [f32(2, 1, 3, 4), f32(1, 3, 4, 2)], {}),
    ("matmul_v2", [f32(4, 3), f32(2, 2, 5, 4)], {"trans_x": True, "trans_y": True}),
    ("matmul_v2", [f32(3), f32(3, 4)], {"trans_x": True}),  # a vector has no transpose
    ("matmul_v2", [f32(4, 3), f32(3)], {"trans_y": True}),
    ("matmul_v2_grad", [f32(2, 1, 3, 4), f32(1, 3, 4, 2), f32(2, 3, 3, 2)], {}),
    ("matmul_v2_grad", [f32(3, 4), f32(2, 2, 4, 5), f32(2, 2, 3, 5)], {}),
    ("matmul_v2_grad", [f64(2, 3, 4, 3), f64(3, 5), f64(2, 3, 4, 5)], {"need": (True, False)}),
    ("accuracy", [f32(5, 2), TOPK, ints(1, 0, 3, 4, 2).reshape(5, 1)], {}),
    ("accuracy", [f32(5, 2), TOPK, np.array([[9], [9], [9], [9], [9]], np.int32)], {}),
    ("accuracy", [f32(0, 2), np.zeros((0, 2), np.int64), np.zeros((0, 1), np.int64)], {}),
]


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)


# bad input only the kernels can see (shapes and values unknown when the program is built)
ERRORS = [
    ("matmul_v2", [f32(2, 3), f32(4, 5)], {}, "matmul_v2: X's last dim 3 differs"),
    ("matmul_v2", [f32(2, 3, 4), f32(3, 4, 5)], {}, "matmul_v2: the batch dims of X and Y"),
    ("strided_slice", [X3, np.array([1.0]), [], None, [], None, []], {"axes": [0], "starts": [0], "ends": [2],
                                                                      "strides": [1]},
     "strided_slice: input StartsTensor must be an int32 or int64 tensor, got float64"),
    ("assign_value", [None], {"shape": [1], "dtype": 2, "values": [2 ** 40]},
     "assign_value: value 1099511627776 does not fit dtype int32"),
    ("fill_constant_batch_size_like", [f32(2, 3)], {"shape": [-1, -1]},
     "fill_constant_batch_size_like: shape .* leaves a negative dim"),
    ("memcpy", [X3], {"dst_place_type": 9}, "memcpy: dst_place_type 9 is not a place type"),
    ("less_than", [f32(2, 3, 4), f32(3)], {"axis": 0},
     r"less_than: the shapes of X \[2, 3, 4\] and Y \[3, 1, 1\] do not broadcast \(axis=0\)"),
    ("logical_xor", [V.boolean(2), V.boolean(3)], {}, r"logical_xor: the shapes of X \[2\] and Y \[3\] do not"),
]


@pytest.mark.parametrize("backend", ["numpy", "cuda"])
@pytest.mark.parametrize("op_type, inputs, attrs, match", ERRORS, ids=[f"{c[0]}-{i}" for i, c in enumerate(ERRORS)])
def test_bad_input_is_the_same_typed_error(backend, op_type, inputs, attrs, match):
    import cuda_backend
    from refimpl.core.errors import InvalidArgument
    from refimpl.ops import get_op_def
    cuda_backend.require()
    od = get_op_def(op_type)
    fn, names, wants_need = od.kernel(backend)

    def prep(v):
        if isinstance(v, list):
            return [prep(x) for x in v]
        return v if v is None or backend == "numpy" else cuda_backend.to_device(v)
    kw = {a: attrs[a] if a in attrs else od.default(a) for a in names}
    if wants_need:
        kw["need"] = (True,) * len(od.outputs)
    with pytest.raises(InvalidArgument, match=match):
        fn(*[prep(v) for v in inputs], **kw)
