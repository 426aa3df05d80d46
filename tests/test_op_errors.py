"""A failing op is named, and its error keeps its kind.

Paddle-typed errors (``EnforceNotMet`` kinds) get the op's location in front of
their message; NumPy's ``ValueError`` (inputs that do not fit together: the
user's fault) becomes ``InvalidArgument``; anything else, such as a kernel bug
(``TypeError``) or running out of memory, keeps its own type and gets a note
naming the block, op index, op type and its inputs' shapes.
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.framework import Program, unique_name
from refimpl.ops.registry import OPS, register_op


@pytest.fixture
def faulty_op():
    """Registers ``test_faulty`` (X -> Out) whose kernel raises what ``raise_with[0]`` holds."""
    raise_with = [None]

    @register_op("test_faulty", ["X"], ["Out"], {})
    def faulty(X):
        raise raise_with[0]
    yield raise_with
    OPS.pop("test_faulty")


def _program():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        h = paddle.scale(x, 2.0)
        out = main.global_block().create_var(name="out", shape=[-1, 3], dtype="float32")
        main.global_block().append_op(type="test_faulty", inputs={"X": [h]}, outputs={"Out": [out]})
    return main, out


def _run(main, out, trace=None):
    exe = paddle.static.Executor(paddle.CPUPlace())
    return exe.run(main, feed={"x": np.ones((2, 3), np.float32)}, fetch_list=[out],
                   scope=paddle.static.Scope(), trace=trace)


@pytest.mark.parametrize("traced", [False, True], ids=["plain", "traced"])
def test_a_kernel_bug_keeps_its_type_and_names_the_op(faulty_op, traced):
    faulty_op[0] = TypeError("unsupported operand")
    main, out = _program()
    with pytest.raises(TypeError, match="unsupported operand") as info:
        _run(main, out, paddle.executor.Trace() if traced else None)
    assert not isinstance(info.value, InvalidArgument)
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert "block 0 op 1 (test_faulty)" in note and "[2, 3] float32" in note, note


def test_running_out_of_memory_is_not_reported_as_bad_input(faulty_op):
    faulty_op[0] = MemoryError("cannot allocate 8.0 TiB")
    main, out = _program()
    with pytest.raises(MemoryError) as info:
        _run(main, out)
    assert not isinstance(info.value, InvalidArgument)
    assert any("test_faulty" in n for n in info.value.__notes__)


def test_a_paddle_error_from_a_kernel_keeps_its_kind_and_gets_the_location(faulty_op):
    faulty_op[0] = PreconditionNotMet("the input is stale")
    main, out = _program()
    with pytest.raises(PreconditionNotMet, match=r"block 0 op 1 \(test_faulty\): the input is stale"):
        _run(main, out)


def test_inputs_that_do_not_fit_together_are_the_users_invalid_argument():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, -1], "float32")
        y = paddle.static.data("y", [None, -1], "float32")
        out = paddle.matmul(x, y)
    exe = paddle.static.Executor(paddle.CPUPlace())
    feed = {"x": np.ones((2, 3), np.float32), "y": np.ones((4, 5), np.float32)}
    with pytest.raises(InvalidArgument, match=r"block 0 op 0 \(matmul_v2\)") as info:
        exe.run(main, feed=feed, fetch_list=[out], scope=paddle.static.Scope())
    assert isinstance(info.value.__cause__, ValueError)


def test_an_error_inside_a_branch_is_located_once_at_the_op_that_failed(faulty_op):
    faulty_op[0] = KeyError("missing entry")
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [1], "float32")
        cond = paddle.static.data("c", [1], "bool")

        def branch():
            block = paddle.static.default_main_program().current_block()
            out = block.create_var(name="branch_out", shape=[1], dtype="float32")
            block.append_op(type="test_faulty", inputs={"X": [x]}, outputs={"Out": [out]})
        paddle.static.nn.cond(cond, branch)
    exe = paddle.static.Executor(paddle.CPUPlace())
    feed = {"x": np.ones(1, np.float32), "c": np.array([True])}
    with pytest.raises(KeyError) as info:
        exe.run(main, feed=feed, scope=paddle.static.Scope())
    notes = [n for n in info.value.__notes__ if n.startswith("refimpl: in ")]
    assert len(notes) == 1 and "block 1 op 0 (test_faulty)" in notes[0], notes


def test_mul_checks_ranks_and_inner_sizes_as_paddles_mul_infermeta():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x1 = paddle.static.data("x1", [4], "float32")
        # Paddle 3.3.1: ValueError: (InvalidArgument) The input tensor X's dimensions of MulOp should be larger
        # than x_num_col_dims. But received X's dimensions = 1, X's shape = [4], x_num_col_dims = 1.
        with pytest.raises(ValueError, match=r"X's dimensions of MulOp should be larger than x_num_col_dims. "
                                             r"But received X's dimensions = 1, X's shape = \[4\]"):
            paddle.static.nn.fc(x1, 2)
        x = paddle.static.data("x", [-1, 3], "float32")
        w = paddle.static.create_parameter([4, 2], "float32")
        with pytest.raises(ValueError, match="First matrix's width must be equal with second matrix's height"):
            main.global_block().append_op(type="mul", inputs={"X": [x], "Y": [w]},
                                          outputs={"Out": [main.global_block().create_var(dtype="float32")]})
