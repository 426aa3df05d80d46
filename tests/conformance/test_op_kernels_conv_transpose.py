"""Cuda kernels of ``refimpl/ops/conv_transpose_ops.py`` against their NumPy kernels (see kernel_check.py)."""
import pytest

from kernel_check import Inputs, check_case, params
from refimpl.ops.conv_transpose_ops import TRANSPOSE3D_ATTRS, TRANSPOSE_ATTRS, conv_transpose_shapes

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(2)
f32, f64 = V.f32, V.f64


def _case(op, xs, ws, dt=f32, **attrs):
    """A forward case and its grad case (Input, Filter[, Bias], Output@GRAD) on the same shapes."""
    nd = len(xs) - 2
    x, w = dt(*xs), dt(*ws)
    out_shape = conv_transpose_shapes(op, xs, ws, dict(TRANSPOSE_ATTRS if nd == 2 else TRANSPOSE3D_ATTRS,
                                                       **attrs), nd)[1]
    bias = [None] if nd == 2 else []                # the 2-D ops' dispensable Bias slot, left empty
    return [(op, [x, w, *bias], attrs), (op + "_grad", [x, w, *bias, dt(*out_shape)], attrs)]


CASES = [
    *_case("conv2d_transpose", (2, 3, 3, 3), (3, 2, 3, 3)),
    *_case("conv2d_transpose", (1, 4, 3, 2), (4, 1, 3, 2), strides=[2, 1], paddings=[1, 0, 0, 1], groups=2,
           output_padding=[1, 0]),
    *_case("conv2d_transpose", (1, 2, 3, 3), (2, 2, 2, 2), dilations=[2, 1], strides=[2, 2], output_size=[7, 6]),
    *_case("conv2d_transpose", (1, 3, 2, 2), (2, 2, 3, 3), f64, padding_algorithm="SAME", strides=[2, 2],
           data_format="NHWC"),
    *_case("depthwise_conv2d_transpose", (1, 3, 3, 3), (3, 1, 3, 3), groups=3, paddings=[1, 1]),
    *_case("conv3d_transpose", (1, 2, 2, 2, 3), (2, 2, 2, 2, 2), strides=[1, 2, 1], paddings=[0, 1, 0]),
    *_case("conv3d_transpose", (1, 2, 2, 3, 4), (4, 1, 2, 1, 2), f64, groups=2, data_format="NHWC"),
    ("conv3d_transpose_grad", [f32(1, 2, 2, 2, 2), f32(2, 1, 2, 2, 2), f32(1, 1, 3, 3, 3)], {"need": [False, True]}),
]


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
