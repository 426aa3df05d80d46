"""Transposed and 3-D convolutions through the user APIs: ``paddle.static.nn.conv2d_transpose /
conv3d / conv3d_transpose``, ``F.conv1d/2d/3d_transpose``, ``F.conv3d`` and the layers
``nn.Conv1D/3D``, ``nn.Conv1D/2D/3DTranspose``.

Programs are compared with literals printed by Paddle 3.3.1 (legacy IR: op ``type, inputs,
outputs, attrs`` without ``op_*``; var shapes; startup initialiser attrs); numbers with plain-NumPy
loop formulas on weights set through the scope; bad input must raise typed errors naming the API.
"""
import itertools

import numpy as np
import pytest

import refimpl as paddle
import refimpl.nn.functional as F
from refimpl.core.errors import InvalidArgument, Unimplemented

from build_helpers import build, ops_of


def _data(name, shape):
    return paddle.static.data(name, shape, "float32")


def loop_conv_transpose(x, w, stride, pad, groups, outs):
    """Channel-first transposed conv by scattering x * w, symmetric pads ``pad`` per dim, dilation 1."""
    nd = x.ndim - 2
    cin, cog = w.shape[:2]
    out = np.zeros((x.shape[0], cog * groups, *(outs[i] + 2 * pad[i] for i in range(nd))))
    for b, ic in itertools.product(range(x.shape[0]), range(cin)):
        g = ic // (cin // groups)
        for pos in np.ndindex(*x.shape[2:]):
            for oc in range(cog):
                for k in np.ndindex(*w.shape[2:]):
                    idx = tuple(pos[i] * stride[i] + k[i] for i in range(nd))
                    out[(b, g * cog + oc) + idx] += x[(b, ic) + pos] * w[(ic, oc) + k]
    return out[(slice(None), slice(None)) + tuple(slice(pad[i], pad[i] + outs[i]) for i in range(nd))]


# ---- programs as Paddle 3.3.1 builds them -------------------------------------------------------------
def test_static_conv2d_transpose_program():
    def net():
        x = _data("data", [None, 3, 8, 8])
        return paddle.static.nn.conv2d_transpose(x, num_filters=3, filter_size=3, groups=3, stride=2,
                                                 output_size=[17, 17])
    main, startup, out = build(net)
    assert out.name == "conv2d_transpose_0.tmp_1" and tuple(out.shape) == (-1, 3, 17, 17)
    # Paddle 3.3.1 printed these (op.input_names order aside)
    conv_attrs = {"strides": [2, 2], "paddings": [0, 0], "output_padding": [], "output_size": [17, 17],
                  "padding_algorithm": "EXPLICIT", "groups": 3, "dilations": [1, 1], "data_format": "NCHW"}
    assert ops_of(main) == [
        ("conv2d_transpose", {"Input": ["data"], "Filter": ["conv2d_transpose_0.w_0"], "Bias": []},
         {"Output": ["conv2d_transpose_0.tmp_0"]}, conv_attrs),
        ("elementwise_add", {"X": ["conv2d_transpose_0.tmp_0"], "Y": ["conv2d_transpose_0.b_0"]},
         {"Out": ["conv2d_transpose_0.tmp_1"]}, {"axis": 1}),
    ]
    assert list(ops_of(main)[0][3]) == list(conv_attrs)           # the op proto's attr order
    w = main.global_block().var("conv2d_transpose_0.w_0")
    assert tuple(w.shape) == (3, 1, 3, 3)
    init = startup.global_block().ops[0]
    assert init.type == "uniform_random"                          # Xavier uniform: sqrt(6 / (9 + 27))
    assert init.attr("max") == pytest.approx(0.40824830532073975, rel=1e-7)


def test_static_conv3d_and_conv3d_transpose_programs():
    def net():
        x = _data("d3", [None, 3, 4, 8, 8])
        a = paddle.static.nn.conv3d(x, 2, 3, act="relu")
        b = paddle.static.nn.conv3d_transpose(x, 2, filter_size=3, act="relu")
        return a, b
    main, startup, (a, b) = build(net)
    assert tuple(a.shape) == (-1, 2, 2, 6, 6) and tuple(b.shape) == (-1, 2, 6, 10, 10)
    ops = ops_of(main)
    assert [o[0] for o in ops] == ["conv3d", "elementwise_add", "relu", "conv3d_transpose", "elementwise_add", "relu"]
    assert ops[0][3] == {"strides": [1, 1, 1], "paddings": [0, 0, 0], "padding_algorithm": "EXPLICIT",
                         "groups": 1, "dilations": [1, 1, 1], "data_format": "NCDHW"}
    assert ops[3][1] == {"Input": ["d3"], "Filter": ["conv3d_transpose_0.w_0"]}
    assert ops[3][3]["data_format"] == "NCHW"          # as Paddle 3.3.1 stores it for 3-D data
    assert ops[4][3] == {"axis": 1} and ops[5][2] == {"Out": ["conv3d_transpose_0.tmp_2"]}
    inits = {op.output("Out")[0]: op for op in startup.global_block().ops}
    assert inits["conv3d_0.w_0"].type == "gaussian_random"
    assert inits["conv3d_0.w_0"].attr("std") == pytest.approx(0.15713484585285187, rel=1e-7)
    assert inits["conv3d_transpose_0.w_0"].attr("max") == pytest.approx(0.21081851422786713, rel=1e-7)


def test_layers_programs_and_names():
    def net():
        x = _data("x", [None, 4, 5, 5])
        x1 = _data("x1", [None, 4, 7])
        x3 = _data("x3", [None, 4, 3, 5, 5])
        return [paddle.nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1, output_padding=1)(x),
                paddle.nn.Conv2DTranspose(4, 4, 3, groups=4)(x),
                paddle.nn.Conv1DTranspose(4, 2, 3, stride=2)(x1),
                paddle.nn.Conv1D(4, 2, 3)(x1),
                paddle.nn.Conv3D(4, 2, 3, padding=1)(x3),
                paddle.nn.Conv3DTranspose(4, 2, 3)(x3)]
    main, startup, outs = build(net)
    # shapes and the op sequence Paddle 3.3.1 printed for the same layers
    assert [tuple(o.shape) for o in outs] == [(-1, 6, 10, 10), (-1, 4, 7, 7), (-1, 2, 15), (-1, 2, 5),
                                             (-1, 2, 3, 5, 5), (-1, 2, 5, 7, 7)]
    assert [o[0] for o in ops_of(main)] == [
        "conv2d_transpose", "reshape2", "elementwise_add", "depthwise_conv2d_transpose", "reshape2",
        "elementwise_add", "unsqueeze2", "unsqueeze2", "conv2d_transpose", "elementwise_add", "squeeze2",
        "assign", "unsqueeze2", "unsqueeze2", "conv2d", "elementwise_add", "squeeze2", "conv3d", "reshape2",
        "elementwise_add", "conv3d_transpose", "elementwise_add"]
    ops = ops_of(main)
    assert ops[0][3]["output_padding"] == [1, 1] and ops[0][3]["paddings"] == [1, 1]
    assert ops[3][2] == {"Output": ["depthwise_conv2d_transpose_0.tmp_0"]}
    assert ops[8][1]["Filter"] == ["unsqueeze2_1.tmp_0"] and ops[8][3]["strides"] == [2, 1]
    assert ops[9][2] == {"Out": ["elementwise_add_0"]} and ops[9][3] == {"axis": 1}
    assert [o.name for o in outs] == ["conv2d_transpose_0.tmp_1", "depthwise_conv2d_transpose_0.tmp_1",
                                      "squeeze_0.tmp_0", "squeeze_1.tmp_0", "conv3d_0.tmp_1", "elementwise_add_2"]
    params = [p.name for p in main.all_parameters()]
    assert params[:6] == ["conv2d_transpose_0.w_0", "conv2d_transpose_0.b_0", "conv2d_transpose_1.w_0",
                          "conv2d_transpose_1.b_0", "conv1d_transpose_0.w_0", "conv1d_transpose_0.b_0"]
    inits = {op.output("Out")[0]: op for op in startup.global_block().ops}
    assert inits["conv2d_transpose_0.w_0"].attr("max") == pytest.approx(0.25819888710975647, rel=1e-7)
    assert inits["conv1d_0.w_0"].attr("std") == pytest.approx(0.40824830532073975, rel=1e-7)


def test_extra_repr_as_paddle_prints_it():
    # Paddle 3.3.1 printed:
    assert str(paddle.nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1, output_padding=1)) == \
        "Conv2DTranspose(4, 6, kernel_size=[3, 3], stride=[2, 2], padding=1, output_padding=1, data_format=NCHW)"
    assert str(paddle.nn.Conv3DTranspose(4, 6, 3)) == "Conv3DTranspose(4, 6, kernel_size=[3, 3, 3], data_format=NCDHW)"
    assert str(paddle.nn.Conv1D(4, 6, 3, padding_mode="reflect", padding=1)) == \
        "Conv1D(4, 6, kernel_size=[3], padding=1, padding_mode=reflect, data_format=NCL)"


# ---- numbers ---------------------------------------------------------------------------------------------
def _run(main, startup, feeds, weights, fetch):
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        for name, value in weights.items():
            scope.find_var(name).get_tensor().set(value, paddle.CPUPlace())
        return exe.run(main, feed=feeds, fetch_list=fetch)


def test_numbers_against_loops():
    rng = np.random.default_rng(3)

    def net():
        x = _data("x", [2, 4, 3, 3])
        x3 = _data("x3", [1, 2, 2, 3, 2])
        a = paddle.static.nn.conv2d_transpose(x, 4, filter_size=3, stride=2, padding=1, groups=2, bias_attr=False)
        b = paddle.nn.Conv3DTranspose(2, 3, 2, stride=[1, 2, 2], bias_attr=False)(x3)
        c = paddle.nn.Conv1DTranspose(4, 2, 2, stride=3, bias_attr=False)(paddle.reshape(x, [2, 4, 9]))
        return a, b, c
    main, startup, (a, b, c) = build(net)
    x, x3 = rng.standard_normal((2, 4, 3, 3)), rng.standard_normal((1, 2, 2, 3, 2))
    wa, wb, wc = rng.standard_normal((4, 2, 3, 3)), rng.standard_normal((2, 3, 2, 2, 2)), rng.standard_normal((4, 2, 2))
    weights = {"conv2d_transpose_0.w_0": wa.astype("float32"), "conv3d_transpose_0.w_0": wb.astype("float32"),
               "conv1d_transpose_0.w_0": wc.astype("float32")}
    got = _run(main, startup, {"x": x.astype("float32"), "x3": x3.astype("float32")}, weights, [a, b, c])
    want_a = loop_conv_transpose(x, wa, (2, 2), (1, 1), 2, (5, 5))
    want_b = loop_conv_transpose(x3, wb, (1, 2, 2), (0, 0, 0), 1, (3, 6, 4))
    want_c = loop_conv_transpose(x.reshape(2, 4, 9), wc, (3,), (0,), 1, (26,))
    for g, w in zip(got, (want_a, want_b, want_c)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_trains_with_sgd():
    def net():
        x = _data("x", [2, 2, 3, 3, 3])
        y = paddle.static.nn.conv3d_transpose(x, 2, filter_size=2, stride=2)
        y = paddle.static.nn.conv3d(y, 1, filter_size=3, act="relu")
        loss = paddle.mean(y)
        paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
        return loss
    main, startup, loss = build(net)
    assert "conv3d_transpose_grad" in [op.type for op in main.global_block().ops]
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(paddle.static.Scope()):
        exe.run(startup)
        feed = {"x": np.random.default_rng(0).standard_normal((2, 2, 3, 3, 3)).astype("float32")}
        losses = [float(exe.run(main, feed=feed, fetch_list=[loss])[0]) for _ in range(3)]
    assert np.isfinite(losses).all() and losses[-1] <= losses[0]


# ---- bad input ---------------------------------------------------------------------------------------------
def _raises(fn, err, *words):
    with pytest.raises(err) as e:
        build(fn)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_bad_input_names_the_api_and_value():
    d4 = lambda: _data("d", [None, 4, 5, 5])                                       # noqa: E731
    d5 = lambda: _data("d", [None, 4, 3, 5, 5])                                    # noqa: E731
    w = lambda shape: paddle.static.create_parameter(shape, "float32")             # noqa: E731
    snn = paddle.static.nn
    _raises(lambda: snn.conv2d_transpose(d4(), 2), InvalidArgument, "static.nn.conv2d_transpose", "output_size")
    _raises(lambda: snn.conv2d_transpose(d4(), 2, filter_size=3, data_format="NCDHW"), InvalidArgument,
            "static.nn.conv2d_transpose", "NCDHW")
    _raises(lambda: snn.conv2d_transpose(d5(), 2, filter_size=3), InvalidArgument, "static.nn.conv2d_transpose",
            "4-D")
    _raises(lambda: snn.conv2d_transpose(d4(), 2, filter_size=3, output_size=20), InvalidArgument,
            "static.nn.conv2d_transpose", "[7, 8)")
    _raises(lambda: snn.conv2d_transpose(d4(), 2, filter_size=3, padding=5), InvalidArgument,
            "static.nn.conv2d_transpose", "-3")
    _raises(lambda: snn.conv3d(d4(), 2, 3), InvalidArgument, "static.nn.conv3d", "5-D")
    _raises(lambda: snn.conv3d(d5(), 2, 3, groups=3), InvalidArgument, "static.nn.conv3d", "groups=3")
    _raises(lambda: snn.conv3d(d5(), 2, 4), InvalidArgument, "static.nn.conv3d", "output size is 0")
    _raises(lambda: snn.conv3d_transpose(d5(), 3, filter_size=3, groups=2), InvalidArgument,
            "static.nn.conv3d_transpose", "groups=2")
    _raises(lambda: snn.conv3d_transpose(d5(), 2, filter_size=3, data_format="NCHW"), InvalidArgument,
            "static.nn.conv3d_transpose", "NCHW")
    _raises(lambda: F.conv2d_transpose(d4(), w([3, 2, 3, 3])), InvalidArgument, "conv2d_transpose",
            "input channels (4")
    _raises(lambda: F.conv2d_transpose(d4(), w([4, 2, 3, 3]), groups=3), InvalidArgument, "conv2d_transpose",
            "groups=3")
    _raises(lambda: F.conv2d_transpose(d4(), w([4, 2, 3, 3]), output_size=[7, 7], output_padding=1),
            InvalidArgument, "conv2d_transpose", "mutually exclusive")
    _raises(lambda: F.conv2d_transpose(d4(), w([4, 2, 3, 3]), stride=2, output_padding=2), InvalidArgument,
            "conv2d_transpose", "output_padding")
    _raises(lambda: F.conv2d_transpose(d4(), w([4, 2, 3, 3]), output_size=_data("s", [2])), Unimplemented,
            "conv2d_transpose", "output_size")
    _raises(lambda: F.conv1d_transpose(_data("d", [None, 4, 7]), w([4, 2, 3]), data_format="NCHW"),
            InvalidArgument, "conv1d_transpose", "NCHW")
    _raises(lambda: F.conv3d(d5(), w([2, 4, 3, 3])), InvalidArgument, "conv3d", "5-D")
    _raises(lambda: F.conv3d_transpose(d5(), w([4, 2, 3, 3, 3]), data_format="NHWC"), InvalidArgument,
            "conv3d_transpose", "NHWC")
    _raises(lambda: paddle.nn.Conv3D(4, 2, 3, groups=3), InvalidArgument, "Conv3D", "groups (3)")
    _raises(lambda: paddle.nn.Conv2DTranspose(4, 6, 3, groups=4), InvalidArgument, "Conv2DTranspose",
            "out_channels (6)")
    _raises(lambda: paddle.nn.Conv1D(4, 2, 3, data_format="NCWH"), InvalidArgument, "Conv1D", "NCWH")
