"""Gradient clipping (``grad_clip=`` with ``paddle.nn.ClipGradBy*``): Paddle's programs and numbers.

The zoo cases 10-12 (global norm: recorded by Paddle 2.6.2; by norm, by value: Paddle 3.3.1) build
exactly the recorded programs, op_namescope included; ``ParamAttr(need_clip=False)`` leaves a
gradient alone as in Paddle (op lists pasted from real Paddle); one training step of a single fc
layer updates the parameters as an independent NumPy computation of the clipped gradient says.
"""
import numpy as np
import pytest

import refimpl as paddle
from oracle import diff_programs
from refimpl.core.errors import InvalidArgument
from zoo_build import build

paddle.enable_static()


@pytest.mark.parametrize("name", ["10_grad_clip", "11_grad_clip", "12_grad_clip"])
def test_zoo_grad_clip_builds_paddles_programs(name):
    main, startup, loss, d = build(name)
    assert loss.name == d["loss_name"]
    got, want = main.to_dict(), d["main"]
    assert diff_programs(got, want) == []
    assert diff_programs(startup.to_dict(), d["startup"]) == []
    # diff_programs sets op_namescope aside; here it counts (/gradient_clip/, /optimizer_k/)
    scopes = [o["attrs"]["op_namescope"] for o in got["blocks"][0]["ops"]]
    assert scopes == [o["attrs"]["op_namescope"] for o in want["blocks"][0]["ops"]]
    assert "/gradient_clip/" in scopes


def _mlp_with_unclipped_bias(opt):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        h = paddle.static.nn.fc(x, 5, bias_attr=paddle.ParamAttr(need_clip=False), activation="relu")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 3)))
        opt().minimize(loss)
    return [(o.type, {k: v for k, v in o.inputs.items() if v}, o.outputs, o.attr("op_role_var"))
            for o in main.global_block().ops if o.attr("op_role") == 2]


# printed by Paddle 3.3.1 (FLAGS_enable_pir_api=0) for the same program: the optimize-role ops as
# (type, non-empty inputs, outputs, op_role_var)
PADDLE_331_CLIP_BY_NORM_NEED_CLIP_FALSE = [
    ('clip_by_norm', {'X': ['fc_0.w_0@GRAD']}, {'Out': ['clip_by_norm_0.tmp_0']}, ['fc_0.w_0', 'clip_by_norm_0.tmp_0']),
    ('clip_by_norm', {'X': ['fc_1.b_0@GRAD']}, {'Out': ['clip_by_norm_1.tmp_0']}, ['fc_1.b_0', 'clip_by_norm_1.tmp_0']),
    ('clip_by_norm', {'X': ['fc_1.w_0@GRAD']}, {'Out': ['clip_by_norm_2.tmp_0']}, ['fc_1.w_0', 'clip_by_norm_2.tmp_0']),
    ('sgd', {'Grad': ['fc_0.b_0@GRAD'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_0.b_0']},
     {'ParamOut': ['fc_0.b_0']}, ['fc_0.b_0', 'fc_0.b_0@GRAD']),
    ('sgd', {'Grad': ['clip_by_norm_0.tmp_0'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_0.w_0']},
     {'ParamOut': ['fc_0.w_0']}, ['fc_0.w_0', 'clip_by_norm_0.tmp_0']),
    ('sgd', {'Grad': ['clip_by_norm_1.tmp_0'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_1.b_0']},
     {'ParamOut': ['fc_1.b_0']}, ['fc_1.b_0', 'clip_by_norm_1.tmp_0']),
    ('sgd', {'Grad': ['clip_by_norm_2.tmp_0'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_1.w_0']},
     {'ParamOut': ['fc_1.w_0']}, ['fc_1.w_0', 'clip_by_norm_2.tmp_0']),
]

# printed by Paddle 2.6.2 (its legacy IR builds ClipGradByGlobalNorm) for the same program
PADDLE_262_GLOBAL_NORM_NEED_CLIP_FALSE = [
    ('squared_l2_norm', {'X': ['fc_0.w_0@GRAD']}, {'Out': ['squared_l2_norm_0.tmp_0']}, ['fc_0.w_0', 'fc_0.w_0@GRAD']),
    ('squared_l2_norm', {'X': ['fc_1.b_0@GRAD']}, {'Out': ['squared_l2_norm_1.tmp_0']}, ['fc_1.b_0', 'fc_1.b_0@GRAD']),
    ('squared_l2_norm', {'X': ['fc_1.w_0@GRAD']}, {'Out': ['squared_l2_norm_2.tmp_0']}, ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('sum', {'X': ['squared_l2_norm_0.tmp_0', 'squared_l2_norm_1.tmp_0', 'squared_l2_norm_2.tmp_0']},
     {'Out': ['add_n_0.tmp_0']}, ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('sqrt', {'X': ['add_n_0.tmp_0']}, {'Out': ['sqrt_0.tmp_0']}, ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('fill_constant', {}, {'Out': ['fill_constant_1.tmp_0']}, ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('elementwise_max', {'X': ['fill_constant_1.tmp_0'], 'Y': ['sqrt_0.tmp_0']}, {'Out': ['elementwise_max_0']},
     ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('elementwise_div', {'X': ['fill_constant_1.tmp_0'], 'Y': ['elementwise_max_0']}, {'Out': ['elementwise_div_0']},
     ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('elementwise_mul', {'X': ['fc_0.w_0@GRAD'], 'Y': ['elementwise_div_0']}, {'Out': ['fc_0.w_0@GRAD']},
     ['fc_0.w_0', 'fc_0.w_0@GRAD']),
    ('elementwise_mul', {'X': ['fc_1.b_0@GRAD'], 'Y': ['elementwise_div_0']}, {'Out': ['fc_1.b_0@GRAD']},
     ['fc_1.b_0', 'fc_1.b_0@GRAD']),
    ('elementwise_mul', {'X': ['fc_1.w_0@GRAD'], 'Y': ['elementwise_div_0']}, {'Out': ['fc_1.w_0@GRAD']},
     ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('sgd', {'Grad': ['fc_0.b_0@GRAD'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_0.b_0']},
     {'ParamOut': ['fc_0.b_0']}, ['fc_0.b_0', 'fc_0.b_0@GRAD']),
    ('sgd', {'Grad': ['fc_0.w_0@GRAD'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_0.w_0']},
     {'ParamOut': ['fc_0.w_0']}, ['fc_0.w_0', 'fc_0.w_0@GRAD']),
    ('sgd', {'Grad': ['fc_1.b_0@GRAD'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_1.b_0']},
     {'ParamOut': ['fc_1.b_0']}, ['fc_1.b_0', 'fc_1.b_0@GRAD']),
    ('sgd', {'Grad': ['fc_1.w_0@GRAD'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_1.w_0']},
     {'ParamOut': ['fc_1.w_0']}, ['fc_1.w_0', 'fc_1.w_0@GRAD']),
]


def test_need_clip_false_by_norm_as_paddle():
    got = _mlp_with_unclipped_bias(lambda: paddle.optimizer.SGD(0.1, grad_clip=paddle.nn.ClipGradByNorm(0.5)))
    assert got == PADDLE_331_CLIP_BY_NORM_NEED_CLIP_FALSE


def test_need_clip_false_global_norm_as_paddle_262():
    got = _mlp_with_unclipped_bias(lambda: paddle.optimizer.SGD(0.1, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)))
    assert got == PADDLE_262_GLOBAL_NORM_NEED_CLIP_FALSE


# ---- numbers: one SGD step of y = x @ W + b, loss = mean(y ** 2) -------------------------------
def _one_step(clip, lr=0.5):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(x, 2)))
        paddle.optimizer.SGD(learning_rate=lr, grad_clip=clip).minimize(loss)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(3, 2)).astype("float32")
    b0 = np.array([0.3, -0.2], "float32")
    xs = rng.normal(size=(4, 3)).astype("float32")
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        scope.var("fc_0.w_0").get_tensor().set(w0)
        scope.var("fc_0.b_0").get_tensor().set(b0)
        exe.run(main, feed={"x": xs})
        w1, b1 = (np.array(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0"))
    y = xs.astype("float64") @ w0 + b0
    dy = 2 * y / y.size
    return (w0, b0), (w1, b1), (xs.T.astype("float64") @ dy, dy.sum(0)), lr


def test_clip_by_value_numbers():
    (w0, b0), (w1, b1), (gw, gb), lr = _one_step(paddle.nn.ClipGradByValue(0.05, -0.02))
    np.testing.assert_allclose(w1, w0 - lr * np.clip(gw, -0.02, 0.05), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b1, b0 - lr * np.clip(gb, -0.02, 0.05), rtol=1e-5, atol=1e-6)


def test_clip_by_norm_numbers():
    (w0, b0), (w1, b1), (gw, gb), lr = _one_step(paddle.nn.ClipGradByNorm(0.1))
    for p0, p1, g in ((w0, w1, gw), (b0, b1, gb)):
        n = np.sqrt((g ** 2).sum())
        np.testing.assert_allclose(p1, p0 - lr * (g * 0.1 / n if n > 0.1 else g), rtol=1e-5, atol=1e-6)


def test_clip_by_global_norm_numbers():
    (w0, b0), (w1, b1), (gw, gb), lr = _one_step(paddle.nn.ClipGradByGlobalNorm(0.1))
    n = np.sqrt((gw ** 2).sum() + (gb ** 2).sum())
    assert n > 0.1  # the clip is active
    np.testing.assert_allclose(w1, w0 - lr * gw * 0.1 / n, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b1, b0 - lr * gb * 0.1 / n, rtol=1e-5, atol=1e-6)


def test_str_as_paddle():
    # printed by Paddle 3.3.1
    assert str(paddle.nn.ClipGradByNorm(0.02)) == 'Gradient Clip By Norm, clip_norm=0.020000'
    assert str(paddle.nn.ClipGradByValue(0.3, -0.2)) == 'Clip Gradient By Value, min = -0.200000, max=0.300000'
    assert str(paddle.nn.ClipGradByGlobalNorm(0.05)) == 'Gradient Clip By GlobalNorm, global_norm=0.050000'


def test_global_norm_signature():
    c = paddle.nn.ClipGradByGlobalNorm(1.0)
    assert (c.clip_norm, c.group_name, c.auto_skip_clip) == (1.0, "default_group", False)
    assert paddle.nn.clip.GradientClipByGlobalNorm is paddle.nn.ClipGradByGlobalNorm


@pytest.mark.parametrize("make, words", [
    (lambda: paddle.nn.ClipGradByGlobalNorm(-1.0), ["ClipGradByGlobalNorm", "clip_norm", "-1.0"]),
    (lambda: paddle.nn.ClipGradByNorm(-0.5), ["ClipGradByNorm", "clip_norm", "-0.5"]),
    (lambda: paddle.nn.ClipGradByNorm("big"), ["ClipGradByNorm", "clip_norm", "big"]),
    (lambda: paddle.nn.ClipGradByValue(-1.0), ["ClipGradByValue", "max", "-1.0"]),
    (lambda: paddle.nn.ClipGradByValue(0.1, 0.5), ["ClipGradByValue", "min", "max"]),
    (lambda: paddle.nn.ClipGradByGlobalNorm(1.0, auto_skip_clip=1), ["ClipGradByGlobalNorm", "auto_skip_clip"]),
    (lambda: paddle.optimizer.SGD(0.1, grad_clip=0.5), ["SGD", "grad_clip", "float"]),
])
def test_bad_input_is_a_typed_error(make, words):
    with pytest.raises(InvalidArgument) as e:
        make()
    assert all(w in str(e.value) for w in words), str(e.value)
