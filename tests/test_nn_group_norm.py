"""The group / instance norm, PReLU and spectral norm APIs (nn.functional, nn layers, static.nn) build
the programs Paddle 3.3.1 builds (names, slots, attrs and initialisers printed by Paddle 3.3.1 with
``FLAGS_enable_pir_api=0``), refuse bad arguments at build time, and run."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument

F = paddle.nn.functional


@pytest.fixture(autouse=True)
def _static():
    """Static mode and fresh layer-name counters (``group_norm_0`` in every test)."""
    paddle.enable_static()
    with paddle.utils.unique_name.guard():
        yield


def _build(fn, shape=(2, 8, 3, 3)):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", list(shape), "float32")
        x.stop_gradient = False
        y = fn(x)
        paddle.static.append_backward(paddle.mean(y))
    return main, startup, y


def _ops(prog):
    return [(op.type, {n: op.input(n) for n in op.input_names if op.input(n)},
             {n: op.output(n) for n in op.output_names if op.output(n)}) for op in prog.global_block().ops]


def _op(prog, op_type):
    return next(op for op in prog.global_block().ops if op.type == op_type)


def test_static_group_norm_has_no_parameters_by_default_and_generated_names():
    # Paddle 3.3.1: static.nn.group_norm(x, groups=4) creates no Scale / Bias (param_attr=None is falsy)
    main, startup, y = _build(lambda x: paddle.static.nn.group_norm(x, groups=4))
    assert len(startup.global_block().ops) == 0
    assert _ops(main)[0] == ("group_norm", {"X": ["x"]}, {"Y": ["_generated_var_2"], "Mean": ["_generated_var_0"],
                                                          "Variance": ["_generated_var_1"]})
    op = _op(main, "group_norm")
    assert [(a, op.attr(a)) for a in ("epsilon", "groups", "data_layout")] == \
        [("epsilon", 9.999999747378752e-06), ("groups", 4), ("data_layout", "NCHW")]
    assert tuple(main.global_block().var("_generated_var_0").shape) == (2, 4)
    grad = _op(main, "group_norm_grad")
    assert {n: grad.input(n) for n in grad.input_names if grad.input(n)} == {
        "X": ["x"], "Y": ["_generated_var_2"], "Mean": ["_generated_var_0"], "Variance": ["_generated_var_1"],
        "Y@GRAD": ["_generated_var_2@GRAD"]}


def test_group_norm_layer_parameters_and_names():
    main, startup, y = _build(lambda x: paddle.nn.GroupNorm(4, 8)(x))
    # Paddle 3.3.1: fill_constant 1.0 / 0.0 into group_norm_0.w_0 / .b_0; temporaries group_norm_0.tmp_0..2
    assert [(op.type, op.output("Out"), op.attr("value")) for op in startup.global_block().ops] == [
        ("fill_constant", ["group_norm_0.w_0"], 1.0), ("fill_constant", ["group_norm_0.b_0"], 0.0)]
    assert _ops(main)[0] == ("group_norm", {"X": ["x"], "Scale": ["group_norm_0.w_0"], "Bias": ["group_norm_0.b_0"]},
                             {"Y": ["group_norm_0.tmp_2"], "Mean": ["group_norm_0.tmp_0"],
                              "Variance": ["group_norm_0.tmp_1"]})
    assert _op(main, "group_norm_grad").attr("op_role_var") == [
        "group_norm_0.b_0", "group_norm_0.b_0@GRAD", "group_norm_0.w_0", "group_norm_0.w_0@GRAD"]


def test_instance_norm_layers_and_static():
    main, startup, _ = _build(lambda x: paddle.nn.InstanceNorm2D(8)(x))
    assert [op.output("Out") for op in startup.global_block().ops] == [["instance_norm2d_0.w_0"],
                                                                       ["instance_norm2d_0.b_0"]]
    # Paddle 3.3.1: the temporaries are the functional helper's, SavedMean / SavedVariance of shape (N*C,)
    assert _ops(main)[0] == ("instance_norm", {"X": ["x"], "Scale": ["instance_norm2d_0.w_0"],
                                               "Bias": ["instance_norm2d_0.b_0"]},
                             {"Y": ["instance_norm_0.tmp_2"], "SavedMean": ["instance_norm_0.tmp_0"],
                              "SavedVariance": ["instance_norm_0.tmp_1"]})
    assert tuple(main.global_block().var("instance_norm_0.tmp_1").shape) == (16,)
    assert _op(main, "instance_norm").attr_names[0] == "epsilon"
    main, startup, _ = _build(lambda x: paddle.static.nn.instance_norm(x))
    assert len(startup.global_block().ops) == 0 and "Scale" not in _ops(main)[0][1]
    main, startup, _ = _build(lambda x: paddle.nn.InstanceNorm1D(8)(x), shape=(2, 8, 5))
    assert startup.global_block().ops[0].output("Out") == ["instance_norm1d_0.w_0"]


@pytest.mark.parametrize("mode, alpha_shape", [("all", (1,)), ("channel", (1, 8, 1, 1)), ("element", (1, 8, 3, 3))])
def test_static_prelu_alpha_shapes(mode, alpha_shape):
    main, startup, _ = _build(lambda x: paddle.static.nn.prelu(x, mode))
    init = startup.global_block().ops[0]
    # Paddle 3.3.1: prelu_0.w_0 filled with 0.25, output prelu_0.tmp_0, attrs mode / data_format
    assert (init.type, init.output("Out"), init.attr("value"), tuple(init.attr("shape"))) == \
        ("fill_constant", ["prelu_0.w_0"], 0.25, alpha_shape)
    op = _op(main, "prelu")
    assert (op.output("Out"), op.attr("mode"), op.attr("data_format")) == (["prelu_0.tmp_0"], mode, "NCHW")
    grad = _op(main, "prelu_grad")
    assert grad.output("Alpha@GRAD") == ["prelu_0.w_0@GRAD"]


def test_prelu_layer_and_functional_modes():
    main, startup, _ = _build(lambda x: paddle.nn.PReLU(8)(x))
    assert startup.global_block().ops[0].output("Out") == ["p_re_lu_0.w_0"]
    assert _op(main, "prelu").attr("mode") == "channel"
    main, startup, _ = _build(lambda x: paddle.nn.PReLU()(x))
    assert _op(main, "prelu").attr("mode") == "all"


def test_spectral_norm_static_and_layer():
    main, startup, _ = _build(lambda x: paddle.static.nn.spectral_norm(x, dim=1, power_iters=2))
    # Paddle 3.3.1: gaussian_random U [8] and V [18], stop_gradient in main; the output _generated_var_0
    assert [(op.type, op.output("Out"), op.attr("shape")) for op in startup.global_block().ops] == [
        ("gaussian_random", ["spectral_norm_0.w_0"], [8]), ("gaussian_random", ["spectral_norm_0.w_1"], [18])]
    op = _op(main, "spectral_norm")
    assert (op.output("Out"), op.attr("dim"), op.attr("power_iters"), op.attr("eps")) == \
        (["_generated_var_0"], 1, 2, 9.999999960041972e-13)
    assert main.global_block().var("spectral_norm_0.w_0").stop_gradient
    assert _op(main, "spectral_norm_grad").output("Weight@GRAD") == ["x@GRAD"]
    main, startup, _ = _build(lambda x: paddle.nn.SpectralNorm([2, 8, 3, 3], dim=1, power_iters=2)(x))
    assert _op(main, "spectral_norm").output("Out") == ["spectral_norm_0.tmp_0"]


@pytest.mark.parametrize("fn, match", [
    (lambda x: paddle.static.nn.group_norm(x, groups=3), "not divisible by groups=3"),
    (lambda x: paddle.static.nn.group_norm(x, groups=16), "groups \\(16\\) must be <= the number of channels"),
    (lambda x: paddle.static.nn.group_norm(x, groups=2, data_layout="NCL"), "received 'NCL'"),
    (lambda x: paddle.nn.GroupNorm(3, 8)(x), "divisible by num_groups"),
    (lambda x: paddle.nn.GroupNorm(2, 8, data_format="NCWH"), "unsupported data layout 'NCWH'"),
    (lambda x: paddle.nn.InstanceNorm3D(8)(x), "expected 5D input \\(got 4D input"),
    (lambda x: paddle.static.nn.prelu(x, "foo"), "mode should be one of all, channel, element, got 'foo'"),
    (lambda x: paddle.static.nn.prelu(x, "channel", data_format="XY"), "receive 'XY'"),
    (lambda x: F.prelu(x, paddle.static.create_parameter([4], "float32")), "size of weight .*\\(4\\).*\\(8"),
    (lambda x: paddle.static.nn.spectral_norm(x, dim=2), "received dim=2"),
    (lambda x: paddle.nn.SpectralNorm([2, 8], dim=3), "received dim=3"),
])
def test_bad_arguments_raise_at_build_time(fn, match):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [2, 8, 3, 3], "float32")
        with pytest.raises(InvalidArgument, match=match):
            fn(x)


def test_static_instance_norm_rank_error():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [6], "float32")
        with pytest.raises(InvalidArgument, match="got 1D input"):
            paddle.static.nn.instance_norm(x)
        with pytest.raises(InvalidArgument, match="should be more than 1"):
            paddle.static.nn.group_norm(x, 2)


def test_layers_run_and_train():
    """GroupNorm -> PReLU -> mean, one SGD step: the output and the updated weight against NumPy."""
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [2, 4, 3, 3], "float32")
        gn, act = paddle.nn.GroupNorm(2, 4), paddle.nn.PReLU(4, init=0.5)
        y = act(gn(x))
        loss = paddle.mean(y)
        paddle.optimizer.SGD(learning_rate=1.0).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    out, = exe.run(main, feed={"x": xv}, fetch_list=[y])
    g = xv.reshape(2, 2, -1).astype(np.float64)
    xhat = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(xv.shape)
    want = np.where(xhat > 0, xhat, 0.5 * xhat)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    alpha = np.asarray(paddle.static.global_scope().find_var("p_re_lu_0.w_0").get_tensor())
    d_alpha = np.where(xhat > 0, 0, xhat).sum(axis=(0, 2, 3)) / xv.size
    np.testing.assert_allclose(alpha, 0.5 - d_alpha, rtol=1e-5, atol=1e-6)
