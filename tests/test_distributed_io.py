"""paddle.distributed.io: save_persistables / load_persistables / is_persistable on a static program."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import NotFound
from refimpl.distributed import io


def _net():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
        paddle.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, x


def test_round_trip_restores_every_persistable(tmp_path):
    main, startup, x = _net()
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((4, 3), "float32")}
    exe.run(main, feed=feed, scope=scope)  # the velocities hold values now
    names = sorted(v.name for v in main.list_vars() if io.is_persistable(v))
    assert "fc_0.w_0_velocity_0" in names and "x" not in names
    with paddle.static.scope_guard(scope):
        io.save_persistables(exe, str(tmp_path), main)
    saved = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    exe.run(main, feed=feed, scope=scope)  # move on, then load the saved state back
    assert not np.array_equal(np.array(scope.find_var("fc_0.w_0").get_tensor()), saved["fc_0.w_0"])
    with paddle.static.scope_guard(scope):
        io.load_persistables(exe, str(tmp_path), main)
    for n in names:
        np.testing.assert_array_equal(np.array(scope.find_var(n).get_tensor()), saved[n], err_msg=n)
    assert not io.is_persistable(main.global_block().var("x"))


def test_loading_a_missing_directory_names_it(tmp_path):
    main, startup, _ = _net()
    exe = paddle.static.Executor()
    with pytest.raises(NotFound, match="nowhere"):
        io.load_persistables(exe, str(tmp_path / "nowhere"), main)
