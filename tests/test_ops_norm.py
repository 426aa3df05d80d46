"""batch_norm / batch_norm_grad (refimpl/ops/norm_ops.py): forward against per-channel loops, float64
central-difference gradients, build-time errors, and one training step of fc -> batch_norm -> mean with
SGD against a hand-written NumPy step."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.ops.registry import get_op_def

from op_check import grad_check, run

R = np.random.default_rng(7)


def _loop_bn(x, scale, bias, mean, var, eps, layout, momentum, train):
    """Batch norm channel by channel with Python loops over channels and float64 statistics."""
    x64 = x.astype(np.float64)
    axis = 1 if layout == "NCHW" or x.ndim == 2 else x.ndim - 1
    y = np.empty_like(x64)
    stats = []
    for c in range(x.shape[axis]):
        xc = np.take(x64, c, axis=axis)
        if train:
            m = sum(float(v) for v in xc.reshape(-1)) / xc.size
            v = sum((float(t) - m) ** 2 for t in xc.reshape(-1)) / xc.size
        else:
            m, v = float(mean[c]), float(var[c])
        idx = [slice(None)] * x.ndim
        idx[axis] = c
        y[tuple(idx)] = (xc - m) / np.sqrt(v + eps) * scale[c] + bias[c]
        stats.append((m, v))
    m, v = np.array(stats).T
    new_mean = mean * momentum + m * (1 - momentum) if train else mean
    new_var = var * momentum + v * (1 - momentum) if train else var
    return y, new_mean, new_var, m, 1 / np.sqrt(v + eps)


CASES = [((4, 3, 2, 2), "NCHW"), ((4, 2, 2, 3), "NHWC"), ((5, 3), "NCHW"), ((5, 3), "NHWC"),
         ((2, 3, 4), "NCHW"), ((2, 2, 2, 2, 3), "NHWC"), ((2, 3, 2, 1, 2), "NCHW")]


def _params(c, dt=np.float32):
    return (R.standard_normal(c).astype(dt), R.standard_normal(c).astype(dt),
            R.standard_normal(c).astype(dt), (R.random(c) + 0.5).astype(dt))


@pytest.mark.parametrize("shape,layout", CASES)
def test_training_forward_matches_loops(shape, layout):
    x = (R.standard_normal(shape) * 2 + 1).astype(np.float32)
    c = shape[1] if layout == "NCHW" else shape[-1]
    scale, bias, mean, var = _params(c)
    y, mean_out, var_out, saved_mean, saved_inv_std, reserve = run(
        "batch_norm", x, scale, bias, mean, var, None, data_layout=layout)
    want = _loop_bn(x, scale, bias, mean, var, 1e-5, layout, 0.9, True)
    for got, w in zip((y, mean_out, var_out, saved_mean, saved_inv_std), want):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6)
    assert reserve.size == 0


@pytest.mark.parametrize("attrs", [{"is_test": True}, {"use_global_stats": True},
                                   {"is_test": True, "data_layout": "NHWC"}])
def test_global_statistics_forward(attrs):
    x = R.standard_normal((3, 4, 2, 2)).astype(np.float32)
    if attrs.get("data_layout") == "NHWC":
        x = x.transpose(0, 2, 3, 1).copy()
    scale, bias, mean, var = _params(4)
    y, mean_out, var_out, saved_mean, saved_inv_std, _ = run("batch_norm", x, scale, bias, mean, var, None, **attrs)
    want = _loop_bn(x, scale, bias, mean, var, 1e-5, attrs.get("data_layout", "NCHW"), 0.9, False)
    np.testing.assert_allclose(y, want[0], rtol=2e-5, atol=2e-6)
    np.testing.assert_array_equal(mean_out, mean)
    np.testing.assert_array_equal(var_out, var)
    assert mean_out is not mean  # a new array: the kernel never writes into its inputs
    saved = () if attrs.get("is_test") else (4,)  # the shapes batch_norm's infer-shape gives them
    assert saved_mean.shape == saved and saved_inv_std.shape == saved


def test_trainable_statistics_in_test_mode_uses_the_batch():
    x = R.standard_normal((6, 3)).astype(np.float32)
    scale, bias, mean, var = _params(3)
    y = run("batch_norm", x, scale, bias, mean, var, None, is_test=True, trainable_statistics=True)[0]
    want = _loop_bn(x, scale, bias, mean, var, 1e-5, "NCHW", 0.9, True)[0]
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-6)


def test_momentum_tensor_overrides_the_attr():
    x = R.standard_normal((6, 3)).astype(np.float32)
    scale, bias, mean, var = _params(3)
    out = run("batch_norm", x, scale, bias, mean, var, np.array([0.5], np.float32), momentum=0.9)
    want = _loop_bn(x, scale, bias, mean, var, 1e-5, "NCHW", 0.5, True)
    np.testing.assert_allclose(out[1], want[1], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(out[2], want[2], rtol=2e-5, atol=2e-6)


def test_one_element_per_channel_is_the_identity():
    x = R.standard_normal((1, 3)).astype(np.float32)
    scale, bias, mean, var = _params(3)
    y, mean_out, var_out, saved_mean, _, _ = run("batch_norm", x, scale, bias, mean, var, None)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(mean_out, mean)
    np.testing.assert_array_equal(saved_mean, np.zeros(3, np.float32))


# ---- gradients --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,layout", [((3, 2, 2, 2), "NCHW"), ((3, 2, 2, 2), "NHWC"), ((4, 3), "NCHW"),
                                          ((2, 2, 3), "NCHW")])
@pytest.mark.parametrize("attrs", [{}, {"use_global_stats": True}])
def test_grads(shape, layout, attrs):
    c = shape[1] if layout == "NCHW" else shape[-1]
    inputs = {"X": R.standard_normal(shape), "Scale": R.standard_normal(c), "Bias": R.standard_normal(c),
              "Mean": R.standard_normal(c), "Variance": R.random(c) + 0.5}
    grad_check("batch_norm", inputs, dict(attrs, data_layout=layout), out_slot="Y", wrt=("X", "Scale", "Bias"),
               rtol=1e-5, atol=1e-7)


def test_grad_op_slots_follow_paddle():
    g = get_op_def("batch_norm").grad
    from refimpl.ops.grad_maker import GradContext
    ins = {"X": ["x"], "Scale": ["s"], "Bias": ["b"], "Mean": ["m"], "Variance": ["v"], "MomentumTensor": []}
    outs = {"Y": ["y"], "MeanOut": ["m"], "VarianceOut": ["v"], "SavedMean": ["sm"], "SavedVariance": ["sv"],
            "ReserveSpace": ["r"]}
    train = g(GradContext("batch_norm", ins, outs, {"is_test": False, "use_global_stats": False}, set()))[0]
    assert train["type"] == "batch_norm_grad"
    assert train["inputs"] == {"X": ["x"], "Scale": ["s"], "Bias": ["b"], "SavedMean": ["sm"],
                               "SavedVariance": ["sv"], "ReserveSpace": ["r"], "MeanOut": ["m"],
                               "VarianceOut": ["v"], "Y@GRAD": ["y@GRAD"]}
    assert train["outputs"] == {"X@GRAD": ["x@GRAD"], "Scale@GRAD": ["s@GRAD"], "Bias@GRAD": ["b@GRAD"]}
    glob = g(GradContext("batch_norm", ins, outs, {"is_test": False, "use_global_stats": True}, {"x@GRAD"}))[0]
    assert glob["inputs"]["Mean"] == ["m"] and glob["inputs"]["Variance"] == ["v"]
    assert glob["outputs"]["X@GRAD"] == []


# ---- build-time errors ------------------------------------------------------------------------------
def _build(x_shape, c_shapes=None, c_dtype="float32", **attrs):
    main = paddle.static.Program()
    block = main.global_block()
    c = 3 if len(x_shape) < 2 else (x_shape[1] if attrs.get("data_layout", "NCHW") == "NCHW" else x_shape[-1])
    shapes = dict({"Scale": [c], "Bias": [c], "Mean": [c], "Variance": [c]}, **(c_shapes or {}))
    v = {n: block.create_var(name=n.lower(), shape=s, dtype=c_dtype) for n, s in shapes.items()}
    x = block.create_var(name="x", shape=x_shape, dtype="float32")
    outs = {n: block.create_var(name=n.lower(), dtype="float32") for n in ("Y", "SavedMean", "SavedVariance")}
    block.append_op(type="batch_norm", inputs=dict({"X": x}, **v),
                    outputs=dict(outs, MeanOut=v["Mean"], VarianceOut=v["Variance"]), attrs=attrs)
    return block


def test_builds_and_infers_shapes():
    block = _build([-1, 3, 4, 4])
    assert block.vars["y"].shape == (-1, 3, 4, 4)
    assert block.vars["savedmean"].shape == (3,) and block.vars["mean"].shape == (3,)


@pytest.mark.parametrize("attrs,saved", [
    ({"is_test": True}, ()), ({"is_test": True, "use_global_stats": True}, ()),
    ({"is_test": True, "trainable_statistics": True}, (3,)), ({"use_global_stats": True}, (3,))])
def test_saved_statistics_have_no_shape_in_test_mode(attrs, saved):
    # Paddle 3.3.1 and 2.6.2 (legacy IR) print SavedMean / SavedVariance with shape () for
    # static.nn.batch_norm(is_test=True) and BatchNorm2D(3).eval(), (3,) for
    # nn.BatchNorm(3, is_test=True, trainable_statistics=True) and in training
    block = _build([2, 3, 4, 4], **attrs)
    assert block.vars["savedmean"].shape == saved and block.vars["savedvariance"].shape == saved
    assert block.vars["mean"].shape == (3,) and block.vars["y"].shape == (2, 3, 4, 4)


@pytest.mark.parametrize("kwargs,words", [
    ({"x_shape": [4]}, ["batch_norm", "X", "[4]"]),
    ({"x_shape": [2, 3, 2, 2, 2, 2]}, ["batch_norm", "X", "6-D"]),
    ({"x_shape": [2, 3, 4, 4], "c_shapes": {"Scale": [4]}}, ["batch_norm", "Scale", "[4]"]),
    ({"x_shape": [2, 3, 4, 4], "c_shapes": {"Variance": [3, 1]}}, ["batch_norm", "Variance", "[3, 1]"]),
    ({"x_shape": [2, 3, 4, 4], "c_shapes": {"Mean": [5]}}, ["batch_norm", "Mean"]),
    ({"x_shape": [2, 3, 4, 4], "data_layout": "NDHWC"}, ["batch_norm", "data_layout", "NDHWC"]),
    ({"x_shape": [2, 3, 4, 4], "c_dtype": "float64"}, ["batch_norm", "Scale", "float64"]),
])
def test_bad_input_is_refused_at_build_time(kwargs, words):
    with pytest.raises(InvalidArgument) as e:
        _build(**kwargs)
    for w in words:
        assert w in str(e.value)


def test_bad_input_is_refused_at_run_time():
    x = R.standard_normal((2, 3, 2)).astype(np.float32)
    scale, bias, mean, var = _params(4)
    with pytest.raises(InvalidArgument, match="Scale"):
        run("batch_norm", x, scale, bias, mean, var, None)
    with pytest.raises(InvalidArgument, match="data_layout"):
        run("batch_norm", x, scale[:3], bias[:3], mean[:3], var[:3], None, data_layout="NWC")


# ---- one training step, end to end ------------------------------------------------------------------
def _numpy_step(x, w, b, scale, bias, mean, var, lr, eps=1e-5, mom=0.9):
    """fc -> batch_norm (training) -> mean, its gradients and SGD, in float64."""
    h = x @ w + b
    mu, v = h.mean(0), h.var(0)
    inv = 1 / np.sqrt(v + eps)
    xhat = (h - mu) * inv
    y = xhat * scale + bias
    loss = y.mean()
    dy = np.full_like(y, 1 / y.size)
    dscale, dbias = (dy * xhat).sum(0), dy.sum(0)
    dxhat = dy * scale
    dh = inv * (dxhat - dxhat.mean(0) - xhat * (dxhat * xhat).mean(0))
    dw, db = x.T @ dh, dh.sum(0)
    return (loss, w - lr * dw, b - lr * db, scale - lr * dscale, bias - lr * dbias,
            mean * mom + mu * (1 - mom), var * mom + v * (1 - mom))


def _bn_program(c):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 3], "float32")
        h = paddle.static.nn.fc(x, c)
        block = main.global_block()
        scale = paddle.static.create_parameter([c], "float32", name="bn.w_0")
        bias = paddle.static.create_parameter([c], "float32", name="bn.b_0", is_bias=True)
        mean = paddle.static.create_global_var([c], 0.0, "float32", persistable=True, name="bn.w_1")
        var = paddle.static.create_global_var([c], 1.0, "float32", persistable=True, name="bn.w_2")
        outs = {n: block.create_var(name=f"bn.{n}", dtype="float32", stop_gradient=True)
                for n in ("SavedMean", "SavedVariance", "ReserveSpace")}
        y = block.create_var(name="bn.y", dtype="float32")
        block.append_op(type="batch_norm", inputs={"X": h, "Scale": scale, "Bias": bias, "Mean": mean,
                                                   "Variance": var},
                        outputs=dict(outs, Y=y, MeanOut=mean, VarianceOut=var))
        loss = paddle.mean(y)
        paddle.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


def test_fc_batch_norm_training_steps_match_numpy():
    c = 4
    main, startup, loss = _bn_program(c)
    types = [op.type for op in main.global_block().ops]
    assert "batch_norm_grad" in types and types.count("sgd") == 4
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        fc_w, fc_b = sorted((p.name for p in main.global_block().all_parameters() if p.name.startswith("fc_")),
                            key=lambda n: n.endswith("b_0"))
        names = [fc_w, fc_b, "bn.w_0", "bn.b_0", "bn.w_1", "bn.w_2"]
        init = [R.standard_normal((3, c)), R.standard_normal(c) * 0.1, R.random(c) + 0.5,
                R.standard_normal(c) * 0.1, np.zeros(c), np.ones(c)]
        for n, a in zip(names, init):
            scope.var(n).get_tensor().set(a.astype(np.float32))
        state = [a.astype(np.float32).astype(np.float64) for a in init]
        for _ in range(3):
            xb = R.standard_normal((6, 3)).astype(np.float32)
            out, = exe.run(main, feed={"x": xb}, fetch_list=[loss])
            want = _numpy_step(xb.astype(np.float64), *state, lr=0.5)
            np.testing.assert_allclose(out, want[0], rtol=1e-5, atol=1e-6)
            state = list(want[1:])
            for n, w in zip(names, state):
                np.testing.assert_allclose(np.array(scope.find_var(n).get_tensor()), w, rtol=1e-4, atol=1e-5,
                                           err_msg=n)


def test_batch_norm_without_scale_and_bias_is_scale_one_bias_zero():
    """weight_attr=False / bias_attr=False leave Scale and Bias empty; the op normalises with 1 and 0."""
    from refimpl.ops.registry import get_op_def
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
    fn, _, _ = get_op_def("batch_norm").kernel("numpy")
    attrs = dict(momentum=0.9, epsilon=1e-5, data_layout="NCHW", is_test=False, use_global_stats=False,
                 trainable_statistics=False)
    got = fn(x, None, None, mean, var, None, **attrs)
    want = fn(x, np.ones(3, np.float32), np.zeros(3, np.float32), mean, var, None, **attrs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    xd = x.astype(np.float64)
    m, v = xd.mean(axis=(0, 2, 3), keepdims=True), xd.var(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(got[0], (xd - m) / np.sqrt(v + 1e-5), rtol=1e-5, atol=1e-6)
    gfn, _, _ = get_op_def("batch_norm_grad").kernel("numpy")
    dy = rng.standard_normal(x.shape).astype(np.float32)
    dx, ds, db = gfn(x, None, None, None, None, got[3], got[4], None, got[1], got[2], dy,
                     need=(True, False, False), **attrs)
    dx1, _, _ = gfn(x, np.ones(3, np.float32), np.zeros(3, np.float32), None, None, got[3], got[4], None,
                    got[1], got[2], dy, need=(True, False, False), **attrs)
    np.testing.assert_array_equal(dx, dx1)
    assert ds is None and db is None
