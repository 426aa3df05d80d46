"""Cuda kernels of ``refimpl/ops/group_norm_ops.py``, ``prelu_ops.py`` and ``spectral_norm_ops.py``
against their NumPy kernels (see kernel_check.py)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(17)
f32, f64, pos = V.f32, V.f64, V.pos


def _gn(x, groups, layout="NCHW", affine=True, **attrs):
    c = x.shape[1] if layout == "NCHW" else x.shape[-1]
    p = [f32(c).astype(x.dtype), f32(c).astype(x.dtype)] if affine else [None, None]
    return ("group_norm", [x, *p], dict(attrs, groups=groups, data_layout=layout))


def _gn_grad(x, groups, layout="NCHW", affine=True, **attrs):
    """A group_norm_grad case whose Y, Mean, Variance come from the NumPy forward (the grad reads Y)."""
    from op_check import run
    op, (x, s, b), a = _gn(x, groups, layout, affine)
    y, m, v = run("group_norm", x, s, b, **a)
    return ("group_norm_grad", [x, s, b, y, m, v, f32(*x.shape).astype(x.dtype)], dict(a, **attrs))


def _in(x, affine=True):
    c = x.shape[1]
    p = [f32(c).astype(x.dtype), f32(c).astype(x.dtype)] if affine else [None, None]
    return ("instance_norm", [x, *p], {})


def _in_grad(x, affine=True, **attrs):
    from op_check import run
    _, (x, s, b), _ = _in(x, affine)
    _, m, v = run("instance_norm", x, s, b)
    return ("instance_norm_grad", [x, s, b, m, v, f32(*x.shape).astype(x.dtype)], attrs)


def _sn(shape, dim, **attrs):
    h = shape[dim]
    w = int(np.prod(shape)) // h
    return ("spectral_norm", [f32(*shape), f32(h), f32(w)], dict(attrs, dim=dim))


def _sn_grad(shape, dim, **attrs):
    h = shape[dim]
    w = int(np.prod(shape)) // h
    return ("spectral_norm_grad", [f32(*shape), f32(h), f32(w), f32(*shape)], dict(attrs, dim=dim))


CASES = [
    _gn(f32(2, 4, 3, 3), 2),                                  # HW = 9: one block of 8 lanes and a tail
    _gn(f32(2, 6, 4), 3),                                     # HW = 4: no full block
    _gn(f32(1, 4, 5, 4), 4, affine=False),
    _gn(f32(2, 2, 3, 4), 2, layout="NHWC"),
    _gn(f32(3, 4), 2),                                        # 2-D: one pixel per channel
    _gn(f64(2, 4, 17), 2, epsilon=1e-3),
    _gn_grad(f32(2, 4, 3, 3), 2),
    _gn_grad(f32(2, 6, 4), 3, affine=False),                  # Paddle's grad without Scale
    _gn_grad(f32(2, 2, 3, 4), 2, layout="NHWC"),
    _gn_grad(f32(2, 4, 3), 4, need=[True, False, False]),
    _gn_grad(f64(2, 4, 9), 2),
    _in(f32(2, 3, 4, 5)),
    _in(f32(2, 3, 6), affine=False),
    _in(f64(1, 2, 3, 2, 2)),
    _in_grad(f32(2, 3, 4, 5)),
    _in_grad(f32(2, 3, 6), affine=False),
    _in_grad(f32(2, 2, 7), need=[True, False, False]),
    _in_grad(f64(2, 2, 3, 3)),
    ("prelu", [f32(2, 3, 2, 2), pos(1)], {"mode": "all"}),
    ("prelu", [f32(2, 3, 2, 2), pos(1, 3, 1, 1)], {"mode": "channel"}),
    ("prelu", [f32(2, 2, 2, 3), pos(3)], {"mode": "channel", "data_format": "NHWC"}),
    ("prelu", [f32(2, 3, 4), pos(1, 3, 4)], {"mode": "element"}),
    ("prelu", [f64(3, 4), pos(4, dt=np.float64)], {"mode": "channel"}),
    ("prelu_grad", [f32(2, 3, 2, 2), pos(1), f32(2, 3, 2, 2)], {"mode": "all"}),
    ("prelu_grad", [f32(2, 3, 2, 2), pos(1, 3, 1, 1), f32(2, 3, 2, 2)], {"mode": "channel"}),
    ("prelu_grad", [f32(2, 2, 2, 3), pos(3), f32(2, 2, 2, 3)], {"mode": "channel", "data_format": "NHWC"}),
    ("prelu_grad", [f32(2, 3, 4), pos(1, 3, 4), f32(2, 3, 4)], {"mode": "element"}),
    ("prelu_grad", [f32(2, 3, 4), pos(1, 3, 4), f32(2, 3, 4)], {"mode": "element", "need": [False, True]}),
    _sn((4, 6), 0),
    _sn((3, 4, 2, 2), 1, power_iters=2),
    _sn((2, 3, 2), 0, power_iters=0),
    _sn_grad((4, 6), 0),
    _sn_grad((3, 4, 2, 2), 1, power_iters=2),
]


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
