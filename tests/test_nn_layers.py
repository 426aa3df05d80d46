"""The layers of ``paddle.nn`` in static mode: Paddle's ops, attrs, names and initialisers, and their numbers.

Programs are compared with what Paddle recorded: the model zoo (``oracle/zoo``: ``01_resnet_block`` and
``03_mlp_layers`` by Paddle 3.3.1, ``02_gpt_mini`` by 2.6.2) and, for layers no zoo case uses, programs
printed from Paddle 3.3.1 (``FLAGS_enable_pir_api=0``, legacy IR) pasted below as literals. Numbers are
checked against plain NumPy formulas after running the programs with refimpl's Executor, and the zoo
models built from layers against the losses and parameters Paddle recorded.
"""
import math

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.framework import unique_name

from oracle import _write_lr, array, diff_programs
from zoo_build import build

nn, F = paddle.nn, paddle.nn.functional
paddle.enable_static()

IGNORED = {"op_role", "op_role_var", "op_namescope", "op_device", "op_callstack", "with_quant_attr"}


def _programs(fn):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        out = fn()
    return main, startup, out


def _ops(prog):
    """(type, inputs, outputs, attrs) of every op, attrs without the common role/device ones."""
    return [(op.type, {k: op.input(k) for k in op.input_names}, {k: op.output(k) for k in op.output_names},
             {k: op.attr(k) for k in op.attr_names if k not in IGNORED}) for op in prog.global_block().ops]


def _vars(prog):
    return {v.name: (list(v.shape), v.dtype, v.persistable, v.stop_gradient, v.is_parameter)
            for v in prog.global_block().vars.values()}


def _same_attrs(got, want):
    assert set(got) == set(want), (sorted(got), sorted(want))
    for k, w in want.items():
        g = got[k]
        assert (g == pytest.approx(w, rel=1e-6)) if isinstance(w, float) else g == w, (k, g, w)


def _check_ops(prog, want):
    got = _ops(prog)
    assert [o[0] for o in got] == [w[0] for w in want]
    for (gt, gi, go, ga), (wt, wi, wo, wa) in zip(got, want):
        assert (gi, go) == (wi, wo), gt
        _same_attrs(ga, wa)


def _run(main, startup, feed, fetch):
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        outs = exe.run(main, feed=feed, fetch_list=fetch)
    return scope, [np.asarray(o) for o in outs]


def _value(scope, name):
    return np.asarray(scope.find_var(name).get_tensor())


# ---- the zoo cases built from layers ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["01_resnet_block", "03_mlp_layers"])
def test_zoo_layer_models_build_paddles_programs(name):
    """Conv2D / BatchNorm2D / ReLU / Sequential / AdaptiveAvgPool2D / Linear (01), Sequential of Linear / ReLU (03)."""
    main, startup, loss, d = build(name)
    assert loss.name == d["loss_name"]
    assert diff_programs(main.to_dict(), d["main"]) == []
    assert diff_programs(startup.to_dict(), d["startup"]) == []


@pytest.mark.parametrize("name", ["01_resnet_block", "02_gpt_mini", "03_mlp_layers"])
def test_zoo_layer_models_train_to_paddles_losses(name):
    """The programs the layers build, run from Paddle's initial values on its feeds, give its losses.

    As Paddle's recorder did, the LR scheduler steps after every run. gpt_mini's final parameters are
    not compared: the key projection's bias has an all-but-zero gradient (softmax ignores a shift shared
    by all keys), which Adam turns into noise.
    """
    main, startup, loss, d = build(name)
    scope = paddle.static.Scope()
    for n, e in d["initial_persistables"].items():
        scope.var(n).get_tensor().set(array(e))
    exe = paddle.static.Executor(paddle.CPUPlace())
    for step, feed in enumerate(d["feeds"]):
        _write_lr(d, step, main, scope)
        out, = exe.run(main, feed={k: array(v) for k, v in feed.items()}, fetch_list=[loss], scope=scope)
        if getattr(main, "lr_scheduler", None) is not None:
            main.lr_scheduler.step()
        np.testing.assert_allclose(out, array(d["fetched_loss"][step]).reshape(np.shape(out)), rtol=1e-5, atol=1e-6)
    if name != "02_gpt_mini":
        for n, e in d["final_persistables"].items():
            np.testing.assert_allclose(_value(scope, n), array(e), rtol=1e-4, atol=1e-5, err_msg=n)


def _canonical(prog_dict, types):
    """Ops and vars of block 0 with the names of temporaries replaced by their order of appearance.

    2.6.2 numbered a layer call's temporaries with the global counter (``linear_12.tmp_0``), 3.3.1 after
    the layer (``linear_0.tmp_0``); parameter, data and gradient-of-parameter names are kept.
    """
    b = prog_dict["blocks"][0]
    keep = {v["name"] for v in b["vars"] if v["persistable"] or v["is_data"]}
    ids = {}

    def c(n):
        return n if n in keep else ids.setdefault(n, f"T{len(ids)}")

    ops = []
    for o in b["ops"]:
        slots = [{k: [c(n) for n in v] for k, v in sorted(o[side].items())} for side in ("inputs", "outputs")]
        if o["type"] in types:
            attrs = {k: v for k, v in o["attrs"].items() if k not in {"op_namescope", "op_role_var"}}
            ops.append((o["type"], slots[0], slots[1], attrs))
    return ops


def test_gpt_mini_layers_build_paddles_ops_and_parameters():
    """Embedding, LayerNorm, Linear, GELU, Sequential, LayerList in Layer subclasses, ``self.tok.weight`` tied."""
    main, startup, loss, d = build("02_gpt_mini")
    assert diff_programs(startup.to_dict(), d["startup"]) == []  # every parameter and initialiser
    params = lambda p: {v["name"]: v for v in p["blocks"][0]["vars"] if v["is_parameter"]}  # noqa: E731
    assert params(main.to_dict()) == params(d["main"])
    mine = {"lookup_table_v2", "layer_norm", "matmul_v2", "elementwise_add", "gelu", "softmax",
            "lookup_table_v2_grad", "layer_norm_grad", "gelu_grad"}
    got, want = _canonical(main.to_dict(), mine), _canonical(d["main"], mine)
    assert len(got) == len(want) > 60
    assert got == want


# ---- layers no zoo case uses: programs printed from Paddle 3.3.1 ----------------------------------------
def _x4():
    return paddle.static.data("x", [None, 3, 8, 8], "float32")


def _x2():
    return paddle.static.data("x", [None, 4], "float32")


def _ids():
    return paddle.static.data("ids", [None, 3], "int64")


def test_embedding_with_padding_idx():
    main, startup, _ = _programs(lambda: nn.Embedding(10, 4, padding_idx=-8)(_ids()))
    # Paddle 3.3.1: lookup_table_v2 {'Ids': ['ids'], 'W': ['embedding_0.w_0']} {'Out': ['embedding_0.tmp_0']}
    # {'padding_idx': 2}; startup uniform_random min/max +-0.6546536684036255 (Xavier of [10, 4])
    _check_ops(main, [("lookup_table_v2", {"Ids": ["ids"], "W": ["embedding_0.w_0"]},
                       {"Out": ["embedding_0.tmp_0"]}, {"padding_idx": 2})])
    assert _vars(main)["embedding_0.tmp_0"][0] == [-1, 3, 4]
    init = startup.global_block().ops[0]
    assert init.type == "uniform_random" and init.attr("max") == pytest.approx(0.6546536684036255)


def test_layer_norm_over_two_dims():
    main, startup, _ = _programs(lambda: nn.LayerNorm([8, 8])(_x4()))
    # Paddle 3.3.1 (vars: name, shape, persistable, stop_gradient):
    #   layer_norm_0.w_0 (64,) persist param, layer_norm_0.b_0 (64,) persist param,
    #   layer_norm_0.tmp_0 (-1, 3) sg, layer_norm_0.tmp_1 (-1, 3) sg, layer_norm_0.tmp_2 (-1, 3, 8, 8)
    _check_ops(main, [("layer_norm", {"X": ["x"], "Scale": ["layer_norm_0.w_0"], "Bias": ["layer_norm_0.b_0"]},
                       {"Y": ["layer_norm_0.tmp_2"], "Mean": ["layer_norm_0.tmp_0"],
                        "Variance": ["layer_norm_0.tmp_1"]},
                       {"begin_norm_axis": 2, "epsilon": 9.999999747378752e-06})])
    v = _vars(main)
    assert v["layer_norm_0.w_0"] == ([64], "float32", True, False, True)
    assert v["layer_norm_0.tmp_0"][0] == [-1, 3] and v["layer_norm_0.tmp_0"][3]
    assert [(o.type, o.attr("value")) for o in startup.global_block().ops] == [("fill_constant", 1.0),
                                                                                ("fill_constant", 0.0)]


def test_conv2d_with_bias_and_its_default_initialiser():
    main, startup, _ = _programs(lambda: nn.Conv2D(3, 6, 3, stride=2, padding=1)(_x4()))
    # Paddle 3.3.1: conv2d -> reshape2 of the bias to [1, 6, 1, 1] -> elementwise_add (axis -1);
    # startup gaussian_random mean 0.0 std 0.27216553688049316 = sqrt(2 / (3 * 3 * 3)), bias fill_constant 0.0
    assert [o[0] for o in _ops(main)] == ["conv2d", "reshape2", "elementwise_add"]
    conv = main.global_block().ops[0]
    assert conv.input("Filter") == ["conv2d_0.w_0"] and conv.output("Output") == ["conv2d_0.tmp_0"]
    assert (conv.attr("strides"), conv.attr("paddings")) == ([2, 2], [1, 1])
    assert _vars(main)["conv2d_0.tmp_1"][0] == [-1, 6, 4, 4]
    w, b = startup.global_block().ops
    assert (w.type, w.attr("mean"), w.attr("shape")) == ("gaussian_random", 0.0, [6, 3, 3, 3])
    assert w.attr("std") == pytest.approx(0.27216553688049316)
    assert (b.type, b.output("Out"), b.attr("value")) == ("fill_constant", ["conv2d_0.b_0"], 0.0)


def test_grouped_conv2d_fan_in_ignores_groups():
    main, startup, _ = _programs(lambda: nn.Conv2D(3, 6, (3, 2), bias_attr=False, groups=3, dilation=2)(_x4()))
    # Paddle 3.3.1: depthwise_conv2d_0.tmp_0 (-1, 6, 4, 6); conv2d_0.w_0 (6, 1, 3, 2); std 0.3333333432674408
    assert [o[0] for o in _ops(main)] == ["depthwise_conv2d"]
    assert _vars(main)["conv2d_0.w_0"][0] == [6, 1, 3, 2]
    assert startup.global_block().ops[0].attr("std") == pytest.approx(0.3333333432674408)


BN_TRAIN = ("batch_norm", {"X": ["x"], "Scale": ["batch_norm2d_0.w_0"], "Bias": ["batch_norm2d_0.b_0"],
                           "Mean": ["batch_norm2d_0.w_1"], "Variance": ["batch_norm2d_0.w_2"], "MomentumTensor": []},
            {"Y": ["batch_norm_0.tmp_2"], "MeanOut": ["batch_norm2d_0.w_1"], "VarianceOut": ["batch_norm2d_0.w_2"],
             "SavedMean": ["batch_norm_0.tmp_0"], "SavedVariance": ["batch_norm_0.tmp_1"],
             "ReserveSpace": ["batch_norm_0.tmp_3"]},
            {"momentum": 0.8999999761581421, "epsilon": 9.999999747378752e-06, "data_layout": "NCHW",
             "is_test": False, "use_global_stats": False, "trainable_statistics": False})


def test_batch_norm2d_training_eval_and_global_stats():
    # Paddle 3.3.1, nn.BatchNorm2D(3) on [-1, 3, 8, 8] in training: BN_TRAIN above
    main, startup, _ = _programs(lambda: nn.BatchNorm2D(3)(_x4()))
    _check_ops(main, [BN_TRAIN])
    v = _vars(main)
    assert v["batch_norm2d_0.w_1"] == ([3], "float32", True, True, True)   # running mean: not trainable
    assert v["batch_norm2d_0.w_0"] == ([3], "float32", True, False, True)
    assert [(o.output("Out")[0], o.attr("value")) for o in startup.global_block().ops] == [
        ("batch_norm2d_0.w_0", 1.0), ("batch_norm2d_0.b_0", 0.0), ("batch_norm2d_0.w_1", 0.0),
        ("batch_norm2d_0.w_2", 1.0)]

    # eval(), momentum 0.8, epsilon 1e-3: is_test and use_global_stats, no ReserveSpace
    main, _, _ = _programs(lambda: nn.BatchNorm2D(3, momentum=0.8, epsilon=1e-3).eval()(_x4()))
    t, i, o, a = BN_TRAIN
    o = {k: v for k, v in o.items() if k != "ReserveSpace"}
    _check_ops(main, [(t, i, o, dict(a, momentum=0.800000011920929, epsilon=0.0010000000474974513,
                                     is_test=True, use_global_stats=True))])

    # use_global_stats=True while training: is_test False, ReserveSpace kept
    main, _, _ = _programs(lambda: nn.BatchNorm2D(3, use_global_stats=True)(_x4()))
    _check_ops(main, [(t, i, BN_TRAIN[2], dict(a, use_global_stats=True))])


def test_batch_norm1d_names_and_ranks():
    main, _, _ = _programs(lambda: nn.BatchNorm1D(3)(paddle.static.data("x", [None, 3, 7], "float32")))
    op = main.global_block().ops[0]
    assert op.input("Scale") == ["batch_norm1d_0.w_0"] and op.output("MeanOut") == ["batch_norm1d_0.w_1"]
    assert op.attr("data_layout") == "NCHW" and _vars(main)["batch_norm_0.tmp_2"][0] == [-1, 3, 7]


def test_batch_norm_wrong_rank_is_a_build_time_error_naming_layer_and_shape():
    # Paddle: ValueError "expected 4D input (got 2D input)"
    with pytest.raises(InvalidArgument, match=r"BatchNorm2D.*4D.*2D.*\[-1, 4\]"):
        _programs(lambda: nn.BatchNorm2D(3)(_x2()))
    with pytest.raises(InvalidArgument, match=r"BatchNorm1D.*2D or 3D.*4D"):
        _programs(lambda: nn.BatchNorm1D(3)(_x4()))
    with pytest.raises(InvalidArgument, match="data_format"):
        _programs(lambda: nn.BatchNorm2D(3, data_format="NCL")(_x4()))


def test_pool_dropout_activation_softmax_flatten_programs():
    # Paddle 3.3.1 (pool2d attrs as printed there)
    pool = {"adaptive": False, "ksize": [2, 2], "strides": [2, 2], "pooling_type": "max", "paddings": [0, 0],
            "ceil_mode": False, "exclusive": True, "data_format": "NCHW", "global_pooling": False,
            "padding_algorithm": "EXPLICIT", "use_cudnn": True}
    main, _, _ = _programs(lambda: nn.MaxPool2D(2)(_x4()))
    _check_ops(main, [("pool2d", {"X": ["x"]}, {"Out": ["pool2d_0.tmp_0"]}, pool)])
    main, _, _ = _programs(lambda: nn.AvgPool2D(2, exclusive=False)(_x4()))
    _check_ops(main, [("pool2d", {"X": ["x"]}, {"Out": ["pool2d_0.tmp_0"]},
                       dict(pool, pooling_type="avg", exclusive=False))])
    main, _, _ = _programs(lambda: nn.AdaptiveAvgPool2D((2, 3))(_x4()))
    _check_ops(main, [("pool2d", {"X": ["x"]}, {"Out": ["pool2d_0.tmp_0"]},
                       dict(pool, pooling_type="avg", adaptive=True, ksize=[2, 3], strides=[1, 1],
                            use_cudnn=False))])
    main, _, _ = _programs(lambda: nn.Dropout(0.3)(_x2()))
    _check_ops(main, [("dropout", {"X": ["x"], "Seed": []}, {"Out": ["dropout_0.tmp_0"], "Mask": ["dropout_0.tmp_1"]},
                       {"dropout_prob": 0.30000001192092896, "is_test": False,
                        "dropout_implementation": "upscale_in_train"})])
    main, _, _ = _programs(lambda: nn.Softmax(axis=0)(_x2()))
    _check_ops(main, [("softmax", {"X": ["x"]}, {"Out": ["softmax_0.tmp_0"]}, {"axis": 0})])
    main, _, _ = _programs(lambda: nn.Flatten(2, 3)(_x4()))
    _check_ops(main, [("flatten_contiguous_range", {"X": ["x"]},
                       {"Out": ["flatten_0.tmp_0"], "XShape": ["flatten_0.tmp_1"]}, {"start_axis": 2, "stop_axis": 3})])
    assert _vars(main)["flatten_0.tmp_0"][0] == [-1, 3, 64]
    # Paddle 2.6.2 (3.3.1 cannot build them in the legacy IR): gelu {'approximate': True}, tanh, sigmoid;
    # 2.6.2 names them gelu_1.tmp_0 ... (global counter), 3.3.1's rule gelu_0.tmp_0
    for layer, op_type, attrs in ((nn.GELU(approximate=True), "gelu", {"approximate": True}),
                                  (nn.Tanh(), "tanh", {}), (nn.Sigmoid(), "sigmoid", {}), (nn.ReLU(), "relu", {})):
        main, _, _ = _programs(lambda: layer(_x2()))
        _check_ops(main, [(op_type, {"X": ["x"]}, {"Out": [f"{op_type}_0.tmp_0"]}, attrs)])


def test_functional_layer_norm_embedding_one_hot_programs():
    # Paddle 3.3.1: F.layer_norm(x, [8, 8]) has empty Scale / Bias slots and begin_norm_axis 2
    main, _, _ = _programs(lambda: F.layer_norm(_x4(), [8, 8]))
    _check_ops(main, [("layer_norm", {"X": ["x"], "Scale": [], "Bias": []},
                       {"Y": ["layer_norm_0.tmp_2"], "Mean": ["layer_norm_0.tmp_0"], "Variance": ["layer_norm_0.tmp_1"]},
                       {"begin_norm_axis": 2, "epsilon": 9.999999747378752e-06})])
    # Paddle 3.3.1: padding_idx=-1 on a [10, 4] table is 9
    main, _, _ = _programs(lambda: F.embedding(_ids(), paddle.static.create_parameter([10, 4], "float32"),
                                                padding_idx=-1))
    _check_ops(main, [("lookup_table_v2", {"Ids": ["ids"], "W": ["create_parameter_0.w_0"]},
                       {"Out": ["embedding_0.tmp_0"]}, {"padding_idx": 9})])
    # Paddle 3.3.1: one_hot_v2 {'X': ['ids'], 'depth_tensor': []} -> one_hot_v2_0.tmp_0 (-1, 3, 5) float32
    main, _, _ = _programs(lambda: F.one_hot(_ids(), 5))
    _check_ops(main, [("one_hot_v2", {"X": ["ids"], "depth_tensor": []}, {"Out": ["one_hot_v2_0.tmp_0"]},
                       {"depth": 5, "dtype": 5, "allow_out_of_range": False})])
    assert _vars(main)["one_hot_v2_0.tmp_0"][:2] == ([-1, 3, 5], "float32")


def test_functional_errors():
    with pytest.raises(InvalidArgument, match="normalized_shape"):
        _programs(lambda: F.layer_norm(_x4(), [4]))
    with pytest.raises(InvalidArgument, match="padding_idx"):
        _programs(lambda: F.embedding(_ids(), paddle.static.create_parameter([10, 4], "float32"), padding_idx=10))
    with pytest.raises(InvalidArgument, match="num_classes"):
        _programs(lambda: F.one_hot(_ids(), 0))
    with pytest.raises(InvalidArgument, match="data_format"):
        _programs(lambda: F.batch_norm(_x4(), *[paddle.static.create_parameter([3], "float32")] * 2,
                                       data_format="CHW"))
    with pytest.raises(InvalidArgument, match="Embedding: padding_idx"):
        nn.Embedding(4, 2, padding_idx=4)


# ---- numbers ------------------------------------------------------------------------------------------
def test_sequential_mlp_numbers():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4)).astype("float32")
    main, startup, y = _programs(lambda: nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2), nn.Tanh())(_x2()))
    scope, (got,) = _run(main, startup, {"x": x}, [y])
    w0, b0, w1, b1 = (_value(scope, n) for n in ("linear_0.w_0", "linear_0.b_0", "linear_1.w_0", "linear_1.b_0"))
    assert np.all(np.abs(w0) <= math.sqrt(6 / 10)) and not b0.any()
    np.testing.assert_allclose(got, np.tanh(np.maximum(x @ w0 + b0, 0) @ w1 + b1), rtol=1e-5, atol=1e-6)


def test_embedding_layer_norm_gelu_softmax_numbers():
    ids = np.array([[1, 2, 3], [2, 0, 9]], "int64")

    def net():
        h = nn.Embedding(10, 4, padding_idx=2)(_ids())
        ln = nn.LayerNorm(4)(h)
        return h, ln, nn.GELU()(ln), nn.Softmax()(ln)

    main, startup, outs = _programs(net)
    scope, (h, ln, g, s) = _run(main, startup, {"ids": ids}, list(outs))
    table = _value(scope, "embedding_0.w_0")
    want = table[ids] * (ids != 2)[..., None]
    np.testing.assert_allclose(h, want, rtol=1e-6)
    mu, var = want.mean(-1, keepdims=True), want.var(-1, keepdims=True)
    want_ln = (want - mu) / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(ln, want_ln, rtol=1e-4, atol=1e-5)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(g, 0.5 * want_ln * (1 + erf(want_ln / math.sqrt(2))), rtol=1e-4, atol=1e-5)
    e = np.exp(want_ln - want_ln.max(-1, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


def _conv_nchw(x, w, stride, pad):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), "float64")
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out


def test_conv_batch_norm_pool_numbers_and_running_statistics():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 8, 8)).astype("float32")

    def net():
        c = nn.Conv2D(3, 4, 3, stride=2, padding=1, bias_attr=False)(_x4())
        b = nn.BatchNorm2D(4)(c)
        return c, b, nn.MaxPool2D(2)(b), nn.AdaptiveAvgPool2D(1)(b)

    main, startup, outs = _programs(net)
    scope, (c, b, mp, ap) = _run(main, startup, {"x": x}, list(outs))
    np.testing.assert_allclose(c, _conv_nchw(x, _value(scope, "conv2d_0.w_0"), 2, 1), rtol=1e-4, atol=1e-5)
    mean, var = c.mean((0, 2, 3)), c.var((0, 2, 3))
    want = (c - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(b, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_value(scope, "batch_norm2d_0.w_1"), 0.1 * mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(_value(scope, "batch_norm2d_0.w_2"), 0.9 + 0.1 * var, rtol=1e-4)
    np.testing.assert_allclose(mp, b.reshape(2, 4, 2, 2, 2, 2).max((3, 5)), rtol=1e-6)
    np.testing.assert_allclose(ap, b.mean((2, 3), keepdims=True), rtol=1e-4, atol=1e-6)


def test_one_hot_and_flatten_numbers():
    ids = np.array([[0, 4, 2]], "int64")
    main, startup, (oh, fl) = _programs(lambda: (F.one_hot(_ids(), 5), nn.Flatten()(F.one_hot(_ids(), 5))))
    _, (a, b) = _run(main, startup, {"ids": ids}, [oh, fl])
    np.testing.assert_array_equal(a, np.eye(5, dtype="float32")[ids])
    np.testing.assert_array_equal(b, np.eye(5, dtype="float32")[ids].reshape(1, 15))
