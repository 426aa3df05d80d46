"""NumPy kernels of conv_ops.py / pool_ops.py: forward against plain loops, float64 gradient checks,
typed errors for bad attrs and shapes, and the slots / grad ops Paddle 3.3.1 records."""
import numpy as np
import pytest

import refimpl.ops  # noqa: F401  (registers the ops)
from refimpl.core.errors import InvalidArgument
from refimpl.ops import get_op_def
from refimpl.ops.grad_maker import make_grad_op_descs

from op_check import grad_check, run

RNG = np.random.default_rng(7)


def rnd(*shape):
    return RNG.standard_normal(shape)


# ---- plain-loop references -------------------------------------------------------------------
def loop_conv(x, w, stride, pads, dil, groups):
    """NCHW conv with pads (t, b, l, r), by explicit loops over every output and tap."""
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pads[0] + pads[1], wd + pads[2] + pads[3]))
    xp[:, :, pads[0]:pads[0] + h, pads[2]:pads[2] + wd] = x
    oh = (xp.shape[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, co, oh, ow))
    per = co // groups
    for b in range(n):
        for o in range(co):
            g = o // per
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ci in range(cg):
                        for a in range(kh):
                            for e in range(kw):
                                acc += w[o, ci, a, e] * xp[b, g * cg + ci, i * stride[0] + a * dil[0],
                                                           j * stride[1] + e * dil[1]]
                    out[b, o, i, j] = acc
    return out


def loop_pool(x, k, s, p, kind, exclusive=True, ceil=False):
    """NCHW pool with symmetric paddings p = (ph, pw), by loops (Paddle's window rules)."""
    n, c, h, w = x.shape
    oh = (h - k[0] + 2 * p[0] + (s[0] - 1 if ceil else 0)) // s[0] + 1
    ow = (w - k[1] + 2 * p[1] + (s[1] - 1 if ceil else 0)) // s[1] + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
            h1, w1 = min(h0 + k[0], h + p[0]), min(w0 + k[1], w + p[1])
            full = (h1 - h0) * (w1 - w0)
            a, b = max(h0, 0), max(w0, 0)
            win = x[:, :, a:min(h1, h), b:min(w1, w)]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                out[:, :, i, j] = win.sum(axis=(2, 3)) / (win.shape[2] * win.shape[3] if exclusive else full)
    return out


# ---- conv forward --------------------------------------------------------------------------
@pytest.mark.parametrize("xs, ws, attrs, pads", [
    ((2, 3, 6, 5), (4, 3, 3, 3), {"paddings": [1, 1]}, (1, 1, 1, 1)),
    ((1, 4, 7, 7), (6, 2, 3, 2), {"strides": [2, 1], "groups": 2, "paddings": [1, 0, 2, 1]}, (1, 0, 2, 1)),
    ((1, 2, 7, 6), (2, 2, 3, 3), {"dilations": [2, 1]}, (0, 0, 0, 0)),
    ((2, 3, 5, 5), (3, 3, 2, 2), {"padding_algorithm": "VALID", "paddings": [3, 3]}, (0, 0, 0, 0)),
    ((1, 2, 5, 6), (3, 2, 3, 2), {"padding_algorithm": "SAME", "strides": [2, 2], "dilations": [3, 3]},
     (1, 1, 0, 1)),
])
def test_conv2d_forward_matches_loops(xs, ws, attrs, pads):
    x, w = rnd(*xs), rnd(*ws)
    a = dict(attrs)
    want = loop_conv(x, w, a.get("strides", [1, 1]), pads,
                     [1, 1] if a.get("padding_algorithm") == "SAME" else a.get("dilations", [1, 1]),
                     a.get("groups", 1))
    np.testing.assert_allclose(run("conv2d", x, w, **a), want, rtol=1e-12, atol=1e-12)


def test_conv2d_nhwc_and_depthwise():
    x, w = rnd(2, 5, 4, 3), rnd(6, 1, 3, 3)
    nchw = x.transpose(0, 3, 1, 2)
    got = run("depthwise_conv2d", x, w, groups=3, paddings=[1, 1], data_format="NHWC")
    want = loop_conv(nchw, w, (1, 1), (1, 1, 1, 1), (1, 1), 3).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert got.flags.c_contiguous


@pytest.mark.parametrize("op", ["conv2d", "depthwise_conv2d"])
@pytest.mark.parametrize("attrs", [
    {"paddings": [1, 1]},
    {"strides": [2, 1], "paddings": [0, 1, 1, 2], "dilations": [1, 2]},
    {"padding_algorithm": "SAME", "strides": [2, 2], "data_format": "NHWC"},
])
def test_conv_grads(op, attrs):
    groups = 2
    nhwc = attrs.get("data_format") == "NHWC"
    x = rnd(2, 5, 4, 2) if nhwc else rnd(2, 2, 5, 4)
    w = rnd(4, 1, 3, 2)
    grad_check(op, {"Input": x, "Filter": w}, dict(attrs, groups=groups), out_slot="Output",
               wrt=("Input", "Filter"))


def test_conv_grad_skips_unneeded_outputs():
    x, w, d = rnd(1, 2, 4, 4), rnd(3, 2, 3, 3), rnd(1, 3, 2, 2)
    dx, dw = run("conv2d_grad", x, w, d, need=(False, True))
    assert dx is None and dw.shape == w.shape


# ---- pool2d ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("k, s, p, exclusive, ceil", [
    ((2, 2), (2, 2), (0, 0), True, False), ((3, 3), (2, 2), (1, 1), True, False),
    ((3, 2), (2, 1), (1, 1), False, False), ((3, 3), (2, 2), (1, 0), False, True),
    ((2, 2), (3, 3), (0, 0), True, True),
])
def test_pool2d_forward_matches_loops(kind, k, s, p, exclusive, ceil):
    x = rnd(2, 3, 7, 7)
    got = run("pool2d", x, pooling_type=kind, ksize=list(k), strides=list(s), paddings=list(p),
              exclusive=exclusive, ceil_mode=ceil)
    np.testing.assert_allclose(got, loop_pool(x, k, s, p, kind, exclusive, ceil), rtol=1e-12)


def test_pool2d_global_adaptive_nhwc():
    x = rnd(2, 3, 5, 7)
    g = run("pool2d", x, pooling_type="avg", ksize=[1, 1], global_pooling=True, paddings=[2, 2])
    np.testing.assert_allclose(g, x.mean(axis=(2, 3), keepdims=True), rtol=1e-12)
    a = run("pool2d", x, pooling_type="max", ksize=[2, 3], adaptive=True)
    want = np.empty((2, 3, 2, 3))
    for i in range(2):
        for j in range(3):
            h0, h1 = i * 5 // 2, -(-(i + 1) * 5 // 2)
            w0, w1 = j * 7 // 3, -(-(j + 1) * 7 // 3)
            want[:, :, i, j] = x[:, :, h0:h1, w0:w1].max(axis=(2, 3))
    np.testing.assert_allclose(a, want)
    nhwc = run("pool2d", x.transpose(0, 2, 3, 1), pooling_type="max", ksize=[2, 3], adaptive=True,
               data_format="NHWC")
    np.testing.assert_allclose(nhwc, want.transpose(0, 2, 3, 1))


def test_pool2d_same_padding_uses_top_left():
    x = rnd(1, 1, 4, 4)
    got = run("pool2d", x, pooling_type="avg", ksize=[3, 3], strides=[2, 2], padding_algorithm="SAME")
    assert got.shape == (1, 1, 2, 2)          # pads (0, 1): Paddle's kernel uses top/left = 0
    np.testing.assert_allclose(got[0, 0, 0, 0], x[0, 0, :3, :3].mean())
    np.testing.assert_allclose(got[0, 0, 1, 1], x[0, 0, 2:, 2:].mean())


@pytest.mark.parametrize("attrs", [
    {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2]},
    {"pooling_type": "max", "ksize": [3, 3], "strides": [1, 1], "paddings": [1, 1]},
    {"pooling_type": "avg", "ksize": [3, 2], "strides": [2, 1], "paddings": [1, 1], "exclusive": False},
    {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "ceil_mode": True},
    {"pooling_type": "avg", "ksize": [2, 3], "adaptive": True},
    {"pooling_type": "max", "ksize": [2, 2], "adaptive": True, "data_format": "NHWC"},
    {"pooling_type": "avg", "ksize": [1, 1], "global_pooling": True},
    {"pooling_type": "avg", "ksize": [7, 3], "adaptive": True},   # windows sharing starts
])
def test_pool2d_grads(attrs):
    x = RNG.permutation(2 * 2 * 5 * 6).reshape(2, 2, 5, 6) / 7.0   # distinct values: no ties at the max
    grad_check("pool2d", {"X": x}, attrs)


def test_max_pool_grad_goes_to_first_max():
    x = np.array([[[[1.0, 3.0], [3.0, 0.0]]]])
    out = run("pool2d", x, pooling_type="max", ksize=[2, 2])
    dx = run("pool2d_grad", x, out, np.ones_like(out), pooling_type="max", ksize=[2, 2])
    np.testing.assert_array_equal(dx, [[[[0.0, 1.0], [0.0, 0.0]]]])


# ---- flatten ----------------------------------------------------------------------------------
def test_flatten_forward_and_grad():
    x = rnd(2, 3, 4, 5)
    out, xshape = run("flatten_contiguous_range", x, start_axis=1, stop_axis=-2)
    assert out.shape == (2, 12, 5) and xshape.shape == (0, 2, 3, 4, 5)
    np.testing.assert_array_equal(out.reshape(-1), x.reshape(-1))
    grad_check("flatten_contiguous_range", {"X": x[:1, :2, :2, :2]}, {"start_axis": 0, "stop_axis": 2})


# ---- registry facts ----------------------------------------------------------------------------
def test_slots_and_grad_ops_as_paddle_records_them():
    od = get_op_def("conv2d")
    assert od.input_slot_names() == ["Input", "Filter"] and od.output_slot_names() == ["Output"]
    descs, _ = make_grad_op_descs("conv2d", {"Input": ["x"], "Filter": ["w"]}, {"Output": ["y"]},
                                  dict(od.attrs), set())
    assert descs[0]["type"] == "conv2d_grad"
    assert descs[0]["inputs"] == {"Input": ["x"], "Filter": ["w"], "Output@GRAD": ["y@GRAD"]}
    assert descs[0]["outputs"] == {"Input@GRAD": ["x@GRAD"], "Filter@GRAD": ["w@GRAD"]}
    descs, _ = make_grad_op_descs("pool2d", {"X": ["x"]}, {"Out": ["y"]}, dict(get_op_def("pool2d").attrs), set())
    assert descs[0]["inputs"] == {"X": ["x"], "Out": ["y"], "Out@GRAD": ["y@GRAD"]}
    descs, _ = make_grad_op_descs("flatten_contiguous_range", {"X": ["x"]}, {"Out": ["y"], "XShape": ["s"]},
                                  dict(get_op_def("flatten_contiguous_range").attrs), set())
    assert descs[0]["inputs"] == {"XShape": ["s"], "Out@GRAD": ["y@GRAD"]}


# ---- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("op, args, attrs, words", [
    ("conv2d", ((1, 3, 5, 5), (4, 3, 3, 3)), {"padding_algorithm": "FULL"}, "padding_algorithm"),
    ("conv2d", ((1, 3, 5, 5), (4, 3, 3, 3)), {"data_format": "NCWH"}, "data_format"),
    ("conv2d", ((1, 3, 2, 2), (4, 3, 3, 3)), {}, "output size"),
    ("conv2d", ((1, 3, 5, 5), (4, 2, 3, 3)), {}, "channels"),
    ("conv2d", ((1, 4, 5, 5), (3, 2, 3, 3)), {"groups": 2}, "groups"),
    ("conv2d", ((1, 3, 5, 5), (4, 3, 3, 3)), {"strides": [0, 1]}, "strides"),
    ("depthwise_conv2d", ((3, 5, 5), (4, 3, 3, 3)), {}, "4-D"),
    ("pool2d", ((1, 3, 2, 2),), {"ksize": [3, 3]}, "output size"),
    ("pool2d", ((1, 3, 4, 4),), {"ksize": [2, 2], "pooling_type": "min"}, "pooling_type"),
    ("pool2d", ((1, 3, 4, 4),), {"ksize": [2, 2], "padding_algorithm": "same"}, "padding_algorithm"),
    ("pool2d", ((1, 3, 4, 4),), {"ksize": [2, 2], "paddings": [1, 1, 1]}, "paddings"),
    ("flatten_contiguous_range", ((2, 3),), {"start_axis": 0, "stop_axis": 2}, "stop_axis"),
    ("flatten_contiguous_range", ((2, 3, 4),), {"start_axis": 2, "stop_axis": 1}, "start_axis"),
])
def test_bad_input_raises_typed_errors(op, args, attrs, words):
    with pytest.raises(InvalidArgument, match=words) as e:
        run(op, *[rnd(*s) for s in args], **attrs)
    assert op in str(e.value)
    od = get_op_def(op)
    ins = {s.name: [(shape, "float32")] for s, shape in zip(od.inputs, args)}
    with pytest.raises(InvalidArgument, match=words):   # and at build time, from infer_shape
        od.infer_shape(ins, dict(od.attrs, **attrs))
