"""NumPy kernels of bilinear_tensor_product, auc and py_func: forward checks against plain loops,
float64 central-difference gradient checks, and the kernels' errors."""
import numpy as np
import pytest

import refimpl.ops  # noqa: F401  (registers the ops)
from refimpl.core.errors import External, InvalidArgument, NotFound, PreconditionNotMet
from refimpl.ops.grad_maker import make_grad_op_descs
from refimpl.ops.py_func_ops import register_callable

from op_check import grad_check, run

R = np.random.default_rng(5)


# ---- bilinear_tensor_product ----------------------------------------------------------------
def bilinear_loops(x, y, w, b):
    n, k = x.shape[0], w.shape[0]
    out = np.zeros((n, k))
    for i in range(n):
        for j in range(k):
            out[i, j] = sum(x[i, a] * w[j, a, c] * y[i, c] for a in range(x.shape[1]) for c in range(y.shape[1]))
            out[i, j] += 0.0 if b is None else b[0, j]
    return out


@pytest.mark.parametrize("with_bias", [True, False])
def test_bilinear_forward_matches_loops(with_bias):
    x, y, w = R.standard_normal((4, 3)), R.standard_normal((4, 2)), R.standard_normal((5, 3, 2))
    b = R.standard_normal((1, 5)) if with_bias else None
    np.testing.assert_allclose(run("bilinear_tensor_product", x, y, w, b), bilinear_loops(x, y, w, b), rtol=1e-12)


def test_bilinear_float32_keeps_dtype():
    x, y, w = (R.standard_normal(s).astype(np.float32) for s in ((2, 3), (2, 4), (2, 3, 4)))
    out = run("bilinear_tensor_product", x, y, w, None)
    assert out.dtype == np.float32 and out.shape == (2, 2)


def test_bilinear_gradients():
    x, y, w, b = R.standard_normal((3, 2)), R.standard_normal((3, 4)), R.standard_normal((2, 2, 4)), \
        R.standard_normal((1, 2))
    grad_check("bilinear_tensor_product", {"X": x, "Y": y, "Weight": w, "Bias": b},
               wrt=("X", "Y", "Weight", "Bias"))
    grad_check("bilinear_tensor_product", {"X": x, "Y": y, "Weight": w}, wrt=("X", "Weight"))


def test_bilinear_grad_op_slots():
    ins = {"X": ["x"], "Y": ["y"], "Weight": ["w"], "Bias": ["b"]}
    descs, _ = make_grad_op_descs("bilinear_tensor_product", ins, {"Out": ["o"]}, {}, {"y@GRAD"})
    (d,) = descs
    assert d["type"] == "bilinear_tensor_product_grad"
    assert d["inputs"] == {"X": ["x"], "Y": ["y"], "Weight": ["w"], "Out@GRAD": ["o@GRAD"]}
    assert d["outputs"] == {"X@GRAD": ["x@GRAD"], "Y@GRAD": [], "Weight@GRAD": ["w@GRAD"], "Bias@GRAD": ["b@GRAD"]}


@pytest.mark.parametrize("shapes, msg", [
    (((2, 3), (2, 4), (5, 3, 4), (1, 4)), "Bias"),
    (((2, 3), (3, 4), (5, 3, 4), None), "batch"),
    (((2, 3), (2, 4), (5, 4, 4), None), "Weight's dims"),
    (((2, 3, 1), (2, 4), (5, 3, 4), None), "2-D"),
])
def test_bilinear_bad_shapes(shapes, msg):
    arrays = [None if s is None else np.zeros(s) for s in shapes]
    with pytest.raises(InvalidArgument, match=msg):
        run("bilinear_tensor_product", *arrays)


# ---- auc ---------------------------------------------------------------------------------------
def pair_auc(buckets, labels):
    """ROC AUC over histogram buckets as the probability a positive outranks a negative (ties: 1/2)."""
    pos = [b for b, l in zip(buckets, labels) if l > 0]
    neg = [b for b, l in zip(buckets, labels) if l == 0]
    if not pos or not neg:
        return 0.0
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def bucket_of(p, n):
    return int(np.float32(p) * np.float32(n))


def predict(p):
    p = np.asarray(p, np.float32).reshape(-1, 1)
    return np.concatenate([1 - p, p], axis=1)


def test_auc_global_matches_pair_count():
    n = 9
    pos, neg = np.zeros((1, n + 1), np.int64), np.zeros((1, n + 1), np.int64)
    seen_b, seen_l = [], []
    for _ in range(3):
        p, lab = R.random(7).astype(np.float32), R.integers(-1, 2, 7)
        auc, pos, neg = run("auc", predict(p), lab, pos, neg, None, num_thresholds=n, slide_steps=0)
        seen_b += [bucket_of(v, n) for v in p]
        seen_l += list(lab)
        assert auc.dtype == np.float64 and auc.shape == ()
        assert auc == pytest.approx(pair_auc(seen_b, seen_l), rel=1e-12)
    assert pos.sum() == sum(1 for l in seen_l if l > 0) and neg.sum() == sum(1 for l in seen_l if l == 0)


def test_auc_sliding_window_of_batches():
    n, steps = 5, 2
    stat = np.zeros((1 + steps) * (n + 1) + 1, np.int64)
    pos, neg = stat.copy(), stat.copy()
    batches = []
    for t in range(5):
        p, lab = R.random(6).astype(np.float32), R.integers(0, 2, 6)
        batches.append(([bucket_of(v, n) for v in p], list(lab)))
        auc, pos, neg = run("auc", predict(p), lab, pos, neg, None, num_thresholds=n, slide_steps=steps)
        window = batches[-steps:]
        want = pair_auc(sum((b for b, _ in window), []), sum((l for _, l in window), []))
        assert auc == pytest.approx(want, rel=1e-12), t
        assert pos[-1] == t + 1 and neg[-1] == t + 1  # the step counter


def test_auc_fake_batch_is_not_counted():
    n = 4
    zeros = np.zeros((1, n + 1), np.int64)
    auc, pos, neg = run("auc", predict([0.9, 0.1]), np.array([1, 0]), zeros, zeros, np.zeros((1, 1), np.float32),
                        num_thresholds=n, slide_steps=0)
    assert auc == 0.0 and not pos.any() and not neg.any()


def test_auc_inputs_are_not_written():
    zeros = np.zeros((1, 5), np.int64)
    run("auc", predict([0.7]), np.array([1]), zeros, zeros, None, num_thresholds=4, slide_steps=0)
    assert not zeros.any()


def test_auc_errors():
    zeros = np.zeros((1, 5), np.int64)
    with pytest.raises(PreconditionNotMet, match="within"):
        run("auc", predict([1.5]), np.array([1]), zeros, zeros, None, num_thresholds=4, slide_steps=0)
    with pytest.raises(InvalidArgument, match="same number of rows"):
        run("auc", predict([0.5, 0.2]), np.array([1]), zeros, zeros, None, num_thresholds=4, slide_steps=0)
    with pytest.raises(InvalidArgument, match="holds 5 counts"):
        run("auc", predict([0.5]), np.array([1]), zeros, zeros, None, num_thresholds=4, slide_steps=1)
    with pytest.raises(InvalidArgument, match="binary"):
        run("auc", np.full((1, 3), 0.3, np.float32), np.array([1]), zeros, zeros, None,
            num_thresholds=4, slide_steps=0)


# ---- py_func -----------------------------------------------------------------------------------
F32 = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_py_func_calls_the_registered_function():
    fid = register_callable(lambda a, b: (a + b, a * b), [("s", (2, 3), "float32"), ("p", (-1, 3), "float32")])
    s, p = run("py_func", [F32, F32], forward_callable_id=fid)
    np.testing.assert_array_equal(s, F32 + F32)
    np.testing.assert_array_equal(p, F32 * F32)


def test_py_func_bare_result_and_no_outputs():
    one = register_callable(lambda a: a[:, :1], [("o", (2, 1), "float32")])
    assert run("py_func", [F32], forward_callable_id=one)[0].shape == (2, 1)
    none = register_callable(lambda a: None, [])
    assert run("py_func", [F32], forward_callable_id=none) == []


def test_py_func_none_leaves_an_output_unwritten():
    fid = register_callable(lambda a: (None, a), [("x@GRAD", (2, 3), "float32"), ("y@GRAD", (2, 3), "float32")])
    dx, dy = run("py_func", [F32], forward_callable_id=fid)
    assert dx is None
    np.testing.assert_array_equal(dy, F32)


@pytest.mark.parametrize("func, msg", [
    (lambda a: a.astype(np.float64), "dtype float64 for output 'out_var'"),
    (lambda a: a.reshape(3, 2), r"shape \[3, 2\] for output 'out_var'"),
    (lambda a: (a, a), "returned 2 value"),
])
def test_py_func_bad_results(func, msg):
    fid = register_callable(func, [("out_var", (2, 3), "float32")])
    with pytest.raises(InvalidArgument, match=msg):
        run("py_func", [F32], forward_callable_id=fid)


def test_py_func_function_raising_names_it():
    def exploding(a):
        raise RuntimeError("boom")
    fid = register_callable(exploding, [("o", (2, 3), "float32")])
    with pytest.raises(External, match=r"py_func: the Python function 'test_py_func_function_raising_names_it"
                                       r".<locals>.exploding' raised RuntimeError: boom"):
        run("py_func", [F32], forward_callable_id=fid)


def test_py_func_unknown_id():
    with pytest.raises(NotFound, match="no Python callable is registered with id 123456"):
        run("py_func", [F32], forward_callable_id=123456)


def test_py_func_not_callable():
    with pytest.raises(InvalidArgument, match="must be a Python callable"):
        register_callable(3, [])


def test_py_func_grad_op_desc():
    attrs = {"forward_callable_id": 4, "backward_callable_id": 5, "backward_skip_vars": ["o1"]}
    ins, outs = {"X": ["a", "b"]}, {"Out": ["o0", "o1"]}
    (d,), _ = make_grad_op_descs("py_func", ins, outs, attrs, {"a@GRAD"})
    assert d["type"] == "py_func"
    assert d["inputs"] == {"X": ["a", "b", "o0", "o0@GRAD", "o1@GRAD"]}
    assert d["outputs"] == {"Out": ["@EMPTY@", "b@GRAD"]}
    assert d["attrs"] == {"forward_callable_id": 5, "backward_callable_id": -1, "backward_skip_vars": []}
    assert make_grad_op_descs("py_func", ins, outs, dict(attrs, backward_callable_id=-1), set())[0] == []
    assert make_grad_op_descs("py_func", ins, outs, attrs, {"a@GRAD", "b@GRAD"})[0] == []
