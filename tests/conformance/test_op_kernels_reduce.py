"""Cuda kernels of ``refimpl/ops/reduce_ops.py`` against their NumPy kernels (see kernel_check.py)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(1)
f32, f64, i64 = V.f32, V.f64, V.i64


def binary(*shape):
    return V.mask(*shape).astype(np.float32)


X3 = f32(2, 3, 4)
G3 = f32(2, 3, 4)
MAX3 = np.max(X3, axis=1)
MIN_ALL = np.min(X3).reshape(())
TIES = np.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, 0.5, 0.5]], np.float32)
NANS = np.array([[1.0, np.nan, 3.0], [2.0, 5.0, np.nan]], np.float32)
LS = f32(2, 3, 4)   # log_softmax inputs, and their outputs (for the grad)
LS_OUT = LS - np.max(LS, axis=-1, keepdims=True)
LS_OUT = LS_OUT - np.log(np.exp(LS_OUT).sum(axis=-1, keepdims=True))

CASES = [
    ("squared_l2_norm", [f32(3, 4)], {}),
    ("squared_l2_norm", [f32(300)], {}),      # longer than one pairwise block
    ("squared_l2_norm", [f64(2, 3)], {}),
    ("squared_l2_norm_grad", [f32(3, 4), f32(1)], {}),
    ("clip_by_norm", [f32(3, 4)], {"max_norm": 0.5}),     # clipped
    ("clip_by_norm", [f32(3, 4)], {"max_norm": 100.0}),   # left alone
    ("clip_by_norm", [np.zeros((2, 2), np.float32)], {"max_norm": 1.0}),
    ("clip_by_norm", [f64(5)], {"max_norm": 0.3}),
    ("clip", [X3, None, None], {"min": -0.5, "max": 0.7}),
    ("clip", [NANS, None, None], {"min": 0.0, "max": 2.5}),
    ("clip", [f32(2, 3), np.array([-0.2], np.float32), np.array([0.4], np.float32)], {}),
    ("clip", [i64(2, 3), None, None], {"min": -2.0, "max": 3.0}),
    ("clip_grad", [X3, G3, None, None], {"min": -0.5, "max": 0.7}),
    ("clip_grad", [f64(6), f64(6), None, np.array([0.1])], {"min": -0.3}),
    ("abs", [X3], {}),
    ("abs", [i64(5)], {}),
    ("abs_grad", [np.array([-1.5, 0.0, -0.0, 2.0, np.nan], np.float32), f32(5)], {}),
    ("sign", [np.array([-1.5, 0.0, -0.0, 2.0, np.nan], np.float32)], {}),
    ("sign", [i64(6)], {}),
    ("reduce_any", [V.boolean(2, 3, 4), None, None], {"dim": [1]}),
    ("reduce_any", [np.array([False, True, False]), None, None], {"reduce_all": True}),
    ("reduce_any", [np.zeros((2, 3), bool), None, None], {"dim": [0], "keep_dim": True}),
    ("reduce_any", [f32(2, 3), None, None], {"dim": [-1]}),
    ("reduce_max", [X3], {"dim": [1]}),
    ("reduce_max", [X3], {"dim": [0, 2], "keep_dim": True}),
    ("reduce_max", [X3], {"reduce_all": True}),
    ("reduce_max", [NANS], {"dim": [-1]}),
    ("reduce_min", [X3], {"dim": [-1]}),
    ("reduce_min", [i64(3, 4)], {"dim": [0]}),
    ("reduce_max_grad", [X3, MAX3, f32(2, 4)], {"dim": [1]}),
    ("reduce_max_grad", [TIES, TIES.max(axis=1), f32(2)], {"dim": [1]}),   # ties all get the gradient
    ("reduce_min_grad", [X3, MIN_ALL, f32()], {"reduce_all": True}),
    ("reduce_prod", [X3], {"dim": [-1]}),
    ("reduce_prod", [X3], {"dim": [1], "keep_dim": True}),
    ("reduce_prod", [i64(3, 4)], {"dim": [0]}),
    ("reduce_prod_grad", [X3, np.prod(X3, axis=-1), f32(2, 3)], {"dim": [-1]}),
    ("top_k_v2", [X3, None], {"k": 2}),
    ("top_k_v2", [X3, np.array([3], np.int32)], {"axis": 1, "largest": False}),
    ("top_k_v2", [TIES, None], {"k": 3}),     # the lower index first among equal values
    ("top_k_v2", [i64(3, 5), None], {"k": 5, "axis": 0 + 1}),
    ("top_k_v2_grad", [X3, np.argsort(-X3, axis=-1, kind="stable")[..., :2], f32(2, 3, 2)], {"k": 2}),
    ("top_k_v2_grad", [X3, np.argsort(X3, axis=1, kind="stable")[:, :2], f32(2, 2, 4)], {"k": 2, "axis": 1}),
    ("arg_max", [X3], {}),
    ("arg_max", [X3], {"axis": 1, "keepdims": True, "dtype": 2}),
    ("arg_max", [TIES], {"axis": -1}),    # the first of equal maxima
    ("arg_max", [NANS], {"axis": 1}),     # the first NaN
    ("arg_max", [X3], {"flatten": True}),
    ("cumsum", [X3], {}),
    ("cumsum", [X3], {"axis": 1, "reverse": True}),
    ("cumsum", [X3], {"axis": 0, "exclusive": True}),
    ("cumsum", [X3], {"flatten": True, "exclusive": True, "reverse": True}),
    ("cumsum", [i64(3, 4)], {"axis": -1}),
    ("cumsum_grad", [X3, G3], {"axis": 1}),
    ("cumsum_grad", [X3, f32(24)], {"flatten": True, "reverse": True}),
    ("log_softmax", [LS], {}),
    ("log_softmax", [f32(3, 5, 2)], {"axis": 1}),
    ("log_softmax", [f64(2, 200)], {}),
    ("log_softmax", [np.array(1.5, np.float32)], {}),  # 0-D: Paddle gives 0
    ("log_softmax_grad", [np.array(0.0, np.float32), np.array(2.0, np.float32)], {}),
    ("log_softmax_grad", [LS_OUT, G3], {}),
    ("log_softmax_grad", [LS_OUT, G3], {"axis": 0}),
    ("one_hot_v2", [i64(2, 3, lo=0, hi=4), None], {"depth": 4}),
    ("one_hot_v2", [i64(5, lo=0, hi=3), np.array([3], np.int32)], {"dtype": 3}),
    ("one_hot_v2", [i64(4, lo=-1, hi=6), None], {"depth": 5, "allow_out_of_range": True}),
    ("sigmoid_cross_entropy_with_logits", [X3 * 3, binary(2, 3, 4), None], {}),
    ("sigmoid_cross_entropy_with_logits", [X3, V.prob(2, 3, 4), None], {"normalize": True}),
    ("sigmoid_cross_entropy_with_logits",
     [X3, np.where(binary(2, 3, 4) > 0, -100.0, 1.0).astype(np.float32), V.pos(2, 3, 4)], {"normalize": True}),
    ("sigmoid_cross_entropy_with_logits", [f64(6), V.prob(6, dt=np.float64), None], {"ignore_index": 0}),
    # pos_weight scales softplus(-x) = log(exp(-m) + exp(-x - m)) + m (Paddle 3.3.1), both signs of x
    ("sigmoid_cross_entropy_with_logits", [X3 * 3, V.prob(2, 3, 4), V.pos(2, 3, 4)], {}),
    ("sigmoid_cross_entropy_with_logits",
     [f64(2, 5) * 3, V.prob(2, 5, dt=np.float64), V.pos(2, 5, dt=np.float64)], {"normalize": True}),
    ("sigmoid_cross_entropy_with_logits_grad", [X3 * 3, binary(2, 3, 4), None, G3], {}),
    ("sigmoid_cross_entropy_with_logits_grad", [X3, V.prob(2, 3, 4), None, G3], {"normalize": True}),
    ("sigmoid_cross_entropy_with_logits_grad",
     [X3, np.where(binary(2, 3, 4) > 0, -100.0, 1.0).astype(np.float32), V.pos(2, 3, 4), G3], {}),
    ("sigmoid_cross_entropy_with_logits_grad", [X3 * 3, V.prob(2, 3, 4), V.pos(2, 3, 4), G3], {"normalize": True}),
]


@pytest.mark.parametrize("op_type, inputs, attrs", params(CASES))
def test_kernel(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
