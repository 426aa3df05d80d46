"""Cuda kernels of ``refimpl/ops/conv_ops.py`` against their NumPy kernels (see kernel_check.py)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params
from op_check import run
from refimpl.ops.conv_ops import CONV3D_ATTRS, CONV_ATTRS, conv_shapes

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(1)
f32, f64, i64 = V.f32, V.f64, V.i64



def _conv(op, xs, ws, dt=f32, **attrs):
    """A forward case and its grad case (Input, Filter, Output@GRAD) on the same shapes."""
    x, w = dt(*xs), dt(*ws)
    nd = len(xs) - 2
    out_shape = conv_shapes(op, xs, ws, dict(CONV_ATTRS if nd == 2 else CONV3D_ATTRS, **attrs), nd)[2]
    return [(op, [x, w], attrs), (op + "_grad", [x, w, dt(*out_shape)], attrs)]


def _pool(xs, dt=f32, **attrs):
    """A pool2d case and its grad case (X, Out of the NumPy kernel, Out@GRAD)."""
    x = dt(*xs)
    out = run("pool2d", x, **attrs)
    return [("pool2d", [x], attrs), ("pool2d_grad", [x, out, dt(*out.shape)], attrs)]


MAX2 = {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2]}
CASES = [
    *_conv("conv2d", (2, 2, 4, 4), (3, 2, 3, 3), paddings=[1, 1]),                       # LeNet-like
    *_conv("conv2d", (1, 4, 5, 4), (4, 2, 2, 3), strides=[2, 1], paddings=[1, 0, 0, 1], groups=2),
    *_conv("conv2d", (1, 2, 5, 5), (2, 2, 2, 2), dilations=[2, 1], padding_algorithm="SAME", strides=[2, 2]),
    *_conv("conv2d", (1, 3, 2, 4), (2, 2, 1, 1), f64, data_format="NHWC", groups=2),
    *_conv("conv2d", (1, 2, 4, 4), (2, 2, 3, 3), padding_algorithm="VALID", strides=[2, 2]),   # ResNet-like
    *_conv("depthwise_conv2d", (1, 3, 4, 4), (3, 1, 3, 3), paddings=[1, 1], groups=3),
    *_conv("depthwise_conv2d", (1, 4, 4, 2), (4, 1, 2, 2), f64, groups=2, data_format="NHWC"),
    ("conv2d_grad", [f32(1, 2, 3, 3), f32(2, 2, 2, 2), f32(1, 2, 2, 2)], {"need": [False, True]}),
    *_conv("conv3d", (1, 2, 3, 4, 3), (3, 2, 2, 3, 2), paddings=[1, 0, 1]),
    *_conv("conv3d", (1, 4, 3, 3, 4), (2, 2, 2, 2, 2), f64, strides=[1, 2, 2], groups=2, dilations=[1, 1, 2],
           data_format="NDHWC"),
    *_conv("conv3d", (1, 1, 4, 3, 3), (2, 1, 3, 2, 2), padding_algorithm="SAME", strides=[2, 1, 2]),
    *_pool((2, 2, 4, 4), **MAX2),
    *_pool((1, 2, 5, 5), pooling_type="max", ksize=[3, 3], strides=[2, 2], paddings=[1, 1]),
    *_pool((1, 2, 5, 4), pooling_type="avg", ksize=[3, 2], strides=[2, 1], paddings=[1, 1], exclusive=False),
    *_pool((1, 2, 5, 5), pooling_type="avg", ksize=[2, 2], strides=[2, 2], ceil_mode=True),
    *_pool((1, 2, 5, 5), pooling_type="avg", ksize=[3, 3], strides=[2, 2], padding_algorithm="SAME"),
    *_pool((2, 3, 3, 3), pooling_type="avg", ksize=[1, 1], adaptive=True),                # ResNet head
    *_pool((1, 5, 4, 2), f64, pooling_type="max", ksize=[2, 3], adaptive=True, data_format="NHWC"),
    *_pool((1, 2, 3, 4), pooling_type="avg", ksize=[1, 1], global_pooling=True),
    ("pool2d_grad", [np.array([[[[1.0, 3.0], [3.0, 0.0]]]], np.float32), np.array([[[[3.0]]]], np.float32),
                     np.array([[[[2.0]]]], np.float32)], {"pooling_type": "max", "ksize": [2, 2]}),  # ties
    ("flatten_contiguous_range", [f32(2, 3, 2, 2)], {"start_axis": 1, "stop_axis": 3}),
    ("flatten_contiguous_range", [f64(2, 3, 4)], {"start_axis": 0, "stop_axis": -2, "need": [True, False]}),
    ("flatten_contiguous_range_grad", [np.empty((0, 2, 3, 2), np.float32), f32(2, 6)],
     {"start_axis": 1, "stop_axis": 2}),
]


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
