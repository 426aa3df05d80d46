"""Gradient and forward checks of the NumPy kernels: activation, loss, manipulation, creation,
nn, logic and optimizer ops.

* every op with a grad: a central-difference gradient check in float64, run
  through the op's registered grad maker and grad kernels (no-need-buffer
  inputs are handed over as shape-only metas, as the executor does);
* every op: a forward check against plain NumPy;
* constants named ``PADDLE_*`` were computed independently with Paddle 3.3.1
  (CPU, legacy static graph, FLAGS_enable_pir_api=0) by running the op on the
  same inputs; Paddle itself is not imported here.
"""
import math

import numpy as np
import pytest

import refimpl.ops  # noqa: F401  (registers the ops)

from op_check import POS, R, X, grad_check, run

# ---- gradient checks -------------------------------------------------------------
@pytest.mark.parametrize("op,x,attrs", [
    ("relu", X, {}), ("tanh", X, {}), ("sigmoid", X, {}), ("square", X, {}), ("exp", X, {}),
    ("log", POS, {}), ("sqrt", POS, {}), ("reciprocal", POS, {}), ("silu", X, {}),
    ("logsigmoid", X * 3, {}), ("leaky_relu", X, {"alpha": 0.1}),
    ("hard_sigmoid", np.append(X, [[3.0, -2.9, 0.1, 1.0]], 0), {}),
    ("gelu", X * 2, {"approximate": False}), ("gelu", X * 2, {"approximate": True}),
    ("softmax", X, {"axis": -1}), ("softmax", X, {"axis": 0}),
    ("pow", POS, {"factor": 2.5}), ("assign", X, {}),
    ("transpose2", R.standard_normal((2, 3, 2)), {"axis": [2, 0, 1]}),
    ("reshape2", R.standard_normal((2, 3, 2)), {"shape": [0, -1]}),
    ("cast", X, {"in_dtype": 6, "out_dtype": 6}),
    ("dropout", X, {"dropout_prob": 0.25, "is_test": True}),
    ("dropout", X, {"dropout_prob": 0.25, "is_test": True, "dropout_implementation": "upscale_in_train"}),
])
def test_unary_grads(op, x, attrs):
    grad_check(op, {"X": x}, attrs)


@pytest.mark.parametrize("impl", ["downgrade_in_infer", "upscale_in_train"])
def test_dropout_train_grad(impl):
    # a Seed input makes the mask the same on every forward run
    grad_check("dropout", {"X": X, "Seed": np.array([7])},
               {"dropout_prob": 0.4, "dropout_implementation": impl})


def test_pow_factor_tensor_grad():
    grad_check("pow", {"X": POS, "FactorTensor": np.array([1.5])}, {"factor": 9.0})


def test_concat_split_grads():
    a, b = R.standard_normal((2, 3)), R.standard_normal((2, 1))
    grad_check("concat", {"X": [a, b]}, {"axis": 1})
    grad_check("concat", {"X": [a, a[:1]]}, {"axis": 0})
    grad_check("split", {"X": R.standard_normal((2, 5))}, {"sections": [2, -1], "axis": 1})
    grad_check("split", {"X": R.standard_normal((4, 3))}, {"num": 2, "axis": 0})


def test_layer_norm_grads():
    x, s, b = R.standard_normal((2, 3, 4)), R.standard_normal(4), R.standard_normal(4)
    grad_check("layer_norm", {"X": x, "Scale": s, "Bias": b}, {"begin_norm_axis": 2},
               out_slot="Y", wrt=("X", "Scale", "Bias"))
    grad_check("layer_norm", {"X": x, "Scale": R.standard_normal(12), "Bias": R.standard_normal(12)},
               {"begin_norm_axis": 1, "epsilon": 1e-3}, out_slot="Y", wrt=("X", "Scale", "Bias"))
    grad_check("layer_norm", {"X": x}, {}, out_slot="Y", wrt=("X",))


def test_lookup_table_grad():
    ids = np.array([[0, 2], [2, 3], [1, 2]])
    grad_check("lookup_table_v2", {"Ids": ids, "W": R.standard_normal((5, 3))}, {}, wrt=("W",))
    grad_check("lookup_table_v2", {"Ids": ids, "W": R.standard_normal((5, 3))}, {"padding_idx": 2}, wrt=("W",))


@pytest.mark.parametrize("attrs,label", [
    ({}, np.array([[1], [0], [3]])),
    ({"ignore_index": 0}, np.array([[1], [0], [3]])),
    ({"soft_label": True}, np.array([[0.1, 0.2, 0.3, 0.4], [0.25] * 4, [1.0, 0, 0, 0]])),
    ({"use_softmax": False}, np.array([[1], [0], [3]])),
])
def test_softmax_with_cross_entropy_grads(attrs, label):
    logits = R.standard_normal((3, 4))
    if not attrs.get("use_softmax", True):
        logits = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    grad_check("softmax_with_cross_entropy", {"Logits": logits, "Label": label}, attrs,
               out_slot="Loss", wrt=("Logits",))


def test_softmax_with_cross_entropy_axis_grad():
    label = np.array([[[0, 2, 1]], [[4, 4, 0]]])
    grad_check("softmax_with_cross_entropy", {"Logits": R.standard_normal((2, 5, 3)), "Label": label},
               {"axis": 1}, out_slot="Loss", wrt=("Logits",))


# ---- forward checks against plain NumPy ---------------------------------------------
def _sig(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("op,attrs,ref", [
    ("relu", {}, lambda x: np.where(x > 0, x, 0)),
    ("tanh", {}, np.tanh),
    ("sigmoid", {}, _sig),
    ("square", {}, lambda x: x * x),
    ("exp", {}, np.exp),
    ("silu", {}, lambda x: x * _sig(x)),
    ("logsigmoid", {}, lambda x: np.log(_sig(x))),
    ("leaky_relu", {"alpha": 0.1}, lambda x: np.where(x > 0, x, 0.1 * x)),
    ("hard_sigmoid", {}, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    ("gelu", {"approximate": False}, lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    ("gelu", {"approximate": True},
     lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    ("softmax", {"axis": 0}, lambda x: np.exp(x) / np.exp(x).sum(0)),
    ("assign", {}, lambda x: x),
])
def test_unary_forward(op, attrs, ref):
    x = X.astype(np.float32)
    out = run(op, x, **attrs)
    assert out.dtype == np.float32 and out.shape == x.shape
    np.testing.assert_allclose(out, ref(X), rtol=2e-6, atol=1e-7)


def test_positive_domain_forward():
    p = POS.astype(np.float32)
    np.testing.assert_allclose(run("log", p), np.log(POS), rtol=1e-6)
    np.testing.assert_allclose(run("sqrt", p), np.sqrt(POS), rtol=1e-6)
    np.testing.assert_allclose(run("reciprocal", p), 1 / POS, rtol=1e-6)
    np.testing.assert_allclose(run("pow", p, None, factor=2.5), POS ** 2.5, rtol=1e-6)
    np.testing.assert_allclose(run("pow", p, np.array([0.5], np.float32), factor=2.5), POS ** 0.5, rtol=1e-6)


def test_erf_accuracy():
    from refimpl.ops.activation_ops import erf
    x = np.concatenate([np.linspace(-7, 7, 20001), np.geomspace(1e-300, 1e-3, 50)])
    ref = np.array([math.erf(v) for v in x])
    assert np.max(np.abs(erf(x) - ref)) < 1e-13
    assert np.max(np.abs(erf(x) - ref) / np.maximum(np.abs(ref), 1e-300)) < 1e-12
    assert np.isnan(erf(np.array([np.nan]))[0]) and erf(np.array([np.inf]))[0] == 1.0


# Paddle 3.3.1 outputs on x = linspace(-3, 3, 7) (float32)
PADDLE_GELU_EXACT = [-0.0040496885776519775, -0.04550027847290039, -0.15865525603294373, 0.0,
                     0.8413447141647339, 1.9544997215270996, 2.995950222015381]
PADDLE_GELU_TANH = [-0.0036375224590301514, -0.04540222883224487, -0.15880796313285828, 0.0,
                    0.8411920070648193, 1.9545977115631104, 2.9963626861572266]
PADDLE_SOFTMAX_CLIP = [0.04742587357759476, 1.5277488635806573e-28, 1.5277488635806573e-28, 0.9525741338729858]


def test_activation_paddle_constants():
    x = np.linspace(-3, 3, 7).astype(np.float32)
    np.testing.assert_allclose(run("gelu", x, approximate=False), PADDLE_GELU_EXACT, rtol=1e-6, atol=1e-8)
    # Paddle's float32 tanh form cancels in 1 + tanh(..) for x < 0 (ours is float64): ~1e-7 absolute
    np.testing.assert_allclose(run("gelu", x, approximate=True), PADDLE_GELU_TANH, rtol=1e-6, atol=2e-7)
    # Paddle clips x - max(x) at -64 before exp: tiny probabilities are exp(-64), not 0
    out = run("softmax", np.array([[0, -100, -70, 3]], np.float32), axis=-1)
    np.testing.assert_allclose(out[0], PADDLE_SOFTMAX_CLIP, rtol=1e-6)


