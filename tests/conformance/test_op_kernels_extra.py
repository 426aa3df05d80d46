"""Cuda kernels of bilinear_tensor_product (``linalg_ops.py``), auc (``metric_ops.py``) and py_func
(``py_func_ops.py``) against their NumPy kernels (see kernel_check.py)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params
from refimpl.ops.py_func_ops import register_callable

V = Inputs(17)
f32, f64 = V.f32, V.f64


def probs(n, width=2, dt=np.float32):
    p = V.r.random((n, 1)).astype(dt)
    p[0] = 1.0  # the top bucket
    p[1] = 0.0
    return np.concatenate([1 - p, p], axis=1) if width == 2 else p


def labels(n, shape=None):
    return V.r.integers(-1, 2, n).astype(np.int64).reshape(shape or (n,))


def zeros(*shape):
    return np.zeros(shape, np.int64)


def stats(n_thr, steps, fill=None):
    """A slide-steps histogram part-way through: counts in each step's bucket, their sum, the counter."""
    width = n_thr + 1
    s = np.zeros((1 + steps) * width + 1, np.int64)
    for k in range(steps):
        s[k * width:(k + 1) * width] = V.r.integers(0, 4, width)
    s[steps * width:(steps + 1) * width] = s[:steps * width].reshape(steps, width).sum(axis=0)
    s[-1] = 5 if fill is None else fill
    return s


def _affine(a, b):
    return np.asarray(a) * np.float32(2) + np.asarray(b), np.asarray(a) - np.asarray(b)


def _affine_grad(a, b, o0, o1, d0, d1):
    return np.asarray(d0) * np.float32(2) + np.asarray(d1), None


PF_FWD = register_callable(_affine, [("o0", (2, 3), "float32"), ("o1", (2, 3), "float32")])
PF_BWD = register_callable(_affine_grad, [("a@GRAD", (2, 3), "float32"), ("b@GRAD", (2, 3), "float32")])
PF_NONE = register_callable(lambda x: None, [])

X, Y, W = f32(4, 3), f32(4, 5), f32(2, 3, 5)
A, B = f32(2, 3), f32(2, 3)

CASES = [
    ("bilinear_tensor_product", [X, Y, W, f32(1, 2)], {}),
    ("bilinear_tensor_product", [X, Y, W, None], {}),
    ("bilinear_tensor_product", [f64(3, 2), f64(3, 4), f64(3, 2, 4), f64(1, 3)], {}),
    ("bilinear_tensor_product_grad", [X, Y, W, f32(4, 2)], {}),
    ("bilinear_tensor_product_grad", [X, Y, W, f32(4, 2)], {"need": (True, False, True, False)}),
    ("bilinear_tensor_product_grad", [f64(3, 2), f64(3, 4), f64(3, 2, 4), f64(3, 3)], {}),
    # Y wider than 8: NumPy's last-axis sums would be pairwise; the kernel's sums stay in order
    ("bilinear_tensor_product", [f32(3, 4), f32(3, 12), f32(2, 4, 12), f32(1, 2)], {}),
    ("bilinear_tensor_product_grad", [f32(10, 4), f32(10, 12), f32(3, 4, 12), f32(10, 3)], {}),
    ("auc", [probs(9), labels(9), zeros(1, 8), zeros(1, 8), None], {"num_thresholds": 7, "slide_steps": 0}),
    ("auc", [probs(9), labels(9, (9, 1)), stats(7, 2), stats(7, 2), None], {"num_thresholds": 7, "slide_steps": 2}),
    ("auc", [probs(6, 1, np.float64), labels(6), stats(15, 1, 0), stats(15, 1, 0), np.zeros((1, 1), np.float32)],
     {"num_thresholds": 15, "slide_steps": 1}),
    ("auc", [probs(6), labels(6), zeros(1, 5), zeros(1, 5), np.zeros((1, 1), np.float32)],
     {"num_thresholds": 4, "slide_steps": 0}),
    ("auc", [probs(5), labels(5), zeros(1, 4096), zeros(1, 4096), np.ones((1, 1), np.float32)],
     {"num_thresholds": 4095, "slide_steps": 0}),
    ("py_func", [[A, B]], {"forward_callable_id": PF_FWD}),
    ("py_func", [[A, B, A, B, f32(2, 3), f32(2, 3)]], {"forward_callable_id": PF_BWD}),
    ("py_func", [[A]], {"forward_callable_id": PF_NONE}),
]


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
