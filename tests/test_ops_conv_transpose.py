"""NumPy kernels of conv_transpose_ops.py and conv3d (conv_ops.py): forward against plain loops,
float64 gradient checks, typed errors for bad attrs and shapes, and the slots / attrs / grad ops
Paddle 3.3.1 records."""
import itertools

import numpy as np
import pytest

import refimpl.ops  # noqa: F401  (registers the ops)
from refimpl.core.errors import InvalidArgument
from refimpl.ops import get_op_def
from refimpl.ops.grad_maker import make_grad_op_descs

from op_check import grad_check, run

RNG = np.random.default_rng(17)


def rnd(*shape):
    return RNG.standard_normal(shape)


# ---- plain-loop references (any number of spatial dims, channel-first) ----------------------------
def loop_conv(x, w, stride, pads, dil, groups):
    """Conv with pads (lo0, hi0, lo1, hi1, ...): loops over every output position and tap."""
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[2 * i], pads[2 * i + 1]) for i in range(nd)])
    outs = [(xp.shape[2 + i] - dil[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    co, cg = w.shape[:2]
    out = np.zeros((x.shape[0], co, *outs))
    for b, o in itertools.product(range(x.shape[0]), range(co)):
        g = o // (co // groups)
        for pos in np.ndindex(*outs):
            acc = 0.0
            for ci in range(cg):
                for k in np.ndindex(*w.shape[2:]):
                    idx = tuple(pos[i] * stride[i] + k[i] * dil[i] for i in range(nd))
                    acc += w[(o, ci) + k] * xp[(b, g * cg + ci) + idx]
            out[(b, o) + pos] = acc
    return out


def loop_conv_transpose(x, w, stride, pads, dil, groups, outs):
    """Transposed conv by scattering: every input element adds x * w into the output window it spreads to."""
    nd = x.ndim - 2
    cin, cog = w.shape[:2]
    full = [outs[i] + pads[2 * i] + pads[2 * i + 1] for i in range(nd)]
    out = np.zeros((x.shape[0], cog * groups, *full))
    for b, ic in itertools.product(range(x.shape[0]), range(cin)):
        g = ic // (cin // groups)
        for pos in np.ndindex(*x.shape[2:]):
            for oc in range(cog):
                for k in np.ndindex(*w.shape[2:]):
                    idx = tuple(pos[i] * stride[i] + k[i] * dil[i] for i in range(nd))
                    out[(b, g * cog + oc) + idx] += x[(b, ic) + pos] * w[(ic, oc) + k]
    crop = tuple(slice(pads[2 * i], pads[2 * i] + outs[i]) for i in range(nd))
    return out[(slice(None), slice(None)) + crop]


# ---- forward ------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, xs, ws, attrs, pads, outs", [
    ("conv2d_transpose", (2, 3, 3, 4), (3, 2, 3, 3), {}, (0, 0, 0, 0), (5, 6)),
    ("conv2d_transpose", (1, 4, 3, 3), (4, 1, 3, 2), {"strides": [2, 1], "paddings": [1, 0], "groups": 2},
     (1, 1, 0, 0), (5, 4)),
    ("conv2d_transpose", (1, 2, 3, 3), (2, 2, 2, 3), {"strides": [2, 2], "dilations": [2, 1],
                                                      "output_padding": [1, 1]}, (0, 0, 0, 0), (8, 8)),
    ("conv2d_transpose", (1, 2, 3, 3), (2, 3, 3, 3), {"strides": [2, 2], "paddings": [1, 0, 0, 1],
                                                      "output_size": [6, 6]}, (1, 0, 0, 1), (6, 6)),
    ("conv2d_transpose", (1, 2, 4, 3), (2, 1, 3, 3), {"strides": [2, 2], "padding_algorithm": "SAME"},
     (0, 1, 1, 1), (8, 5)),
    ("depthwise_conv2d_transpose", (1, 3, 3, 3), (3, 1, 3, 3), {"groups": 3, "paddings": [1, 1]},
     (1, 1, 1, 1), (3, 3)),
    ("conv3d_transpose", (1, 2, 2, 3, 2), (2, 2, 2, 3, 2), {"strides": [1, 2, 2], "paddings": [0, 1, 0]},
     (0, 0, 1, 1, 0, 0), (3, 5, 4)),
    ("conv3d_transpose", (1, 4, 2, 2, 2), (4, 1, 2, 2, 2), {"groups": 2, "strides": [2, 2, 2],
                                                            "output_size": [5, 4, 5]}, (0,) * 6, (5, 4, 5)),
])
def test_conv_transpose_forward_matches_loops(op, xs, ws, attrs, pads, outs):
    x, w = rnd(*xs), rnd(*ws)
    nd = len(xs) - 2
    dil = [1] * nd if attrs.get("padding_algorithm") == "SAME" else attrs.get("dilations", [1] * nd)
    want = loop_conv_transpose(x, w, attrs.get("strides", [1] * nd), pads, dil, attrs.get("groups", 1), outs)
    got = run(op, x, w, **attrs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv_transpose_channel_last():
    x, w = rnd(2, 3, 4, 4), rnd(4, 2, 2, 2)          # NHWC
    got = run("conv2d_transpose", x, w, strides=[2, 2], data_format="NHWC")
    want = loop_conv_transpose(x.transpose(0, 3, 1, 2), w, (2, 2), (0,) * 4, (1, 1), 1, (6, 8))
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-12)
    assert got.flags.c_contiguous
    x3 = rnd(1, 2, 2, 3, 2)                          # NDHWC, stored as "NHWC" as Paddle's Python does
    w3 = rnd(2, 3, 2, 1, 2)
    got = run("conv3d_transpose", x3, w3, data_format="NHWC")
    want = loop_conv_transpose(x3.transpose(0, 4, 1, 2, 3), w3, (1, 1, 1), (0,) * 6, (1, 1, 1), 1, (3, 2, 4))
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 4, 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("xs, ws, attrs, pads", [
    ((1, 2, 4, 5, 4), (3, 2, 3, 3, 2), {"paddings": [1, 0, 1]}, (1, 1, 0, 0, 1, 1)),
    ((2, 4, 3, 4, 5), (2, 2, 2, 2, 3), {"strides": [1, 2, 2], "groups": 2, "paddings": [0, 1, 1, 0, 0, 1]},
     (0, 1, 1, 0, 0, 1)),
    ((1, 2, 5, 5, 5), (2, 2, 2, 2, 2), {"dilations": [2, 1, 2]}, (0,) * 6),
    ((1, 1, 5, 4, 3), (1, 1, 3, 3, 3), {"padding_algorithm": "SAME", "strides": [2, 2, 1], "dilations": [3, 3, 3]},
     (1, 1, 0, 1, 1, 1)),
])
def test_conv3d_forward_matches_loops(xs, ws, attrs, pads):
    x, w = rnd(*xs), rnd(*ws)
    dil = [1, 1, 1] if attrs.get("padding_algorithm") == "SAME" else attrs.get("dilations", [1, 1, 1])
    want = loop_conv(x, w, attrs.get("strides", [1, 1, 1]), pads, dil, attrs.get("groups", 1))
    np.testing.assert_allclose(run("conv3d", x, w, **attrs), want, rtol=1e-12, atol=1e-12)
    nd = run("conv3d", x.transpose(0, 2, 3, 4, 1), w, data_format="NDHWC", **attrs)
    np.testing.assert_allclose(nd, want.transpose(0, 2, 3, 4, 1), rtol=1e-12, atol=1e-12)


def test_conv_transpose_is_the_input_gradient_of_conv():
    """<conv(y, W), x> == <y, conv_transpose(x, W)>: the two ops are adjoint."""
    y, w = rnd(2, 2, 7, 6), rnd(3, 2, 3, 2)
    attrs = {"strides": [2, 1], "paddings": [1, 0], "dilations": [1, 2]}
    cx = run("conv2d", y, w, **attrs)
    x = rnd(*cx.shape)
    ty = run("conv2d_transpose", x, w, output_size=[7, 6], **attrs)
    np.testing.assert_allclose((cx * x).sum(), (y * ty).sum(), rtol=1e-12)


# ---- gradients ------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, xs, ws, attrs", [
    ("conv2d_transpose", (2, 2, 3, 3), (2, 3, 3, 2), {"strides": [2, 1], "paddings": [1, 0, 0, 1]}),
    ("conv2d_transpose", (1, 4, 3, 2), (4, 1, 2, 2), {"groups": 2, "dilations": [2, 1], "output_padding": [1, 0],
                                                      "strides": [1, 1]}),
    ("conv2d_transpose", (1, 3, 3, 2), (2, 2, 3, 3), {"padding_algorithm": "SAME", "strides": [2, 2],
                                                      "data_format": "NHWC"}),
    ("depthwise_conv2d_transpose", (1, 2, 3, 3), (2, 1, 3, 3), {"groups": 2, "strides": [2, 2],
                                                                "output_size": [8, 7]}),
    ("conv3d_transpose", (1, 2, 2, 3, 2), (2, 2, 2, 2, 3), {"strides": [2, 1, 2], "paddings": [0, 1, 1]}),
    ("conv3d", (1, 2, 3, 4, 3), (2, 1, 2, 3, 2), {"groups": 2, "paddings": [1, 0, 1], "strides": [1, 2, 1]}),
    ("conv3d", (1, 3, 3, 3, 2), (2, 2, 2, 2, 2), {"data_format": "NDHWC", "dilations": [1, 2, 1]}),
])
def test_grads(op, xs, ws, attrs):
    grad_check(op, {"Input": rnd(*xs), "Filter": rnd(*ws)}, attrs, out_slot="Output", wrt=("Input", "Filter"))


def test_grad_skips_unneeded_outputs():
    x, w = rnd(1, 2, 3, 3), rnd(2, 3, 2, 2)
    dx, dw = run("conv2d_transpose_grad", x, w, None, rnd(1, 3, 4, 4), need=(False, True))
    assert dx is None and dw.shape == w.shape
    dx, dw = run("conv3d_grad", rnd(1, 2, 3, 3, 3), rnd(2, 2, 2, 2, 2), rnd(1, 2, 2, 2, 2), need=(True, False))
    assert dw is None and dx.shape == (1, 2, 3, 3, 3)


# ---- registry facts, as Paddle 3.3.1 prints them ----------------------------------------------------
# OpProtoHolder.get_op_proto(...) of Paddle 3.3.1 (legacy IR): slots and attrs in proto order
PROTO = {
    "conv2d_transpose": (["Input", "Filter", "Bias?"],
                         ["strides", "paddings", "output_padding", "output_size", "padding_algorithm", "groups",
                          "dilations", "data_format"]),
    "depthwise_conv2d_transpose": (["Input", "Filter", "Bias?"],
                                   ["strides", "paddings", "output_padding", "output_size", "padding_algorithm",
                                    "groups", "dilations", "data_format"]),
    "conv3d": (["Input", "Filter"], ["strides", "paddings", "padding_algorithm", "groups", "dilations", "data_format"]),
    "conv3d_transpose": (["Input", "Filter"],
                         ["strides", "paddings", "output_padding", "output_size", "padding_algorithm", "groups",
                          "dilations", "data_format"]),
}
# the attrs of an op appended with none given, as Paddle 3.3.1 fills them in
DEFAULTS = {
    "conv2d_transpose": {"paddings": [0, 0], "dilations": [1, 1], "strides": [1, 1], "output_padding": [],
                         "padding_algorithm": "EXPLICIT", "groups": 1, "output_size": [], "data_format": "NCHW"},
    "conv3d": {"data_format": "NCDHW", "groups": 1, "padding_algorithm": "EXPLICIT", "dilations": [1, 1, 1],
               "paddings": [0, 0, 0], "strides": [1, 1, 1]},
    "conv3d_transpose": {"paddings": [0, 0, 0], "dilations": [1, 1, 1], "strides": [1, 1, 1], "output_padding": [],
                         "padding_algorithm": "EXPLICIT", "groups": 1, "output_size": [], "data_format": "NCHW"},
}


@pytest.mark.parametrize("op", sorted(PROTO))
def test_slots_attrs_and_grad_ops(op):
    od = get_op_def(op)
    slots, attrs = PROTO[op]
    assert [repr(s) for s in od.inputs] == slots and od.output_slot_names() == ["Output"]
    assert list(od.attrs) == attrs
    if op in DEFAULTS:
        assert od.attrs == DEFAULTS[op]
    descs, _ = make_grad_op_descs(op, {"Input": ["x"], "Filter": ["w"]}, {"Output": ["y"]}, dict(od.attrs),
                                  {"x@GRAD"})
    (d,) = descs
    assert d["type"] == op + "_grad"
    want = {"Input": ["x"], "Filter": ["w"], "Output@GRAD": ["y@GRAD"]}
    if "Bias?" in slots:
        want["Bias"] = []     # Paddle 3.3.1 records 'Bias': [] in the grad op too
    assert d["inputs"] == want
    assert d["outputs"] == {"Input@GRAD": [], "Filter@GRAD": ["w@GRAD"]}


# ---- bad input --------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, args, attrs, words", [
    ("conv2d_transpose", ((1, 3, 5, 5), (4, 2, 3, 3)), {}, "input channels"),
    ("conv2d_transpose", ((1, 4, 5, 5), (4, 2, 3, 3)), {"groups": 3}, "groups"),
    ("conv2d_transpose", ((1, 4, 5, 5), (4, 2, 3, 3)), {"strides": [2, 2], "output_size": [10, 10]}, r"\[11, 13\)"),
    ("conv2d_transpose", ((1, 4, 5, 5), (4, 2, 3, 3)), {"strides": [2, 2], "output_size": [13, 13]}, "output_size"),
    ("conv2d_transpose", ((1, 4, 5, 5), (4, 2, 3, 3)), {"strides": [2, 2], "output_size": [12]}, "output_size"),
    ("conv2d_transpose", ((1, 4, 5, 5), (4, 2, 3, 3)), {"strides": [2, 2], "output_padding": [2, 2]},
     "output_padding"),
    ("conv2d_transpose", ((1, 4, 5, 5), (4, 2, 3, 3)), {"paddings": [5, 5]}, "output size is -3"),
    ("conv2d_transpose", ((1, 4, 5, 5), (4, 2, 3, 3)), {"data_format": "NCDHW"}, "data_format"),
    ("conv2d_transpose", ((1, 4, 5, 5), (4, 2, 3, 3)), {"padding_algorithm": "FULL"}, "padding_algorithm"),
    ("depthwise_conv2d_transpose", ((4, 5, 5), (4, 1, 3, 3)), {}, "4-D"),
    ("conv3d_transpose", ((1, 4, 5, 5), (4, 2, 3, 3)), {}, "5-D"),
    ("conv3d_transpose", ((1, 4, 3, 5, 5), (4, 2, 3, 3, 3)), {"strides": [1, 1]}, "strides"),
    ("conv3d", ((1, 4, 3, 5, 5), (2, 3, 3, 3, 3)), {}, "channels"),
    ("conv3d", ((1, 4, 3, 5, 5), (2, 4, 4, 3, 3)), {}, "output size is 0"),
    ("conv3d", ((1, 4, 3, 5, 5), (3, 2, 3, 3, 3)), {"groups": 2}, "groups"),
    ("conv3d", ((1, 4, 3, 5, 5), (2, 4, 3, 3, 3)), {"paddings": [1, 1]}, "paddings"),
    ("conv3d", ((1, 4, 5, 5), (2, 4, 3, 3)), {}, "5-D"),
    ("conv3d", ((1, 4, 3, 5, 5), (2, 4, 3, 3, 3)), {"data_format": "NCWH"}, "data_format"),
])
def test_bad_input_raises_typed_errors(op, args, attrs, words):
    with pytest.raises(InvalidArgument, match=words) as e:
        run(op, *[rnd(*s) for s in args], **attrs)
    assert op in str(e.value)
    od = get_op_def(op)
    ins = {s.name: [(shape, "float32")] for s, shape in zip(od.inputs, args)}
    with pytest.raises(InvalidArgument, match=words):   # and at build time, from infer_shape
        od.infer_shape(ins, dict(od.attrs, **attrs))


def test_unknown_sizes_stay_unknown():
    od = get_op_def("conv2d_transpose")
    ins = {"Input": [((-1, 4, -1, 5), "float32")], "Filter": [((4, 2, 3, 3), "float32")]}
    out = od.infer_shape(ins, dict(od.attrs, strides=[2, 2], padding_algorithm="SAME"))["Output"][0]
    assert out == (-1, 2, -1, 9)        # Paddle 3.3.1's F.conv2d_transpose prints (-1, 2, -1, 9)
