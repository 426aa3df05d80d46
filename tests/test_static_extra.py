"""paddle.static.nn.bilinear_tensor_product, nn.Bilinear / F.bilinear, paddle.static.auc,
paddle.static.py_func and paddle.static.ExponentialMovingAverage: the programs they build (against
what real Paddle printed for the same builders, pasted as literals) and what they compute (against
independent NumPy formulas)."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework import unique_name

paddle.enable_static()


def ops_of(block):
    return [(op.type, {n: op.input(n) for n in op.input_names if op.input(n)},
             {n: op.output(n) for n in op.output_names if op.output(n)}) for op in block.ops]


def fresh():
    return paddle.static.Program(), paddle.static.Program()


# ---- bilinear ---------------------------------------------------------------------------------
def test_bilinear_tensor_product_program_as_paddle():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("t1", shape=[-1, 5], dtype="float32")
        y = paddle.static.data("t2", shape=[-1, 4], dtype="float32")
        t = paddle.static.nn.bilinear_tensor_product(x, y, size=3, act="sigmoid")
        paddle.static.nn.bilinear_tensor_product(x, y, size=3, bias_attr=False)
    # Paddle 3.3.1 (FLAGS_enable_pir_api=0) printed these ops and vars for the same two calls
    assert ops_of(main.global_block()) == [
        ("bilinear_tensor_product", {"X": ["t1"], "Y": ["t2"], "Weight": ["bilinear_tensor_product_0.w_0"],
                                     "Bias": ["bilinear_tensor_product_0.b_0"]},
         {"Out": ["bilinear_tensor_product_0.tmp_0"]}),
        ("sigmoid", {"X": ["bilinear_tensor_product_0.tmp_0"]}, {"Out": ["bilinear_tensor_product_0.tmp_1"]}),
        ("bilinear_tensor_product", {"X": ["t1"], "Y": ["t2"], "Weight": ["bilinear_tensor_product_1.w_0"]},
         {"Out": ["bilinear_tensor_product_1.tmp_0"]})]
    assert [(v.name, tuple(v.shape)) for v in main.global_block().vars.values()][2:] == [
        ("bilinear_tensor_product_0.w_0", (3, 5, 4)), ("bilinear_tensor_product_0.tmp_0", (-1, 3)),
        ("bilinear_tensor_product_0.b_0", (1, 3)), ("bilinear_tensor_product_0.tmp_1", (-1, 3)),
        ("bilinear_tensor_product_1.w_0", (3, 5, 4)), ("bilinear_tensor_product_1.tmp_0", (-1, 3))]
    init = [(op.type, op.output("Out")[0], round(op.attr("max"), 7) if op.type == "uniform_random" else None)
            for op in startup.global_block().ops]
    assert init == [("uniform_random", "bilinear_tensor_product_0.w_0", 0.4330127),
                    ("fill_constant", "bilinear_tensor_product_0.b_0", None),
                    ("uniform_random", "bilinear_tensor_product_1.w_0", 0.4330127)]
    assert t.name == "bilinear_tensor_product_0.tmp_1"


def test_bilinear_layer_and_functional_names_as_paddle():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("t1", shape=[-1, 5], dtype="float32")
        y = paddle.static.data("t2", shape=[-1, 4], dtype="float32")
        layer = paddle.nn.Bilinear(5, 4, 3)
        t = layer(x, y)
        w = paddle.static.create_parameter([3, 5, 4], "float32")
        t2 = paddle.nn.functional.bilinear(x, y, w)
    # Paddle 3.3.1: bilinear_0.tmp_0 bilinear_1.tmp_0, parameters bilinear_0.w_0 (3, 5, 4) / b_0 (1, 3)
    assert (t.name, t2.name) == ("bilinear_0.tmp_0", "bilinear_1.tmp_0")
    assert [(p.name, tuple(p.shape)) for p in layer.parameters()] == [("bilinear_0.w_0", (3, 5, 4)),
                                                                       ("bilinear_0.b_0", (1, 3))]
    assert ops_of(main.global_block())[1][1] == {"X": ["t1"], "Y": ["t2"], "Weight": ["create_parameter_0.w_0"]}


def test_bilinear_runs_and_matches_numpy():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", shape=[-1, 3], dtype="float64")
        y = paddle.static.data("y", shape=[-1, 2], dtype="float64")
        w_attr = paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.5))
        b_attr = paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(-1.0))
        out = paddle.static.nn.bilinear_tensor_product(x, y, size=2, param_attr=w_attr, bias_attr=b_attr)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    xs, ys = np.arange(6.0).reshape(2, 3), np.array([[1.0, -2.0], [0.5, 3.0]])
    got, = exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[out])
    want = 0.5 * xs.sum(1, keepdims=True) * ys.sum(1, keepdims=True) - 1.0   # every W[k, a, b] = 0.5
    np.testing.assert_allclose(got, np.repeat(want, 2, axis=1), rtol=1e-12)


def test_bilinear_bad_input():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", shape=[-1, 3], dtype="float32")
        y = paddle.static.data("y", shape=[-1, 2], dtype="float32")
        i = paddle.static.data("i", shape=[-1, 2], dtype="int64")
        with pytest.raises(InvalidArgument, match="bilinear_tensor_product: argument 'y' .* float32 or float64"):
            paddle.static.nn.bilinear_tensor_product(x, i, size=2)
        with pytest.raises(InvalidArgument, match="Weight's dims 1 and 2"):
            paddle.nn.functional.bilinear(x, y, paddle.static.create_parameter([2, 3, 3], "float32"))
        with pytest.raises(InvalidArgument, match="Bilinear: out_features must be a positive int"):
            paddle.nn.Bilinear(3, 2, 0)


# ---- auc ----------------------------------------------------------------------------------------
def test_auc_program_as_paddle():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        p = paddle.static.data("p", shape=[-1, 2], dtype="float32")
        lab = paddle.static.data("l", shape=[-1], dtype="int64")
        g, b, stats = paddle.static.auc(p, lab)
    # Paddle 3.3.1 built these names, shapes and ops for the same call
    assert (g.name, b.name) == ("auc_0.tmp_0", "auc_0.tmp_1")
    assert [(s.name, tuple(s.shape), s.persistable) for s in stats] == [
        ("_generated_var_0", (8193,), True), ("_generated_var_1", (8193,), True),
        ("_generated_var_2", (1, 4096), True), ("_generated_var_3", (1, 4096), True)]
    block = main.global_block()
    assert [op.type for op in block.ops] == ["fill_constant", "auc", "auc"]
    assert block.ops[0].output("Out") == ["fill_constant_1.tmp_0"]
    assert [(op.input("StatPos"), op.output("AUC"), op.attr("slide_steps"), op.attr("num_thresholds"),
             op.input("InsTagWeight")) for op in block.ops[1:]] == [
        (["_generated_var_0"], ["auc_0.tmp_1"], 1, 4095, []), (["_generated_var_2"], ["auc_0.tmp_0"], 0, 4095, [])]
    assert [(op.type, op.output("Out"), op.attr("shape"), op.attr("dtype")) for op in startup.global_block().ops] == [
        ("fill_constant", ["_generated_var_0"], [8193], 3), ("fill_constant", ["_generated_var_1"], [8193], 3),
        ("fill_constant", ["_generated_var_2"], [1, 4096], 3), ("fill_constant", ["_generated_var_3"], [1, 4096], 3)]


def roc_pairs(scores, labels):
    pos = [s for s, l in zip(scores, labels) if l > 0]
    neg = [s for s, l in zip(scores, labels) if l == 0]
    return sum(1.0 if a > c else 0.5 if a == c else 0.0 for a in pos for c in neg) / (len(pos) * len(neg))


def test_auc_runs_global_and_batch():
    main, startup = fresh()
    n = 4095
    with paddle.static.program_guard(main, startup):
        p = paddle.static.data("p", shape=[-1, 2], dtype="float32")
        lab = paddle.static.data("l", shape=[-1, 1], dtype="int64")
        g, b, _ = paddle.static.auc(p, lab, num_thresholds=n)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    rng = np.random.default_rng(1)
    seen_s, seen_l = [], []
    for _ in range(3):
        q = rng.random(8).astype(np.float32)
        labels = rng.integers(0, 2, 8)
        labels[:2] = [0, 1]
        gv, bv = exe.run(main, feed={"p": np.stack([1 - q, q], 1), "l": labels.reshape(-1, 1)}, fetch_list=[g, b])
        buckets = [int(v * np.float32(n)) for v in q]
        seen_s += buckets
        seen_l += list(labels)
        assert float(bv) == pytest.approx(roc_pairs(buckets, labels), rel=1e-12)   # slide_steps=1: this batch
        assert float(gv) == pytest.approx(roc_pairs(seen_s, seen_l), rel=1e-12)


def test_auc_bad_input():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        p = paddle.static.data("p", shape=[-1, 2], dtype="float32")
        lab = paddle.static.data("l", shape=[-1], dtype="float32")
        with pytest.raises(InvalidArgument, match="auc: argument 'label'"):
            paddle.static.auc(p, lab)
        with pytest.raises(InvalidArgument, match="at least 2 dims"):
            paddle.static.auc(paddle.static.data("q", shape=[-1], dtype="float32"),
                              paddle.static.data("m", shape=[-1], dtype="int64"))


# ---- py_func -----------------------------------------------------------------------------------
def test_py_func_forward_and_backward():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", shape=[2, 3], dtype="float32")
        x.stop_gradient = False
        o = main.current_block().create_var(name="o", dtype="float32", shape=[2, 3])
        out = paddle.static.py_func(np.tanh, x, o, backward_func=lambda y, dy: dy * (1 - y * y),
                                    skip_vars_in_backward_input=x)
        loss = paddle.mean(out * 3.0)
        paddle.static.append_backward(loss)
    fwd, bwd = [op for op in main.global_block().ops if op.type == "py_func"]
    assert (fwd.input("X"), fwd.output("Out"), fwd.attr("backward_skip_vars")) == (["x"], ["o"], ["x"])
    assert (bwd.input("X"), bwd.output("Out")) == (["o", "o@GRAD"], ["x@GRAD"])
    assert bwd.attr("forward_callable_id") == fwd.attr("backward_callable_id") >= 0
    assert bwd.attr("backward_callable_id") == -1
    exe = paddle.static.Executor(paddle.CPUPlace())
    xs = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    got, dx = exe.run(main, feed={"x": xs}, fetch_list=[o, "x@GRAD"])
    np.testing.assert_allclose(got, np.tanh(xs), rtol=1e-6)
    np.testing.assert_allclose(dx, 0.5 * (1 - np.tanh(xs) ** 2), rtol=1e-5)


def test_py_func_errors_at_build_and_run():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", shape=[2, 3], dtype="float32")
        block = main.current_block()
        no_shape = block.create_var(name="no_shape", dtype="float32")
        with pytest.raises(InvalidArgument, match="shape of output 'no_shape'"):
            paddle.static.py_func(np.tanh, x, no_shape)
        o = block.create_var(name="o", dtype="float32", shape=[2, 3])
        with pytest.raises(InvalidArgument, match="'stranger' of skip_vars_in_backward_input"):
            paddle.static.py_func(np.tanh, x, o, backward_func=np.tanh,
                                  skip_vars_in_backward_input=block.create_var(name="stranger", shape=[1]))
        with pytest.raises(InvalidArgument, match="argument 'x'"):
            paddle.static.py_func(np.tanh, "x", o)
        with pytest.raises(InvalidArgument, match="func must be a Python callable"):
            paddle.static.py_func(None, x, o)
        paddle.static.py_func(lambda a: np.asarray(a, np.float64), x, o)
    exe = paddle.static.Executor(paddle.CPUPlace())
    with pytest.raises(InvalidArgument, match="returned dtype float64 for output 'o'"):
        exe.run(main, feed={"x": np.ones((2, 3), np.float32)}, fetch_list=[o])


def test_py_func_is_reexported_in_static_nn():
    assert paddle.static.nn.py_func is paddle.static.py_func


# ---- ExponentialMovingAverage --------------------------------------------------------------
def build_ema(decay):
    main, startup = fresh()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", shape=[-1, 2], dtype="float32")
        h = paddle.static.nn.fc(x, size=2, weight_attr=paddle.ParamAttr(
            initializer=paddle.nn.initializer.Constant(0.5)))
        cost = paddle.mean(h)
        paddle.optimizer.SGD(learning_rate=0.5).minimize(cost)
        ema = paddle.static.ExponentialMovingAverage(decay)
        ema.update()
    return main, startup, ema


def test_ema_update_program_as_paddle_262():
    main, startup, ema = build_ema(0.9)
    ops = main.global_block().ops
    # Paddle 2.6.2 prepends the counter's increment and appends, per parameter, under the optimize
    # role: elementwise_mul, scale, elementwise_mul, elementwise_add, assign
    assert ops[0].type == "increment" and ops[0].input("X") == ["@EMA_STEP_COUNTER@"]
    tail = ops[-10:]
    assert [op.type for op in tail] == ["elementwise_mul", "scale", "elementwise_mul", "elementwise_add",
                                        "assign"] * 2
    assert [op.attr("op_namescope") for op in tail[::5]] == ["/moving_average_2/", "/moving_average_3/"]
    assert tail[0].attr("op_role_var") == ["fc_0.w_0", "fc_0.w_0.ema_tmp_0"]
    assert tail[4].output("Out") == ["fc_0.w_0_ema_0"] and tail[9].output("Out") == ["fc_0.b_0_ema_0"]
    assert {op.attr("op_role") for op in tail} == {2}
    assert [op.output("Out")[0] for op in startup.global_block().ops][-5:] == [
        "scheduled_ema_decay_rate", "fc_0.w_0_ema_0", "fc_0.b_0_ema_0", "@EMA_STEP_COUNTER@", "@EMA_STEP_COUNTER@"]
    assert [op.type for op in ema.restore_program.global_block().ops] == ["assign", "assign"]


def test_ema_numbers_follow_the_formula():
    decay, lr = 0.8, 0.5
    main, startup, ema = build_ema(decay)
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    feed = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)
    w, b = np.full((2, 2), 0.5), np.zeros(2)
    ema_w, ema_b = np.zeros((2, 2)), np.zeros(2)
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        for step in range(1, 4):
            exe.run(main, feed={"x": feed}, fetch_list=[])
            w = w - lr * np.repeat(feed.mean(0)[:, None] / 2, 2, axis=1)   # d mean(x @ w + b) / dw
            b = b - lr * np.full(2, 0.5)
            ema_w, ema_b = ema_w * decay + w * (1 - decay), ema_b * decay + b * (1 - decay)
        np.testing.assert_allclose(np.array(scope.find_var("fc_0.w_0_ema_0").get_tensor()), ema_w, rtol=1e-5)
        with ema.apply(exe):
            np.testing.assert_allclose(np.array(scope.find_var("fc_0.w_0").get_tensor()),
                                       ema_w / (1 - decay ** 3), rtol=1e-5)
            np.testing.assert_allclose(np.array(scope.find_var("fc_0.b_0").get_tensor()),
                                       ema_b / (1 - decay ** 3), rtol=1e-5)
        np.testing.assert_allclose(np.array(scope.find_var("fc_0.w_0").get_tensor()), w, rtol=1e-6)


def test_ema_bad_arguments():
    with pytest.raises(Unimplemented, match="thres_steps"):
        paddle.static.ExponentialMovingAverage(0.9, thres_steps=object())
    with pytest.raises(InvalidArgument, match="decay must be a number in"):
        paddle.static.ExponentialMovingAverage(1.5)


# ---- WeightNormParamAttr --------------------------------------------------------------------
def test_weight_norm_program_as_paddle():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x2", shape=[-1, 4], dtype="float32")
        paddle.static.nn.fc(x, size=3, weight_attr=paddle.static.WeightNormParamAttr(dim=1))
    # Paddle 3.3.1 (legacy IR) built these ops for the same fc
    assert ops_of(main.global_block()) == [
        ("reshape2", {"X": ["fc_0.w_0_v"]}, {"Out": ["fc_0.weight_norm_reshape_1"], "XShape": ["Xshape"]}),
        ("abs", {"X": ["fc_0.weight_norm_reshape_1"]}, {"Out": ["fc_0.weight_norm_abs_1"]}),
        ("pow", {"X": ["fc_0.weight_norm_abs_1"]}, {"Out": ["fc_0.weight_norm_pow_1"]}),
        ("reduce_sum", {"X": ["fc_0.weight_norm_pow_1"]}, {"Out": ["fc_0.weight_norm_sum_1"]}),
        ("pow", {"X": ["fc_0.weight_norm_sum_1"]}, {"Out": ["fc_0.weight_norm_norm_2"]}),
        ("reshape2", {"X": ["fc_0.weight_norm_norm_2"]}, {"Out": ["fc_0.weight_norm_norm_1"], "XShape": ["Xshape"]}),
        ("elementwise_div", {"X": ["fc_0.w_0_g"], "Y": ["fc_0.weight_norm_norm_1"]}, {"Out": ["elementwise_div_0"]}),
        ("reshape2", {"X": ["elementwise_div_0"]}, {"Out": ["reshape2_0.tmp_0"], "XShape": ["reshape2_0.tmp_1"]}),
        ("elementwise_mul", {"X": ["fc_0.w_0_v"], "Y": ["reshape2_0.tmp_0"]}, {"Out": ["elementwise_mul_0"]}),
        ("mul", {"X": ["x2"], "Y": ["elementwise_mul_0"]}, {"Out": ["fc_0.tmp_0"]}),
        ("elementwise_add", {"X": ["fc_0.tmp_0"], "Y": ["fc_0.b_0"]}, {"Out": ["fc_0.tmp_1"]})]
    assert [op.type for op in startup.global_block().ops] == [
        "uniform_random", "reshape2", "abs", "pow", "reduce_sum", "pow", "reshape2", "reshape2", "fill_constant"]
    assert [(p.name, tuple(p.shape)) for p in main.all_parameters()] == [
        ("fc_0.w_0_g", (1, 3)), ("fc_0.w_0_v", (4, 3)), ("fc_0.b_0", (3,))]


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_weight_norm_numbers(dim):
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", shape=[-1, 4], dtype="float32")
        attr = paddle.static.WeightNormParamAttr(dim=dim, name="wn")
        out = paddle.static.nn.fc(x, size=3, weight_attr=attr, bias_attr=False)
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    feed = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        v = np.array(scope.find_var("wn_v").get_tensor())
        got, = exe.run(main, feed={"x": feed}, fetch_list=[out])
        np.testing.assert_allclose(got, feed @ v, rtol=1e-5, atol=1e-7)   # g starts as ||v||: w == v
        g = np.linspace(0.5, 2.0, 3 if dim == 1 else 4 if dim == 0 else 1).astype(np.float32)
        g = g.reshape((1, 3) if dim == 1 else (4, 1) if dim == 0 else (1, 1))
        scope.find_var("wn_g").get_tensor().set(g, paddle.CPUPlace())
        got, = exe.run(main, feed={"x": feed}, fetch_list=[out])
    axes = None if dim is None else (1 - dim,)
    w = v * g / np.sqrt((v.astype(np.float64) ** 2).sum(axis=axes, keepdims=True))
    want = feed @ w  # float32 sums: an output near 0 keeps the absolute error of the larger terms
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


def test_weight_norm_unsupported_dim():
    main, startup = fresh()
    with paddle.static.program_guard(main, startup):
        with pytest.raises(Unimplemented, match="dim=1 of the 3-D weight"):
            paddle.static.nn.bilinear_tensor_product(
                paddle.static.data("a", shape=[-1, 2], dtype="float32"),
                paddle.static.data("b", shape=[-1, 5], dtype="float32"), size=3,
                param_attr=paddle.static.WeightNormParamAttr(dim=1))
