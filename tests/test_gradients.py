"""paddle.static.gradients: the ops Paddle 3.3.1 builds, and the numbers they compute."""
import json

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import InvalidArgument
from refimpl.framework import Program, unique_name

relu = paddle.nn.functional.relu


def _x(name="x"):
    v = paddle.static.data(name, [2, 3], "float32")
    v.stop_gradient = False
    return v


def _fc_mean():
    x = _x()
    return paddle.static.gradients([paddle.mean(paddle.static.nn.fc(x, 4))], [x])


def _given_grad():
    x, g = _x(), paddle.static.data("g", [2, 3], "float32")
    return paddle.static.gradients([relu(x)], [x], target_gradients=[g])


def _two_targets():
    x = _x()
    return paddle.static.gradients([relu(x), paddle.square(x)], [x])


def _unreachable():
    x, z = _x(), _x("z")
    w = paddle.square(z)
    return paddle.static.gradients([paddle.mean(relu(x))], [x, z, w])


def _no_grad_set():
    x = _x()
    h, k = relu(x), paddle.square(x)
    return paddle.static.gradients([paddle.mean(h * k)], [x], no_grad_set=[k])


def _second_call():
    x = _x()
    g1 = paddle.static.gradients([paddle.mean(relu(x))], [x])
    return g1 + paddle.static.gradients([paddle.mean(paddle.square(x))], [x])


def _build(builder):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        grads = builder()
    return main, startup, grads


def _dump(main):
    """One line per op as the script that printed PADDLE_OPS wrote them (with_quant_attr left out)."""
    lines = []
    for op in main.global_block().ops:
        ins = {n: op.input(n) for n in op.input_names}
        outs = {n: op.output(n) for n in op.output_names}
        attrs = {a: op.attr(a) for a in op.attr_names if a not in ("op_callstack", "with_quant_attr")}
        lines.append(" ".join([op.type] + [json.dumps(d, sort_keys=True) for d in (ins, outs, attrs)]))
    return lines


# Printed by Paddle 3.3.1 (FLAGS_enable_pir_api=0 /tmp/pd33/bin/python), the same builders with
# `import paddle`, one line per op of main.global_block(): type, inputs, outputs, attrs (json, sorted keys).
PADDLE_OPS = {
    "c1": [
        'mul {"X": ["x"], "Y": ["fc_0.w_0"]} {"Out": ["fc_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": [], "x_num_col_dims": 1, "y_num_col_dims": 1}',
        'elementwise_add {"X": ["fc_0.tmp_0"], "Y": ["fc_0.b_0"]} {"Out": ["fc_0.tmp_1"]} {"axis": 1, "op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'reduce_mean {"X": ["fc_0.tmp_1"]} {"Out": ["mean_0.tmp_0"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'fill_any_like {"X": ["mean_0.tmp_0"]} {"Out": ["mean_0.tmp_0@GRAD"]} {"dtype": 5, "op_device": "", "op_namescope": "", "op_role": 1, "op_role_var": [], "value": 1.0}',
        'reduce_mean_grad {"Out@GRAD": ["mean_0.tmp_0@GRAD"], "X": ["fc_0.tmp_1"]} {"X@GRAD": ["fc_0.tmp_1@GRAD"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'elementwise_add_grad {"Out@GRAD": ["fc_0.tmp_1@GRAD"], "X": ["fc_0.tmp_0"], "Y": ["fc_0.b_0"]} {"X@GRAD": ["fc_0.tmp_0@GRAD"], "Y@GRAD": ["fc_0.b_0@GRAD"]} {"axis": 1, "op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": []}',
        'mul_grad {"Out@GRAD": ["fc_0.tmp_0@GRAD"], "X": ["x"], "Y": ["fc_0.w_0"]} {"X@GRAD": ["x@GRAD"], "Y@GRAD": ["fc_0.w_0@GRAD"]} {"op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": [], "x_num_col_dims": 1, "y_num_col_dims": 1}',
    ],
    "c3": [
        'relu {"X": ["x"]} {"Out": ["relu_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'relu_grad {"Out": ["relu_0.tmp_0"], "Out@GRAD": ["g"]} {"X@GRAD": ["x@GRAD"]} {"op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": []}',
    ],
    "c4": [
        'relu {"X": ["x"]} {"Out": ["relu_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'square {"X": ["x"]} {"Out": ["square_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'fill_any_like {"X": ["relu_0.tmp_0"]} {"Out": ["relu_0.tmp_0@GRAD"]} {"dtype": 5, "op_device": "", "op_namescope": "", "op_role": 1, "op_role_var": [], "value": 1.0}',
        'fill_any_like {"X": ["square_0.tmp_0"]} {"Out": ["square_0.tmp_0@GRAD"]} {"dtype": 5, "op_device": "", "op_namescope": "", "op_role": 1, "op_role_var": [], "value": 1.0}',
        'square_grad {"Out@GRAD": ["square_0.tmp_0@GRAD"], "X": ["x"]} {"X@GRAD": ["x@GRAD@RENAME@block0@0"]} {"op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": []}',
        'relu_grad {"Out": ["relu_0.tmp_0"], "Out@GRAD": ["relu_0.tmp_0@GRAD"]} {"X@GRAD": ["x@GRAD@RENAME@block0@1"]} {"op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": []}',
        'sum {"X": ["x@GRAD@RENAME@block0@0", "x@GRAD@RENAME@block0@1"]} {"Out": ["x@GRAD"]} {"op_device": "", "op_namescope": "", "op_role": 1, "op_role_var": []}',
    ],
    "c5": [
        'square {"X": ["z"]} {"Out": ["square_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'relu {"X": ["x"]} {"Out": ["relu_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'reduce_mean {"X": ["relu_0.tmp_0"]} {"Out": ["mean_0.tmp_0"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'fill_any_like {"X": ["mean_0.tmp_0"]} {"Out": ["mean_0.tmp_0@GRAD"]} {"dtype": 5, "op_device": "", "op_namescope": "", "op_role": 1, "op_role_var": [], "value": 1.0}',
        'reduce_mean_grad {"Out@GRAD": ["mean_0.tmp_0@GRAD"], "X": ["relu_0.tmp_0"]} {"X@GRAD": ["relu_0.tmp_0@GRAD"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'relu_grad {"Out": ["relu_0.tmp_0"], "Out@GRAD": ["relu_0.tmp_0@GRAD"]} {"X@GRAD": ["x@GRAD"]} {"op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": []}',
    ],
    "c6": [
        'relu {"X": ["x"]} {"Out": ["relu_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'square {"X": ["x"]} {"Out": ["square_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'elementwise_mul {"X": ["relu_0.tmp_0"], "Y": ["square_0.tmp_0"]} {"Out": ["tmp_0"]} {"axis": -1, "op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'reduce_mean {"X": ["tmp_0"]} {"Out": ["mean_0.tmp_0"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'fill_any_like {"X": ["mean_0.tmp_0"]} {"Out": ["mean_0.tmp_0@GRAD"]} {"dtype": 5, "op_device": "", "op_namescope": "", "op_role": 1, "op_role_var": [], "value": 1.0}',
        'reduce_mean_grad {"Out@GRAD": ["mean_0.tmp_0@GRAD"], "X": ["tmp_0"]} {"X@GRAD": ["tmp_0@GRAD"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'elementwise_mul_grad {"Out@GRAD": ["tmp_0@GRAD"], "X": ["relu_0.tmp_0"], "Y": ["square_0.tmp_0"]} {"X@GRAD": ["relu_0.tmp_0@GRAD"], "Y@GRAD": []} {"axis": -1, "op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": []}',
        'relu_grad {"Out": ["relu_0.tmp_0"], "Out@GRAD": ["relu_0.tmp_0@GRAD"]} {"X@GRAD": ["x@GRAD"]} {"op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": []}',
    ],
    "c7": [
        'relu {"X": ["x"]} {"Out": ["relu_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'reduce_mean {"X": ["relu_0.tmp_0"]} {"Out": ["mean_0.tmp_0"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'fill_any_like {"X": ["mean_0.tmp_0"]} {"Out": ["mean_0.tmp_0@GRAD"]} {"dtype": 5, "op_device": "", "op_namescope": "", "op_role": 1, "op_role_var": [], "value": 1.0}',
        'reduce_mean_grad {"Out@GRAD": ["mean_0.tmp_0@GRAD"], "X": ["relu_0.tmp_0"]} {"X@GRAD": ["relu_0.tmp_0@GRAD"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'relu_grad {"Out": ["relu_0.tmp_0"], "Out@GRAD": ["relu_0.tmp_0@GRAD"]} {"X@GRAD": ["x@GRAD"]} {"op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": []}',
        'square {"X": ["x"]} {"Out": ["square_0.tmp_0"]} {"op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": []}',
        'reduce_mean {"X": ["square_0.tmp_0"]} {"Out": ["mean_1.tmp_0"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 0, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'fill_any_like {"X": ["mean_1.tmp_0"]} {"Out": ["mean_1.tmp_0@GRAD"]} {"dtype": 5, "op_device": "", "op_namescope": "", "op_role": 1, "op_role_var": [], "value": 1.0}',
        'reduce_mean_grad {"Out@GRAD": ["mean_1.tmp_0@GRAD"], "X": ["square_0.tmp_0"]} {"X@GRAD": ["square_0.tmp_0@GRAD"]} {"dim": [], "in_dtype": -1, "keep_dim": false, "op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": [], "out_dtype": -1, "reduce_all": true}',
        'square_grad {"Out@GRAD": ["square_0.tmp_0@GRAD"], "X": ["x"]} {"X@GRAD": ["grad/grad/x@GRAD"]} {"op_device": "", "op_namescope": "/", "op_role": 1, "op_role_var": []}',
    ],
}
BUILDERS = {"c1": _fc_mean, "c3": _given_grad, "c4": _two_targets, "c5": _unreachable,
            "c6": _no_grad_set, "c7": _second_call}
# Paddle 3.3.1's returned grads: names and shapes (None: the input does not reach the targets).
PADDLE_RETURNS = {"c1": [("x@GRAD", (2, 3))], "c3": [("x@GRAD", (2, 3))], "c4": [("x@GRAD", (2, 3))],
                  "c5": [("x@GRAD", (2, 3)), None, None], "c6": [("x@GRAD", (2, 3))],
                  "c7": [("x@GRAD", (2, 3)), ("grad/grad/x@GRAD", (2, 3))]}


@pytest.mark.parametrize("case", sorted(BUILDERS))
def test_program_matches_paddle_op_by_op(case):
    main, _, grads = _build(BUILDERS[case])
    got, want = _dump(main), PADDLE_OPS[case]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"op {k}"
    assert len(got) == len(want)
    assert [None if v is None else (v.name, tuple(v.shape)) for v in grads] == PADDLE_RETURNS[case]


def test_grad_vars_are_shaped_like_their_forward_vars():
    main, _, _ = _build(_fc_mean)
    got = sorted((v.name, list(v.shape)) for v in main.global_block().vars.values() if "GRAD" in v.name)
    # Paddle 3.3.1 printed these names and shapes for the same program.
    assert got == [("fc_0.b_0@GRAD", [4]), ("fc_0.tmp_0@GRAD", [2, 4]), ("fc_0.tmp_1@GRAD", [2, 4]),
                   ("fc_0.w_0@GRAD", [3, 4]), ("mean_0.tmp_0@GRAD", []), ("x@GRAD", [2, 3])]


X = np.array([[0.5, -1.0, 2.0], [-0.3, 1.5, -2.5]], "float32")


def _run(main, startup, fetch, feed):
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


def test_non_scalar_target_is_seeded_with_ones():
    main, startup, grads = _build(lambda: (lambda x: paddle.static.gradients(relu(x) * 2.0, x))(_x()))
    (gx,), _ = _run(main, startup, grads, {"x": X})
    np.testing.assert_allclose(gx, 2.0 * (X > 0))


def test_fc_mean_grad_matches_numpy():
    main, startup, grads = _build(_fc_mean)
    (gx,), scope = _run(main, startup, grads, {"x": X})
    w = np.array(scope.find_var("fc_0.w_0").get_tensor())
    np.testing.assert_allclose(gx, np.tile(w.sum(1) / 8.0, (2, 1)), rtol=1e-5)


def test_two_targets_add_up():
    main, startup, grads = _build(_two_targets)
    (gx,), _ = _run(main, startup, grads, {"x": X})
    np.testing.assert_allclose(gx, (X > 0) + 2 * X, rtol=1e-6)


def test_given_target_gradient_is_used():
    g = np.arange(6, dtype="float32").reshape(2, 3) - 2.5
    main, startup, grads = _build(_given_grad)
    (gx,), _ = _run(main, startup, grads, {"x": X, "g": g})
    np.testing.assert_allclose(gx, g * (X > 0))


def test_unreachable_inputs_get_none_and_the_rest_runs():
    main, startup, grads = _build(_unreachable)
    assert grads[1:] == [None, None]
    (gx,), _ = _run(main, startup, grads[:1], {"x": X, "z": X})
    np.testing.assert_allclose(gx, (X > 0) / 6.0, rtol=1e-6)


def test_second_call_on_one_program_matches_central_differences():
    main, startup, grads = _build(_second_call)
    (g1, g2), _ = _run(main, startup, grads, {"x": X})
    eps, num = 1e-3, np.zeros((2, 3))
    for idx in np.ndindex(2, 3):
        hi, lo = X.astype("float64"), X.astype("float64")
        hi[idx] += eps
        lo[idx] -= eps
        num[idx] = (np.mean(hi ** 2) - np.mean(lo ** 2)) / (2 * eps)
    np.testing.assert_allclose(g2, num, rtol=1e-3)
    np.testing.assert_allclose(g1, (X > 0) / 6.0, rtol=1e-6)


def test_bad_arguments_raise_typed_errors():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = _x()
        y = relu(x)
        with pytest.raises(InvalidArgument, match="targets"):
            paddle.static.gradients("y", [x])
        with pytest.raises(InvalidArgument, match="same number"):
            paddle.static.gradients([y], [x], target_gradients=[y, y])
        with pytest.raises(InvalidArgument, match="shapes of target and grad"):
            paddle.static.gradients([y], [x], target_gradients=[paddle.static.data("g", [3], "float32")])
