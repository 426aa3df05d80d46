"""Feeds are safe and checked: a run never writes into the caller's arrays, bad feeds are typed errors."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import InvalidArgument
from refimpl.framework import Program, unique_name


def build_sgd():
    """x[N, 3] -> fc(2) -> mean, trained by SGD: fc_0.w_0 is updated in place by the ``sgd`` kernel."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
        paddle.optimizer.SGD(learning_rate=0.5).minimize(loss)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup, scope=scope)
    return main, scope, exe, loss


def x_feed():
    return np.arange(6, dtype="float32").reshape(2, 3) / 6


def test_feeding_a_parameter_does_not_alias_the_callers_array():
    main, scope, exe, loss = build_sgd()
    w = np.full((3, 2), 0.25, dtype="float32")
    w_before = w.copy()
    for _ in range(2):
        exe.run(main, feed={"x": x_feed(), "fc_0.w_0": w}, fetch_list=[loss], scope=scope)
    np.testing.assert_array_equal(w, w_before)  # the caller's array is untouched
    held = np.asarray(scope.find_var("fc_0.w_0").get_tensor())
    assert not np.shares_memory(held, w)
    # the scope got W and one SGD step (d mean / dW = mean of x per row / 2 outputs)
    grad = np.repeat(x_feed().mean(axis=0)[:, None] / 2, 2, axis=1)
    np.testing.assert_allclose(held, w_before - 0.5 * grad, rtol=1e-6)


def test_feeding_a_parameter_then_running_without_it_keeps_training_the_copy():
    main, scope, exe, loss = build_sgd()
    w = np.zeros((3, 2), dtype="float32")
    exe.run(main, feed={"x": x_feed(), "fc_0.w_0": w}, fetch_list=[loss], scope=scope)
    exe.run(main, feed={"x": x_feed()}, fetch_list=[loss], scope=scope)
    assert not w.any()


def test_a_ragged_list_feed_is_a_typed_error_naming_the_feed():
    main, scope, exe, loss = build_sgd()
    out, = exe.run(main, feed={"x": x_feed().tolist()}, fetch_list=[loss], scope=scope)  # a plain list is fine
    assert np.isfinite(out).all()
    with pytest.raises(InvalidArgument, match=r"feed 'x'.*ragged"):
        exe.run(main, feed={"x": [[1.0, 2.0, 3.0], [1.0, 2.0]]}, fetch_list=[loss], scope=scope)


def test_strings_and_objects_in_a_feed_are_typed_errors():
    main, scope, exe, loss = build_sgd()
    for value in ([["1.5", "2", "3"]], [["a", "b", "c"]], np.array([[1.0, None, 2.0]], dtype=object)):
        with pytest.raises(InvalidArgument, match=r"feed 'x'.*(str|object)"):
            exe.run(main, feed={"x": value}, fetch_list=[loss], scope=scope)


def test_a_persistable_held_in_the_wrong_dtype_is_named():
    main, scope, exe, loss = build_sgd()
    scope.find_var("fc_0.w_0").get_tensor().set(np.zeros((3, 2), dtype="float64"))
    with pytest.raises(InvalidArgument, match=r"fc_0\.w_0.*float64.*float32|fc_0\.w_0.*float32.*float64"):
        exe.run(main, feed={"x": x_feed()}, fetch_list=[loss], scope=scope)

