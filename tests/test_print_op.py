"""paddle.static.Print and the print op against Paddle 3.3.1's program and printout."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.ops.print_ops import format_tensor, PRINT_ATTRS


def _build(**kw):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 3], "float32")
        x.stop_gradient = False
        y = paddle.static.Print(x, **kw)
        loss = paddle.mean(y)
        paddle.static.append_backward(loss)
    return main, y


def test_print_program_is_paddles():
    main, y = _build(message="m", summarize=2, print_phase="backward")
    ops = main.global_block().ops
    # Paddle 3.3.1: ['print', 'reduce_mean', 'fill_constant', 'reduce_mean_grad', 'print'], Out print_0.tmp_0
    assert [op.type for op in ops] == ["print", "reduce_mean", "fill_constant", "reduce_mean_grad", "print"]
    assert y.name == "print_0.tmp_0" and ops[0].input("In") == ["x"]
    assert ops[0].attr("print_phase") == "BACKWARD" and ops[0].attr("is_forward") is True
    grad = ops[-1]
    assert grad.input("In") == ["print_0.tmp_0@GRAD"] and grad.output("Out") == ["x@GRAD"]
    assert grad.attr("is_forward") is False and grad.attr("op_role") == 1 and grad.attr("message") == "m"


def test_print_prints_what_paddle_prints_and_honours_first_n_and_phase(capsys):
    main, _ = _build(first_n=1, print_phase="forward")
    exe = paddle.static.Executor(paddle.CPUPlace())
    x = np.array([[0.5, -1.0, 2.0], [1e-7, 3.0, 4.0]], "float32")
    for _ in range(2):
        exe.run(main, feed={"x": x})
    # Paddle 3.3.1 printed exactly this once (first_n=1, forward phase only)
    assert capsys.readouterr().out == (
        "Variable: x\n  - lod: {}\n  - place: Place(cpu)\n  - shape: [2, 3]\n  - layout: NCHW\n"
        "  - dtype: float32\n  - data: [0.500000 -1.000000 2.000000 0.000000 3.000000 4.000000]\n")


def test_format_switches_and_integers():
    attrs = dict(PRINT_ATTRS, print_tensor_name=False, print_tensor_type=False, print_tensor_shape=False,
                 summarize=1)
    # Paddle 3.3.1 for a float64 [0.5, 1e-7] with those switches: lod, place, layout, data
    assert format_tensor("d", np.array([0.5, 1e-7]), attrs, "Place(cpu)") == (
        "  - lod: {}\n  - place: Place(cpu)\n  - layout: NCHW\n  - data: [0.500000]\n")
    text = format_tensor("i", np.array([3, -4]), dict(PRINT_ATTRS, print_tensor_lod=False,
                                                       print_tensor_layout=False), "Place(cpu)")
    assert text == "Variable: i\n  - place: Place(cpu)\n  - shape: [2]\n  - dtype: int64\n  - data: [3.000000 -4.000000]\n"


def test_print_passes_its_input_on_and_bad_arguments_are_named():
    main, y = _build()
    exe = paddle.static.Executor(paddle.CPUPlace())
    x = np.arange(6, dtype="float32").reshape(2, 3)
    got, = exe.run(main, feed={"x": x}, fetch_list=[y])
    np.testing.assert_array_equal(got, x)
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        v = paddle.static.data("v", [2], "float32")
        with pytest.raises(InvalidArgument, match="print_phase must be one of"):
            paddle.static.Print(v, print_phase="sideways")
        with pytest.raises(InvalidArgument, match="must be a static Variable"):
            paddle.static.Print(np.ones(2))


def test_first_n_zero_prints_every_run_values_print_as_float32_and_out_is_a_copy(capsys):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        w = paddle.static.create_parameter([2], "float32", name="pw")
        pw = paddle.static.Print(w, first_n=0, print_tensor_lod=False)
        i = paddle.static.data("i", [2], "int64")
        paddle.static.Print(i, first_n=0)
        loss = paddle.mean(w * w)
        paddle.optimizer.SGD(0.5).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    for _ in range(2):
        before = np.array(paddle.static.global_scope().find_var("pw").get_tensor())
        got_pw, got_w = exe.run(main, feed={"i": np.array([1000000007, -3])}, fetch_list=[pw, w])
        np.testing.assert_array_equal(got_pw, before)      # Print's output is the value before sgd
        assert not np.array_equal(got_pw, got_w)
    out = capsys.readouterr().out
    assert out.count("Variable: pw") == 2 and out.count("Variable: i") == 2   # first_n=0: every run
    # Paddle 3.3.1 prints an int64 1000000007 through float: 1000000000.000000
    assert "  - data: [1000000000.000000 -3.000000]\n" in out
