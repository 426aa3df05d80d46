"""NumPy kernels of index_ops.py and shape_ops.py (and the comparisons of logic_ops.py): forward
checks against plain NumPy / Python loops, float64 central-difference gradient checks through the
registered grad makers, and the typed errors for bad input."""
import numpy as np
import pytest

import refimpl.ops  # noqa: F401  (registers the ops)
from refimpl.core.errors import InvalidArgument
from refimpl.core.tensor import TensorMeta
from refimpl.ops import get_op_def
from refimpl.ops.grad_maker import make_grad_op_descs

from op_check import grad_check, run

R = np.random.default_rng(7)


# ---- comparisons ---------------------------------------------------------------------------
@pytest.mark.parametrize("op,fn", [("greater_than", lambda a, b: a > b), ("greater_equal", lambda a, b: a >= b),
                                   ("less_equal", lambda a, b: a <= b), ("not_equal", lambda a, b: a != b)])
def test_comparisons(op, fn):
    x = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], np.float32)
    y = np.array([2.0, 2.0, 2.0], np.float32)
    want = [[fn(float(x[i, j]), float(y[j])) for j in range(3)] for i in range(2)]
    got = run(op, x, y)
    assert got.dtype == np.bool_ and got.tolist() == want
    col = np.array([2.0, 1.0], np.float32)   # axis=0: Y aligned with X's first dim
    assert run(op, x, col, axis=0).tolist() == [[fn(float(x[i, j]), float(col[i])) for j in range(3)]
                                               for i in range(2)]
    with pytest.raises(InvalidArgument, match=op):
        run(op, x, np.ones(4, np.float32))


# ---- range ---------------------------------------------------------------------------------------
def test_range_forward():
    got = run("range", np.array([0], np.int64), np.array([11], np.int64), np.array([2], np.int64))
    assert got.dtype == np.int64 and got.tolist() == [0, 2, 4, 6, 8, 10]
    assert run("range", np.array([5]), np.array([1]), np.array([-2])).tolist() == [5, 3]
    got = run("range", np.array([0.5], np.float32), np.array([1.0], np.float32), np.array([0.1], np.float32))
    want, v = [], np.float32(0.5)
    while len(want) < 5:  # repeated float32 addition, as Paddle's CPU kernel
        want.append(v)
        v = np.float32(v + np.float32(0.1))
    assert got.dtype == np.float32 and got.tolist() == want


def test_range_bad_step():
    with pytest.raises(InvalidArgument, match="range: Step must not be 0"):
        run("range", np.array([0]), np.array([3]), np.array([0]))
    with pytest.raises(InvalidArgument, match="range"):
        run("range", np.array([0]), np.array([3]), np.array([-1]))


# ---- tril_triu --------------------------------------------------------------------------------------
@pytest.mark.parametrize("lower,diagonal", [(True, 0), (True, -1), (False, 0), (False, 2)])
def test_tril_triu(lower, diagonal):
    x = R.standard_normal((2, 3, 4))
    want = x.copy()
    for b in range(2):
        for i in range(3):
            for j in range(4):
                keep = j - i <= diagonal if lower else j - i >= diagonal
                want[b, i, j] = x[b, i, j] if keep else 0.0
    np.testing.assert_array_equal(run("tril_triu", x, lower=lower, diagonal=diagonal), want)
    grad_check("tril_triu", {"X": x}, {"lower": lower, "diagonal": diagonal})


def test_tril_triu_rank():
    with pytest.raises(InvalidArgument, match="tril_triu"):
        run("tril_triu", np.ones(3), lower=True)


# ---- where --------------------------------------------------------------------------------------------
def test_where_forward_and_grad():
    c = R.random((2, 3)) < 0.5
    x, y = R.standard_normal((2, 3)), R.standard_normal((2, 3))
    want = [[x[i, j] if c[i, j] else y[i, j] for j in range(3)] for i in range(2)]
    np.testing.assert_array_equal(run("where", c, x, y), want)
    grad_check("where", {"Condition": c, "X": x, "Y": y}, wrt=("X", "Y"))


def test_where_grad_slots():
    descs, _ = make_grad_op_descs("where", {"Condition": ["c"], "X": ["x"], "Y": ["y"]}, {"Out": ["o"]}, {},
                                  {"y@GRAD"})
    assert descs[0]["type"] == "where_grad"
    assert descs[0]["inputs"] == {"Condition": ["c"], "X": ["x"], "Y": ["y"], "Out@GRAD": ["o@GRAD"]}
    assert descs[0]["outputs"] == {"X@GRAD": ["x@GRAD"], "Y@GRAD": []}
    assert get_op_def("where_grad").no_need_buffer == ("X", "Y")


def test_where_shape_mismatch():
    with pytest.raises(InvalidArgument, match="where: the shape of X"):
        run("where", np.ones((2, 3), bool), np.ones((3, 2)), np.ones((2, 3)))


# ---- slice ------------------------------------------------------------------------------------------------
def test_slice_forward():
    x = R.standard_normal((3, 5, 4))
    np.testing.assert_array_equal(run("slice", x, None, None, [], [], axes=[1, 2], starts=[1, -3],
                                      ends=[4, 100]), x[:, 1:4, 1:4])
    got = run("slice", x, None, None, [], [], axes=[1], starts=[2], ends=[3], decrease_axis=[1])
    np.testing.assert_array_equal(got, x[:, 2, :])
    got = run("slice", x, np.array([0, 1]), None, [], [np.array([2]), np.array([2])], axes=[0, 1],
              starts=[9, 9], ends=[9, 9])  # tensors override the attrs
    np.testing.assert_array_equal(got, x[0:2, 1:2])
    one = run("slice", x[:1, :1, :1], None, None, [], [], axes=[0, 1, 2], starts=[0, 0, 0], ends=[1, 1, 1],
              decrease_axis=[0, 1, 2])
    assert one.shape == () and one == x[0, 0, 0]


def test_slice_grad():
    x = R.standard_normal((3, 5, 4))
    grad_check("slice", {"Input": x}, {"axes": [1, 2], "starts": [1, -3], "ends": [4, 100]}, wrt=("Input",))
    grad_check("slice", {"Input": x}, {"axes": [1], "starts": [2], "ends": [3], "decrease_axis": [1]},
               wrt=("Input",))


def test_slice_bad_input():
    x = np.ones((2, 3))
    with pytest.raises(InvalidArgument, match="slice: axes value 2"):
        run("slice", x, None, None, [], [], axes=[2], starts=[0], ends=[1])
    with pytest.raises(InvalidArgument, match="slice: end"):
        run("slice", x, None, None, [], [], axes=[1], starts=[2], ends=[1])
    with pytest.raises(InvalidArgument, match="decrease_axis"):
        run("slice", x, None, None, [], [], axes=[1], starts=[0], ends=[2], decrease_axis=[1])


# ---- gather --------------------------------------------------------------------------------------------------
def test_gather_forward():
    x = R.standard_normal((2, 5, 3))
    idx = np.array([4, 0, 4, 2])
    want = np.stack([x[:, i, :] for i in idx], axis=1)
    np.testing.assert_array_equal(run("gather", x, idx, None, axis=1), want)
    np.testing.assert_array_equal(run("gather", x, idx[:2], np.array([1]), axis=0), want[:, :2])
    np.testing.assert_array_equal(run("gather", x, np.array(1), None), x[1])  # a 0-D index drops the axis


def test_gather_grad_repeats():
    x = R.standard_normal((2, 5, 3))
    grad_check("gather", {"X": x, "Index": np.array([4, 0, 4, 2])}, {"axis": 1})
    grad_check("gather", {"X": x, "Index": np.array([1, 1])}, {"axis": 0})


def test_gather_index_out_of_range():
    with pytest.raises(InvalidArgument, match=r"gather: Index value 5 at position 1"):
        run("gather", np.ones((2, 5)), np.array([0, 5]), None, axis=1)
    with pytest.raises(InvalidArgument, match=r"gather: Index value -1"):
        run("gather", np.ones((2, 5)), np.array([-1]), None)
    with pytest.raises(InvalidArgument, match="gather: axis value 3"):
        run("gather", np.ones((2, 5)), np.array([0]), None, axis=3)


# ---- squeeze2 / unsqueeze2 --------------------------------------------------------------------------------------
def test_squeeze_unsqueeze_forward():
    x = R.standard_normal((1, 3, 1, 2))
    out, xshape = run("squeeze2", x, axes=[0, 1, -2])
    assert out.shape == (3, 2) and xshape.shape == (0, 1, 3, 1, 2)
    np.testing.assert_array_equal(out, x[0, :, 0, :])
    assert run("squeeze2", x, axes=[])[0].shape == (3, 2)
    out, xshape = run("unsqueeze2", x[0, :, 0], None, [], axes=[0, -1, 2])
    assert out.shape == (1, 3, 1, 2, 1) and xshape.shape == (0, 3, 2)
    assert run("unsqueeze2", np.ones((3, 2)), np.array([1]), [], axes=[9])[0].shape == (3, 1, 2)


def test_squeeze_unsqueeze_grads():
    grad_check("squeeze2", {"X": R.standard_normal((1, 3, 1))}, {"axes": [0]})
    grad_check("unsqueeze2", {"X": R.standard_normal((3, 2))}, {"axes": [1]})


def test_squeeze_unsqueeze_bad_axes():
    with pytest.raises(InvalidArgument, match="squeeze2: axes value 4"):
        run("squeeze2", np.ones((1, 3)), axes=[4])
    with pytest.raises(InvalidArgument, match="unsqueeze2: axes value 4"):
        run("unsqueeze2", np.ones((1, 3)), None, [], axes=[4])


# ---- stack --------------------------------------------------------------------------------------------------------
def test_stack_forward_and_grad():
    a, b = R.standard_normal((2, 3)), R.standard_normal((2, 3))
    got = run("stack", [a, b], axis=1)
    assert got.shape == (2, 2, 3)
    for i in range(2):
        np.testing.assert_array_equal(got[:, 0][i], a[i])
        np.testing.assert_array_equal(got[:, 1][i], b[i])
    grad_check("stack", {"X": [a, b]}, {"axis": -1}, out_slot="Y")
    with pytest.raises(InvalidArgument, match="stack"):
        run("stack", [a, b.T], axis=0)
    with pytest.raises(InvalidArgument, match="stack: axis 4"):
        run("stack", [a, b], axis=4)


def test_stack_grad_skips_inputs_without_grad():
    descs, _ = make_grad_op_descs("stack", {"X": ["a", "b"]}, {"Y": ["y"]}, {"axis": 0}, {"a@GRAD"})
    assert descs[0]["outputs"] == {"X@GRAD": ["@EMPTY@", "b@GRAD"]}
    got = run("stack_grad", [TensorMeta((2,), np.float64)] * 2, np.arange(4.0).reshape(2, 2))
    assert [g.tolist() for g in got] == [[0.0, 1.0], [2.0, 3.0]]


# ---- expand_v2 -------------------------------------------------------------------------------------------------------
def test_expand_forward_and_grad():
    x = R.standard_normal((1, 3))
    got = run("expand_v2", x, None, [], shape=[2, 4, -1])
    want = np.empty((2, 4, 3))
    for i in range(2):
        for j in range(4):
            want[i, j] = x[0]
    np.testing.assert_array_equal(got, want)
    assert run("expand_v2", x, np.array([2, 3]), [], shape=[])[0].shape == (3,)
    grad_check("expand_v2", {"X": x}, {"shape": [2, 4, -1]})
    grad_check("expand_v2", {"X": R.standard_normal((2, 1))}, {"shape": [2, 3]})


def test_expand_bad_shape():
    with pytest.raises(InvalidArgument, match="expand_v2: X's dim 1 is 3"):
        run("expand_v2", np.ones((1, 3)), None, [], shape=[2, 4])
    with pytest.raises(InvalidArgument, match="expand_v2"):
        run("expand_v2", np.ones((1, 3)), None, [], shape=[3])


# ---- build-time shapes and errors (infer_shape) ----------------------------------------------------------
def _infer(op, attrs=None, **ins):
    od = get_op_def(op)
    return od.infer_shape({k: v for k, v in ins.items()}, dict(od.attrs, **(attrs or {})))


def test_infer_shapes():
    f = "float32"
    assert _infer("slice", {"axes": [1], "starts": [1], "ends": [4]}, Input=[((-1, 5, 6), f)])["Out"] == ((-1, 3, 6), f)
    assert _infer("slice", {"axes": [1], "starts": [1], "ends": [2], "decrease_axis": [1]},
                  Input=[((-1, 2, 3, 6), f)])["Out"] == ((-1, 3, 6), f)
    assert _infer("gather", {"axis": 1}, X=[((-1, 11, 6), f)], Index=[((6,), "int64")])["Out"] == ((-1, 6, 6), f)
    assert _infer("unsqueeze2", {"axes": [1]}, X=[((-1, 3, 6), f)]) == {"Out": ((-1, 1, 3, 6), f),
                                                                        "XShape": ((0, -1, 3, 6), f)}
    assert _infer("squeeze2", {"axes": [1]}, X=[((-1, 1, 3, 6), f)])["Out"] == ((-1, 3, 6), f)
    assert _infer("stack", {"axis": 1}, X=[((-1, 3, 6), f)] * 2)["Y"] == ((-1, 2, 3, 6), f)
    assert _infer("expand_v2", {"shape": [6, 6]}, X=[((1, 6), f)])["Out"] == ((6, 6), f)
    assert _infer("range", Start=[((1,), "int64")], End=[((1,), "int64")], Step=[((1,), "int64")])["Out"] == \
        ((-1,), "int64")
    assert _infer("greater_than", X=[((5, 5), f)], Y=[((), f)])["Out"] == ((5, 5), "bool")
    assert _infer("gather_nd", X=[((-1, 3, 4), f)], Index=[((5, 2), "int64")])["Out"] == ((5, 4), f)
    assert _infer("tile", {"repeat_times": [2, 1, 3]}, X=[((-1, 4), f)])["Out"] == ((2, -1, 12), f)


def test_build_time_errors():
    f = "float32"
    with pytest.raises(InvalidArgument, match="slice: axes value 3"):
        _infer("slice", {"axes": [3], "starts": [0], "ends": [1]}, Input=[((-1, 5, 6), f)])
    with pytest.raises(InvalidArgument, match="where: the shape of Y"):
        _infer("where", Condition=[((-1, 4), "bool")], X=[((-1, 4), f)], Y=[((-1, 5), f)])
    with pytest.raises(InvalidArgument, match="gather: axis value -3"):
        _infer("gather", {"axis": -3}, X=[((2, 3), f)], Index=[((1,), "int64")])
    with pytest.raises(InvalidArgument, match="expand_v2"):
        _infer("expand_v2", {"shape": [2, 4]}, X=[((1, 3), f)])
    with pytest.raises(InvalidArgument, match="tril_triu"):
        _infer("tril_triu", X=[((4,), f)])


# ---- gather_nd ------------------------------------------------------------------------------------------------------
def test_gather_nd_forward_and_grad():
    x = R.standard_normal((2, 3, 4))
    idx = np.array([[1, 2], [0, -1], [1, 2]])
    got = run("gather_nd", x, idx)
    want = np.stack([x[i % 2, j % 3] for i, j in idx])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run("gather_nd", x, np.array([[[1, 0, 3]]])), [[x[1, 0, 3]]])
    assert run("gather_nd", x, np.zeros((2, 0), np.int64)).shape == (2, 2, 3, 4)
    grad_check("gather_nd", {"X": x, "Index": idx})
    grad_check("gather_nd", {"X": x, "Index": np.array([[1], [1], [0]])})


def test_gather_nd_bad_index():
    with pytest.raises(InvalidArgument, match=r"gather_nd: Index value 3"):
        run("gather_nd", np.ones((2, 3)), np.array([[1, 3]]))
    with pytest.raises(InvalidArgument, match=r"gather_nd: Index value -3"):
        run("gather_nd", np.ones((2, 3)), np.array([[-3]]))
    with pytest.raises(InvalidArgument, match="exceeds the rank"):
        run("gather_nd", np.ones((2, 3)), np.array([[0, 0, 0]]))


# ---- tile -----------------------------------------------------------------------------------------------------------
def test_tile_forward_and_grad():
    x = R.standard_normal((2, 3))
    got = run("tile", x, None, [], repeat_times=[2, 1, 2])
    assert got.shape == (2, 2, 6)
    for a in range(2):
        for i in range(2):
            for j in range(6):
                assert got[a, i, j] == x[i, j % 3]
    np.testing.assert_array_equal(run("tile", x, np.array([2]), [], repeat_times=[9]), np.concatenate([x, x], 1))
    grad_check("tile", {"X": x}, {"repeat_times": [2, 1, 2]})
    grad_check("tile", {"X": R.standard_normal((3, 1))}, {"repeat_times": [2]})
    with pytest.raises(InvalidArgument, match="tile: every repeat_times value must be positive"):
        run("tile", x, None, [], repeat_times=[0, 1])
