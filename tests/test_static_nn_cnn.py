"""paddle.static.nn.conv2d and batch_norm: LeNet as Paddle recorded it, Paddle's programs, numbers.

The zoo's LeNet (``oracle/zoo/programs/00_lenet.json``, Paddle 3.3.1) is built with refimpl's API and
compared with the recorded main / startup programs, then run from the recorded initial values on the
recorded feeds (losses and final parameters against Paddle's). Other programs are compared with
literals printed by Paddle 3.3.1 (legacy IR; op ``type, inputs, outputs, attrs`` without ``op_*``).
"""
import numpy as np
import pytest

import refimpl as paddle
import refimpl.nn.functional as F
from refimpl.core.errors import InvalidArgument
from oracle import array, diff_programs
from zoo_build import build as zoo_build, case

from build_helpers import build, ops_of


def _prefix(got, want, n_ops):
    """``want`` cut to its first ``n_ops`` ops of block 0 and to the vars ``got`` has."""
    names = {v["name"] for v in got["blocks"][0]["vars"]}
    block = dict(want["blocks"][0], ops=want["blocks"][0]["ops"][:n_ops],
                 vars=[v for v in want["blocks"][0]["vars"] if v["name"] in names])
    return dict(want, blocks=[block])


# ---- LeNet (00_lenet) -----------------------------------------------------------------------------------
def _lenet_features(cfg):
    """zoo.py's z_lenet up to the second pool: only this module's APIs (and F's pools)."""
    c, hw = cfg["channels"], cfg["hw"]
    x = paddle.static.data("img", [None, c, hw, hw], "float32")
    paddle.static.data("label", [None, 1], "int64")
    h = paddle.static.nn.conv2d(x, num_filters=cfg["f1"], filter_size=3, padding=1)
    h = paddle.static.nn.batch_norm(h, act="relu")
    h = F.max_pool2d(h, kernel_size=2, stride=2)
    h = paddle.static.nn.conv2d(h, num_filters=cfg["f2"], filter_size=3, padding=1, act="relu")
    h = paddle.static.nn.batch_norm(h)
    return F.avg_pool2d(h, kernel_size=2, stride=2)


def test_lenet_features_are_paddles_first_ops():
    d = case("00_lenet")
    main, startup, out = build(lambda: _lenet_features(d["config"]))
    assert out.name == "pool2d_1.tmp_0"
    got_main, got_startup = main.to_dict(), startup.to_dict()
    assert diff_programs(got_main, _prefix(got_main, d["main"], 10)) == []
    assert diff_programs(got_startup, _prefix(got_startup, d["startup"], 12)) == []


def test_lenet_builds_paddles_programs():
    main, startup, loss, d = zoo_build("00_lenet")
    assert loss.name == d["loss_name"]
    assert diff_programs(main.to_dict(), d["main"]) == []
    assert diff_programs(startup.to_dict(), d["startup"]) == []


def test_lenet_built_here_trains_as_paddle_did():
    """The program built here, from Paddle's initial values and feeds: Paddle's losses and parameters."""
    main, _, loss, d = zoo_build("00_lenet")
    scope = paddle.static.Scope()
    for name, entry in d["initial_persistables"].items():
        scope.var(name).get_tensor().set(array(entry))
    exe = paddle.static.Executor(paddle.CPUPlace())
    losses = [exe.run(main, feed={k: array(v) for k, v in feed.items()}, fetch_list=[loss], scope=scope)[0]
              for feed in d["feeds"]]
    want = [array(e) for e in d["fetched_loss"]]
    np.testing.assert_allclose(np.array(losses, np.float64).reshape(-1), np.array(want, np.float64).reshape(-1),
                               rtol=1e-5, atol=1e-6)
    for name, entry in d["final_persistables"].items():
        np.testing.assert_allclose(np.array(scope.find_var(name).get_tensor()), array(entry), rtol=1e-5,
                                   atol=1e-5, err_msg=name)


# ---- other programs, against Paddle 3.3.1 -----------------------------------------------------------------
def x4(shape=(None, 4, 6, 6)):
    return paddle.static.data("x", list(shape), "float32")


def _conv(op, w, out, fmt, groups, algo, dil, pads, strides):
    return (op, {'Filter': [w], 'Input': ['x']}, {'Output': [out]},
            {'data_format': fmt, 'groups': groups, 'padding_algorithm': algo, 'dilations': dil,
             'paddings': pads, 'strides': strides})


def _add(x, y, out, axis):
    return ("elementwise_add", {'X': [x], 'Y': [y]}, {'Out': [out]}, {'axis': axis})


def _gauss(name, std, shape):
    return ("gaussian_random", {}, {'Out': [name]}, {'dtype': 5, 'seed': 0, 'std': std, 'mean': 0.0, 'shape': shape})


def _const(name, value, shape):
    return ("fill_constant", {}, {'Out': [name]}, {'force_cpu': False, 'place_type': -1, 'str_value': str(value),
                                                   'value': value, 'shape': shape, 'dtype': 5})


def _bn(p, mean, var, y, outs_extra, layout="NCHW", eps=9.999999747378752e-06, momentum=0.8999999761581421,
        is_test=False, global_stats=False, x="x"):
    outs = {'MeanOut': [mean], 'SavedMean': [f'{p}.tmp_0'], 'SavedVariance': [f'{p}.tmp_1'], 'VarianceOut': [var],
            'Y': [y], **outs_extra}
    return ("batch_norm", {'Bias': [f'{p}.b_0'], 'Mean': [mean], 'MomentumTensor': [], 'Scale': [f'{p}.w_0'],
                           'Variance': [var], 'X': [x]}, outs,
            {'trainable_statistics': False, 'use_global_stats': global_stats, 'data_layout': layout,
             'epsilon': eps, 'momentum': momentum, 'is_test': is_test})


def _bn_startup(p, mean, var, c):
    return [_const(f"{p}.w_0", 1.0, [c]), _const(f"{p}.b_0", 0.0, [c]), _const(mean, 0.0, [c]), _const(var, 1.0, [c])]


PROGRAMS = {  # printed by Paddle 3.3.1: (builder, main ops, startup ops, output shape)
    "conv_nhwc_same_act": (
        lambda: paddle.static.nn.conv2d(x4((None, 6, 6, 4)), 3, [3, 2], stride=2, padding="SAME", act="relu",
                                        data_format="NHWC"),
        [_conv("conv2d", "conv2d_0.w_0", "conv2d_0.tmp_0", "NHWC", 1, "SAME", [1, 1], [0, 0], [2, 2]),
         _add("conv2d_0.tmp_0", "conv2d_0.b_0", "conv2d_0.tmp_1", 3),
         ("relu", {'X': ['conv2d_0.tmp_1']}, {'Out': ['conv2d_0.tmp_2']}, {})],
        [_gauss("conv2d_0.w_0", 0.28867512941360474, [3, 4, 3, 2]), _const("conv2d_0.b_0", 0.0, [3])],
        [-1, 3, 3, 3]),
    "conv_groups_no_bias": (
        lambda: paddle.static.nn.conv2d(x4(), 6, 3, padding=[1, 2], groups=2, bias_attr=False,
                                        param_attr=paddle.ParamAttr(name="cw")),
        [_conv("conv2d", "cw", "conv2d_0.tmp_0", "NCHW", 2, "EXPLICIT", [1, 1], [1, 2], [1, 1])],
        [_gauss("cw", 0.2357022613286972, [6, 2, 3, 3])], [-1, 6, 6, 8]),
    "conv_depthwise": (
        lambda: paddle.static.nn.conv2d(x4(), 8, 3, groups=4, use_cudnn=False, dilation=2,
                                        padding=[[0, 0], [0, 0], [1, 1], [2, 2]]),
        [_conv("depthwise_conv2d", "depthwise_conv2d_0.w_0", "depthwise_conv2d_0.tmp_0", "NCHW", 4, "EXPLICIT",
               [2, 2], [1, 2], [1, 1]),
         _add("depthwise_conv2d_0.tmp_0", "depthwise_conv2d_0.b_0", "depthwise_conv2d_0.tmp_1", 1)],
        [_gauss("depthwise_conv2d_0.w_0", 0.2357022613286972, [8, 1, 3, 3]),
         _const("depthwise_conv2d_0.b_0", 0.0, [8])], [-1, 8, 4, 6]),
    "conv_groups_with_cudnn": (
        lambda: paddle.static.nn.conv2d(x4(), 8, 3, groups=4),
        [_conv("conv2d", "conv2d_0.w_0", "conv2d_0.tmp_0", "NCHW", 4, "EXPLICIT", [1, 1], [0, 0], [1, 1]),
         _add("conv2d_0.tmp_0", "conv2d_0.b_0", "conv2d_0.tmp_1", 1)],
        [_gauss("conv2d_0.w_0", 0.2357022613286972, [8, 1, 3, 3]), _const("conv2d_0.b_0", 0.0, [8])],
        [-1, 8, 4, 4]),
    "bn_test_named_stats": (
        lambda: paddle.static.nn.batch_norm(x4(), is_test=True, momentum=0.8, epsilon=1e-3, moving_mean_name="mm",
                                            moving_variance_name="mv"),
        [_bn("batch_norm_0", "mm", "mv", "batch_norm_0.tmp_2", {}, eps=0.0010000000474974513,
             momentum=0.800000011920929, is_test=True)],
        _bn_startup("batch_norm_0", "mm", "mv", 4), [-1, 4, 6, 6]),
    "bn_nhwc_2d_global_act": (
        lambda: paddle.static.nn.batch_norm(paddle.static.data("x", [None, 5], "float32"), data_layout="NHWC",
                                            use_global_stats=True, act="tanh", name="bnx"),
        [_bn("bnx", "bnx.w_1", "bnx.w_2", "bnx.tmp_3", {'ReserveSpace': ['bnx.tmp_2']}, layout="NHWC",
             global_stats=True),
         ("tanh", {'X': ['bnx.tmp_3']}, {'Out': ['bnx.tmp_4']}, {})],
        _bn_startup("bnx", "bnx.w_1", "bnx.w_2", 5), [-1, 5]),
    "bn_in_place": (
        lambda: paddle.static.nn.batch_norm(x4(), in_place=True),
        [_bn("batch_norm_0", "batch_norm_0.w_1", "batch_norm_0.w_2", "x", {'ReserveSpace': ['batch_norm_0.tmp_2']})],
        _bn_startup("batch_norm_0", "batch_norm_0.w_1", "batch_norm_0.w_2", 4), [-1, 4, 6, 6]),
}


@pytest.mark.parametrize("case_name", sorted(PROGRAMS))
def test_program_matches_paddle(case_name):
    fn, want_main, want_startup, out_shape = PROGRAMS[case_name]
    main, startup, out = build(fn)
    assert ops_of(main) == want_main
    assert ops_of(startup) == want_startup
    assert list(out.shape) == out_shape


def test_batch_norm_statistics_are_untrainable_parameters():
    main, startup, _ = build(lambda: paddle.static.nn.batch_norm(x4()))
    block = main.global_block()
    for name, trainable in (("batch_norm_0.w_0", True), ("batch_norm_0.b_0", True), ("batch_norm_0.w_1", False),
                            ("batch_norm_0.w_2", False)):
        v = block.var(name)
        assert (v.is_parameter, v.persistable, v.trainable, v.stop_gradient) == (True, True, trainable, not trainable)


def test_batch_norm_momentum_tensor_goes_to_the_momentum_slot():
    main, _, _ = build(lambda: paddle.static.nn.batch_norm(x4(), momentum=paddle.full([1], 0.7, "float32")))
    bn = main.global_block().ops[-1]
    assert bn.input("MomentumTensor") == ["fill_constant_1.tmp_0"]   # as Paddle 3.3.1 names it
    assert bn.attr("momentum") == pytest.approx(0.9)


BAD = {
    "conv rank": (lambda: paddle.static.nn.conv2d(x4((None, 3, 8)), 4, 3), "[-1, 3, 8]"),
    "conv groups": (lambda: paddle.static.nn.conv2d(x4((None, 3, 8, 8)), 4, 3, groups=2), "groups=2"),
    "conv kernel too big": (lambda: paddle.static.nn.conv2d(x4((None, 3, 2, 2)), 4, 3), "'x'"),
    "conv padding": (lambda: paddle.static.nn.conv2d(x4(), 4, 3, padding="foo"), "'foo'"),
    "conv data_format": (lambda: paddle.static.nn.conv2d(x4(), 4, 3, data_format="NC"), "'NC'"),
    "conv unknown channels": (lambda: paddle.static.nn.conv2d(x4((None, -1, 6, 6)), 4, 3), "channel"),
    "conv use_cudnn": (lambda: paddle.static.nn.conv2d(x4(), 4, 3, use_cudnn=1), "use_cudnn"),
    "bn rank": (lambda: paddle.static.nn.batch_norm(paddle.static.data("x", [None], "float32")), "[-1]"),
    "bn layout": (lambda: paddle.static.nn.batch_norm(x4(), data_layout="NCDHW"), "'NCDHW'"),
    "bn bias_attr": (lambda: paddle.static.nn.batch_norm(x4(), bias_attr=False), "bias_attr"),
}


@pytest.mark.parametrize("case_name", sorted(BAD))
def test_bad_input_raises_at_build(case_name):
    fn, needle = BAD[case_name]
    with pytest.raises(InvalidArgument) as e:
        build(fn)
    assert needle in str(e.value)


# ---- numbers ---------------------------------------------------------------------------------------------
def _run(fn, feed, set_params=None):
    main, startup, out = build(fn)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup, scope=scope)
    for name, value in (set_params or {}).items():
        scope.var(name).get_tensor().set(value)
    fetch = [out] + [n for n in ("batch_norm_0.w_1", "batch_norm_0.w_2")]
    return exe.run(main, feed=feed, fetch_list=fetch if "batch_norm" in str(main) else [out], scope=scope)


def test_conv2d_with_bias_and_relu_numbers():
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 5, 5), (4, 3, 3, 3), (4,)))
    (got,) = _run(lambda: paddle.static.nn.conv2d(x4((None, 3, 5, 5)), 4, 3, padding=1, act="relu"), {"x": x},
                  {"conv2d_0.w_0": w, "conv2d_0.b_0": b})
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
    want = np.zeros((2, 4, 5, 5))
    for i in range(5):
        for j in range(5):
            want[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i:i + 3, j:j + 3], w)
    np.testing.assert_allclose(got, np.maximum(want + b.reshape(1, 4, 1, 1), 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_training_and_inference_numbers(layout):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 2, 4, 4)).astype(np.float32) * 2 + 1
    shape = (None, 2, 4, 4)
    if layout == "NHWC":
        x, shape = x.transpose(0, 2, 3, 1).copy(), (None, 4, 4, 2)
    axes = (0, 2, 3) if layout == "NCHW" else (0, 1, 2)
    bshape = (1, 2, 1, 1) if layout == "NCHW" else (1, 1, 1, 2)
    scale, bias = np.array([1.5, 0.5], np.float32), np.array([0.1, -0.2], np.float32)
    mean0, var0 = np.array([0.3, -0.1], np.float32), np.array([2.0, 0.5], np.float32)
    params = {"batch_norm_0.w_0": scale, "batch_norm_0.b_0": bias, "batch_norm_0.w_1": mean0,
              "batch_norm_0.w_2": var0}
    y, mean, var = _run(lambda: paddle.static.nn.batch_norm(x4(shape), momentum=0.8, data_layout=layout),
                        {"x": x}, params)
    xd = x.astype(np.float64)
    mu, sig2 = xd.mean(axis=axes), xd.var(axis=axes)
    want = (xd - mu.reshape(bshape)) / np.sqrt(sig2.reshape(bshape) + 1e-5) * scale.reshape(bshape) \
        + bias.reshape(bshape)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean, 0.8 * mean0 + 0.2 * mu, rtol=1e-5)
    np.testing.assert_allclose(var, 0.8 * var0 + 0.2 * sig2, rtol=1e-5)   # the biased batch variance
    y_test, mean_t, _ = _run(lambda: paddle.static.nn.batch_norm(x4(shape), is_test=True, data_layout=layout),
                             {"x": x}, params)
    want_test = (xd - mean0.reshape(bshape)) / np.sqrt(var0.reshape(bshape) + 1e-5) * scale.reshape(bshape) \
        + bias.reshape(bshape)
    np.testing.assert_allclose(y_test, want_test, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mean_t, mean0)   # inference leaves the running mean alone
