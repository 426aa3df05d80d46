"""Review mends of the nn / tensor API: cross_entropy, batch norm without weight, softmax(dtype),
dropout(axis / p), where with a Python float, mixed-dtype operators, split, the shared helpers.

Expected programs and numbers are real Paddle's, pasted as literals: "2.6.2" is
``/tmp/pd26/bin/python`` (Paddle 2.6.2, legacy IR), "3.3.1" is ``/tmp/pd33/bin/python`` with
``FLAGS_enable_pir_api=0``; each test says which printed what.
"""
import pathlib
import re
import warnings

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, Unimplemented

paddle.enable_static()

@pytest.fixture(autouse=True)
def _fresh_names():
    with paddle.utils.unique_name.guard():  # every test's names count from 0, as in a fresh Paddle process
        yield


_LOGITS = np.array([[1, 2, 3], [0.5, 0.1, -1], [2, 2, 0], [0, 0, 1]], "float32")


def _ops(prog):
    return [(op.type, {n: op.input(n) for n in op.input_names if op.input(n)},
             {n: op.output(n) for n in op.output_names}) for op in prog.global_block().ops]


def _run(main, startup, feed, fetch):
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def _numpy_ce(logits, labels):
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(labels)), labels]


# ---- 1, 2: cross_entropy ------------------------------------------------------------------------
def test_cross_entropy_mean_with_ignore_index_divides_by_the_kept_labels():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [4, 3], "float32")
        y = paddle.static.data("y", [4, 1], "int64")
        loss = paddle.nn.functional.cross_entropy(x, y, ignore_index=1)
    # 2.6.2 printed this program (3.3.1's legacy IR cannot build it: its paddle.sum is PIR-only)
    assert _ops(main) == [
        ("softmax_with_cross_entropy", {"Label": ["y"], "Logits": ["x"]},
         {"Loss": ["softmax_with_cross_entropy_0.tmp_1"], "Softmax": ["softmax_with_cross_entropy_0.tmp_0"]}),
        ("reduce_sum", {"X": ["softmax_with_cross_entropy_0.tmp_1"]}, {"Out": ["sum_0.tmp_0"]}),
        ("fill_constant", {}, {"Out": ["tmp_0"]}),
        ("not_equal", {"X": ["y"], "Y": ["tmp_0"]}, {"Out": ["tmp_1"]}),
        ("cast", {"X": ["tmp_1"]}, {"Out": ["cast_0.tmp_0"]}),
        ("reduce_sum", {"X": ["cast_0.tmp_0"]}, {"Out": ["sum_1.tmp_0"]}),
        ("fill_constant", {}, {"Out": ["fill_constant_1.tmp_0"]}),
        ("equal", {"X": ["sum_1.tmp_0"], "Y": ["fill_constant_1.tmp_0"]}, {"Out": ["equal_0.tmp_0"]}),
        ("cast", {"X": ["equal_0.tmp_0"]}, {"Out": ["tmp_2"]}),
        ("elementwise_add", {"X": ["sum_1.tmp_0"], "Y": ["tmp_2"]}, {"Out": ["tmp_3"]}),
        ("elementwise_div", {"X": ["sum_0.tmp_0"], "Y": ["tmp_3"]}, {"Out": ["tmp_4"]}),
    ]
    sums = [op for op in main.global_block().ops if op.type == "reduce_sum"]
    assert [op.attr("reduce_all") for op in sums] == [False, False]  # 2.6.2's static sum leaves it False
    labels = np.array([[0], [1], [1], [1]], "int64")
    got, = _run(main, startup, {"x": _LOGITS, "y": labels}, [loss])
    np.testing.assert_allclose(got, 2.407606, rtol=1e-6)  # 2.6.2 printed 2.407606
    np.testing.assert_allclose(got, _numpy_ce(_LOGITS, labels[:, 0])[0], rtol=1e-6)  # only sample 0 counts


def test_cross_entropy_mean_with_every_label_ignored_is_zero_not_nan():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [4, 3], "float32")
        y = paddle.static.data("y", [4], "int64")
        loss = paddle.nn.functional.cross_entropy(x, y, ignore_index=2)
    got, = _run(main, startup, {"x": _LOGITS, "y": np.full([4], 2, "int64")}, [loss])
    assert float(got) == 0.0  # the count + (count == 0) denominator of Paddle's formula


def test_cross_entropy_label_of_rank_n_is_unsqueezed_and_none_squeezed_back():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [4, 3], "float32")
        y = paddle.static.data("y2", [4], "int64")
        loss = paddle.nn.functional.cross_entropy(x, y, reduction="none")
    # 2.6.2 printed: unsqueeze2 (axes [-1]) -> softmax_with_cross_entropy -> squeeze2 (axes [-1])
    assert _ops(main) == [
        ("unsqueeze2", {"X": ["y2"]}, {"Out": ["unsqueeze2_0.tmp_0"], "XShape": ["unsqueeze2_0.tmp_1"]}),
        ("softmax_with_cross_entropy", {"Label": ["unsqueeze2_0.tmp_0"], "Logits": ["x"]},
         {"Loss": ["softmax_with_cross_entropy_0.tmp_1"], "Softmax": ["softmax_with_cross_entropy_0.tmp_0"]}),
        ("squeeze2", {"X": ["softmax_with_cross_entropy_0.tmp_1"]},
         {"Out": ["squeeze_0.tmp_0"], "XShape": ["squeeze_0.tmp_1"]}),
    ]
    ops = main.global_block().ops
    assert ops[0].attr("axes") == [-1] and ops[2].attr("axes") == [-1]
    assert loss.shape == (4,)
    got, = _run(main, startup, {"x": _LOGITS, "y2": np.array([0, 1, 1, 1], "int64")}, [loss])
    # 2.6.2 printed [2.407606, 1.0384008, 0.75862366, 1.5514448]
    np.testing.assert_allclose(got, [2.407606, 1.0384008, 0.75862366, 1.5514448], rtol=1e-6)


def test_cross_entropy_label_rank_two_more_is_a_value_error():
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        x = paddle.static.data("x", [4, 3], "float32")
        y = paddle.static.data("y3", [4, 1, 1], "int64")
        # 2.6.2: ValueError "Expected nput_dims - 1 = label_dims or input_dims == label_dims"
        with pytest.raises(ValueError) as e:
            paddle.nn.functional.cross_entropy(x, y)
    assert isinstance(e.value, InvalidArgument) and "cross_entropy" in str(e.value) and "y3" in str(e.value)


# ---- 3: batch norm without weight / bias -------------------------------------------------------
def test_batch_norm_without_weight_and_bias_has_paddles_parameters():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        bn = paddle.nn.BatchNorm2D(3, weight_attr=False, bias_attr=False)
        bn2 = paddle.nn.BatchNorm2D(3, weight_attr=False)
    # 2.6.2 and 3.3.1 printed the same: no weight / bias, the statistics take w_0 / w_1
    assert bn.weight is None and bn.bias is None
    assert [(n, p.name) for n, p in bn.named_parameters()] == [
        ("_mean", "batch_norm2d_0.w_0"), ("_variance", "batch_norm2d_0.w_1")]
    assert [(n, p.name) for n, p in bn2.named_parameters()] == [
        ("bias", "batch_norm2d_1.b_0"), ("_mean", "batch_norm2d_1.w_0"), ("_variance", "batch_norm2d_1.w_1")]


def test_batch_norm_without_weight_and_bias_runs_as_paddle():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [2, 3, 4, 4], "float32")
        y = paddle.nn.BatchNorm2D(3, weight_attr=False, bias_attr=False)(x)
    op = main.global_block().ops[-1]
    assert op.input("Scale") == [] and op.input("Bias") == []  # 2.6.2 / 3.3.1: 'Scale': [], 'Bias': []
    xv = np.arange(96, dtype="float32").reshape(2, 3, 4, 4) / 10
    got, = _run(main, startup, {"x": xv}, [y])
    # 2.6.2 and 3.3.1 printed y[0, 0, 0] = [-1.2889383 -1.2480196 -1.207101 -1.1661823]
    np.testing.assert_allclose(got[0, 0, 0], [-1.2889383, -1.2480196, -1.207101, -1.1661823], rtol=1e-5)


# ---- 4: softmax(dtype) --------------------------------------------------------------------------
def test_softmax_with_dtype_casts_first():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [2, 3], "float32")
        a = paddle.nn.functional.softmax(x)
        b = paddle.nn.functional.softmax(x, dtype="float64")
        c = paddle.nn.functional.softmax(x, axis=0, dtype=paddle.float64, name="nm")
    # 2.6.2 and 3.3.1 printed these ops, names and dtypes
    assert _ops(main) == [
        ("softmax", {"X": ["x"]}, {"Out": ["softmax_0.tmp_0"]}),
        ("cast", {"X": ["x"]}, {"Out": ["softmax_1.tmp_0"]}),
        ("softmax", {"X": ["softmax_1.tmp_0"]}, {"Out": ["softmax_1.tmp_1"]}),
        ("cast", {"X": ["x"]}, {"Out": ["nm.tmp_0"]}),
        ("softmax", {"X": ["nm.tmp_0"]}, {"Out": ["nm.tmp_1"]}),
    ]
    casts = [op for op in main.global_block().ops if op.type == "cast"]
    assert [(op.attr("in_dtype"), op.attr("out_dtype")) for op in casts] == [(5, 6), (5, 6)]
    assert (a.dtype, b.dtype, c.dtype) == ("float32", "float64", "float64")
    assert main.global_block().ops[-1].attr("axis") == 0


def test_softmax_with_an_integer_dtype_is_rejected():
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        x = paddle.static.data("x", [2, 3], "float32")
        # 2.6.2 / 3.3.1: TypeError "The data type of 'dtype' in softmax must be [...], but received int32"
        with pytest.raises(InvalidArgument, match="softmax.*int32"):
            paddle.nn.functional.softmax(x, dtype="int32")


# ---- 5: dropout(axis / p) -----------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(axis=1), Unimplemented, "F.dropout(axis=...)"),
    (dict(axis=[0, 1]), Unimplemented, "F.dropout(axis=...)"),
    (dict(p="0.5"), InvalidArgument, "'0.5'"),
    (dict(p=None), InvalidArgument, "None"),
])
def test_dropout_axis_and_non_number_p_are_typed_errors(kwargs, exc, words):
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        x = paddle.static.data("x", [2, 3], "float32")
        with pytest.raises(exc) as e:
            paddle.nn.functional.dropout(x, **kwargs)
    assert "dropout" in str(e.value) and words in str(e.value)


def test_dropout_p_zero_with_axis_returns_x_as_paddle():
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        x = paddle.static.data("x", [2, 3], "float32")
        assert paddle.nn.functional.dropout(x, p=0, axis=1) is x  # Paddle returns x before looking at axis


# ---- 6: where with a Python float ---------------------------------------------------------------
def test_where_with_a_float_and_a_float32_tensor_is_a_typed_error_not_float64():
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        x = paddle.static.data("x", [2, 3], "float32")
        c = paddle.static.data("c", [2, 3], "bool")
        # 2.6.2 builds a float64 fill_constant and its elementwise_add fails when run: "The type of data we
        # are trying to retrieve (float64) does not match the type of data (float32)"
        with pytest.raises(InvalidArgument, match="where.*float64.*float32"):
            paddle.where(c, 1.0, x)
        with pytest.raises(InvalidArgument, match="where.*float32.*int64"):
            paddle.where(c, x, 2)
        x64 = paddle.static.data("x64", [2, 3], "float64")
        assert paddle.where(c, 1.0, x64).dtype == "float64"


# ---- 7: mixed-dtype operators -------------------------------------------------------------------
def _caught(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return [str(m.message) for m in w if issubclass(m.category, UserWarning)]


def test_float_promotion_warns_as_paddle_262():
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        a = paddle.static.data("a", [2, 3], "float16")
        b = paddle.static.data("b", [2, 3], "float32")
        got = _caught(lambda: a * b)
    # 2.6.2 printed this UserWarning
    assert got == ["The input dtypes of OP elementwise_mul are paddle.float16 and paddle.float32, "
                   "the output will be auto-promoted to paddle.float32"]


def test_int_times_float_variable_warns_of_the_conversion():
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        a = paddle.static.data("a", [2, 3], "int64")
        b = paddle.static.data("b", [2, 3], "float32")
        got = _caught(lambda: a * b)
        assert _caught(lambda: b * b) == []
        assert _caught(lambda: b * a) == []  # an int cast to float loses nothing: no warning
    # 2.6.2 casts b to int64 without a word (output int64), 3.3.1 raises TypeError
    assert len(got) == 1 and got[0].startswith(
        "The input dtypes of OP elementwise_mul are paddle.int64 and paddle.float32, the output will be "
        "auto-converted to paddle.int64")


# ---- 8: split ------------------------------------------------------------------------------------
def test_split_stores_a_negative_axis_plus_rank():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [4, 6, -1], "float32")
        outs = paddle.split(x, 2, axis=-2)
    op = main.global_block().ops[-1]
    # 2.6.2 printed axis 1, num 2, sections [] and outputs (4, 3, -1)
    assert (op.attr("axis"), op.attr("num"), op.attr("sections")) == (1, 2, [])
    assert [o.shape for o in outs] == [(4, 3, -1), (4, 3, -1)]


@pytest.mark.parametrize("num_or_sections, axis, words", [
    (4, 1, "not divisible"),          # 2.6.2: AssertionError "... must be evenly divisible ..."
    (0, 1, "> 0"),                    # 2.6.2: AssertionError "num_or_sections must be than 0."
    ([2, -1, -1], 1, "only one"),     # 2.6.2: "Only one dimension value of Attr(num_or_sections) ... can be -1"
    ([2, 2], 1, "add up"),            # 2.6.2: "Sum of Attr(num_or_sections) must be equal to ..."
    ([6, -1], 1, "less than"),        # 2.6.2: "... other than unknown section must be less than ..."
    ([1] * 7, 1, "more than"),        # 2.6.2: "len(num_or_sections) must not be more than input.shape[dim]."
    (2, 3, "out of range"),           # 2.6.2: IndexError
    (2, -4, "out of range"),          # 2.6.2: AssertionError "(rank(x) + axis) must >= 0"
    (2.0, 1, "num_or_sections"),      # 2.6.2: TypeError "The type of 'num_or_sections' in split must be ..."
])
def test_split_checks_num_or_sections_at_build_time(num_or_sections, axis, words):
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        x = paddle.static.data("x", [4, 6, -1], "float32")
        with pytest.raises(InvalidArgument) as e:
            paddle.split(x, num_or_sections, axis=axis)
    assert "split" in str(e.value) and words in str(e.value)
    if words != "out of range":
        assert "'x'" in str(e.value)


def test_split_accepts_what_paddle_accepts():
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        x = paddle.static.data("x", [4, 6, -1], "float32")
        # 2.6.2 printed these output shapes
        assert [o.shape for o in paddle.split(x, [2, -1, 1], axis=1)] == [(4, 2, -1), (4, 3, -1), (4, 1, -1)]
        assert [o.shape for o in paddle.split(x, 1, axis=0)] == [(4, 6, -1)]
        assert [o.shape for o in paddle.split(x, [2, -1], axis=2)] == [(4, 6, -1), (4, 6, -1)]


# ---- 11: the shared helpers of refimpl.tensor.math ------------------------------------------------
def test_math_helpers_are_public_and_the_private_names_gone():
    from refimpl.tensor import math
    assert callable(math.check_variable) and callable(math.unary_op)
    assert not hasattr(math, "_var") and not hasattr(math, "_unary")
    root = pathlib.Path(paddle.__file__).parent
    pattern = re.compile(r"from (refimpl\.tensor|\.|\.\.)?\.?math import[^\n]*\b(_var|_unary)\b")
    users = [str(p) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert users == []


def test_adam_beta_powers_have_the_moments_dtype():
    """3.3.1 printed, for fc(x float64, 2) + mean + ``Adam(0.1).minimize``: every ``*_beta{1,2}_pow_acc_0`` and
    ``*_moment{1,2}_0`` var float64 (float32 only for float16 / bfloat16 parameters), and after one step on
    ``x = ones((3, 4))`` ``fc_0.w_0_beta1_pow_acc_0`` = [0.8099999785423279] (0.9 as a float32 attr, squared)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 4], "float64")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
        paddle.optimizer.Adam(0.1).minimize(loss)
    accs = {v.name: v.dtype for v in main.list_vars() if "_pow_acc_" in v.name or "_moment" in v.name}
    assert len(accs) == 8 and set(map(str, accs.values())) <= {"float64", "paddle.float64"}, accs
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    exe.run(main, feed={"x": np.ones((3, 4))}, fetch_list=[loss], scope=scope)
    pow1 = np.array(scope.find_var("fc_0.w_0_beta1_pow_acc_0").get_tensor())
    assert pow1.dtype == np.float64 and pow1.tolist() == [0.8099999785423279]
