"""NumPy kernels of ``refimpl/ops/reduce_ops.py``: forward checks against plain loops / math,
float64 central-difference gradient checks, registry facts from Paddle 3.3.1 and bad input."""
import math

import numpy as np
import pytest

import refimpl as paddle
import refimpl.ops  # noqa: F401  (registers the ops)
from refimpl.core.errors import InvalidArgument
from refimpl.ops import get_op_def
from refimpl.ops.grad_maker import make_grad_op_descs

from op_check import R, X, grad_check, run

X3 = R.standard_normal((2, 3, 4))


# ---- forward: independent formulas --------------------------------------------------------
def test_squared_l2_norm_and_clip_by_norm():
    x = R.standard_normal((3, 4)).astype(np.float32)
    total = sum(float(v) ** 2 for v in x.ravel())
    out = run("squared_l2_norm", x)
    assert out.shape == (1,) and out.dtype == np.float32
    assert math.isclose(float(out[0]), total, rel_tol=1e-6)
    norm = math.sqrt(total)
    np.testing.assert_allclose(run("clip_by_norm", x, max_norm=0.5), x * (0.5 / norm), rtol=1e-6)
    np.testing.assert_array_equal(run("clip_by_norm", x, max_norm=norm * 2), x)
    np.testing.assert_array_equal(run("clip_by_norm", np.zeros(3, np.float32), max_norm=1.0), np.zeros(3))


def test_clip_abs_sign():
    x = np.array([-2.0, -0.5, 0.0, 0.3, 1.0, np.nan], np.float32)
    want = [(-1.0 if v < -1 else 0.5 if v > 0.5 else v) for v in x]
    np.testing.assert_array_equal(run("clip", x, None, None, min=-1.0, max=0.5), np.array(want, np.float32))
    np.testing.assert_array_equal(run("clip", x, np.array([0.0]), np.array([0.1]), min=-9.0, max=9.0),
                                  np.array([0, 0, 0, 0.1, 0.1, np.nan], np.float32))
    np.testing.assert_array_equal(run("abs", x), np.array([2, 0.5, 0, 0.3, 1, np.nan], np.float32))
    np.testing.assert_array_equal(run("sign", x), [-1, -1, 0, 1, 1, np.nan])
    dx = run("abs_grad", np.array([-2.0, 0.0, 3.0]), np.array([5.0, 7.0, 11.0]))
    np.testing.assert_array_equal(dx, [-5.0, 0.0, 11.0])


def test_reduce_max_min_forward_and_tie_grad():
    for name, pick in (("reduce_max", max), ("reduce_min", min)):
        out = run(name, X3, dim=[1])
        want = [[pick(X3[i, :, k]) for k in range(4)] for i in range(2)]
        np.testing.assert_array_equal(out, want)
        assert run(name, X3, dim=[0, 2], keep_dim=True).shape == (1, 3, 1)
        assert run(name, X3, reduce_all=True).shape == ()
    x = np.array([[1.0, 3.0, 3.0, -2.0]])
    dx = run("reduce_max_grad", x, np.array([3.0]), np.array([2.0]), dim=[1])
    np.testing.assert_array_equal(dx, [[0.0, 2.0, 2.0, 0.0]])  # every tied maximum gets the gradient


def test_reduce_prod():
    out = run("reduce_prod", X3, dim=[1])
    want = [[X3[i, 0, k] * X3[i, 1, k] * X3[i, 2, k] for k in range(4)] for i in range(2)]
    np.testing.assert_allclose(out, want, rtol=1e-12)
    assert run("reduce_prod", X3, reduce_all=True, keep_dim=True).shape == (1, 1, 1)


def test_top_k_v2():
    x = np.array([[1.0, 5.0, 3.0, 5.0], [0.0, -1.0, 2.0, 7.0]])
    out, idx = run("top_k_v2", x, None, k=3)
    want = [sorted(range(4), key=lambda j: (-row[j], j))[:3] for row in x]
    assert idx.dtype == np.int64 and idx.tolist() == want
    np.testing.assert_array_equal(out, [[x[i, j] for j in w] for i, w in enumerate(want)])
    out, idx = run("top_k_v2", x, np.array([1]), axis=0, largest=False)
    assert idx.tolist() == [[1, 1, 1, 0]] and out.tolist() == [[0.0, -1.0, 2.0, 5.0]]


def test_arg_max():
    x = np.array([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0]], np.float32)
    out = run("arg_max", x)
    assert out.dtype == np.int64 and out.tolist() == [1, 0]  # the first of equal maxima
    assert run("arg_max", x, axis=0, keepdims=True, dtype=2).tolist() == [[1, 0, 1]]
    assert run("arg_max", x, flatten=True).tolist() == 3


def _loop_cumsum(row, exclusive, reverse):
    idx = list(range(len(row)))[::-1] if reverse else list(range(len(row)))
    out, acc = [0.0] * len(row), 0.0
    for i in idx:
        out[i] = acc if exclusive else acc + row[i]
        acc += row[i]
    return out


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(exclusive, reverse):
    out = run("cumsum", X3, axis=1, exclusive=exclusive, reverse=reverse)
    for i in range(2):
        for k in range(4):
            np.testing.assert_allclose(out[i, :, k], _loop_cumsum(X3[i, :, k], exclusive, reverse), rtol=1e-12)
    flat = run("cumsum", X3, flatten=True, exclusive=exclusive, reverse=reverse)
    np.testing.assert_allclose(flat, _loop_cumsum(X3.ravel(), exclusive, reverse), rtol=1e-12, atol=1e-12)


def test_log_softmax_one_hot_sigmoid_ce():
    row = X3[0, 0]
    lse = math.log(sum(math.exp(v) for v in row))
    np.testing.assert_allclose(run("log_softmax", X3)[0, 0], [v - lse for v in row], rtol=1e-12)
    oh = run("one_hot_v2", np.array([[2, 0]]), None, depth=3)
    assert oh.dtype == np.float32 and oh.tolist() == [[[0, 0, 1], [1, 0, 0]]]
    assert run("one_hot_v2", np.array([5, 1]), None, depth=3, allow_out_of_range=True).tolist() == [[0, 0, 0], [0, 1, 0]]
    x, lab = np.array([-1.5, 0.2, 3.0, 0.7]), np.array([0.0, 1.0, 0.3, -100.0])
    want = [max(v, 0) - v * t + math.log(1 + math.exp(-abs(v))) if t != -100 else 0.0 for v, t in zip(x, lab)]
    np.testing.assert_allclose(run("sigmoid_cross_entropy_with_logits", x, lab, None), want, rtol=1e-12)
    np.testing.assert_allclose(run("sigmoid_cross_entropy_with_logits", x, lab, None, normalize=True),
                               np.array(want) / 3, rtol=1e-12)


def test_sigmoid_ce_pos_weight_is_paddle_331_bit_for_bit():
    # printed by Paddle 3.3.1 (legacy IR, the op appended by hand; X@GRAD from paddle.static.gradients;
    # repr of each float32 as a Python float where 8 digits do not pin it down)
    x, lab = np.array([-1.5, 0.3, 2.0, -0.7], np.float32), np.array([1.0, 0.0, 1.0, 0.0], np.float32)
    pw, ones = np.array([2.0, 3.0, 0.5, 1.5], np.float32), np.ones(4, np.float32)
    np.testing.assert_array_equal(run("sigmoid_cross_entropy_with_logits", x, lab, pw),
                                  np.array([3.4028268, 1.9630659, 0.06346402, 0.9547792], np.float32))
    np.testing.assert_array_equal(run("sigmoid_cross_entropy_with_logits_grad", x, lab, pw, ones),
                                  np.array([-1.635149, -0.27667236, -0.05960146, -0.002281665802001953], np.float32))
    # float64, Out@GRAD d, labels -100 ignored; printed by Paddle 3.3.1 the same way
    x = np.array([0.0, 30.0, -30.0, 90.0, -90.0, -1.4578413757679298, 1.677385975587076, -3.5199438891252854])
    lab = np.array([-100.0, 0.15760144803070653, 1.0, 0.3564994420885479, 3.0, -100.0, 1.0, 0.12239848297579292])
    pw = np.array([2.6236242311754943, 1.343726473682159, 1.6994445258732207, 0.6639033646479474,
                   0.80234838300755, 0.7802117532216916, 0.301505491377259, 2.341138172463328])
    d = np.array([-0.10031706444805384, -0.6559982779150202, 0.49828506876480194, -0.21945471235280117,
                  -1.0199130875471998, 1.8824135849857386, 1.1661397483449962, 1.3777758925746164])
    np.testing.assert_array_equal(run("sigmoid_cross_entropy_with_logits", x, lab, pw), [
        0.0, 25.27195655907893, 50.983335776196775, 57.91505021203069, 252.2113544706795, 0.0,
        0.05165171389467355, 5.21986128289189])
    np.testing.assert_array_equal(run("sigmoid_cross_entropy_with_logits_grad", x, lab, pw, d), [
        0.0, -0.5526119994098806, -0.8468078324366248, -0.14121922983532478, 2.858151791696133, 0.0,
        -0.05535619112606548, -1.9236903621431842])
    # and the formula: pw scales softplus(-x) = -log(sigmoid(x)), and normalize divides by the count
    want = [(1 - t) * v + w * math.log(1 + math.exp(-v)) if t != -100 else 0.0 for v, t, w in zip(x, lab, pw)]
    np.testing.assert_allclose(run("sigmoid_cross_entropy_with_logits", x, lab, pw, normalize=True),
                               np.array(want) / 6, rtol=1e-13)


# ---- gradients ------------------------------------------------------------------------------
@pytest.mark.parametrize("op,ins,attrs", [
    ("squared_l2_norm", {"X": X3}, {}),
    ("clip", {"X": X3}, {"min": -0.5, "max": 0.7}),
    ("abs", {"X": X}, {}),
    ("reduce_max", {"X": X3}, {"dim": [-1]}),
    ("reduce_max", {"X": X3}, {"reduce_all": True}),
    ("reduce_min", {"X": X3}, {"dim": [0, 2], "keep_dim": True}),
    ("reduce_prod", {"X": X3}, {"dim": [1]}),
    ("reduce_prod", {"X": X3}, {"reduce_all": True}),
    ("top_k_v2", {"X": X3}, {"k": 2}),
    ("top_k_v2", {"X": X3}, {"k": 3, "axis": 1, "largest": False}),
    ("cumsum", {"X": X3}, {"axis": 1}),
    ("cumsum", {"X": X3}, {"axis": -1, "reverse": True, "exclusive": True}),
    ("cumsum", {"X": X3}, {"flatten": True}),
    ("log_softmax", {"X": X3}, {"axis": 1}),
    ("log_softmax", {"X": X3}, {}),
    ("sigmoid_cross_entropy_with_logits", {"X": X3, "Label": (R.random((2, 3, 4)) > 0.5) * 1.0}, {}),
    ("sigmoid_cross_entropy_with_logits", {"X": X3, "Label": R.random((2, 3, 4))}, {"normalize": True}),
    ("sigmoid_cross_entropy_with_logits",
     {"X": X3 * 3, "Label": R.random((2, 3, 4)), "pos_weight": R.random((2, 3, 4)) + 0.5}, {}),
    ("sigmoid_cross_entropy_with_logits",
     {"X": X3, "Label": R.random((2, 3, 4)), "pos_weight": R.random((2, 3, 4)) + 0.5}, {"normalize": True}),
])
def test_grads(op, ins, attrs):
    grad_check(op, ins, attrs)


def test_sign_grad_is_a_zero_scale():
    grad_check("sign", {"X": X})  # the derivative is 0 away from x == 0
    (desc,), _ = make_grad_op_descs("sign", {"X": ["x"]}, {"Out": ["y"]}, {}, set())
    assert desc["type"] == "scale" and desc["inputs"] == {"X": ["y@GRAD"]} and desc["attrs"]["scale"] == 0.0


def test_clip_by_norm_has_no_grad_op():
    assert get_op_def("clip_by_norm").grad is None  # Paddle registers none (it clips gradients)


# ---- registry facts (Paddle 3.3.1: ops.yaml / backward.yaml / op_compat.yaml) --------------------
@pytest.mark.parametrize("op,ins,outs", [
    ("clip", ["X", "Min?", "Max?"], ["Out"]), ("clip_grad", ["X", "Out@GRAD", "Min?", "Max?"], ["X@GRAD"]),
    ("reduce_max_grad", ["X", "Out", "Out@GRAD"], ["X@GRAD"]), ("cumsum_grad", ["X", "Out@GRAD"], ["X@GRAD"]),
    ("log_softmax_grad", ["Out", "Out@GRAD"], ["X@GRAD"]), ("top_k_v2", ["X", "K?"], ["Out", "Indices"]),
    ("top_k_v2_grad", ["X", "Indices", "Out@GRAD"], ["X@GRAD"]), ("one_hot_v2", ["X", "depth_tensor?"], ["Out"]),
    ("sigmoid_cross_entropy_with_logits_grad", ["X", "Label", "pos_weight?", "Out@GRAD"], ["X@GRAD"]),
])
def test_slots(op, ins, outs):
    od = get_op_def(op)
    assert [repr(s) for s in od.inputs] == ins and [repr(s) for s in od.outputs] == outs


# ---- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda: run("clip", X, None, None, min=1.0, max=0.5),
    lambda: run("clip_grad", X, X, np.array([2.0]), None, max=1.0),
    lambda: run("reduce_max", X3, dim=[3]),
    lambda: run("reduce_min", X3, dim=[-4]),
    lambda: run("reduce_max", np.zeros((2, 0)), dim=[1]),
    lambda: run("reduce_prod", X3, dim=[7]),
    lambda: run("top_k_v2", X3, None, k=5),
    lambda: run("top_k_v2", X3, np.array([0]), k=1),
    lambda: run("arg_max", X3, axis=5),
    lambda: run("arg_max", X3, dtype=5),
    lambda: run("cumsum", X3, axis=3),
    lambda: run("log_softmax", X3, axis=-4),
    lambda: run("one_hot_v2", np.array([0, 3]), None, depth=3),
    lambda: run("one_hot_v2", np.array([-1, 0]), None, depth=3),
    lambda: run("one_hot_v2", np.array([0]), None, depth=0),
    lambda: run("sigmoid_cross_entropy_with_logits", X3, X3[0], None),
    lambda: run("squared_l2_norm_grad", X, np.ones(2)),
])
def test_bad_input_is_invalid_argument(call):
    with pytest.raises(InvalidArgument):
        call()


def test_bad_attrs_at_build_time():
    import refimpl as paddle
    paddle.enable_static()
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [2, 3], "float32")
        block = main.global_block()
        for op_type, attrs in (("clip", {"min": 1.0, "max": 0.0}), ("reduce_max", {"dim": [2]}),
                               ("cumsum", {"axis": -3}), ("one_hot_v2", {"depth": 0})):
            out = block.create_var(name=f"out_{op_type}", dtype="float32")
            with pytest.raises(InvalidArgument, match=op_type):
                block.append_op(type=op_type, inputs={"X": [x]}, outputs={"Out": [out]}, attrs=attrs)


# Paddle 3.3.1 (CPU wheel) printed these float32 means of x = (sin(0.37 k) * 3 + 0.1), k < n; NumPy's
# pairwise mean differs in the last bits for every one of them.
PADDLE_MEANS = {17: "0x1.972e960000000p-4", 1000: "0x1.a57bfc0000000p-4", 4099: "0x1.a663300000000p-4",
                100003: "0x1.99af600000000p-4"}


@pytest.mark.parametrize("n", sorted(PADDLE_MEANS))
def test_mean_of_all_values_is_paddles_bit_for_bit(n):
    from refimpl.ops.math_ops import eigen_sum_f32
    x = (np.sin(np.arange(n) * 0.37) * 3 + 0.1).astype("float32")
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        v = paddle.static.data("x", [n], "float32")
        m = paddle.mean(v)
    got, = paddle.static.Executor(paddle.CPUPlace()).run(main, feed={"x": x}, fetch_list=[m])
    assert float(got) == float.fromhex(PADDLE_MEANS[n])
    assert float(np.float32(eigen_sum_f32(x) / np.float32(n))) == float(got)
