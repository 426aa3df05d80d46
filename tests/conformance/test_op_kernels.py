"""Every cuda kernel, called directly, against the NumPy kernel: forward ops (grads and
optimizers are in test_op_kernels_train.py). See kernel_check.py for the case format
and how the two results are compared."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, cuda_ops_to_cover, params
from test_op_kernels_conv import CASES as CONV_CASES
from test_op_kernels_index import CASES as INDEX_CASES
from test_op_kernels_norm import CASES as NORM_CASES
from test_op_kernels_pad import CASES as PAD_CASES
from test_op_kernels_reduce import CASES as REDUCE_CASES
from test_op_kernels_tensor import CASES as TENSOR_CASES
from test_op_kernels_train import CASES as TRAIN_CASES
from test_op_kernels_conv_transpose import CASES as CONV_T_CASES
from test_op_kernels_group_norm import CASES as GROUP_NORM_CASES
from test_op_kernels_extra import CASES as EXTRA_CASES
from test_op_kernels_amp import CASES as AMP_CASES
from test_op_kernels_lars_lamb import CASES as LARS_LAMB_CASES
from test_op_kernels_dgc import CASES as DGC_CASES
from test_op_kernels_model_parallel import CASES as MP_CASES

# the edge-value cases (inf, nan, 0, overflow) make both kernels warn, on purpose
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(1)
f32, f64, pos, prob, i64 = V.f32, V.f64, V.pos, V.prob, V.i64


def with_nan(x):
    x = x.copy()
    x.reshape(-1)[::3] = np.nan
    return x


def ints(*values):
    return np.array(values, np.int64)


def halves(x):
    """A copy of ``x`` with every other element changed (so equal and not equal both occur)."""
    y = x.copy()
    y.reshape(-1)[::2] = x.reshape(-1)[::2] + 1
    return y


X4 = f32(2, 3, 2, 2)
I4 = i64(2, 3, 2, 2)
EW_FLOAT = ["elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div", "elementwise_max",
            "elementwise_min"]

ELEMENTWISE = [
    case for op in EW_FLOAT for case in [
        (op, [f32(2, 3, 4), f32(3)], {"axis": 1}),
        (op, [f32(2, 3, 2, 2), f32(3, 2)], {"axis": 1}),
        (op, [f32(2, 3, 4), f32(2, 3)], {"axis": 0}),
        (op, [f32(2, 3, 4), f32(2, 1, 4)], {}),
        (op, [f64(5), f64(5)], {}),
        (op, [f32(4), f32(3, 1)], {}),
        (op, [f32(0, 3), f32(3)], {}),
    ]
] + [
    (op, [i64(2, 3, 2, 2), V.nonzero_i64(3, 2)], {"axis": 1})
    for op in ["elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_max", "elementwise_min",
               "elementwise_mod"]
] + [
    ("elementwise_max", [with_nan(f32(2, 3)), f32(2, 3)], {}),
    ("elementwise_max", [f32(2, 3), with_nan(f32(3))], {}),
    ("elementwise_min", [with_nan(f64(6)), f64(6)], {}),
    ("elementwise_min", [f32(3, 2), with_nan(f32(3, 2))], {}),
    ("elementwise_max", [np.array([-0.0, 0.0, -0.0, 0.0, 1.0]), np.array([0.0, -0.0, -0.0, 0.0, 1.0])], {}),
    ("elementwise_min", [np.array([-0.0, 0.0, -0.0, 0.0, 1.0]), np.array([0.0, -0.0, -0.0, 0.0, 1.0])], {}),
    ("elementwise_mod", [f32(2, 3, 4) * 4, f32(3) + 0.5], {"axis": 1}),
    ("elementwise_mod", [f64(2, 5) * 4, -pos(5, dt=np.float64)], {}),
    ("elementwise_mod", [V.nonzero_i64(6) * 3, V.nonzero_i64(6)], {}),
    ("elementwise_mod", [f32(0, 2), pos(2)], {}),
    ("elementwise_div", [ints(7, -7, 9, 5), ints(2, 2, -4, 5)], {}),
    ("elementwise_pow", [pos(2, 3, 4), f32(3)], {"axis": 1}),
    ("elementwise_pow", [f32(2, 3), ints(0, 1, 2)[None, :].astype(np.float32)], {}),
    ("elementwise_pow", [pos(2, 3, 2, 2, dt=np.float64), f64(2, 3)], {"axis": 0}),
    ("elementwise_pow", [i64(2, 3), ints(0, 1, 3)], {}),
    ("elementwise_pow", [pos(0, 3), f32(3)], {}),
    ("equal", [I4, halves(I4)[0]], {"axis": 1}),
    ("equal", [X4, halves(X4)], {}),
    ("equal", [i64(5, lo=0, hi=2), i64(5, lo=0, hi=2)], {}),
    ("equal", [f32(0, 2), f32(2)], {}),
    ("less_than", [f32(2, 3, 4), f32(3)], {"axis": 1}),
    ("less_than", [i64(3, 4), i64(4)], {}),
    ("less_than", [f64(6), f64(6)], {}),
    ("less_than", [with_nan(f32(2, 3)), f32(2, 3)], {}),
    ("logical_not", [V.boolean(2, 3, 2, 2)], {}),
    ("logical_not", [np.array([0.0, -0.0, 1.5, np.nan], np.float32)], {}),
    ("logical_not", [i64(5, lo=-1, hi=2)], {}),
    ("logical_not", [V.boolean(0, 3)], {}),
    ("increment", [f32(1)], {}),
    ("increment", [ints(7).reshape(())], {"step": -3.0}),
    ("increment", [f64(1, 1)], {"step": 0.1}),
    ("increment", [ints(41)], {"step": 2.7}),
]

SCALE_SUM = [
    ("scale", [X4, None, None], {"scale": 2.5, "bias": 1.0}),
    ("scale", [X4, None, None], {"scale": 0.3}),
    ("scale", [X4, None, None], {"scale": 0.3, "bias": -0.7, "bias_after_scale": False}),
    ("scale", [f64(5), np.array([1.7]), np.array([0.2])], {}),
    ("scale", [I4, None, None], {"scale": 3.0, "bias": 2.0}),
    ("scale", [f32(0, 3), None, None], {"scale": 2.0, "bias": 1.0}),
    ("sum", [[X4]], {}),
    ("sum", [[X4, f32(2, 3, 2, 2), f32(2, 3, 2, 2)]], {}),
    ("sum", [[i64(4), i64(4)]], {}),
    ("sum", [[f64(3, 2), f64(3, 2)]], {}),
    ("sum", [[f32(0, 2), f32(0, 2)]], {}),
]

REDUCE = [
    case for op in ["reduce_sum", "reduce_mean"] for case in [
        (op, [X4], {}),
        (op, [X4], {"dim": [1]}),
        (op, [X4], {"dim": [-1], "keep_dim": True}),
        (op, [X4], {"dim": [0, 2]}),
        (op, [X4], {"dim": [1, 3], "keep_dim": True}),
        (op, [X4], {"dim": [1], "reduce_all": True}),
        (op, [f64(3, 4)], {"dim": [0], "keep_dim": True}),
        (op, [f32(7)], {"dim": [0]}),
        (op, [f32(2, 300)], {"dim": [1]}),
    ]
] + [  # float32 means of every value: Eigen's 8-lane order on both backends (tails of 0, 5 and 7)
    ("reduce_mean", [f32(n)], {"reduce_all": True}) for n in (5, 16, 21, 103)
] + [
    ("reduce_mean", [f32(3, 5, 7)], {"dim": [0, 1, 2], "keep_dim": True}),
    ("reduce_sum", [I4], {"dim": [2]}),
    ("reduce_sum", [f32(0, 3)], {"dim": [0]}),
    ("reduce_sum", [f32(3, 0)], {"dim": [0]}),
]

UNARY = ["relu", "tanh", "sigmoid", "square", "exp", "log", "sqrt", "logsigmoid", "reciprocal", "silu", "ceil"]
EDGES = np.array([0.0, -0.0, 1.0, -1.0, 100.0, -100.0, 1e-30, np.inf, -np.inf, np.nan], np.float32)
ACTIVATION = [
    case for op in UNARY for case in [
        (op, [X4], {}),
        (op, [pos(2, 3) if op in ("log", "sqrt") else f32(2, 3)], {}),
        (op, [f64(5)], {}),
        (op, [EDGES], {}),
        (op, [f32(0, 3)], {}),
    ]
] + [
    ("gelu", [X4], {}),
    ("gelu", [X4], {"approximate": True}),
    ("gelu", [f64(5)], {"approximate": True}),
    ("gelu", [EDGES[:-1]], {}),
    ("gelu", [f32(0, 2)], {}),
    ("leaky_relu", [X4], {}),
    ("leaky_relu", [f64(6)], {"alpha": 0.3}),
    ("leaky_relu", [EDGES], {"alpha": 0.1}),
    ("hard_sigmoid", [X4 * 4], {}),
    ("hard_sigmoid", [f64(6) * 4], {"slope": 0.5, "offset": 0.25}),
    ("hard_sigmoid", [EDGES], {}),
    ("pow", [pos(2, 3, 2, 2), None], {"factor": 2.5}),
    ("pow", [f32(2, 3), None], {"factor": 3.0}),
    ("pow", [pos(5, dt=np.float64), np.array([0.5], np.float32)], {}),
    ("pow", [EDGES, None], {"factor": -1.5}),
    ("pow", [f32(0, 2), None], {"factor": 2.0}),
    ("softmax", [X4], {}),
    ("softmax", [X4], {"axis": 1}),
    ("softmax", [f32(3, 4, 2)], {"axis": 0}),
    ("softmax", [f64(2, 5, 3)], {"axis": -2}),
    ("softmax", [f32(200) * 30], {}),
    ("softmax", [f32(2, 150)], {"axis": 1}),
    ("softmax", [np.array([[1.0, np.inf, 0.0], [-np.inf, 0.0, 2.0]], np.float32)], {}),
    ("softmax", [f32(0, 4)], {}),
]

MANIPULATION = [
    ("reshape2", [f32(2, 3, 4), None, []], {"shape": [0, -1]}),
    ("reshape2", [f32(24), None, []], {"shape": [2, 3, -1, 2]}),
    ("reshape2", [I4, ints(4, -1), []], {"shape": [1]}),
    ("reshape2", [f64(2, 6), None, [ints(3), ints(4)]], {"shape": [-1, -1]}),
    ("reshape2", [V.boolean(2, 3), None, []], {"shape": [6], "need": (True, False)}),
    ("reshape2", [f32(0, 3), None, []], {"shape": [3, -1]}),
    ("transpose2", [X4], {"axis": [0, 2, 3, 1]}),
    ("transpose2", [f64(2, 3, 4)], {"axis": [2, 0, 1]}),
    ("transpose2", [i64(3, 4, 2)], {"axis": [-1, 0, 1]}),
    ("transpose2", [f32(5)], {"axis": [0], "need": (True, False)}),
    ("transpose2", [f32(0, 3)], {"axis": [1, 0]}),
    ("concat", [[f32(2, 3), f32(2, 1), f32(2, 4)], None], {"axis": 1}),
    ("concat", [[X4, f32(2, 3, 2, 1)], None], {"axis": -1}),
    ("concat", [[f32(2, 3), f32(0, 3), f32(1, 3)], None], {"axis": 0}),
    ("concat", [[i64(2, 2), i64(2, 3)], ints(-1)], {"axis": 0}),
    ("concat", [[f64(3), f64(4)], None], {}),
    ("split", [f32(2, 6), None, []], {"num": 3, "axis": 1}),
    ("split", [X4, None, []], {"sections": [1, -1, 1], "axis": 1}),
    ("split", [f64(4, 3), ints(-1), []], {"sections": [2, 1]}),
    ("split", [i64(5, 2), None, [ints(1), ints(4)]], {"sections": [-1, -1], "axis": 0}),
    ("split", [f32(6), None, []], {"sections": [0, 4, 2]}),
    ("cast", [np.array([1.7, -1.7, 0.5, -0.0, 3e9], np.float32)], {"out_dtype": 3}),
    ("cast", [f64(2, 3) * 1e3], {"out_dtype": 5}),
    ("cast", [i64(4)], {"out_dtype": 5}),
    ("cast", [np.array([0.0, -0.0, 0.1, np.nan], np.float32)], {"out_dtype": 0}),
    ("cast", [V.boolean(2, 3)], {"out_dtype": 6}),
    ("cast", [I4], {"out_dtype": 2}),
    ("cast", [f32(0, 3)], {"out_dtype": 6}),
    ("assign", [X4], {}),
    ("nop", [[X4, i64(4)]], {}),   # the legacy pipeline's: its outputs are its inputs
    ("nop", [[f32(0, 3)]], {}),
    ("assign", [I4], {}),
    ("assign", [V.boolean(3)], {}),
    ("assign", [np.array(2.5)], {}),
    ("assign", [f32(0, 3)], {}),
]

CREATION = [
    ("fill_constant", [None, None, []], {"shape": [2, 3], "value": 1.5}),
    ("fill_constant", [None, None, []], {"shape": [2, 3], "dtype": 3, "value": 7.0}),
    ("fill_constant", [None, None, []], {"shape": [4], "dtype": 6, "str_value": "0.1"}),
    ("fill_constant", [None, None, []], {"shape": [2], "dtype": 3, "str_value": "9007199254740993"}),
    ("fill_constant", [None, None, []], {"shape": [3], "str_value": "-inf"}),
    ("fill_constant", [None, None, []], {"shape": [2, 2], "dtype": 0, "value": 1.0}),
    ("fill_constant", [np.array([0.3], np.float32), None, []], {"shape": [3], "dtype": 6}),
    ("fill_constant", [None, ints(2, 1, 3), []], {"value": 2.0}),
    ("fill_constant", [None, None, [ints(2), ints(2)]], {"shape": [-1, -1], "dtype": 3, "value": -4.0}),
    ("fill_constant", [None, None, []], {"shape": [0, 4], "value": 1.0}),
    ("fill_any_like", [X4], {"value": 2.0}),
    ("fill_any_like", [f32(2, 3)], {"value": 7.0, "dtype": 3}),
    ("fill_any_like", [i64(4)], {"value": 0.1, "dtype": 6}),
    ("fill_any_like", [f64(3)], {"value": 1.0, "dtype": 0}),
    ("fill_any_like", [f32(0, 2)], {"value": 1.0}),
    ("uniform_random", [None, []], {"shape": [2, 3], "seed": 7}),
    ("seed", [], {"seed": 7}),
    ("seed", [], {"seed": 123456, "force_cpu": True}),
    ("uniform_random", [ints(3, 4), []], {"dtype": 6, "min": -2.0, "max": 5.0}),
    ("uniform_random", [None, [ints(4), ints(4)]], {"shape": [-1, -1], "diag_num": 3, "diag_step": 4}),
    ("gaussian_random", [None, []], {"shape": [2, 3], "seed": 5, "mean": 1.0, "std": 2.0}),
    ("gaussian_random", [ints(5), []], {"dtype": 6}),
    ("gaussian_random", [None, []], {"shape": [0, 3]}),
    ("lookup_table_v2", [i64(2, 3, lo=0, hi=5), f32(5, 4)], {}),
    ("lookup_table_v2", [ints(0, 2, 4, 2), f64(5, 3)], {"padding_idx": 2}),
    ("lookup_table_v2", [i64(2, 2, 2, lo=0, hi=6), f32(6, 2)], {"padding_idx": 0}),
    ("lookup_table_v2", [ints(), f32(5, 4)], {}),
]

NN = [
    ("layer_norm", [f32(2, 3, 4), f32(12), f32(12)], {}),
    ("layer_norm", [f32(2, 3, 4), f32(4), None], {"begin_norm_axis": 2}),
    ("layer_norm", [X4, None, None], {"begin_norm_axis": 3, "epsilon": 1e-3}),
    ("layer_norm", [f64(2, 3, 2, 2), None, f64(12)], {}),
    ("layer_norm", [f32(3, 200), f32(200), f32(200)], {}),
    ("layer_norm", [f32(5), f32(5), f32(5)], {"begin_norm_axis": 0}),
    ("dropout", [f32(2, 3, 4), ints(3)], {}),
    ("dropout", [f32(2, 3, 4), None], {"dropout_implementation": "upscale_in_train"}),
    ("dropout", [X4, None], {"dropout_prob": 0.3, "is_test": True}),
    ("dropout", [X4, None], {"is_test": True, "dropout_implementation": "upscale_in_train"}),
    ("dropout", [f64(6), ints(11)], {"dropout_prob": 1.0, "dropout_implementation": "upscale_in_train"}),
    ("dropout", [f32(6), None], {"dropout_prob": 0.0}),
    ("dropout", [f32(0, 3), None], {}),
    ("softmax_with_cross_entropy", [f32(4, 5), ints(1, -100, 4, 0)[:, None]], {}),
    ("softmax_with_cross_entropy", [f32(2, 3, 4), i64(2, 1, 4, lo=0, hi=3)], {"axis": 1}),
    ("softmax_with_cross_entropy", [f64(3, 4), ints(0, 2, 3)], {"ignore_index": 2}),
    ("softmax_with_cross_entropy", [f32(3, 4), ints(1, 0, 3)[:, None].astype(np.int32)], {}),
    ("softmax_with_cross_entropy", [f32(3, 4), prob(3, 4)], {"soft_label": True}),
    ("softmax_with_cross_entropy", [f32(3, 2, 4), prob(3, 2, 4)], {"soft_label": True, "axis": 0}),
    ("softmax_with_cross_entropy", [prob(3, 4), ints(2, 0, 1)[:, None]], {"use_softmax": False}),
    ("softmax_with_cross_entropy", [np.array([[0.2, 0.0, 0.8]], np.float32), ints(1)[:, None]],
     {"use_softmax": False}),
    ("softmax_with_cross_entropy", [f32(0, 4), np.zeros((0, 1), np.int64)], {}),
]

COALESCE = {"dtype": 5, "copy_data": True}
COLLECTIVE = [
    ("coalesce_tensor", [[f32(2, 3), f32(4)]], dict(COALESCE, use_align=False)),
    ("coalesce_tensor", [[f32(2, 3), f32(4), f32(1)]], dict(COALESCE, align_size=64)),
    ("coalesce_tensor", [[f32(3), f32(2, 2)]], COALESCE),
    ("coalesce_tensor", [[f64(3), f64(2)]], {"dtype": 6, "set_constant": True, "constant": 1.5,
                                             "align_size": 32}),
    ("coalesce_tensor", [[None, None]], {"dtype": 3, "concated_shapes": [2, 3, 4], "concated_ranks": [2, 1],
                                         "align_size": 16}),
    ("depend", [f32(2, 3), [f32(4), f32(1)]], {}),
]

CASES = ELEMENTWISE + SCALE_SUM + REDUCE + ACTIVATION + MANIPULATION + CREATION + NN + COLLECTIVE


@pytest.mark.parametrize("op_type,inputs,attrs", params(CASES))
def test_forward_kernel_matches_numpy(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)


def test_every_cuda_kernel_has_cases():
    """A new cuda kernel needs a case here or in a test_op_kernels_*.py (or to be communication / I/O)."""
    covered = {c[0] for c in CASES + TRAIN_CASES + CONV_CASES + NORM_CASES + INDEX_CASES + REDUCE_CASES
               + PAD_CASES + TENSOR_CASES + CONV_T_CASES + GROUP_NORM_CASES + EXTRA_CASES
               + AMP_CASES + LARS_LAMB_CASES + DGC_CASES + MP_CASES}
    assert [t for t in cuda_ops_to_cover() if t not in covered] == []


@pytest.mark.parametrize("shape", [(129,), (1, 136), (3, 1000), (2, 4133)])
def test_long_rows_summed_as_a_tree_are_numpys_pairwise_sums(monkeypatch, shape):
    """The parallel tree path (taken for long rows, lowered here) adds exactly as NumPy does."""
    from cuda_backend import ew
    from cuda_backend.device import to_device, to_host
    monkeypatch.setattr(ew, "TREE_MIN", 129)
    x = (np.random.default_rng(3).standard_normal(shape) * 1e3).astype(np.float32)
    x.reshape(-1)[::7] *= 1e-4  # magnitudes that make the order visible
    got = to_host(ew.sum_axes(to_device(x), (len(shape) - 1,)))
    want = x.sum(axis=-1)
    assert got.shape == want.shape and got.tobytes() == want.tobytes()
