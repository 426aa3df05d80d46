"""paddle.nn.functional's CNN functions, losses, log_softmax and pad in static mode.

Programs are compared with literals printed by real Paddle 3.3.1 (legacy IR,
``FLAGS_enable_pir_api=0``; each op as ``type, inputs, outputs, attrs`` without the ``op_*`` attrs),
numbers with plain-NumPy formulas written here, bad input with the typed errors at build time.
"""
import numpy as np
import pytest

import refimpl as paddle
import refimpl.nn.functional as F
from refimpl.core.errors import InvalidArgument, Unimplemented

from build_helpers import build, ops_of


def x4(shape=(None, 3, 8, 8), name="x", dtype="float32"):
    return paddle.static.data(name, list(shape), dtype)


def param(shape, name):
    return paddle.static.create_parameter(list(shape), "float32", name=name)


# ---- programs, against Paddle 3.3.1 ---------------------------------------------------------------------
def _conv_bias():
    return F.conv2d(x4(), param([6, 3, 3, 3], "w"), param([6], "b"), stride=2, padding=1)


def _conv_nhwc_same():
    return F.conv2d(x4((None, 8, 8, 3)), param([6, 3, 3, 3], "w"), param([6], "b"), padding="same",
                    data_format="NHWC")


def _conv_depthwise():
    return F.conv2d(x4((None, 4, 8, 8)), param([8, 1, 3, 3], "w"), padding=[1, 2, 3, 4], groups=4, dilation=2)


def _conv_pairs():
    return F.conv2d(x4((None, 4, 8, 8)), param([8, 2, 3, 3], "w"), padding=[[0, 0], [0, 0], [1, 1], [2, 2]],
                    groups=2)


CONV = "conv2d"
PROGRAMS = {  # printed by Paddle 3.3.1
    "conv_bias": (_conv_bias, [
        ("conv2d", {'Filter': ['w'], 'Input': ['x']}, {'Output': ['conv2d_0.tmp_0']},
         {'data_format': 'NCHW', 'groups': 1, 'padding_algorithm': 'EXPLICIT', 'dilations': [1, 1],
          'paddings': [1, 1], 'strides': [2, 2]}),
        ("reshape2", {'Shape': [], 'ShapeTensor': [], 'X': ['b']},
         {'Out': ['reshape2_0.tmp_0'], 'XShape': ['reshape2_0.tmp_1']},
         {'mkldnn_data_type': 'float32', 'use_quantizer': False, 'shape': [1, 6, 1, 1]}),
        ("elementwise_add", {'X': ['conv2d_0.tmp_0'], 'Y': ['reshape2_0.tmp_0']}, {'Out': ['conv2d_0.tmp_1']},
         {'axis': -1})], [-1, 6, 4, 4]),
    "conv_nhwc_same": (_conv_nhwc_same, [
        ("conv2d", {'Filter': ['w'], 'Input': ['x']}, {'Output': ['conv2d_0.tmp_0']},
         {'data_format': 'NHWC', 'groups': 1, 'padding_algorithm': 'SAME', 'dilations': [1, 1],
          'paddings': [0, 0], 'strides': [1, 1]}),
        ("elementwise_add", {'X': ['conv2d_0.tmp_0'], 'Y': ['b']}, {'Out': ['conv2d_0.tmp_1']}, {'axis': -1})],
        [-1, 8, 8, 6]),
    "conv_depthwise": (_conv_depthwise, [
        ("depthwise_conv2d", {'Filter': ['w'], 'Input': ['x']}, {'Output': ['depthwise_conv2d_0.tmp_0']},
         {'data_format': 'NCHW', 'groups': 4, 'padding_algorithm': 'EXPLICIT', 'dilations': [2, 2],
          'paddings': [1, 2, 3, 4], 'strides': [1, 1]})], [-1, 8, 7, 11]),
    "conv_pairs": (_conv_pairs, [
        ("conv2d", {'Filter': ['w'], 'Input': ['x']}, {'Output': ['conv2d_0.tmp_0']},
         {'data_format': 'NCHW', 'groups': 2, 'padding_algorithm': 'EXPLICIT', 'dilations': [1, 1],
          'paddings': [1, 2], 'strides': [1, 1]})], [-1, 8, 8, 10]),
}


def _conv1d_bias():
    return F.conv1d(x4((None, 3, 8)), param([4, 3, 3], "w"), param([4], "b"), stride=2, padding=1)


def _unsqueeze(x, out, axes):
    return ("unsqueeze2", {'AxesTensor': [], 'AxesTensorList': [], 'X': [x]},
            {'Out': [out + '.tmp_0'], 'XShape': [out + '.tmp_1']}, {'axes': axes})


PROGRAMS["conv1d_bias"] = (_conv1d_bias, [  # printed by Paddle 3.3.1
    ("assign", {'X': ['w']}, {'Out': ['assign_0.tmp_0']}, {}),
    _unsqueeze('assign_0.tmp_0', 'unsqueeze2_0', [-2]),
    _unsqueeze('x', 'unsqueeze2_1', [-2]),
    ("conv2d", {'Filter': ['unsqueeze2_0.tmp_0'], 'Input': ['unsqueeze2_1.tmp_0']}, {'Output': ['conv2d_0.tmp_0']},
     {'data_format': 'NCHW', 'groups': 1, 'padding_algorithm': 'EXPLICIT', 'dilations': [1, 1],
      'paddings': [0, 1], 'strides': [1, 2]}),
    ("elementwise_add", {'X': ['conv2d_0.tmp_0'], 'Y': ['b']}, {'Out': ['elementwise_add_0']}, {'axis': 1}),
    ("squeeze2", {'X': ['elementwise_add_0']}, {'Out': ['squeeze_0.tmp_0'], 'XShape': ['squeeze_0.tmp_1']},
     {'axes': [-2]})], [-1, 4, 4])
PROGRAMS["conv1d_nlc_same"] = (  # printed by Paddle 3.3.1
    lambda: F.conv1d(x4((None, 8, 4)), param([4, 1, 3], "w"), padding="same", groups=4, data_format="NLC",
                     dilation=2), [
        ("assign", {'X': ['w']}, {'Out': ['assign_0.tmp_0']}, {}),
        _unsqueeze('assign_0.tmp_0', 'unsqueeze2_0', [-2]),
        _unsqueeze('x', 'unsqueeze2_1', [-3]),
        ("conv2d", {'Filter': ['unsqueeze2_0.tmp_0'], 'Input': ['unsqueeze2_1.tmp_0']},
         {'Output': ['conv2d_0.tmp_0']}, {'data_format': 'NHWC', 'groups': 4, 'padding_algorithm': 'SAME',
                                          'dilations': [1, 2], 'paddings': [0, 0], 'strides': [1, 1]}),
        ("squeeze2", {'X': ['conv2d_0.tmp_0']}, {'Out': ['squeeze_0.tmp_0'], 'XShape': ['squeeze_0.tmp_1']},
         {'axes': [-3]})], [-1, 8, 4])


def _pool(pooling_type, ksize, strides, paddings, algo="EXPLICIT", ceil=False, exclusive=True, fmt="NCHW",
          adaptive=False, cudnn=True):
    return ("pool2d", {'X': ['x']}, {'Out': ['pool2d_0.tmp_0']},
            {'adaptive': adaptive, 'ksize': ksize, 'strides': strides, 'pooling_type': pooling_type,
             'paddings': paddings, 'ceil_mode': ceil, 'exclusive': exclusive, 'data_format': fmt,
             'global_pooling': False, 'padding_algorithm': algo, 'use_cudnn': cudnn})


PROGRAMS.update({  # printed by Paddle 3.3.1
    "max_default_stride": (lambda: F.max_pool2d(x4(), 3), [_pool('max', [3, 3], [3, 3], [0, 0])], [-1, 3, 2, 2]),
    "max_same_nhwc": (lambda: F.max_pool2d(x4((None, 8, 8, 3)), [2, 3], stride=[1, 2], padding="same",
                                           data_format="NHWC", ceil_mode=True),
                      [_pool('max', [2, 3], [1, 2], [0, 0], "SAME", ceil=True, fmt="NHWC")], [-1, 8, 4, 3]),
    "max_pad4": (lambda: F.max_pool2d(x4(), 3, 2, padding=[1, 0, 2, 1]),
                 [_pool('max', [3, 3], [2, 2], [1, 0, 2, 1])], [-1, 3, 4, 5]),
    "avg_not_exclusive": (lambda: F.avg_pool2d(x4(), 3, 2, padding=1, exclusive=False, ceil_mode=True),
                          [_pool('avg', [3, 3], [2, 2], [1, 1], ceil=True, exclusive=False)], [-1, 3, 5, 5]),
    "avg_pairs_nhwc": (lambda: F.avg_pool2d(x4((None, 8, 8, 3)), 2, padding=[[0, 0], [1, 1], [1, 1], [0, 0]],
                                            data_format="NHWC"),
                       [_pool('avg', [2, 2], [2, 2], [1, 1], fmt="NHWC")], [-1, 5, 5, 3]),
    "avg_divisor": (lambda: F.avg_pool2d(x4(), 2, divisor_override=3), [
        _pool('avg', [2, 2], [2, 2], [0, 0]),
        ("scale", {'BiasTensor': [], 'ScaleTensor': [], 'X': ['pool2d_0.tmp_0']}, {'Out': ['tmp_0']},
         {'bias_after_scale': True, 'bias': 0.0, 'scale': 4.0}),
        ("scale", {'BiasTensor': [], 'ScaleTensor': [], 'X': ['tmp_0']}, {'Out': ['tmp_1']},
         {'bias_after_scale': True, 'bias': 0.0, 'scale': 0.3333333432674408})], [-1, 3, 4, 4]),
    "adaptive_int": (lambda: F.adaptive_avg_pool2d(x4(), 3),
                     [_pool('avg', [3, 3], [1, 1], [0, 0], adaptive=True, cudnn=False)], [-1, 3, 3, 3]),
    "adaptive_none_nhwc": (lambda: F.adaptive_avg_pool2d(x4((None, 5, 7, 3)), [None, 2], data_format="NHWC"),
                           [_pool('avg', [5, 2], [1, 1], [0, 0], fmt="NHWC", adaptive=True, cudnn=False)],
                           [-1, 5, 2, 3]),
})


def _two(shape=(None, 4)):
    return paddle.static.data("x", list(shape), "float32"), paddle.static.data("y", list(shape), "float32")


SCE = ("sigmoid_cross_entropy_with_logits", {'Label': ['y'], 'X': ['x'], 'pos_weight': []},
       {'Out': ['sigmoid_cross_entropy_with_logits_0.tmp_0']}, {'ignore_index': -100, 'normalize': False})
ONE = ("fill_constant", {'ShapeTensor': [], 'ShapeTensorList': [], 'ValueTensor': []},
       {'Out': ['fill_constant_1.tmp_0']},
       {'force_cpu': False, 'place_type': -1, 'str_value': '1.0', 'value': 1.0, 'shape': [1], 'dtype': 5})
MEAN = ("reduce_mean", {'X': ['sigmoid_cross_entropy_with_logits_0.tmp_0']}, {'Out': ['mean_0.tmp_0']},
        {'out_dtype': -1, 'in_dtype': -1, 'reduce_all': True, 'keep_dim': False, 'dim': []})
PROGRAMS.update({  # printed by Paddle 3.3.1
    "bce_mean": (lambda: F.binary_cross_entropy_with_logits(*_two()), [ONE, SCE, MEAN], []),
    "bce_none": (lambda: F.binary_cross_entropy_with_logits(*_two(), reduction="none"), [ONE, SCE], [-1, 4]),
    "square_error_cost": (lambda: F.square_error_cost(*_two()), [
        ("elementwise_sub", {'X': ['x'], 'Y': ['y']}, {'Out': ['square_error_cost_0.tmp_0']}, {'axis': -1}),
        ("square", {'X': ['square_error_cost_0.tmp_0']}, {'Out': ['square_error_cost_0.tmp_1']}, {})], [-1, 4]),
    "log_softmax_cast": (lambda: F.log_softmax(_two()[0], axis=1, dtype="float64"), [
        ("cast", {'X': ['x']}, {'Out': ['log_softmax_0.tmp_0']}, {'in_dtype': 5, 'out_dtype': 6}),
        ("log_softmax", {'X': ['log_softmax_0.tmp_0']}, {'Out': ['log_softmax_0.tmp_1']}, {'axis': 1})], [-1, 4]),
})


def _pad3d_via(shape, pad, mode, axes, paddings, fmt="NCDHW", **kw):
    """unsqueeze2 + pad3d + squeeze2 as Paddle 3.3.1 prints them for F.pad of a 3-D / 4-D x."""
    x = paddle.static.data("x", list(shape), "float32")
    return F.pad(x, pad, mode=mode, **kw), [
        ("unsqueeze2", {'AxesTensor': [], 'AxesTensorList': [], 'X': ['x']},
         {'Out': ['unsqueeze2_0.tmp_0'], 'XShape': ['unsqueeze2_0.tmp_1']}, {'axes': axes}),
        ("pad3d", {'Paddings': [], 'X': ['unsqueeze2_0.tmp_0']}, {'Out': ['pad3d_0.tmp_0']},
         {'data_format': fmt, 'value': 0.0, 'mode': mode, 'paddings': paddings}),
        ("squeeze2", {'X': ['pad3d_0.tmp_0']}, {'Out': ['squeeze_0.tmp_0'], 'XShape': ['squeeze_0.tmp_1']},
         {'axes': axes})]


PAD3D = {  # printed by Paddle 3.3.1
    "reflect_4d": ((2, 3, 4, 5), [1, 2, 3, 0], "reflect", [2], [1, 2, 3, 0, 0, 0], "NCDHW", {}),
    "constant_4d": ((2, 3, 4, 5), [1, 2, 3, 0], "constant", [2], [1, 2, 3, 0, 0, 0], "NCDHW", {}),
    "replicate_nhwc": ((2, 3, 4, 5), [1, 2, 3, 0], "replicate", [1], [1, 2, 3, 0, 0, 0], "NDHWC",
                       {"data_format": "NHWC"}),
    "circular_3d": ((2, 3, 4), [1, 2], "circular", [3, 4], [0, 0, 0, 0, 1, 2], "NCDHW", {}),
}


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_program_matches_paddle(case):
    fn, want, out_shape = PROGRAMS[case]
    main, _, out = build(fn)
    assert ops_of(main) == want
    assert list(out.shape) == out_shape


@pytest.mark.parametrize("case", sorted(PAD3D))
def test_pad3d_program_matches_paddle(case):
    shape, pad, mode, axes, paddings, fmt, kw = PAD3D[case]
    holder = {}
    main, _, out = build(lambda: holder.setdefault("r", _pad3d_via(shape, pad, mode, axes, paddings, fmt, **kw)))
    assert ops_of(main) == holder["r"][1]


@pytest.mark.parametrize("shape, pad, kw, paddings", [  # printed by Paddle 3.3.1
    ((2, 3, 4, 5), [1, 0, 0, 2, 1, 1, 0, 3], {"value": 2}, [1, 0, 0, 2, 1, 1, 0, 3]),
    ((2, 3, 4, 5), [1, 2, 0, 1, 2, 0], {"value": 1.5}, [0, 0, 2, 0, 0, 1, 1, 2]),
    ((2, 3, 4, 5), [1, 0, 0, 2, 1, 1, 0, 3], {"pad_from_left_axis": False}, [0, 3, 1, 1, 0, 2, 1, 0]),
])
def test_constant_pad_op_matches_paddle(shape, pad, kw, paddings):
    main, _, out = build(lambda: F.pad(paddle.static.data("x", list(shape), "float32"), pad, **kw))
    ((typ, ins, outs, attrs),) = ops_of(main)
    assert (typ, ins, outs) == ("pad", {"X": ["x"]}, {"Out": ["pad_0.tmp_0"]})
    assert attrs == {"paddings": paddings, "pad_value": float(kw.get("value", 0.0))}


# ---- bad input raises when the program is built ---------------------------------------------------------
BAD = {
    "unknown padding": (lambda: F.conv2d(x4(), param([6, 3, 3, 3], "w"), padding="full"), "'full'"),
    "conv data_format": (lambda: F.conv2d(x4(), param([6, 3, 3, 3], "w"), data_format="NCWH"), "'NCWH'"),
    "channels vs groups": (lambda: F.conv2d(x4(), param([6, 1, 3, 3], "w"), groups=2), "groups=2"),
    "filters vs groups": (lambda: F.conv2d(x4((None, 4, 8, 8)), param([5, 2, 3, 3], "w"), groups=2), "5 filters"),
    "conv kernel too big": (lambda: F.conv2d(x4((None, 3, 2, 2)), param([6, 3, 3, 3], "w")), "'x'"),
    "conv rank": (lambda: F.conv2d(x4((None, 3, 8)), param([6, 3, 3, 3], "w")), "[-1, 3, 8]"),
    "conv negative padding": (lambda: F.conv2d(x4(), param([6, 3, 3, 3], "w"), padding=-1), "-1"),
    "conv 3 paddings": (lambda: F.conv2d(x4(), param([6, 3, 3, 3], "w"), padding=[1, 2, 3]), "[1, 2, 3]"),
    "conv1d data_format": (lambda: F.conv1d(x4((None, 3, 8)), param([4, 3, 3], "w"), data_format="NCHW"),
                           "'NCHW'"),
    "conv1d rank": (lambda: F.conv1d(x4(), param([4, 3, 3], "w")), "[-1, 3, 8, 8]"),
    "conv1d kernel too big": (lambda: F.conv1d(x4((None, 3, 2)), param([4, 3, 3], "w")), "'x'"),
    "conv int input": (lambda: F.conv2d(x4(dtype="int64"), param([6, 3, 3, 3], "w")), "int64"),
    "pool kernel too big": (lambda: F.max_pool2d(x4((None, 3, 2, 2)), 3), "'x'"),
    "pool data_format": (lambda: F.avg_pool2d(x4(), 2, data_format="NCWH"), "'NCWH'"),
    "pool padding": (lambda: F.avg_pool2d(x4(), 2, padding="full"), "'full'"),
    "pool rank": (lambda: F.max_pool2d(x4((None, 3, 8)), 2), "[-1, 3, 8]"),
    "pool valid + ceil": (lambda: F.max_pool2d(x4(), 2, padding="valid", ceil_mode=True), "VALID"),
    "pool zero kernel": (lambda: F.avg_pool2d(x4(), 0), "[0, 0]"),
    "pool mask nhwc": (lambda: F.max_pool2d(x4(), 2, return_mask=True, data_format="NHWC"), "NHWC"),
    "adaptive data_format": (lambda: F.adaptive_avg_pool2d(x4(), 2, data_format="X"), "'X'"),
    "adaptive rank": (lambda: F.adaptive_avg_pool2d(x4((None, 3, 8)), 2), "[-1, 3, 8]"),
    "bce reduction": (lambda: F.binary_cross_entropy_with_logits(*_two(), reduction="avg"), "'avg'"),
    "mse reduction": (lambda: F.mse_loss(*_two(), reduction="avg"), "'avg'"),
    "log_softmax axis": (lambda: F.log_softmax(_two()[0], axis=2), "axis 2"),
    "pad mode": (lambda: F.pad(x4(), [1, 2, 3, 0], mode="edge"), "'edge'"),
    "pad 2-D reflect": (lambda: F.pad(paddle.static.data("x", [4, 5], "float32"), [1, 1], mode="reflect"),
                        "[4, 5]"),
    "pad format": (lambda: F.pad(x4(), [1, 2, 3, 0], mode="reflect", data_format="NLC"), "'NLC'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_at_build(case):
    fn, needle = BAD[case]
    with pytest.raises(InvalidArgument) as e:
        build(fn)
    assert needle in str(e.value)


def test_return_mask_is_unimplemented():
    with pytest.raises(Unimplemented, match="max_pool2d_with_index"):
        build(lambda: F.max_pool2d(x4(), 2, return_mask=True))


# ---- numbers, against NumPy formulas -------------------------------------------------------------------
def run(fn, feeds, grads=()):
    """Build with ``fn(vars) -> out`` (vars: static.data per feed), run once, fetch out (and grads)."""
    def body():
        vs = {k: paddle.static.data(k, list(v.shape), str(v.dtype)) for k, v in feeds.items()}
        for k in grads:
            vs[k].stop_gradient = False
        out = fn(vs)
        if grads:
            paddle.static.append_backward(paddle.sum(out * vs["w_out"]))
        return out
    main, startup, out = build(body)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    return exe.run(main, feed=feeds, fetch_list=[out] + [k + "@GRAD" for k in grads])


def np_conv(x, w, b, stride, pads, dil, groups):
    """Direct NCHW convolution: every output is a sum over its window (pads: t, b, l, r)."""
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3]))).astype(np.float64)
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    oh = (h - (dil[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (wd - (dil[1] * (kw - 1) + 1)) // stride[1] + 1
    out = np.zeros((n, co, oh, ow))
    for o in range(co):
        g = o // (co // groups)
        for i in range(oh):
            for j in range(ow):
                win = x[:, g * cg:(g + 1) * cg, i * stride[0]:i * stride[0] + dil[0] * (kh - 1) + 1:dil[0],
                        j * stride[1]:j * stride[1] + dil[1] * (kw - 1) + 1:dil[1]]
                out[:, o, i, j] = (win * w[o]).sum(axis=(1, 2, 3))
    return out + (0 if b is None else b.reshape(1, -1, 1, 1))


RNG = np.random.default_rng(16)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("xs, ws, kw, np_args", [
    ((2, 3, 7, 6), (4, 3, 3, 3), dict(stride=2, padding=1), ((2, 2), (1, 1, 1, 1), (1, 1), 1)),
    ((1, 4, 6, 6), (4, 2, 3, 2), dict(padding=[1, 0, 2, 1], groups=2, dilation=[1, 2]),
     ((1, 1), (1, 0, 2, 1), (1, 2), 2)),
    ((1, 3, 6, 5), (6, 1, 3, 3), dict(padding=1, groups=3), ((1, 1), (1, 1, 1, 1), (1, 1), 3)),     # depthwise
])
def test_conv2d_numbers(xs, ws, kw, np_args):
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    (got,) = run(lambda v: F.conv2d(v["x"], v["w"], v["b"], **kw), {"x": x, "w": w, "b": b})
    np.testing.assert_allclose(got, np_conv(x, w, b, *np_args), rtol=1e-5, atol=1e-5)


def test_conv1d_numbers():
    x, w, b = rand(2, 3, 9), rand(4, 3, 3), rand(4)
    (got,) = run(lambda v: F.conv1d(v["x"], v["w"], v["b"], stride=2, padding=[1, 2]), {"x": x, "w": w, "b": b})
    want = np_conv(x[:, :, None, :], w[:, :, None, :], b, (1, 2), (0, 0, 1, 2), (1, 1), 1)[:, :, 0, :]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv2d_nhwc_same_numbers():
    x, w = rand(1, 5, 6, 2), rand(3, 2, 3, 2)
    (got,) = run(lambda v: F.conv2d(v["x"], v["w"], stride=2, padding="SAME", data_format="NHWC"), {"x": x, "w": w})
    # SAME with stride 2: out = ceil(in / 2); total pad (out - 1) * 2 + k - in, the odd cell at the bottom / right
    want = np_conv(x.transpose(0, 3, 1, 2), w, None, (2, 2), (1, 1, 0, 1), (1, 1), 1).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def np_pool(x, k, s, pads, op, exclusive=True):
    """NCHW pooling by loops; pads (t, b, l, r); windows clipped to the input (avg divides by the clipped
    count when exclusive, else by the window inside the padded input)."""
    n, c, h, w = x.shape
    oh, ow = (h + pads[0] + pads[1] - k[0]) // s[0] + 1, (w + pads[2] + pads[3] - k[1]) // s[1] + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s[0] - pads[0], j * s[1] - pads[2]
            h1, w1 = min(h0 + k[0], h + pads[0]), min(w0 + k[1], w + pads[2])
            win = x[:, :, max(h0, 0):min(h1, h), max(w0, 0):min(w1, w)]
            if op == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                size = win.shape[2] * win.shape[3] if exclusive else (h1 - h0) * (w1 - w0)
                out[:, :, i, j] = win.sum(axis=(2, 3)) / size
    return out


@pytest.mark.parametrize("fn, np_args", [
    (lambda x: F.max_pool2d(x, 2), ((2, 2), (2, 2), (0, 0, 0, 0), "max")),
    (lambda x: F.max_pool2d(x, 3, 2, padding=1), ((3, 3), (2, 2), (1, 1, 1, 1), "max")),
    (lambda x: F.avg_pool2d(x, [3, 2], [2, 1], padding=[1, 0, 0, 1]), ((3, 2), (2, 1), (1, 0, 0, 1), "avg")),
    (lambda x: F.avg_pool2d(x, 3, 2, padding=1, exclusive=False), ((3, 3), (2, 2), (1, 1, 1, 1), "avg", False)),
])
def test_pool_numbers(fn, np_args):
    x = rand(2, 3, 7, 6)
    (got,) = run(lambda v: fn(v["x"]), {"x": x})
    np.testing.assert_allclose(got, np_pool(x, *np_args), rtol=1e-6, atol=1e-6)


def test_avg_pool_divisor_override_numbers():
    x = rand(1, 2, 4, 4)
    (got,) = run(lambda v: F.avg_pool2d(v["x"], 2, divisor_override=3), {"x": x})
    want = x.reshape(1, 2, 2, 2, 2, 2).sum(axis=(3, 5)) / 3
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_adaptive_avg_pool_numbers():
    x = rand(2, 3, 5, 7)
    (got,) = run(lambda v: F.adaptive_avg_pool2d(v["x"], [2, 3]), {"x": x})
    want = np.zeros((2, 3, 2, 3))
    for i in range(2):
        for j in range(3):  # window [floor(i * H / OH), ceil((i + 1) * H / OH))
            h0, h1 = i * 5 // 2, -(-(i + 1) * 5 // 2)
            w0, w1 = j * 7 // 3, -(-(j + 1) * 7 // 3)
            want[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    (glob,) = run(lambda v: F.adaptive_avg_pool2d(v["x"], 1), {"x": x})
    np.testing.assert_allclose(glob, x.mean(axis=(2, 3), keepdims=True), rtol=1e-6, atol=1e-6)


def test_losses_numbers():
    x, y = rand(3, 4), (RNG.random((3, 4)) < 0.5).astype(np.float32)
    feeds = {"x": x, "y": y}
    (bce,) = run(lambda v: F.binary_cross_entropy_with_logits(v["x"], v["y"]), feeds)
    (mse,) = run(lambda v: F.mse_loss(v["x"], v["y"]), feeds)
    (sec,) = run(lambda v: F.square_error_cost(v["x"], v["y"]), feeds)
    (lsm,) = run(lambda v: F.log_softmax(v["x"], axis=0), feeds)
    xd = x.astype(np.float64)
    sig = 1 / (1 + np.exp(-xd))
    np.testing.assert_allclose(bce, np.mean(-(y * np.log(sig) + (1 - y) * np.log(1 - sig))), rtol=1e-5)
    np.testing.assert_allclose(mse, np.mean((xd - y) ** 2), rtol=1e-6)
    np.testing.assert_allclose(sec, (xd - y) ** 2, rtol=1e-6)
    np.testing.assert_allclose(lsm, xd - np.log(np.exp(xd).sum(axis=0, keepdims=True)), rtol=1e-5, atol=1e-6)


def test_bce_with_weight_and_pos_weight_numbers():
    x, y = np.array([[-1.5, 0.3, 2.0]], np.float32), np.array([[1.0, 0.0, 1.0]], np.float32)
    w, pw = np.array([0.5, 1.0, 2.0], np.float32), np.array([2.0, 3.0, 0.5], np.float32)
    (got,) = run(lambda v: F.binary_cross_entropy_with_logits(v["x"], v["y"], weight=v["w"], pos_weight=v["pw"],
                                                               reduction="none"), {"x": x, "y": y, "w": w, "pw": pw})
    # printed by Paddle 3.3.1 (dygraph) for the same inputs; also -w * (pw * y * log(s) + (1 - y) * log(1 - s))
    np.testing.assert_allclose(got, [[1.7014134, 0.8543553, 0.12692805]], rtol=1e-6)


NP_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _np_pairs(shape, pad, fmt):
    """np.pad's pairs for F.pad's list (last spatial dim first) on a channel-first / -last x."""
    nd = len(shape)
    spatial = list(range(2, nd)) if fmt.startswith("NC") else list(range(1, nd - 1))
    pairs = [(0, 0)] * nd
    for k, axis in enumerate(reversed(spatial)):
        pairs[axis] = (pad[2 * k], pad[2 * k + 1])
    return pairs


def _np_pad_grad(shape, pairs, mode, g):
    """The adjoint of np.pad: each output cell adds its gradient to the input cell it copies."""
    idx = np.pad(np.arange(int(np.prod(shape))).reshape(shape), pairs, mode=NP_MODE[mode],
                 **({"constant_values": -1} if mode == "constant" else {}))
    dx = np.zeros(int(np.prod(shape)))
    for i, v in zip(idx.reshape(-1), g.astype(np.float64).reshape(-1)):
        if i >= 0:
            dx[i] += v
    return dx.reshape(shape)


@pytest.mark.parametrize("shape, pad, mode, fmt", [
    ((2, 3, 4, 5), [1, 2, 3, 0], "reflect", "NCHW"),
    ((2, 3, 4, 5), [2, 2, 1, 3], "replicate", "NCHW"),
    ((1, 4, 5, 3), [3, 4, 1, 6], "circular", "NHWC"),
    ((2, 3, 4), [1, 2], "constant", "NCL"),
    ((1, 2, 3, 4, 3), [1, 2, 0, 3, 2, 1], "reflect", "NCDHW"),
    ((1, 3, 4, 3, 2), [2, 0, 3, 1, 1, 1], "replicate", "NDHWC"),
])
def test_pad_modes_numbers_and_grads(shape, pad, mode, fmt):
    x = rand(*shape)
    pairs = _np_pairs(shape, pad, fmt)
    out_shape = tuple(d + a + b for d, (a, b) in zip(shape, pairs))
    w_out = rand(*out_shape)
    got, dx = run(lambda v: F.pad(v["x"], pad, mode=mode, data_format=fmt, value=0.0),
                  {"x": x, "w_out": w_out}, grads=["x"])
    np.testing.assert_array_equal(got, np.pad(x, pairs, mode=NP_MODE[mode]))
    np.testing.assert_allclose(dx, _np_pad_grad(shape, pairs, mode, w_out), rtol=1e-5, atol=1e-6)


def test_constant_pad_op_numbers_and_grad():
    x = rand(2, 3, 4)
    # a pad for every dim (and pad_from_left_axis): the pairs run from dim 0 ...
    got, dx = run(lambda v: F.pad(v["x"], [1, 2, 0, 3, 1, 0], value=2.5), {"x": x, "w_out": rand(5, 6, 5)},
                  grads=["x"])
    np.testing.assert_array_equal(got, np.pad(x, [(1, 2), (0, 3), (1, 0)], constant_values=2.5))
    # ... fewer pads than dims: from the last dim, the rest 0
    w_out = rand(2, 4, 7)
    got, dx = run(lambda v: F.pad(v["x"], [1, 2, 0, 1], value=-1), {"x": x, "w_out": w_out}, grads=["x"])
    np.testing.assert_array_equal(got, np.pad(x, [(0, 0), (0, 1), (1, 2)], constant_values=-1))
    np.testing.assert_array_equal(dx, w_out[:, 0:3, 1:5])


def test_reflect_pad_not_smaller_than_input_raises_when_run():
    x = rand(1, 1, 3, 3)
    with pytest.raises(InvalidArgument, match="reflect"):
        run(lambda v: F.pad(v["x"], [3, 0, 0, 0], mode="reflect"), {"x": x})
