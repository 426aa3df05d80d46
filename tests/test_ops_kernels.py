"""Kernel checks against Paddle 3.3.1 constants and NumPy: losses, manipulation,
creation, layer_norm, dropout, logic and optimizer ops (``PADDLE_*`` constants were
computed independently with Paddle 3.3.1; Paddle is not imported here)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import refimpl.ops  # noqa: F401  (registers the ops)
from refimpl.core import random as rrandom
from refimpl.core.errors import InvalidArgument
from refimpl.core.tensor import TensorMeta
from refimpl.ops import get_op_def
from refimpl.ops.grad_maker import make_grad_op_descs
from refimpl.ops.registry import EMPTY_VAR_NAME

from op_check import run

# ---- softmax_with_cross_entropy ---------------------------------------------------
LOGITS = np.linspace(-2, 2, 12).astype(np.float32).reshape(3, 4)
# Paddle 3.3.1 on LOGITS: hard labels [[1], [-100], [3]]; soft labels SOFT; d mean(Loss) / d Logits
PADDLE_SWCE_HARD_LOSS = [[1.649259090423584], [0.0], [0.92198646068573]]
PADDLE_SWCE_HARD_DLOGITS = [[0.044533759355545044, -0.26926925778388977, 0.0921594426035881, 0.13257606327533722],
                            [0.0, 0.0, 0.0, 0.0],
                            [0.044533759355545044, 0.06406407803297043, 0.0921594426035881, -0.20075727999210358]]
SOFT = np.array([[0.1, 0.2, 0.3, 0.4], [0.25] * 4, [1, 0, 0, 0]], np.float32)
PADDLE_SWCE_SOFT_LOSS = [[1.2856228351593018], [1.4674409627914429], [2.012895345687866]]


def test_softmax_with_cross_entropy_forward():
    label = np.array([[1], [-100], [3]])
    sm, loss = run("softmax_with_cross_entropy", LOGITS, label)
    ref_sm = np.exp(LOGITS) / np.exp(LOGITS).sum(1, keepdims=True)
    np.testing.assert_allclose(sm, ref_sm, rtol=1e-6)
    np.testing.assert_allclose(loss, [[-np.log(ref_sm[0, 1])], [0.0], [-np.log(ref_sm[2, 3])]], rtol=1e-6)
    np.testing.assert_allclose(loss, PADDLE_SWCE_HARD_LOSS, rtol=1e-6)
    assert loss.dtype == np.float32 and loss.shape == (3, 1)
    dx = run("softmax_with_cross_entropy_grad", label, sm, np.full((3, 1), 1 / 3, np.float32))
    np.testing.assert_allclose(dx, PADDLE_SWCE_HARD_DLOGITS, rtol=1e-5, atol=1e-7)
    _, soft_loss = run("softmax_with_cross_entropy", LOGITS, SOFT, soft_label=True)
    np.testing.assert_allclose(soft_loss, PADDLE_SWCE_SOFT_LOSS, rtol=1e-6)
    np.testing.assert_allclose(soft_loss, -(SOFT * np.log(ref_sm)).sum(1, keepdims=True), rtol=1e-5)


def test_softmax_with_cross_entropy_edge_cases():
    # use_softmax=False with a zero probability: Paddle 3.3.1 gives 1e20 (its "tolerable value")
    _, loss = run("softmax_with_cross_entropy", np.array([[0.2, 0.0, 0.8]], np.float32), np.array([[1]]),
                  use_softmax=False)
    np.testing.assert_allclose(loss, [[1.0000000200408773e+20]], rtol=1e-6)
    with pytest.raises(InvalidArgument):
        run("softmax_with_cross_entropy", LOGITS, np.array([[1], [4], [0]]))
    # a label without the class dim is accepted
    _, loss = run("softmax_with_cross_entropy", LOGITS, np.array([1, 0, 3]))
    assert loss.shape == (3, 1)


# ---- manipulation ------------------------------------------------------------------
def test_reshape_transpose_forward():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out, xshape = run("reshape2", x, None, [], shape=[0, -1, 2])
    assert out.shape == (2, 6, 2) and xshape.shape == (0, 2, 3, 4) and xshape.size == 0
    out, _ = run("reshape2", x, np.array([4, -1]), [], shape=[1])
    assert out.shape == (4, 6)
    out, _ = run("reshape2", x, None, [np.array([3]), np.array([8])], shape=[-1, -1])
    assert out.shape == (3, 8)
    with pytest.raises(InvalidArgument):
        run("reshape2", x, None, [], shape=[5, -1])
    np.testing.assert_array_equal(run("reshape2_grad", xshape, out), x)
    t, ts = run("transpose2", x, axis=[2, 0, 1])
    np.testing.assert_array_equal(t, x.transpose(2, 0, 1))
    np.testing.assert_array_equal(run("transpose2_grad", ts, t, axis=[2, 0, 1]), x)


def test_concat_split_cast_assign_forward():
    a, b = np.ones((2, 3), np.float32), np.zeros((2, 1), np.float32)
    np.testing.assert_array_equal(run("concat", [a, b], None, axis=1), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(run("concat", [a, b], np.array([-1]), axis=0), np.concatenate([a, b], 1))
    x = np.arange(10.0).reshape(2, 5)
    parts = run("split", x, None, [], sections=[2, -1], num=0, axis=1)
    assert [p.shape for p in parts] == [(2, 2), (2, 3)]
    parts = run("split", x, None, [np.array([1]), np.array([4])], sections=[], num=0, axis=1)
    assert [p.shape for p in parts] == [(2, 1), (2, 4)]
    assert [p.shape for p in run("split", x, np.array([0]), [], num=2)] == [(1, 5), (1, 5)]
    out = run("cast", np.array([1.7, -1.7, 0.0]), out_dtype=3)
    assert out.dtype == np.int64 and out.tolist() == [1, -1, 0]
    assert run("cast", np.array([2.0, 0.0]), out_dtype=0).tolist() == [True, False]
    y = run("assign", x)
    assert y is not x and np.array_equal(y, x)


def test_grad_maker_descs():
    # concat: an input without a grad gets @EMPTY@; split's grad is a concat with split's attrs
    descs, _ = make_grad_op_descs("concat", {"X": ["a", "b", "c"], "AxisTensor": []}, {"Out": ["o"]},
                                  {"axis": 1}, {"a@GRAD", "c@GRAD"})
    assert descs[0]["type"] == "concat_grad"
    assert descs[0]["outputs"]["X@GRAD"] == [EMPTY_VAR_NAME, "b@GRAD", EMPTY_VAR_NAME]
    attrs = {"sections": [1, 2], "num": 0, "axis": 1}
    descs, _ = make_grad_op_descs("split", {"X": ["x"], "AxisTensor": [], "SectionsTensorList": []},
                                  {"Out": ["o1", "o2"]}, attrs, set())
    assert descs[0]["type"] == "concat" and descs[0]["inputs"]["X"] == ["o1@GRAD", "o2@GRAD"]
    assert descs[0]["attrs"] == attrs and descs[0]["outputs"] == {"Out": ["x@GRAD"]}
    descs, _ = make_grad_op_descs("cast", {"X": ["x"]}, {"Out": ["y"]}, {"in_dtype": 5, "out_dtype": 6}, set())
    assert descs[0]["type"] == "cast" and (descs[0]["attrs"]["in_dtype"], descs[0]["attrs"]["out_dtype"]) == (6, 5)
    descs, _ = make_grad_op_descs("reshape2", {"X": ["x"], "Shape": [], "ShapeTensor": []},
                                  {"Out": ["y"], "XShape": ["xs"]}, {"shape": [-1]}, set())
    assert descs[0]["inputs"] == {"XShape": ["xs"], "Out@GRAD": ["y@GRAD"]}


def _infer(op, ins, **attrs):
    od = get_op_def(op)
    return od.infer_shape(ins, dict(od.attrs, **attrs))


def test_infer_shapes():
    f = "float32"
    assert _infer("reshape2", {"X": [((-1, 3, 4), f)]}, shape=[-1, 12]) == \
        {"Out": ((-1, 12), f), "XShape": ((0, -1, 3, 4), f)}
    assert _infer("reshape2", {"X": [((-1, 3, 4), f)]}, shape=[0, 0, -1, 2])["Out"][0] == (-1, 3, -1, 2)
    assert _infer("reshape2", {"X": [((2, 3, 4), f)]}, shape=[4, 0, -1])["Out"][0] == (4, 3, 2)
    assert _infer("transpose2", {"X": [((-1, 3, 4), f)]}, axis=[2, 0, 1])["Out"][0] == (4, -1, 3)
    assert _infer("concat", {"X": [((-1, 3), f), ((2, -1), f)]}, axis=0)["Out"][0] == (-1, 3)
    assert _infer("split", {"X": [((-1, 6), f)]}, sections=[2, -1], axis=0)["Out"] == [((-1, 6), f)] * 2
    assert _infer("split", {"X": [((3, 6), f)]}, sections=[2, -1], axis=1)["Out"] == [((3, 2), f), ((3, 4), f)]
    assert _infer("layer_norm", {"X": [((-1, 3, 4), f)]}, begin_norm_axis=2)["Mean"] == ((-1, 3), f)
    assert _infer("softmax_with_cross_entropy", {"Logits": [((-1, 5, 3), f)]}, axis=1)["Loss"][0] == (-1, 1, 3)
    assert _infer("lookup_table_v2", {"Ids": [((-1, 1), "int64")], "W": [((10, 4), f)]})["Out"] == ((-1, 1, 4), f)
    assert _infer("fill_constant", {}, shape=[2, 5], dtype=3)["Out"] == ((2, 5), "int64")
    assert _infer("cast", {"X": [((-1, 2), f)]}, in_dtype=5, out_dtype=6)["Out"] == ((-1, 2), "float64")
    assert _infer("equal", {"X": [((-1, 3), "int64")], "Y": [((3,), "int64")]})["Out"] == ((-1, 3), "bool")
    assert _infer("dropout", {"X": [((-1, 3), f)]})["Mask"] == ((-1, 3), "uint8")


# ---- creation -------------------------------------------------------------------------
def test_fill_ops():
    out = run("fill_constant", None, None, [], dtype=5, shape=[2, 3], value=1.5)
    assert out.dtype == np.float32 and out.shape == (2, 3) and np.all(out == 1.5)
    # str_value wins over value; int64 stays exact (Paddle 3.3.1 gives [1234567890123] * 2)
    out = run("fill_constant", None, None, [], dtype=3, shape=[2], value=0.0, str_value="1234567890123")
    assert out.dtype == np.int64 and out.tolist() == [1234567890123] * 2
    assert run("fill_constant", None, None, [], dtype=5, shape=[1], value=3.0, str_value="-inf")[0] == -np.inf
    out = run("fill_constant", np.array([4.0]), np.array([2, 2]), [], dtype=6, shape=[], value=0.0)
    assert out.dtype == np.float64 and out.shape == (2, 2) and np.all(out == 4.0)
    out = run("fill_constant", None, None, [np.array([3]), np.array([1])], dtype=0, shape=[-1, -1], value=1.0)
    assert out.dtype == np.bool_ and out.shape == (3, 1) and out.all()
    x = np.zeros((2, 3), np.float32)
    out = run("fill_any_like", x, value=2.0, dtype=-1)
    assert out.dtype == np.float32 and np.all(out == 2.0)
    assert run("fill_any_like", x, value=1.0, dtype=3).dtype == np.int64


def test_random_ops_are_reproducible():
    rrandom.seed(123)
    u1 = run("uniform_random", None, [], shape=[3, 4], min=-2.0, max=3.0)
    g1 = run("gaussian_random", None, [], shape=[500], mean=1.0, std=2.0)
    rrandom.seed(123)
    u2 = run("uniform_random", None, [], shape=[3, 4], min=-2.0, max=3.0)
    g2 = run("gaussian_random", None, [], shape=[500], mean=1.0, std=2.0)
    assert np.array_equal(u1, u2) and np.array_equal(g1, g2)
    assert u1.dtype == np.float32 and u1.min() >= -2 and u1.max() < 3
    assert abs(g1.mean() - 1.0) < 0.3 and abs(g1.std() - 2.0) < 0.3
    a = run("uniform_random", None, [], shape=[5], seed=9)
    b = run("uniform_random", None, [], shape=[5], seed=9)
    assert np.array_equal(a, b)  # a non-zero seed attr repeats its numbers
    d = run("uniform_random", np.array([3, 3]), [], shape=[], diag_num=3, diag_step=3, diag_val=7.0)
    assert d.reshape(-1)[[0, 4, 8]].tolist() == [7.0, 7.0, 7.0]


# Paddle 3.3.1: W = arange(12).reshape(4, 3) / 10, ids = [[0, 2], [2, 3], [1, 2]], padding_idx 2,
# d mean(Out) / d W
PADDLE_EMB_DW_PAD2 = [[0.0555555559694767] * 3, [0.0555555559694767] * 3, [0.0] * 3, [0.0555555559694767] * 3]


def test_lookup_table():
    W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    ids = np.array([[0, 2], [2, 3], [1, 2]])
    out = run("lookup_table_v2", ids, W, padding_idx=2)
    assert out.shape == (3, 2, 3) and out.dtype == np.float32
    np.testing.assert_array_equal(out[0, 0], W[0])
    assert not out[ids == 2].any()
    dW = run("lookup_table_v2_grad", ids, TensorMeta(W.shape, W.dtype), np.full((3, 2, 3), 1 / 18, np.float32),
             padding_idx=2)
    np.testing.assert_allclose(dW, PADDLE_EMB_DW_PAD2, rtol=1e-6)
    with pytest.raises(InvalidArgument):
        run("lookup_table_v2", np.array([4]), W)


# ---- layer_norm and dropout ----------------------------------------------------------------
LN_X = np.linspace(-1, 2, 12).astype(np.float32).reshape(3, 4) ** 2
LN_SCALE = np.array([1, 2, 0.5, -1], np.float32)
LN_BIAS = np.array([0, 0.1, 0.2, 0.3], np.float32)
# Paddle 3.3.1 layer_norm(LN_X, LN_SCALE, LN_BIAS), begin_norm_axis 1; grads of mean(Y)
PADDLE_LN_Y = [[1.5160324573516846, 0.571654736995697, -0.120051309466362, 1.411757230758667],
               [-1.066381812095642, -1.2428511381149292, 0.2987389862537384, -1.2403292655944824],
               [-1.261267900466919, -0.9446860551834106, 0.3847311735153198, -1.1141486167907715]]
PADDLE_LN_MEAN = [0.44214877486228943, 0.3429752290248871, 2.623966932296753]
PADDLE_LN_VAR = [0.13539034128189087, 0.09850762784481049, 0.9468103647232056]
PADDLE_LN_DX = [[-0.15363942086696625, 0.27428480982780457, 0.07241897284984589, -0.19306427240371704],
                [-0.17300188541412354, 0.19344599545001984, 0.017287468537688255, -0.03773149847984314],
                [-0.0633544847369194, 0.07821916043758392, 0.017260795459151268, -0.03212542086839676]]
PADDLE_LN_DSCALE = [-0.06763477623462677, -0.07982844114303589, -0.006096856668591499, 0.153560072183609]


def test_layer_norm_forward_and_paddle_constants():
    y, mean, var = run("layer_norm", LN_X, LN_SCALE, LN_BIAS)
    ref_mean, ref_var = LN_X.mean(1), LN_X.var(1)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-6)
    np.testing.assert_allclose(var, ref_var, rtol=1e-5)
    ref_y = (LN_X - ref_mean[:, None]) / np.sqrt(ref_var[:, None] + 1e-5) * LN_SCALE + LN_BIAS
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, PADDLE_LN_Y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean, PADDLE_LN_MEAN, rtol=1e-6)
    np.testing.assert_allclose(var, PADDLE_LN_VAR, rtol=1e-5)
    assert y.dtype == np.float32
    dx, ds, db = run("layer_norm_grad", LN_X, LN_SCALE, TensorMeta((4,), np.float32), mean, var,
                     np.full((3, 4), 1 / 12, np.float32))
    np.testing.assert_allclose(dx, PADDLE_LN_DX, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ds, PADDLE_LN_DSCALE, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(db, [0.25] * 4, rtol=1e-6)
    _, mean3, _ = run("layer_norm", np.ones((2, 3, 4), np.float32), None, None, begin_norm_axis=2)
    assert mean3.shape == (2, 3)


def test_dropout_forward():
    x = np.ones((200, 50), np.float32)
    out, mask = run("dropout", x, np.array([3]), dropout_prob=0.3)
    assert mask.dtype == np.uint8 and abs(1 - mask.mean() - 0.3) < 0.02
    np.testing.assert_array_equal(out, mask.astype(np.float32))
    out, mask2 = run("dropout", x, np.array([3]), dropout_prob=0.3, dropout_implementation="upscale_in_train")
    np.testing.assert_array_equal(mask2, mask)
    np.testing.assert_allclose(out, mask / np.float32(0.7), rtol=1e-7)
    # Paddle 3.3.1: is_test downgrade_in_infer scales by 1 - p; upscale_in_train is the identity
    out, m = run("dropout", x, None, dropout_prob=0.25, is_test=True)
    assert m.size == 0 and np.all(out == 0.75)
    g = np.full((2, 5), 2.0, np.float32)
    assert np.all(run("dropout_grad", None, g, dropout_prob=0.25, is_test=True) == 1.5)
    assert np.all(run("dropout_grad", None, g, dropout_prob=0.25, is_test=True,
                      dropout_implementation="upscale_in_train") == 2.0)
    out, mask = run("dropout", x, None, dropout_prob=1.0, dropout_implementation="upscale_in_train")
    assert not out.any() and not mask.any()


# ---- logic --------------------------------------------------------------------------------
def test_logic_ops():
    x, y = np.array([[1, 2, 3], [3, 2, 1]]), np.array([1, 2, 1])
    np.testing.assert_array_equal(run("equal", x, y), x == y)
    np.testing.assert_array_equal(run("less_than", x, y), x < y)
    np.testing.assert_array_equal(run("less_than", x, np.array([2, 2]), axis=0), x < np.array([[2], [2]]))
    assert run("equal", x, y).dtype == np.bool_
    np.testing.assert_array_equal(run("logical_not", np.array([True, False])), [False, True])
    step = run("increment", np.array([5], np.int64), step=1.0)
    assert step.dtype == np.int64 and step.tolist() == [6]
    assert run("increment", np.array([0.5], np.float32), step=-2.0).tolist() == [-1.5]
    with pytest.raises(InvalidArgument):
        run("increment", np.array([1, 2]))
    descs, _ = make_grad_op_descs("increment", {"X": ["s"]}, {"Out": ["s2"]}, {"step": 2.0}, set())
    assert descs[0]["inputs"] == {"X": ["s2"]} and descs[0]["attrs"]["step"] == -2.0


# ---- optimizers ------------------------------------------------------------------------------
def _opt_inputs():
    f = np.float32
    return dict(p=np.linspace(-1, 1, 6).astype(f), g=np.linspace(0.5, -0.7, 6).astype(f),
                m1=np.linspace(-0.1, 0.1, 6).astype(f), m2=np.linspace(0.01, 0.03, 6).astype(f),
                v=np.linspace(0.2, -0.3, 6).astype(f), lr=np.array([0.01], f),
                b1p=np.array([0.9 ** 3], f), b2p=np.array([0.999 ** 3], f))


# Paddle 3.3.1 results of one step on _opt_inputs() (float32)
PADDLE_SGD_PARAM = [-1.0049999952316284, -0.6026000380516052, -0.20020000636577606, 0.2021999955177307,
                    0.6046000123023987, 1.0069999694824219]
PADDLE_MOM_PARAM = [-1.0068000555038452, -0.6035000085830688, -0.20020000636577606, 0.20309999585151672,
                    0.6064000129699707, 1.009700059890747]
PADDLE_MOM_VELOCITY = [0.6800000071525574, 0.3499999940395355, 0.019999999552965164, -0.3100000023841858,
                       -0.6399999856948853, -0.9700000286102295]
# mu 0.9, use_nesterov, l2_decay 0.05, rescale_grad 2.0 (which Paddle's CPU kernel ignores)
PADDLE_MOM_NESTEROV_L2_PARAM = [-1.0101699829101562, -0.605180025100708, -0.200190007686615,
                                0.20480000972747803, 0.609790027141571, 1.014780044555664]
PADDLE_MOM_NESTEROV_L2_VELOCITY = [0.6299999952316284, 0.3199999928474426, 0.009999998845160007,
                                   -0.29999998211860657, -0.6100000143051147, -0.9199999570846558]
PADDLE_ADAM_PARAM = [-0.9992014765739441, -0.5995228886604309, -0.19975897669792175, 0.20005445182323456,
                     0.5999001264572144, 0.9997684955596924]
PADDLE_ADAM_M1 = [-0.03999998793005943, -0.027999991551041603, -0.01599999889731407, -0.00400000624358654,
                  0.007999986410140991, 0.01999998465180397]
PADDLE_ADAM_M2 = [0.010239996947348118, 0.014053599908947945, 0.017982399091124535, 0.02202639915049076,
                  0.026185598224401474, 0.030459992587566376]
PADDLE_ADAM_B1POW, PADDLE_ADAM_B2POW = [0.6560999751091003], [0.9960060119628906]
# adamw: coeff 0.1, with_decay, lr_ratio 0.5 (moments and beta pows as for adam)
PADDLE_ADAMW_PARAM = [-0.9987014532089233, -0.5992228984832764, -0.19965897500514984, 0.19995445013046265,
                      0.5996001362800598, 0.9992684721946716]


def test_sgd_in_place():
    d = _opt_inputs()
    p = d["p"]
    ref = d["p"].astype(np.float64) - 0.01 * d["g"]
    out, master = run("sgd", p, d["lr"], d["g"], None)
    assert out is p and master is None
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    np.testing.assert_allclose(out, PADDLE_SGD_PARAM, rtol=1e-6)


def test_momentum():
    d = _opt_inputs()
    p, v = d["p"], d["v"]
    po, vo, _ = run("momentum", p, d["g"], v, d["lr"], None, mu=0.9)
    assert po is p and vo is v
    np.testing.assert_allclose(vo, PADDLE_MOM_VELOCITY, rtol=1e-6)
    np.testing.assert_allclose(po, PADDLE_MOM_PARAM, rtol=1e-6)
    d = _opt_inputs()
    g2 = d["g"] + 0.05 * d["p"]
    ref_v = 0.9 * d["v"] + g2
    ref_p = d["p"] - 0.01 * (g2 + 0.9 * ref_v)
    po, vo, _ = run("momentum", d["p"], d["g"], d["v"], d["lr"], None, mu=0.9, use_nesterov=True,
                    regularization_method="l2_decay", regularization_coeff=0.05, rescale_grad=2.0)
    np.testing.assert_allclose(vo, ref_v, rtol=1e-6)
    np.testing.assert_allclose(po, ref_p, rtol=1e-6)
    np.testing.assert_allclose(vo, PADDLE_MOM_NESTEROV_L2_VELOCITY, rtol=1e-6)
    np.testing.assert_allclose(po, PADDLE_MOM_NESTEROV_L2_PARAM, rtol=1e-6)


def _adam(op, d, **attrs):
    return run(op, d["p"], d["g"], d["lr"], d["m1"], d["m2"], None, d["b1p"], d["b2p"], None, None,
               None, None, None, **attrs)


def _adam_reference(d, lr_ratio=1.0, coeff=0.0, b1=0.9, b2=0.999, eps=1e-8):
    p, g, m1, m2 = (d[k].astype(np.float64) for k in ("p", "g", "m1", "m2"))
    b1p, b2p = float(d["b1p"][0]), float(d["b2p"][0])
    p = p - 0.01 * lr_ratio * coeff * p
    m1 = b1 * m1 + (1 - b1) * g
    m2 = b2 * m2 + (1 - b2) * g * g
    lr_t = 0.01 * math.sqrt(1 - b2p) / (1 - b1p)
    return p - lr_t * m1 / (np.sqrt(m2) + eps * math.sqrt(1 - b2p)), m1, m2


def test_adam():
    d = _opt_inputs()
    outs = _adam("adam", d)
    for got, want in zip(outs, (d["p"], d["m1"], d["m2"], None, d["b1p"], d["b2p"], None)):
        assert got is want  # updated in place
    ref_p, ref_m1, ref_m2 = _adam_reference(_opt_inputs())
    np.testing.assert_allclose(outs[0], ref_p, rtol=1e-6)
    np.testing.assert_allclose(outs[1], ref_m1, rtol=1e-5)
    np.testing.assert_allclose(outs[2], ref_m2, rtol=1e-6)
    for got, want in zip(outs, (PADDLE_ADAM_PARAM, PADDLE_ADAM_M1, PADDLE_ADAM_M2, None,
                                PADDLE_ADAM_B1POW, PADDLE_ADAM_B2POW)):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_adamw():
    d = _opt_inputs()
    outs = _adam("adamw", d, coeff=0.1, with_decay=True, lr_ratio=0.5)
    ref_p, _, _ = _adam_reference(_opt_inputs(), lr_ratio=0.5, coeff=0.1)
    np.testing.assert_allclose(outs[0], ref_p, rtol=1e-6)
    np.testing.assert_allclose(outs[0], PADDLE_ADAMW_PARAM, rtol=1e-6)
    np.testing.assert_allclose(outs[1], PADDLE_ADAM_M1, rtol=1e-6)
    np.testing.assert_allclose(outs[4], PADDLE_ADAM_B1POW, rtol=1e-6)
    d = _opt_inputs()  # with_decay False: plain adam whatever coeff says
    np.testing.assert_allclose(_adam("adamw", d, coeff=0.1)[0], PADDLE_ADAM_PARAM, rtol=1e-6)


def test_adam_options():
    d = _opt_inputs()
    m2max = np.full(6, 0.025, np.float32)
    out = run("adam", d["p"], d["g"], d["lr"], d["m1"], d["m2"], m2max, d["b1p"], d["b2p"], None, None,
              None, None, None, amsgrad=True)
    assert out[3] is m2max and np.all(m2max >= out[2])
    d = _opt_inputs()
    before = {k: v.copy() for k, v in d.items()}
    out = run("adam", d["p"], d["g"], d["lr"], d["m1"], d["m2"], None, d["b1p"], d["b2p"], None,
              np.array([True]), None, None, None)
    assert all(np.array_equal(d[k], before[k]) for k in d)  # SkipUpdate: nothing changes
    d = _opt_inputs()
    _adam("adam", d, use_global_beta_pow=True)
    assert d["b1p"][0] == np.float32(0.9 ** 3)
    d = _opt_inputs()
    out = run("adam", d["p"], d["g"], d["lr"], d["m1"], d["m2"], None, d["b1p"], d["b2p"], None, None,
              np.array([0.5], np.float32), None, None)
    np.testing.assert_allclose(out[4], [0.5 * 0.9 ** 3], rtol=1e-6)  # Beta1Tensor overrides beta1


def test_multi_precision_master_param():
    d = _opt_inputs()
    master = d["p"].astype(np.float32)
    param = d["p"].astype(np.float16)
    out, mout = run("sgd", param, d["lr"], d["g"], master, multi_precision=True)
    assert out is param and mout is master
    np.testing.assert_allclose(master, PADDLE_SGD_PARAM, rtol=1e-6)
    np.testing.assert_array_equal(param, master.astype(np.float16))



# ---- shapes the earlier kernels got wrong ---------------------------------------------------------
def _kernel(op_type):
    return get_op_def(op_type).kernel("numpy")[0]


def test_add_and_sub_grads_read_only_the_shape_of_a_freed_lower_rank_y():
    d = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    meta_x, meta_y = TensorMeta((2, 3, 4), np.float32), TensorMeta((3,), np.float32)
    for op, sign in (("elementwise_add_grad", 1), ("elementwise_sub_grad", -1)):
        dx, dy = _kernel(op)(meta_x, meta_y, d, axis=1, need=(True, True))
        np.testing.assert_array_equal(dx, d)
        np.testing.assert_array_equal(dy, sign * d.sum(axis=(0, 2)))


def test_integer_division_truncates_toward_zero_as_paddle():
    out = _kernel("elementwise_div")(np.array([7, -7, 5, -9]), np.array([2, 2, -3, -3]), axis=-1)
    assert out.dtype == np.int64 and out.tolist() == [3, -3, -1, 3]  # Paddle 3.3.1: [3, -3, -1, 3]


def test_vector_dot_product_grad_and_empty_mean_grad():
    x, y = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    dx, dy = _kernel("matmul_v2_grad")(x, y, np.float32(2), trans_x=False, trans_y=False, need=(True, True))
    np.testing.assert_array_equal(dx, 2 * y)
    np.testing.assert_array_equal(dy, 2 * x)
    g = _kernel("reduce_mean_grad")(np.zeros((0, 3), np.float32), np.zeros(3, np.float32),
                                    dim=[0], keep_dim=False, reduce_all=False)
    assert g.shape == (0, 3)


# ---- small matmuls add over k in order, as Paddle's CPU kernel ------------------------------------------
# The inputs given to Paddle, as exact float32 values (NumPy's float32 ``**`` differs by an ulp between CPUs,
# so they are written out rather than computed)
MM_X = np.array([-6.858999729156494, -3.5815768241882324, -1.5608959197998047, -0.49303892254829407,
                 -0.07408797740936279, -0.0001249996421393007, 0.03276801481842995, 0.32850927114486694,
                 1.1910161972045898, 2.9242067337036133, 5.832000732421875, 10.218314170837402],
                np.float32).reshape(3, 4)
MM_W = np.array([2.1969997882843018, 0.3285089135169983, 0.0005119985435158014, -0.1488770693540573,
                 -1.4815443754196167, -5.359377384185791, -13.144258499145508, -26.198074340820312],
                np.float32).reshape(4, 2)
# Paddle 3.3.1 (matmul_v2 on the CPU) on MM_X @ MM_W; NumPy's BLAS differs in the last bits
PADDLE_MM = [-6.277887344360352, 19.56207275390625, -4.529329299926758, -8.806245803833008,
             -140.33436584472656, -299.0001525878906]


def test_small_matmul_adds_over_k_in_order_as_paddle():
    out = _kernel("matmul_v2")(MM_X, MM_W, trans_x=False, trans_y=False)
    np.testing.assert_array_equal(out.reshape(-1), np.array(PADDLE_MM, np.float32))
    rng = np.random.default_rng(0)
    for m, k, n in [(1, 1, 2), (5, 9, 3), (8, 40, 17)]:
        x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        want = np.zeros((m, n), np.float32)
        for i in range(k):
            want = want + x[:, i:i + 1] * w[i:i + 1, :]
        for op, got in (("mul", _kernel("mul")(x, w, x_num_col_dims=1, y_num_col_dims=1)),
                        ("matmul_v2", _kernel("matmul_v2")(x, w, trans_x=False, trans_y=False))):
            assert got.tobytes() == want.tobytes(), op


def _k_order_loop(a, b):
    """The reference: out = sum_k a[..., :, k] * b[..., k, :], added k = 0, 1, ... with a rounding per add."""
    want = None
    for i in range(a.shape[-1]):
        t = a[..., :, i:i + 1] * b[..., i:i + 1, :]
        want = t if want is None else want + t
    return want


@settings(max_examples=80, deadline=None)
@given(m=st.integers(1, 12), k=st.integers(1, 40), n=st.integers(2, 20), batch=st.sampled_from([(), (2,), (3, 1)]),
       dtype=st.sampled_from(["float32", "float64"]), layout=st.sampled_from(["cc", "tc", "ct", "tt"]),
       seed=st.integers(0, 2 ** 16))
def test_small_products_add_over_k_in_order_for_every_layout(m, k, n, batch, dtype, layout, seed):
    """``mm`` and the reduction it falls back to (when this NumPy's einsum does not add in order) give
    the k-order sums bit for bit, whatever the operands' memory layout (the grad kernels pass
    transposed views)."""
    from refimpl.ops import math_ops
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (m, k)).astype(dtype)
    b = rng.standard_normal(batch[-1:] + (k, n)).astype(dtype)
    if layout[0] == "t":
        a = np.ascontiguousarray(a.swapaxes(-1, -2)).swapaxes(-1, -2)
    if layout[1] == "t":
        b = np.ascontiguousarray(b.swapaxes(-1, -2)).swapaxes(-1, -2)
    want = _k_order_loop(a, b).tobytes()
    assert math_ops.mm(a, b).tobytes() == want
    assert math_ops._reduce_in_order(a, b).tobytes() == want


def _eigen_order_mean_loop(x):
    """A float32 mean of all values as Eigen's full reduction: element i into lane i % 8 while whole
    packets of 8 last, lanes folded in halves, the tail summed in order and added first."""
    flat, f = x.reshape(-1), np.float32
    vec = len(flat) // 8 * 8
    lanes = [f(0)] * 8
    for i in range(vec):
        lanes[i % 8] = flat[i] if i < 8 else f(lanes[i % 8] + flat[i])
    tail = f(0)
    for v in flat[vec:]:
        tail = f(tail + v)
    a, b, c, d = (f(lanes[k] + lanes[k + 4]) for k in range(4))
    return f(f(tail + f(f(a + c) + f(b + d))) / f(len(flat)))


@settings(max_examples=80, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), dtype=st.sampled_from(["float32", "float64"]),
       scale=st.integers(-3, 3), seed=st.integers(0, 2 ** 16), keep=st.booleans(), which=st.integers(0, 3))
def test_reduce_mean_gives_numpys_or_eigens_mean_bit_for_bit(shape, dtype, scale, seed, keep, which):
    x = (np.random.default_rng(seed).standard_normal(shape) * 10.0 ** scale).astype(dtype)
    dim, axis = [([], None), ([0], (0,)), ([len(shape) - 1], (len(shape) - 1,)),
                 (list(range(len(shape))), None)][which]
    got = _kernel("reduce_mean")(x, dim=dim, keep_dim=keep, reduce_all=False)
    want = np.asarray(np.mean(x, axis=axis, keepdims=keep))
    if dtype == "float32" and (axis is None or len(axis) == len(shape)):  # Paddle's (Eigen's) order
        want = np.full(want.shape, _eigen_order_mean_loop(x), np.float32)
    if not keep and axis is None:
        want = want.reshape(())
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
