"""NumPy kernels of the tensor ops (strided_slice, shape, assign_value, fill_constant_batch_size_like,
the logical ops, is_empty, bmm, broadcasting matmul_v2, accuracy) and their API functions: forward
checks against Python loops / independent formulas and numbers printed by a real Paddle, float64
central-difference gradient checks through the registered grad makers, the programs the API builds
(against programs printed by Paddle), and the typed errors for bad input."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.core.tensor import TensorMeta
from refimpl.ops import get_op_def
from refimpl.ops.grad_maker import make_grad_op_descs

from op_check import grad_check, run

R = np.random.default_rng(11)
NO_T = [None, [], None, [], None, []]


# ---- strided_slice ------------------------------------------------------------------------------
def _ss(x, *tensors, **attrs):
    return run("strided_slice", x, *(tensors or NO_T), **attrs)


def test_strided_slice_matches_python_slicing():
    """Each (start, end, stride) is Python's slice on its dim, negative strides included."""
    x = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    for s0, e0, t0 in [(3, -5, -1), (0, 4, 2), (-1, -100, -2), (2, 1, 1), (100, -100, -3)]:
        for s1, e1, t1 in [(-1, -7, -2), (1, 100, 2), (5, 2, -1), (0, 6, 7)]:
            rows = list(range(4))[s0:e0:t0]
            cols = list(range(6))[s1:e1:t1]
            want = [[x[r, c] for c in cols] for r in rows]
            got = _ss(x, axes=[0, 1], starts=[s0, s1], ends=[e0, e1], strides=[t0, t1])
            assert got.shape == (len(rows), len(cols)) and got.tolist() == want, (s0, e0, t0, s1, e1, t1)


def test_strided_slice_paddle_numbers():
    """Outputs printed by Paddle 3.3.1 (FLAGS_enable_pir_api=0) for x = arange(24).reshape(4, 6)."""
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    got = _ss(x, axes=[0, 1], starts=[3, -1], ends=[0, -7], strides=[-1, -2])
    assert got.tolist() == [[23.0, 21.0, 19.0], [17.0, 15.0, 13.0], [11.0, 9.0, 7.0]]
    assert _ss(x, axes=[1], starts=[2], ends=[1], strides=[-1]).tolist() == [[2.0], [8.0], [14.0], [20.0]]
    assert _ss(x, axes=[0], starts=[5], ends=[2], strides=[1]).shape == (0, 6)
    # a repeated axis: the later entry wins
    assert _ss(x, axes=[0, 0], starts=[0, 1], ends=[2, 3], strides=[1, 1]).tolist() == x[1:3].tolist()


# (start, end, stride) on a dim of 5 and Out for x = 10 + arange(5), printed by Paddle 3.3.1
# (FLAGS_enable_pir_api=0, one program per combination, the op appended by hand): a sample of the grid
# starts / ends in -7..7, +-2**31 and strides +-1, +-2, +-3, on all of which 3.3.1 is Python's slicing and
# raises nothing. Paddle 2.6.2 differed: its end -1 with a negative stride ran to the front, and a range
# empty the wrong way round raised InvalidArgument.
SS_GRID_331 = [
    (-7, -7, -1, []), (-6, -1, -3, []), (-5, -7, -1, [10]), (-3, 2147483647, 1, [12, 13, 14]),
    (-1, -1, -1, []), (-1, -2147483648, -3, [14, 11]), (0, -1, -1, []), (1, -2147483648, 3, []),
    (2, -4, -1, [12]), (3, 7, -1, []), (4, -1, -2, []), (7, -7, -3, [14, 11]), (7, 3, -1, [14]),
    (2147483647, -1, -1, []), (2147483647, -2147483648, -2, [14, 12, 10]),
    (2147483647, -2147483648, -1, [14, 13, 12, 11, 10]), (-2147483648, 2147483647, -1, []),
    (-2147483648, 2147483647, 2, [10, 12, 14]), (-3, 6, -2, []), (4, 2147483647, -2, []),
    (3, 2147483647, 2, [13]), (-5, 3, 1, [10, 11, 12]), (0, 0, -2, []), (5, -5, -3, [14, 11]), (2, 1, 2, []),
    (5, 2, 1, []), (4, 4, -2, []), (-6, -2, -1, []), (5, -5, 2, []), (-7, -3, -1, []),
    (-2147483648, 6, 3, [10, 13]), (2, 0, -3, [12]),
]


@pytest.mark.parametrize("start,end,stride,want", SS_GRID_331)
def test_strided_slice_bounds_grid_paddle_331(start, end, stride, want):
    x = np.arange(5, dtype=np.float32) + 10
    attrs = dict(axes=[0], starts=[start], ends=[end], strides=[stride])
    assert _ss(x, **attrs).tolist() == want
    dx = run("strided_slice_grad", x, np.ones(len(want), np.float32), *NO_T, **attrs)
    assert dx.tolist() == [float(v in want) for v in x]  # Paddle's X@GRAD of sum(Out): 1 where read
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        xv = paddle.static.data("x", [5], "float32")
        out = main.global_block().create_var(name="o", dtype="float32")
        main.global_block().append_op(type="strided_slice", inputs={"Input": [xv]}, outputs={"Out": [out]},
                                      attrs=dict(attrs, infer_flags=[1]))
    assert out.shape == (len(want),)


def test_strided_slice_decrease_axis_and_tensors():
    x = R.standard_normal((3, 4, 5))
    got = _ss(x, axes=[1], starts=[2], ends=[3], strides=[1], decrease_axis=[1])
    assert got.shape == (3, 5) and np.array_equal(got, x[:, 2, :])
    # StartsTensor, EndsTensorList and StridesTensor override the attrs
    got = _ss(x, np.array([4]), [], None, [np.array([0])], np.array([-2]), [], axes=[1], starts=[0], ends=[9],
              strides=[1])
    assert np.array_equal(got, x[:, 4:0:-2, :])


def test_strided_slice_float_bound_tensors_are_an_error():
    x = np.arange(6.0)
    with pytest.raises(InvalidArgument, match="strided_slice: input StartsTensor must be an int32 or int64 "
                                              "tensor, got float32"):
        _ss(x, np.array([1.7], np.float32), [], None, [], None, [], axes=[0], starts=[0], ends=[6], strides=[1])
    with pytest.raises(InvalidArgument, match=r"strided_slice: input StridesTensorList\[0\] .* got float64"):
        _ss(x, None, [], None, [], None, [np.array([2.0])], axes=[0], starts=[0], ends=[6], strides=[1])
    got = _ss(x, np.array([1], np.int32), [], None, [np.array([5], np.int64)], None, [], axes=[0], starts=[0],
              ends=[6], strides=[1])
    assert got.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_strided_slice_grad():
    x = R.standard_normal((3, 5, 4))
    for attrs in ({"axes": [1, 2], "starts": [4, 0], "ends": [-6, 4], "strides": [-2, 3]},
                  {"axes": [0], "starts": [1], "ends": [2], "strides": [1], "decrease_axis": [0]}):
        grad_check("strided_slice", {"Input": x}, attrs, wrt=("Input",))


def test_strided_slice_grad_op_desc_and_no_need_buffer():
    descs, _ = make_grad_op_descs("strided_slice", {"Input": ["x"]}, {"Out": ["y"]},
                                  get_op_def("strided_slice").attrs, set())
    (d,) = descs
    assert d["type"] == "strided_slice_grad"
    assert d["inputs"]["Input"] == ["x"] and d["inputs"]["Out@GRAD"] == ["y@GRAD"]
    assert d["outputs"] == {"Input@GRAD": ["x@GRAD"]}
    assert get_op_def("strided_slice_grad").no_need_buffer == ("Input",)
    g = np.ones((2, 2), np.float32)  # the grad reads only Input's shape
    dx = run("strided_slice_grad", TensorMeta((2, 4), np.float32), g, *NO_T, axes=[1], starts=[0], ends=[4],
             strides=[2])
    assert dx.tolist() == [[1, 0, 1, 0], [1, 0, 1, 0]]


@pytest.mark.parametrize("attrs,match", [
    ({"axes": [2], "starts": [0], "ends": [1], "strides": [1]}, r"axes\[0\] must be in \[0, 2\).*got 2"),
    ({"axes": [-1], "starts": [0], "ends": [1], "strides": [1]}, r"axes\[0\].*got -1"),
    ({"axes": [0], "starts": [0], "ends": [4], "strides": [0]}, r"strides\[0\] must not be 0"),
    ({"axes": [0, 1], "starts": [0], "ends": [4], "strides": [1]}, "axes .* differ in length"),
])
def test_strided_slice_errors_at_build_time(attrs, match):
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [4, 6], "float32")
        out = main.global_block().create_var(name="o", dtype="float32")
        with pytest.raises(InvalidArgument, match="strided_slice: " + match):
            main.global_block().append_op(type="strided_slice", inputs={"Input": [x]}, outputs={"Out": [out]},
                                          attrs=attrs)


def test_strided_slice_static_shape():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [-1, 4, 6], "float32")
        out = main.global_block().create_var(name="o", dtype="float32")
        main.global_block().append_op(type="strided_slice", inputs={"Input": [x]}, outputs={"Out": [out]},
                                      attrs={"axes": [1, 2], "starts": [0, 1], "ends": [4, 6], "strides": [2, 2]})
    assert out.shape == (-1, 2, 3)  # as Paddle 3.3.1 printed it


# ---- shape, assign_value, fill_constant_batch_size_like -------------------------------------------
def test_shape_reads_only_the_shape():
    got = run("shape", TensorMeta((5, 3, 0), np.float32))
    assert got.dtype == np.int32 and got.tolist() == [5, 3, 0]
    assert run("shape", np.float64(2.0).reshape(())).tolist() == []
    assert get_op_def("shape").no_need_buffer == ("Input",)


def test_assign_value():
    got = run("assign_value", None, shape=[2, 2], dtype=5, values=[1.5, -2.0, 0.1, 3.0])
    assert got.dtype == np.float32 and got.tolist() == [[1.5, -2.0], [np.float32(0.1), 3.0]]
    assert run("assign_value", None, shape=[3], dtype=3, values=[1, -2, 2 ** 40]).tolist() == [1, -2, 2 ** 40]
    assert run("assign_value", None, shape=[2], dtype=0, values=[True, False]).tolist() == [True, False]
    got = run("assign_value", None, shape=[], dtype=2, values=[3])
    assert got.shape == () and got.dtype == np.int32 and got == 3
    with pytest.raises(InvalidArgument, match=r"assign_value: 3 values do not fill shape \[2, 2\]"):
        run("assign_value", None, shape=[2, 2], dtype=5, values=[1.0, 2.0, 3.0])
    # (Paddle 3.3.1's kernel wraps 2**40 to 0 in int32 without a word; refimpl refuses it)
    with pytest.raises(InvalidArgument, match="assign_value: value 1099511627776 does not fit dtype int32"):
        run("assign_value", None, shape=[3], dtype=2, values=[1, -2, 2 ** 40])


def test_fill_constant_batch_size_like():
    got = run("fill_constant_batch_size_like", TensorMeta((5, 3), np.float32), shape=[7, 2, -1],
              output_dim_idx=2, dtype=3, value=1.5)
    assert got.dtype == np.int64 and got.shape == (7, 2, 5) and (got == 1).all()  # Paddle 3.3.1 printed 1s
    got = run("fill_constant_batch_size_like", TensorMeta((2, 4), np.float32), shape=[-1, 3], input_dim_idx=1,
              dtype=6, str_value="0.1")
    assert got.dtype == np.float64 and got.shape == (4, 3) and (got == 0.1).all()
    with pytest.raises(InvalidArgument, match="fill_constant_batch_size_like: output_dim_idx 2"):
        run("fill_constant_batch_size_like", np.zeros((2, 3)), shape=[1, 1], output_dim_idx=2)
    with pytest.raises(InvalidArgument, match="fill_constant_batch_size_like: input_dim_idx 2"):
        run("fill_constant_batch_size_like", np.zeros((2, 3)), shape=[1, 1], input_dim_idx=2)
    # a -1 outside output_dim_idx: Paddle 3.3.1 builds Out (2, -1) but fails at run time
    with pytest.raises(InvalidArgument, match=r"fill_constant_batch_size_like: shape \[-1, -1\] leaves a "
                                              r"negative dim outside output_dim_idx 0"):
        run("fill_constant_batch_size_like", np.zeros((2, 3)), shape=[-1, -1])


def test_fill_constant_batch_size_like_static_shape():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [-1, 3], "float32")
        o = main.global_block().create_var(name="o", dtype="float32")
        main.global_block().append_op(type="fill_constant_batch_size_like", inputs={"Input": [x]},
                                      outputs={"Out": [o]},
                                      attrs={"shape": [7, 2, -1], "output_dim_idx": 2, "dtype": 3, "value": 1.5})
    assert o.shape == (7, 2, -1) and o.dtype == "int64"  # as Paddle 3.3.1 printed them
    with paddle.static.program_guard(main, paddle.static.Program()):
        y = paddle.static.data("y", [2, 3], "float32")
        o2 = main.global_block().create_var(name="o2", dtype="float32")
        main.global_block().append_op(type="fill_constant_batch_size_like", inputs={"Input": [y]},
                                      outputs={"Out": [o2]}, attrs={"shape": [-1, -1], "value": 1.0})
    assert o2.shape == (2, -1)  # Paddle 3.3.1 built this too (and failed when run)


# ---- logical ops, is_empty ---------------------------------------------------------------------------
@pytest.mark.parametrize("op,fn", [("logical_and", lambda a, b: a and b), ("logical_or", lambda a, b: a or b),
                                   ("logical_xor", lambda a, b: a != b)])
def test_logical_ops(op, fn):
    x = R.random((2, 1, 3)) < 0.5
    y = R.random((4, 1)) < 0.5
    got = run(op, x, y)
    want = [[[fn(bool(x[i, 0, k]), bool(y[j, 0])) for k in range(3)] for j in range(4)] for i in range(2)]
    assert got.dtype == np.bool_ and got.tolist() == want
    with pytest.raises(InvalidArgument, match=op + ": the shapes of X"):
        run(op, x, np.ones((3, 2), bool))


def test_logical_ops_read_non_zero_as_true():
    """Paddle 2.6.2 printed [[F, T, T], [F, T, T]] for logical_and(a, a), a = [[0, 1, 2], [-0.0, nan, 3]]."""
    a = np.array([[0, 1, 2], [-0.0, np.nan, 3]], np.float32)
    assert run("logical_and", a, a).tolist() == [[False, True, True], [False, True, True]]


def test_comparison_and_logical_shapes_that_do_not_broadcast():
    """A typed error naming the op and both shapes, at build time (infer-shape) and at run time."""
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x, y = paddle.static.data("x", [2, 3], "float32"), paddle.static.data("y", [4], "float32")
        out = main.global_block().create_var(name="o", dtype="bool")
        for op in ("less_than", "logical_and"):
            with pytest.raises(InvalidArgument, match=rf"{op}: the shapes of X \[2, 3\] and Y \[4\] do not"):
                main.global_block().append_op(type=op, inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]})
    with pytest.raises(InvalidArgument, match=r"equal: the shapes of X \[2, 3, 4\] and Y \[3, 1, 1\] .*axis=0"):
        run("equal", np.zeros((2, 3, 4)), np.zeros(3), axis=0)


def test_is_empty():
    assert run("is_empty", np.zeros((2, 0))).tolist() is True
    got = run("is_empty", np.zeros((2, 1)))
    assert got.shape == () and got.dtype == np.bool_ and not got


# ---- bmm, matmul_v2 broadcasting -------------------------------------------------------------------
def _loop_matmul(a, b):
    out = np.zeros(a.shape[:-1] + b.shape[-1:])
    for idx in np.ndindex(out.shape):
        *batch, i, j = idx
        out[idx] = sum(a[tuple(batch) + (i, k)] * b[tuple(batch) + (k, j)] for k in range(a.shape[-1]))
    return out


def test_bmm_forward_and_grad():
    x, y = R.standard_normal((3, 2, 4)), R.standard_normal((3, 4, 5))
    np.testing.assert_allclose(run("bmm", x, y), _loop_matmul(x, y), rtol=1e-12)
    grad_check("bmm", {"X": x, "Y": y}, wrt=("X", "Y"))
    descs, _ = make_grad_op_descs("bmm", {"X": ["x"], "Y": ["y"]}, {"Out": ["o"]}, {}, {"x@GRAD"})
    assert descs[0]["type"] == "bmm_grad" and descs[0]["outputs"] == {"X@GRAD": [], "Y@GRAD": ["y@GRAD"]}


@pytest.mark.parametrize("xs,ys,match", [
    ((3, 4), (4, 5), "X and Y must be 3-D"),
    ((2, 3, 4), (3, 4, 5), "the batch dims of X"),
    ((2, 3, 4), (2, 5, 5), "X's last dim must equal Y's middle dim"),
])
def test_bmm_bad_shapes(xs, ys, match):
    with pytest.raises(InvalidArgument, match="bmm: " + match):
        run("bmm", np.zeros(xs), np.zeros(ys))
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x, y = paddle.static.data("x", list(xs), "float32"), paddle.static.data("y", list(ys), "float32")
        with pytest.raises(InvalidArgument, match="bmm"):
            paddle.bmm(x, y)
        out = main.global_block().create_var(name="o", dtype="float32")
        with pytest.raises(InvalidArgument, match="bmm: " + match):  # the op's infer-shape, without the API
            main.global_block().append_op(type="bmm", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]})


def test_matmul_v2_broadcasts_batch_dims():
    x, y = R.standard_normal((2, 1, 3, 4)), R.standard_normal((5, 4, 2))
    want = _loop_matmul(np.broadcast_to(x, (2, 5, 3, 4)), np.broadcast_to(y, (2, 5, 4, 2)))
    np.testing.assert_allclose(run("matmul_v2", x, y), want, rtol=1e-12)
    # the grads sum over the broadcast dims: checked against central differences
    grad_check("matmul_v2", {"X": x, "Y": y}, wrt=("X", "Y"))
    grad_check("matmul_v2", {"X": R.standard_normal((4, 3)), "Y": R.standard_normal((2, 2, 5, 4))},
               {"trans_x": True, "trans_y": True}, wrt=("X", "Y"))


def test_matmul_v2_bad_shapes_at_build_time():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x, y = paddle.static.data("x", [2, 3, 4], "float32"), paddle.static.data("y", [3, 4, 5], "float32")
        z = paddle.static.data("z", [2, 5, 2], "float32")
        out = main.global_block().create_var(name="o", dtype="float32")
        with pytest.raises(InvalidArgument, match="matmul_v2: the batch dims"):
            main.global_block().append_op(type="matmul_v2", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]})
        with pytest.raises(InvalidArgument, match="matmul_v2: X's last dim 4 differs"):
            main.global_block().append_op(type="matmul_v2", inputs={"X": [x], "Y": [z]}, outputs={"Out": [out]})



def test_matmul_v2_vector_ignores_its_transpose():
    """Paddle 3.3.1 (FLAGS_enable_pir_api=0) builds Out [4] for matmul(x[3], y[3, 4], transpose_x=True) and
    for matmul(x[4, 3], y[3], transpose_y=True): a 1-D operand has no transpose."""
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        v, m = paddle.static.data("v", [3], "float32"), paddle.static.data("m", [3, 4], "float32")
        assert paddle.matmul(v, m, transpose_x=True).shape == (4,)
        m2 = paddle.static.data("m2", [4, 3], "float32")
        assert paddle.matmul(m2, v, transpose_y=True).shape == (4,)
        assert paddle.matmul(v, m2, transpose_x=True, transpose_y=True).shape == (4,)
    x, a, b = R.standard_normal(3), R.standard_normal((3, 4)), R.standard_normal((4, 3))
    np.testing.assert_allclose(run("matmul_v2", x, a, trans_x=True), x @ a, rtol=1e-12)
    np.testing.assert_allclose(run("matmul_v2", b, x, trans_y=True), b @ x, rtol=1e-12)


@pytest.mark.parametrize("xs,ys,attrs,match", [
    ((2, 3), (4, 5), {}, "X's last dim 3 differs from Y's second-to-last 4"),
    ((3,), (4, 2), {"trans_x": True}, "X's last dim 3 differs"),
    ((2, 3, 4), (3, 4, 5), {}, "the batch dims of X and Y do not broadcast"),
    ((), (3,), {}, "X and Y must have at least 1 dim"),
])
def test_matmul_v2_bad_shapes_at_run_time(xs, ys, attrs, match):
    """Shapes unknown when the program is built: the kernel raises the infer-shape's typed error."""
    with pytest.raises(InvalidArgument, match="matmul_v2: " + match):
        run("matmul_v2", np.zeros(xs), np.zeros(ys), **attrs)

# ---- accuracy -----------------------------------------------------------------------------------------
def test_accuracy_paddle_numbers():
    """Paddle 3.3.1 printed 0.5 (float32), 2 and 4 (int32) for these top-2 indices and labels."""
    idx = np.array([[3, 1], [1, 2], [4, 3], [0, 1]], np.int64)
    acc, correct, total = run("accuracy", np.zeros((4, 2), np.float32), idx, np.array([[1], [2], [0], [4]]))
    assert (acc.dtype, correct.dtype, total.dtype) == (np.float32, np.int32, np.int32)
    assert (acc.shape, float(acc), int(correct), int(total)) == ((), 0.5, 2, 4)
    acc, correct, total = run("accuracy", np.zeros((0, 2)), np.zeros((0, 2), np.int64), np.zeros((0, 1), np.int64))
    assert (float(acc), int(correct), int(total)) == (0.0, 0, 0)


def test_accuracy_counts_rows_with_the_label_in_top_k():
    idx = R.integers(0, 6, (50, 3))
    lab = R.integers(0, 6, (50, 1))
    hits = sum(int(lab[i, 0]) in idx[i].tolist() for i in range(50))
    acc, correct, total = run("accuracy", np.zeros((50, 3), np.float32), idx, lab)
    assert int(correct) == hits and int(total) == 50 and acc == np.float32(hits) / np.float32(50)


@pytest.mark.parametrize("label,match", [
    (np.zeros((4,), np.int64), "Label must be 2-D"),
    (np.zeros((4, 2), np.int64), "Label's second dim must be 1"),
    (np.zeros((3, 1), np.int64), "Indices has 4 rows and Label 3"),
    (np.zeros((4, 1), np.float32), "Label must hold integers"),
])
def test_accuracy_bad_label(label, match):
    with pytest.raises(InvalidArgument, match="accuracy: " + match):
        run("accuracy", np.zeros((4, 2), np.float32), np.zeros((4, 2), np.int64), label)


def test_static_accuracy_program_and_run():
    """Ops, slots, attrs and vars as Paddle 3.3.1 printed them for accuracy(pr, lab, k=2)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        pr = paddle.static.data("pr", [-1, 5], "float32")
        lab = paddle.static.data("lab", [-1, 1], "int64")
        acc = paddle.static.accuracy(pr, lab, k=2)
        with pytest.raises(InvalidArgument, match="accuracy: Label must be 2-D"):
            paddle.static.accuracy(pr, paddle.static.data("lab1", [-1], "int64"))
    topk, op = main.global_block().ops[:2]
    assert topk.type == "top_k_v2" and topk.input("X") == ["pr"]
    assert topk.output("Out") == ["accuracy_0.tmp_0"] and topk.output("Indices") == ["accuracy_0.tmp_1"]
    assert (topk.attr("k"), topk.attr("sorted"), topk.attr("axis"), topk.attr("largest")) == (2, False, -1, True)
    assert op.type == "accuracy" and op.output("Accuracy") == ["accuracy_0.tmp_2"]
    assert op.output("Correct") == ["accuracy_0.tmp_3"] and op.output("Total") == ["accuracy_0.tmp_4"]
    assert [(v.shape, v.dtype) for v in (main.global_block().var(f"accuracy_0.tmp_{i}") for i in range(5))] == \
        [((-1, 2), "float32"), ((-1, 2), "int64"), ((), "float32"), ((), "float32"), ((), "float32")]
    p = np.array([[0.1, 0.5, 0.2, 0.9, 0.0], [0.3, 0.35, 0.32, 0.1, 0.0], [1, 2, 3, 4, 5], [5, 4, 3, 2, 1]],
                 np.float32)
    exe = paddle.static.Executor(paddle.CPUPlace())
    (got,) = exe.run(main, feed={"pr": p, "lab": np.array([[1], [2], [0], [4]], np.int64)}, fetch_list=[acc])
    assert float(got) == 0.5  # rows 0 and 1 have their label in the top 2


# ---- the API: programs as Paddle builds them ------------------------------------------------------------
def _ops(main):
    return [(op.type, {k: op.input(k) for k in op.input_names}, {k: op.output(k) for k in op.output_names})
            for op in main.global_block().ops]


def test_logic_api_programs():
    """Op types, slots and output names as Paddle 2.6.2 printed them (3.3.1's legacy IR cannot build these)."""
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        b1, b2 = paddle.static.data("b1", [-1, 3], "bool"), paddle.static.data("b2", [3], "bool")
        p = paddle.static.data("p", [2, 3], "float32")
        outs = [paddle.logical_and(b1, b2), paddle.logical_or(b1, b2), paddle.logical_xor(b1, b2),
                paddle.logical_not(b1)]
        cmps = [getattr(paddle, n)(p, p) for n in ("greater_than", "greater_equal", "less_than", "less_equal",
                                                   "equal", "not_equal")]
        empty = paddle.is_empty(p)
        with pytest.raises(InvalidArgument, match="logical_and: the dtypes of x and y"):
            paddle.logical_and(b1, p)
    got = _ops(main)
    assert got[:4] == [(t, {"X": ["b1"], "Y": ["b2"]}, {"Out": [f"{t}_0.tmp_0"]})
                       for t in ("logical_and", "logical_or", "logical_xor")] + \
        [("logical_not", {"X": ["b1"]}, {"Out": ["logical_not_0.tmp_0"]})]
    assert [o.shape for o in outs] == [(-1, 3)] * 4 and {o.dtype for o in outs} == {"bool"}
    for (t, ins, o), v in zip(got[4:10], cmps):
        assert ins == {"X": ["p"], "Y": ["p"]} and o == {"Out": [f"{t}_0.tmp_0"]}
        assert v.dtype == "bool" and v.stop_gradient and v.shape == (2, 3)
    assert [op.attr("axis") for op in main.global_block().ops[4:10]] == [-1] * 6
    assert got[10] == ("is_empty", {"X": ["p"]}, {"Out": ["is_empty_0.tmp_0"]}) and empty.shape == ()


def test_shape_rank_bmm_api_programs():
    """As Paddle printed them: shape -> int32 shape_0.tmp_0 [3]; rank -> assign_value into assign_0.tmp_0
    (dtype 2 = int32, shape [], values [3]); bmm -> bmm_0.tmp_0 and a bmm_grad op."""
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [-1, 4, 6], "float32")
        s, r = paddle.shape(x), paddle.rank(x)
        p, q = paddle.static.data("p", [2, 3, 4], "float32"), paddle.static.data("q", [2, 4, 5], "float32")
        p.stop_gradient = q.stop_gradient = False
        m = paddle.bmm(p, q)
        paddle.static.append_backward(paddle.mean(m))
    ops = main.global_block().ops
    assert (ops[0].type, ops[0].input("Input"), ops[0].output("Out")) == ("shape", ["x"], ["shape_0.tmp_0"])
    assert (s.shape, s.dtype, s.stop_gradient) == ((3,), "int32", True)
    assert ops[1].type == "assign_value" and ops[1].output("Out") == ["assign_0.tmp_0"]
    assert (ops[1].attr("dtype"), ops[1].attr("shape"), ops[1].attr("values")) == (2, [], [3])
    assert (r.shape, r.dtype) == ((), "int32")
    assert (ops[2].type, ops[2].output("Out"), m.shape) == ("bmm", ["bmm_0.tmp_0"], (2, 3, 5))
    grad = [op for op in ops if op.type == "bmm_grad"]
    assert len(grad) == 1 and grad[0].output("X@GRAD") == ["p@GRAD"] and grad[0].output("Y@GRAD") == ["q@GRAD"]
    exe = paddle.static.Executor(paddle.CPUPlace())
    got_s, got_r = exe.run(main, feed={"x": np.zeros((5, 4, 6), np.float32), "p": R.standard_normal((2, 3, 4))
                                       .astype(np.float32), "q": np.ones((2, 4, 5), np.float32)},
                           fetch_list=[s, r])
    assert got_s.tolist() == [5, 4, 6] and int(got_r) == 3


# ---- eye ---------------------------------------------------------------------------------------
# Printed by Paddle 3.3.1 (FLAGS_enable_pir_api=0) for paddle.eye(3) and paddle.eye(2, 4, dtype="int64"):
# op eye, no inputs, Out eye_0.tmp_0 of shape (3, 3) float32, stop_gradient True, attrs num_rows 3,
# num_columns 3, dtype 5; the values are the identity ([[1, 0, 0, 0], [0, 1, 0, 0]] for the second).
def test_eye_builds_paddles_op_and_runs():
    import refimpl as paddle
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        with paddle.utils.unique_name.guard():
            a, b = paddle.eye(3), paddle.eye(2, 4, dtype="int64")
    ops = main.global_block().ops
    assert [op.type for op in ops] == ["eye", "eye"] and a.name == "eye_0.tmp_0" and b.name == "eye_1.tmp_0"
    assert [(op.attr("num_rows"), op.attr("num_columns"), op.attr("dtype")) for op in ops] == [(3, 3, 5), (2, 4, 3)]
    assert list(a.shape) == [3, 3] and a.stop_gradient and list(b.shape) == [2, 4] and b.dtype == "int64"
    got_a, got_b = paddle.static.Executor().run(main, fetch_list=[a, b])
    assert np.array_equal(got_a, [[1, 0, 0], [0, 1, 0], [0, 0, 1]]) and got_a.dtype == np.float32
    assert np.array_equal(got_b, [[1, 0, 0, 0], [0, 1, 0, 0]]) and got_b.dtype == np.int64


def test_eye_rejects_negative_sizes():
    import refimpl as paddle
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        with pytest.raises(InvalidArgument, match="eye: argument 'num_rows'"):
            paddle.eye(-1)
        with pytest.raises(InvalidArgument, match="num_columns"):
            paddle.eye(2, 1.5)
