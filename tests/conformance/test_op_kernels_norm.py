"""Cuda kernels of ``refimpl/ops/norm_ops.py`` against their NumPy kernels (see kernel_check.py)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(1)
f32, f64, i64 = V.f32, V.f64, V.i64

pos = V.pos


def _vec(x, c):
    """A per-channel vector of X's dtype (Paddle requires Scale, Bias, Mean, Variance to match X)."""
    return f32(c).astype(x.dtype)


def _bn(x, c, **attrs):
    """A batch_norm case: X, Scale, Bias, Mean, Variance (positive), no MomentumTensor."""
    return ("batch_norm", [x, _vec(x, c), _vec(x, c), _vec(x, c), pos(c, dt=x.dtype), None], attrs)


def _bn_grad(x, c, global_stats=False, **attrs):
    """A batch_norm_grad case in the slots Paddle's grad maker fills (Mean / Variance with global stats)."""
    mean, var = _vec(x, c), pos(c, dt=x.dtype)
    glob = [mean, var] if global_stats else [None, None]
    attrs = dict(attrs, use_global_stats=True) if global_stats else attrs
    return ("batch_norm_grad", [x, _vec(x, c), _vec(x, c), *glob, _vec(x, c), pos(c, dt=x.dtype),
                                np.empty((0,), x.dtype), mean, var, f32(*x.shape).astype(x.dtype)], attrs)


CASES = [
    _bn(f32(2, 3, 2, 2), 3),
    _bn(f32(2, 2, 3, 4), 2),                                   # HW = 12: NumPy's 8-lane pairwise sum
    _bn(f32(2, 2, 2, 3), 3, data_layout="NHWC"),
    _bn(f32(5, 3), 3),                                         # 2-D: (N, C) in either layout
    _bn(f32(2, 3, 4), 3),
    _bn(f32(2, 2, 2, 1, 2), 2, data_layout="NHWC"),
    _bn(f32(2, 3, 2, 2), 3, is_test=True),
    _bn(f32(2, 2, 2, 3), 3, use_global_stats=True, data_layout="NHWC"),
    _bn(f32(1, 3), 3),                                         # one element per channel: y = x
    _bn(f64(2, 3, 2, 2), 3, momentum=0.5, epsilon=1e-3),
    ("batch_norm", [f32(3, 2), f32(2), f32(2), f32(2), pos(2), np.array([0.7], np.float32)], {}),
    # weight_attr=False / bias_attr=False: no Scale, no Bias (ones and zeros)
    ("batch_norm", [f32(2, 3, 2, 2), None, None, f32(3), pos(3), None], {}),
    ("batch_norm_grad", [f32(2, 3, 2, 2), None, None, None, None, f32(3), pos(3), np.empty((0,), np.float32),
                         f32(3), pos(3), f32(2, 3, 2, 2)], {"need": [True, False, False]}),
    _bn_grad(f32(2, 3, 2, 2), 3),
    _bn_grad(f32(2, 2, 3, 4), 2),
    _bn_grad(f32(2, 2, 2, 3), 3, data_layout="NHWC"),
    _bn_grad(f32(5, 3), 3),
    _bn_grad(f32(2, 3, 4), 3, need=[True, False, False]),
    _bn_grad(f32(2, 3, 2, 2), 3, global_stats=True),
    _bn_grad(f32(2, 2, 2, 3), 3, data_layout="NHWC", is_test=True),
    _bn_grad(f32(1, 3), 3),
    _bn_grad(f64(2, 3, 2, 2), 3),
]


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)


@pytest.mark.parametrize("backend", ["numpy", "cuda"])
def test_global_statistics_grad_without_statistics_is_the_same_typed_error(backend):
    """Both kernels refuse a use_global_stats grad given neither Mean/Variance nor MeanOut/VarianceOut."""
    import cuda_backend
    from refimpl.core.errors import InvalidArgument
    from refimpl.ops import get_op_def
    cuda_backend.require()
    od = get_op_def("batch_norm_grad")
    fn, names, _ = od.kernel(backend)
    prep = (lambda a: a) if backend == "numpy" else cuda_backend.to_device
    x, s, dy = prep(f32(2, 3)), prep(np.ones(3, np.float32)), prep(f32(2, 3))
    attrs = {a: od.attrs[a] for a in names if a != "need"}
    attrs["use_global_stats"] = True
    with pytest.raises(InvalidArgument, match="global statistics need input Mean/Variance"):
        fn(x, s, s, None, None, prep(np.zeros(3, np.float32)), prep(np.ones(3, np.float32)), None, None, None,
           dy, need=(True, True, True), **attrs)
