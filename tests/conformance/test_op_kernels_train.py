"""Every cuda kernel, called directly, against the NumPy kernel: matmul, the grad ops and
the optimizers (their in-place updated inputs are compared too). See kernel_check.py."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params

# the edge-value cases (inf, nan, 0, overflow) make both kernels warn, on purpose
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(2)
f32, f64, pos, prob, i64 = V.f32, V.f64, V.pos, V.prob, V.i64


def ints(*values):
    return np.array(values, np.int64)


def xshape(*shape):
    return np.empty((0,) + shape, np.float32)


X4 = f32(2, 3, 2, 2)
EW_GRAD = ["elementwise_add_grad", "elementwise_sub_grad", "elementwise_mul_grad", "elementwise_div_grad",
           "elementwise_pow_grad"]


def ew_grad(op, x, y, d, **attrs):
    """An elementwise grad case; div's grad also reads Out (any values of Out's shape do)."""
    if op == "elementwise_div_grad":
        return (op, [x, y, f32(*d.shape).astype(d.dtype), d], attrs)
    return (op, [x, y, d], attrs)


ELEMENTWISE_GRAD = [
    case for op in EW_GRAD for case in [
        ew_grad(op, pos(2, 3, 4), f32(3), f32(2, 3, 4), axis=1),
        ew_grad(op, pos(2, 3, 2, 2), f32(3, 2), f32(2, 3, 2, 2), axis=1),
        ew_grad(op, pos(2, 3, 4), f32(2, 1, 4), f32(2, 3, 4)),
        ew_grad(op, pos(2, 3, 4), f32(2, 3, 4), f32(2, 3, 4), need=(True, False)),
        ew_grad(op, pos(2, 3, 4), f32(4), f32(2, 3, 4), need=(False, True)),
        ew_grad(op, pos(4), f32(3, 4), f32(3, 4)),
        ew_grad(op, pos(5, dt=np.float64), f64(5), f64(5)),
        ew_grad(op, pos(0, 3), f32(3), f32(0, 3)),
    ]
]

UNARY_GRAD = {"relu_grad": 2, "tanh_grad": 2, "sigmoid_grad": 2, "square_grad": 2, "exp_grad": 2,
              "log_grad": 2, "sqrt_grad": 2, "logsigmoid_grad": 2, "reciprocal_grad": 2, "silu_grad": 3}
EDGES = np.array([0.0, -0.0, 1.0, -1.0, 100.0, -100.0, 1e-30, np.inf, -np.inf, np.nan], np.float32)
ACTIVATION_GRAD = [
    case for op, n in UNARY_GRAD.items() for case in [
        (op, [X4 for _ in range(n - 1)] + [f32(2, 3, 2, 2)], {}),
        (op, [f64(5) for _ in range(n - 1)] + [f64(5)], {}),
        (op, [EDGES for _ in range(n - 1)] + [f32(10)], {}),
        (op, [f32(0, 3) for _ in range(n)], {}),
    ]
] + [
    ("gelu_grad", [X4, f32(2, 3, 2, 2)], {}),
    ("gelu_grad", [X4, f32(2, 3, 2, 2)], {"approximate": True}),
    ("gelu_grad", [f64(5), f64(5)], {"approximate": True}),
    ("gelu_grad", [EDGES[:-1], f32(9)], {}),
    ("leaky_relu_grad", [X4, f32(2, 3, 2, 2)], {}),
    ("leaky_relu_grad", [EDGES, f32(10)], {"alpha": 0.3}),
    ("leaky_relu_grad", [f64(0, 2), f64(0, 2)], {}),
    ("hard_sigmoid_grad", [f32(2, 3, 2, 2) * 0.5 + 0.5, f32(2, 3, 2, 2)], {}),
    ("hard_sigmoid_grad", [np.array([0.0, 1.0, 0.5, -1, 2], np.float64), f64(5)], {"slope": 0.5}),
    ("pow_grad", [pos(2, 3, 2, 2), None, f32(2, 3, 2, 2)], {"factor": 2.5}),
    ("pow_grad", [f32(2, 3), np.array([3.0], np.float32), f32(2, 3)], {}),
    ("pow_grad", [EDGES, None, f32(10)], {"factor": -1.5}),
    ("pow_grad", [f64(0, 2), None, f64(0, 2)], {"factor": 2.0}),
    ("softmax_grad", [prob(2, 3, 2, 2), f32(2, 3, 2, 2)], {}),
    ("softmax_grad", [prob(2, 3, 2, 2), f32(2, 3, 2, 2)], {"axis": 1}),
    ("softmax_grad", [prob(3, 4, dt=np.float64), f64(3, 4)], {"axis": 0}),
    ("softmax_grad", [prob(2, 200), f32(2, 200)], {}),
    ("softmax_grad", [prob(0, 3), f32(0, 3)], {}),
]

REDUCE_GRAD = [
    case for op in ["reduce_sum_grad", "reduce_mean_grad"] for case in [
        (op, [X4, f32()], {}),
        (op, [X4, f32(2, 2, 2)], {"dim": [1]}),
        (op, [X4, f32(2, 3, 2, 1)], {"dim": [-1], "keep_dim": True}),
        (op, [X4, f32(3, 2)], {"dim": [0, 2]}),
        (op, [X4, f32(1, 1, 1, 1)], {"dim": [1], "keep_dim": True, "reduce_all": True}),
        (op, [f64(3, 4), f64(4)], {"dim": [0]}),
        (op, [f32(7), f32()], {"dim": [0]}),
    ]
] + [
    ("reduce_sum_grad", [f32(0, 3), f32(3)], {"dim": [0]}),
    ("reduce_mean_grad", [f32(0, 3), f32(3)], {"dim": [0]}),
]

MANIPULATION_GRAD = [
    ("reshape2_grad", [xshape(2, 3, 4), f32(2, 12)], {}),
    ("reshape2_grad", [xshape(24), f32(2, 3, 2, 2)], {}),
    ("reshape2_grad", [xshape(0, 3), f32(3, 0)], {}),
    ("transpose2_grad", [xshape(2, 3, 2, 2), f32(2, 2, 2, 3)], {"axis": [0, 2, 3, 1]}),
    ("transpose2_grad", [xshape(2, 3, 4), f64(4, 2, 3)], {"axis": [2, 0, 1]}),
    ("transpose2_grad", [xshape(5), f32(5)], {"axis": [0]}),
    ("transpose2_grad", [xshape(0, 3), f32(3, 0)], {"axis": [-1, 0]}),
    ("concat_grad", [[f32(2, 3), f32(2, 1), f32(2, 4)], f32(2, 8), None], {"axis": 1}),
    ("concat_grad", [[X4, f32(2, 3, 2, 1)], f32(2, 3, 2, 3), ints(-1)], {}),
    ("concat_grad", [[f64(2, 3), f64(0, 3), f64(1, 3)], f64(3, 3), None], {"axis": 0}),
    ("concat_grad", [[f32(3), f32(4)], f32(7), None], {}),
    ("lookup_table_v2_grad", [ints(1, 3, 1, 0, 1), f32(5, 4), f32(5, 4)], {}),
    ("lookup_table_v2_grad", [i64(2, 3, lo=0, hi=4), f64(4, 3), f64(2, 3, 3)], {"padding_idx": 2}),
    ("lookup_table_v2_grad", [i64(2, 2, 2, lo=0, hi=3), f32(3, 2), f32(2, 2, 2, 2)], {"padding_idx": 0}),
    ("lookup_table_v2_grad", [ints(), f32(5, 4), f32(0, 4)], {}),
]


def ln_grad(x, begin, scale=True, bias=True, **attrs):
    """A layer_norm_grad case: X, Scale?, Bias?, Mean, Variance (positive), dY."""
    lead, norm = x.shape[:begin], x.shape[begin:]
    n = int(np.prod(norm))
    sb = (f32(n).astype(x.dtype) if scale else None, f32(n).astype(x.dtype) if bias else None)
    return ("layer_norm_grad", [x, *sb, f32(*lead).astype(x.dtype), pos(*lead, dt=x.dtype),
                                f32(*x.shape).astype(x.dtype)], dict(attrs, begin_norm_axis=begin))


NN_GRAD = [
    ln_grad(f32(2, 3, 4), 1),
    ln_grad(f32(2, 3, 4), 2, bias=False),
    ln_grad(X4, 3, scale=False, bias=False, epsilon=1e-3),
    ln_grad(f64(2, 3, 2, 2), 1, need=(True, False, False)),
    ln_grad(f32(3, 5), 1, need=(False, True, True)),
    ln_grad(f32(3, 200), 1),
    ("dropout_grad", [V.mask(2, 3, 4), f32(2, 3, 4)], {}),
    ("dropout_grad", [V.mask(2, 3, 4), f32(2, 3, 4)], {"dropout_implementation": "upscale_in_train"}),
    ("dropout_grad", [V.mask(6), f64(6)], {"dropout_prob": 1.0, "dropout_implementation": "upscale_in_train"}),
    ("dropout_grad", [np.empty(0, np.uint8), X4], {"dropout_prob": 0.3, "is_test": True}),
    ("dropout_grad", [np.empty(0, np.uint8), X4], {"is_test": True, "dropout_implementation": "upscale_in_train"}),
    ("dropout_grad", [V.mask(0, 3), f32(0, 3)], {}),
    ("softmax_with_cross_entropy_grad", [ints(1, -100, 4, 0)[:, None], prob(4, 5), f32(4, 1)], {}),
    ("softmax_with_cross_entropy_grad", [i64(2, 1, 4, lo=0, hi=3), prob(2, 3, 4), f32(2, 1, 4)], {"axis": 1}),
    ("softmax_with_cross_entropy_grad", [ints(0, 2, 3), prob(3, 4, dt=np.float64), f64(3, 1)],
     {"ignore_index": 2}),
    ("softmax_with_cross_entropy_grad", [ints(1, 0, 3)[:, None].astype(np.int32), prob(3, 4), f32(3, 1)], {}),
    ("softmax_with_cross_entropy_grad", [prob(3, 4), prob(3, 4), f32(3, 1)], {"soft_label": True}),
    ("softmax_with_cross_entropy_grad", [prob(3, 2, 4), prob(3, 2, 4), f32(1, 2, 4)],
     {"soft_label": True, "axis": 0}),
    ("softmax_with_cross_entropy_grad", [ints(2, 0, 1)[:, None], prob(3, 4), f32(3, 1)], {"use_softmax": False}),
    ("softmax_with_cross_entropy_grad", [prob(3, 4), prob(3, 4), f32(3, 1)],
     {"soft_label": True, "use_softmax": False}),
    ("softmax_with_cross_entropy_grad", [np.zeros((0, 1), np.int64), prob(0, 4), f32(0, 1)], {}),
]

MATMUL = [
    ("matmul_v2", [f32(3, 4), f32(4, 5)], {}),
    ("matmul_v2", [f32(4, 3), f32(4, 5)], {"trans_x": True}),
    ("matmul_v2", [f64(3, 4), f64(5, 4)], {"trans_y": True}),
    ("matmul_v2", [f32(2, 1, 3, 4), f32(3, 5, 4)], {"trans_y": True}),
    ("matmul_v2", [f32(4), f32(4)], {}),
    ("matmul_v2", [f32(4), f32(2, 4, 3)], {}),
    ("matmul_v2", [f32(2, 3, 4), f32(4)], {}),
    ("matmul_v2", [f32(3, 0), f32(0, 2)], {}),
    ("matmul_v2", [f32(0, 3, 4), f32(4, 2)], {}),
    ("matmul_v2", [f32(5, 20), f32(20, 6)], {}),
    ("matmul_v2_grad", [f32(3, 4), f32(4, 5), f32(3, 5)], {}),
    ("matmul_v2_grad", [f32(4, 3), f32(5, 4), f32(3, 5)], {"trans_x": True, "trans_y": True}),
    ("matmul_v2_grad", [f64(2, 1, 3, 4), f64(3, 4, 5), f64(2, 3, 3, 5)], {}),
    ("matmul_v2_grad", [f32(4), f32(2, 4, 3), f32(2, 3)], {}),
    ("matmul_v2_grad", [f32(2, 3, 4), f32(4), f32(2, 3)], {"need": (True, False)}),
    ("matmul_v2_grad", [f32(4), f32(4), f32()], {"need": (False, True)}),
    ("matmul_v2_grad", [f32(4), f32(4), f32()], {"trans_x": True, "trans_y": True}),
    ("matmul_v2_grad", [f32(3, 0), f32(0, 2), f32(3, 2)], {}),
    ("mul", [f32(2, 3, 4), f32(12, 5)], {}),
    ("mul", [f32(2, 3, 4), f32(4, 5)], {"x_num_col_dims": 2}),
    ("mul", [f64(2, 3, 4), f64(2, 2, 5)], {"x_num_col_dims": 2, "y_num_col_dims": 2}),
    ("mul_grad", [f32(2, 3, 4), f32(12, 5), f32(2, 5)], {}),
    ("mul_grad", [f64(2, 3, 4), f64(2, 2, 5), f64(2, 3, 5)], {"x_num_col_dims": 2, "y_num_col_dims": 2}),
    ("mul_grad", [f32(3, 4), f32(4, 2), f32(3, 2)], {"need": (False, True)}),
]


def lr(v=0.1):
    return np.array([v], np.float32)


def half(x):
    return x.astype(np.float16)


P, G = f32(3, 4), f32(3, 4)
OPTIMIZER = [
    ("sgd", [f32(3, 4), lr(), f32(3, 4), None], {}),
    ("sgd", [f64(5), lr(0.3), f64(5), None], {}),
    ("sgd", [half(P), lr(), G, P.copy()], {"multi_precision": True}),
    ("sgd", [f32(0, 2), lr(), f32(0, 2), None], {}),
    ("momentum", [f32(3, 4), f32(3, 4), f32(3, 4), lr(), None], {}),
    ("momentum", [f32(3, 4), f32(3, 4), f32(3, 4), lr(), None], {"use_nesterov": True, "mu": 0.8}),
    ("momentum", [f64(6), f64(6), f64(6), lr(), None],
     {"regularization_method": "l2_decay", "regularization_coeff": 0.01, "rescale_grad": 2.0}),
    ("momentum", [half(P), G, f32(3, 4), lr(), P.copy()], {"multi_precision": True, "use_nesterov": True}),
]


def adam(param=None, grad=None, m2max=None, master=None, skip=None, betas=(None, None, None), dt=np.float32):
    """An adam / adamw input list in slot order (state of Param's shape, beta pows mid-training)."""
    p = param if param is not None else f32(3, 4).astype(dt)
    shape = p.shape if master is None else master.shape
    g = grad if grad is not None else f32(*shape).astype(dt)
    m1, m2 = f32(*shape).astype(g.dtype) * 0.1, pos(*shape, dt=g.dtype) * 0.01
    b1pow, b2pow = np.array([0.9 ** 3], np.float32), np.array([0.999 ** 3], np.float32)
    return [p, g, lr(0.01), m1, m2, m2max, b1pow, b2pow, master, skip, *betas]


ADAM_BETAS = (np.array([0.8], np.float32), np.array([0.99], np.float32), np.array([1e-6], np.float32))
OPTIMIZER += [
    case for op in ["adam", "adamw"] for case in [
        (op, adam(), {}),
        (op, adam(dt=np.float64), {"beta1": 0.85}),
        (op, adam(m2max=pos(3, 4) * 0.02), {"amsgrad": True}),
        (op, adam(), {"use_global_beta_pow": True, "lazy_mode": False}),
        (op, adam(betas=ADAM_BETAS), {}),
        (op, adam(skip=np.array([True])), {}),
        (op, adam(skip=np.array([False])), {}),
        (op, adam(param=half(P), grad=G, master=P.copy()), {"multi_precision": True}),
        (op, adam(param=f32(0, 3)), {}),
    ]
] + [
    ("adamw", adam(), {"with_decay": True}),
    ("adamw", adam(dt=np.float64), {"with_decay": True, "coeff": 0.1, "lr_ratio": 0.5}),
    ("adamw", adam(m2max=pos(3, 4) * 0.02), {"with_decay": True, "amsgrad": True}),
    ("adamw", adam(param=half(P), grad=G, master=P.copy()), {"with_decay": True, "multi_precision": True}),
]

CASES = ELEMENTWISE_GRAD + ACTIVATION_GRAD + REDUCE_GRAD + MANIPULATION_GRAD + NN_GRAD + MATMUL + OPTIMIZER


@pytest.mark.parametrize("op_type,inputs,attrs", params(CASES))
def test_train_kernel_matches_numpy(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)


# ---- the matmul kernel's own order ---------------------------------------------------------------------
def _in_k_order(x, y):
    """x @ y with each output's products added in order k = 0, 1, ... (every product and sum rounded)."""
    out = np.zeros(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]) + (x.shape[-2], y.shape[-1]), x.dtype)
    for k in range(x.shape[-1]):
        out = out + x[..., :, k:k + 1] * y[..., k:k + 1, :]
    return out


@pytest.mark.parametrize("xs, ys, ta, tb", [((1, 1), (1, 1), False, False), ((3, 5), (5, 7), False, False),
                                            ((9, 17), (10, 17), False, True), ((20, 11), (20, 13), True, False),
                                            ((2, 1, 6, 9), (3, 9, 5), False, False), ((2, 0), (0, 3), False, False)])
def test_cuda_matmul_adds_in_k_order_bit_for_bit(xs, ys, ta, tb):
    """The register-tiled kernel gives what a plain k loop gives, whatever its tile sizes."""
    from cuda_backend.device import to_device, to_host
    from cuda_backend.ops_matmul import bmm
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ys).astype(np.float32)
    got = to_host(bmm(to_device(x), to_device(y), ta, tb))
    want = _in_k_order(x.swapaxes(-1, -2) if ta else x, y.swapaxes(-1, -2) if tb else y)
    assert got.shape == want.shape and got.tobytes() == want.tobytes()
