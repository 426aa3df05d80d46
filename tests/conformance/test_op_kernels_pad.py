"""Cuda kernels of ``refimpl/ops/pad_ops.py`` against their NumPy kernels (see kernel_check.py).

Every case compares bit for bit: the forwards copy, and the pad3d grads add each input element's
cells in the same (row-major output) order on both backends.
"""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params
from op_check import run

V = Inputs(16)
f32, f64, i64 = V.f32, V.f64, V.i64


def _pad(xs, dt=f32, **attrs):
    """A pad case and its grad case (Out@GRAD shaped like the NumPy kernel's Out)."""
    x = dt(*xs)
    out = run("pad", x, **attrs)
    return [("pad", [x], attrs), ("pad_grad", [dt(*out.shape)], attrs)]


def _pad3d(xs, dt=f32, paddings_tensor=None, **attrs):
    """A pad3d case and its grad case (X, Paddings, Out@GRAD)."""
    x = dt(*xs)
    out = run("pad3d", x, paddings_tensor, **attrs)
    return [("pad3d", [x, paddings_tensor], attrs), ("pad3d_grad", [x, paddings_tensor, dt(*out.shape)], attrs)]


CASES = [
    *_pad((2, 3, 4, 5), paddings=[1, 0, 0, 2, 1, 1, 0, 3], pad_value=2.0),
    *_pad((3, 4), f64, paddings=[0, 2, 1, 1], pad_value=-1.5),
    *_pad((5,), paddings=[3, 0]),
    ("pad", [i64(2, 3)], {"paddings": [1, 1, 0, 2], "pad_value": 7.0}),
    ("pad_grad", [np.array([[-0.0, 1.0], [2.0, -0.0]], np.float32)], {"paddings": [0, 0, 0, 0]}),
    *_pad3d((2, 3, 1, 4, 5), paddings=[1, 2, 3, 0, 0, 0], mode="constant", value=0.5),
    *_pad3d((1, 2, 3, 4, 5), paddings=[1, 2, 3, 0, 2, 1], mode="reflect"),
    *_pad3d((1, 2, 4, 3, 3), f64, paddings=[2, 2, 1, 2, 0, 3], mode="replicate"),
    *_pad3d((1, 2, 3, 2, 2), paddings=[3, 4, 0, 2, 5, 1], mode="circular"),                     # pads > size
    *_pad3d((1, 3, 4, 5, 2), paddings=[0, 1, 2, 1, 1, 0], mode="reflect", data_format="NDHWC"),
    *_pad3d((2, 1, 3, 4, 3), paddings=[1, 0, 0, 0, 0, 1], mode="constant", value=-2.0, data_format="NDHWC"),
    *_pad3d((1, 2, 2, 3, 3), paddings_tensor=np.array([1, 1, 0, 2, 1, 0], np.int32), mode="replicate"),
    ("pad3d_grad", [f32(1, 1, 1, 2, 2), None, np.array([[[[[-0.0, 1.0, 2.0], [3.0, -0.0, 4.0]]]]], np.float32)],
     {"paddings": [0, 1, 0, 0, 0, 0]}),                                                        # -0.0 kept
]


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
