"""append_backward: gradients are right (finite differences) and named as Paddle names them."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import InvalidArgument
from refimpl.framework import OpRole, Program, unique_name


def _program(builder):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        loss = builder()
    return main, startup, loss


def _model():
    x = paddle.static.data("x", [None, 5], "float32")
    lab = paddle.static.data("label", [None, 1], "int64")
    h = paddle.static.nn.fc(x, 6, activation="tanh")
    h = paddle.static.nn.layer_norm(h)
    w = paddle.static.create_parameter([6, 6], "float32", name="w_shared")
    h = paddle.nn.functional.gelu(h @ w) @ w + h
    logits = paddle.static.nn.fc(h, 3)
    return paddle.nn.functional.cross_entropy(logits, lab)


def test_gradients_match_finite_differences():
    paddle.seed(3)
    main, startup, loss = _program(_model)
    fwd = main.clone(for_test=True)
    with paddle.static.program_guard(main, startup):
        pg = paddle.static.append_backward(loss)
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((4, 5)).astype("float32"),
            "label": rng.integers(0, 3, (4, 1)).astype("int64")}
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    grads = exe.run(main, feed=feed, fetch_list=[g for _, g in pg], scope=scope)
    for (p, _), g in zip(pg, grads):
        t = scope.find_var(p.name).get_tensor()
        base = np.array(t).astype("float64")
        num = np.zeros_like(base)
        for idx in np.ndindex(*base.shape):
            vals = []
            for sign in (1, -1):
                v = base.copy()
                v[idx] += sign * 1e-3
                t.set(v.astype("float32"))
                vals.append(float(exe.run(fwd, feed=feed, fetch_list=[loss.name], scope=scope)[0]))
            num[idx] = (vals[0] - vals[1]) / 2e-3
        t.set(base.astype("float32"))
        np.testing.assert_allclose(g, num, rtol=2e-2, atol=2e-3, err_msg=p.name)


def test_multiply_used_vars_are_renamed_and_summed():
    main, _, loss = _program(lambda: paddle.mean(_shared()))
    with paddle.static.program_guard(main):
        paddle.static.append_backward(loss)
    ops = main.global_block().ops
    renamed = [n for op in ops for n in op.output_arg_names if "@RENAME@" in n]
    assert renamed == ["w@GRAD@RENAME@block0@0", "w@GRAD@RENAME@block0@1"]
    total = [op for op in ops if op.type == "sum"][0]
    assert total.output("Out") == ["w@GRAD"] and total.attr("op_role_var") == ["w", "w@GRAD"]
    assert total.attr("op_role") == OpRole.Backward


def _shared():
    x = paddle.static.data("x", [None, 3], "float32")
    w = paddle.static.create_parameter([3, 3], "float32", name="w")
    return (x @ w) @ w


def test_loss_grad_seed_and_no_grad_set():
    main, _, loss = _program(_model)
    with paddle.static.program_guard(main):
        pg = paddle.static.append_backward(loss, no_grad_set={"w_shared"})
    names = [p.name for p, _ in pg]
    assert "w_shared" not in names and "fc_0.w_0" in names
    seed = [op for op in main.global_block().ops if op.type == "fill_constant"][0]
    assert seed.attr("op_role") == 257 and seed.output("Out") == [loss.name + "@GRAD"]


def test_parameter_list_limits_the_result():
    main, _, loss = _program(_model)
    with paddle.static.program_guard(main):
        pg = paddle.static.append_backward(loss, parameter_list=["fc_1.w_0"])
    assert [(p.name, g.name) for p, g in pg] == [("fc_1.w_0", "fc_1.w_0@GRAD")]


def test_bad_loss_is_rejected():
    with pytest.raises(InvalidArgument, match="loss"):
        paddle.static.append_backward("not a variable")
    with pytest.raises(InvalidArgument, match="minimize"):
        paddle.optimizer.SGD(0.1).minimize(3.0)
    with pytest.raises(InvalidArgument, match="learning_rate"):
        paddle.optimizer.SGD(learning_rate="fast")
