"""Weight decay: ``paddle.regularizer.L1Decay`` / ``L2Decay`` on the optimizer and per parameter.

Programs against ops pasted from real Paddle 3.3.1 and against the zoo recordings (resnet_block's
``scale`` + ``sum`` per gradient, gpt_mini's ``adamw``); numbers against NumPy; bad input.
"""
import re

import numpy as np
import pytest

import refimpl as paddle
from oracle import load, oracle_file
from refimpl.core.errors import InvalidArgument

paddle.enable_static()
R = paddle.regularizer


def _build(opt, weight_reg=None, loss_fn=None):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        wa = paddle.ParamAttr(regularizer=weight_reg) if weight_reg is not None else None
        h = paddle.static.nn.fc(x, 5, weight_attr=wa, activation="relu")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 3)))
        opt().minimize(loss)
    return main, startup


def _optimize_ops(main):
    return [(o.type, {k: v for k, v in o.inputs.items() if v}, o.outputs, o.attr("op_role_var"))
            for o in main.global_block().ops if o.attr("op_role") == 2]


# printed by Paddle 3.3.1 (FLAGS_enable_pir_api=0): SGD(weight_decay=L1Decay(0.01)) with the first
# fc's weight created with ParamAttr(regularizer=L2Decay(0.05)): the parameter's own L2 wins there
PADDLE_331_SGD_L1_PARAMATTR_L2 = [
    ('sign', {'X': ['fc_0.b_0']}, {'Out': ['_generated_var_0']}, ['fc_0.b_0', 'fc_0.b_0@GRAD']),
    ('scale', {'X': ['_generated_var_0']}, {'Out': ['_generated_var_1']}, ['fc_0.b_0', 'fc_0.b_0@GRAD']),
    ('sum', {'X': ['fc_0.b_0@GRAD', '_generated_var_1']}, {'Out': ['fc_0.b_0@GRAD']}, ['fc_0.b_0', 'fc_0.b_0@GRAD']),
    ('scale', {'X': ['fc_0.w_0']}, {'Out': ['_generated_var_2']}, ['fc_0.w_0', 'fc_0.w_0@GRAD']),
    ('sum', {'X': ['fc_0.w_0@GRAD', '_generated_var_2']}, {'Out': ['fc_0.w_0@GRAD']}, ['fc_0.w_0', 'fc_0.w_0@GRAD']),
    ('sign', {'X': ['fc_1.b_0']}, {'Out': ['_generated_var_3']}, ['fc_1.b_0', 'fc_1.b_0@GRAD']),
    ('scale', {'X': ['_generated_var_3']}, {'Out': ['_generated_var_4']}, ['fc_1.b_0', 'fc_1.b_0@GRAD']),
    ('sum', {'X': ['fc_1.b_0@GRAD', '_generated_var_4']}, {'Out': ['fc_1.b_0@GRAD']}, ['fc_1.b_0', 'fc_1.b_0@GRAD']),
    ('sign', {'X': ['fc_1.w_0']}, {'Out': ['_generated_var_5']}, ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('scale', {'X': ['_generated_var_5']}, {'Out': ['_generated_var_6']}, ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('sum', {'X': ['fc_1.w_0@GRAD', '_generated_var_6']}, {'Out': ['fc_1.w_0@GRAD']}, ['fc_1.w_0', 'fc_1.w_0@GRAD']),
    ('sgd', {'Grad': ['fc_0.b_0@GRAD'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_0.b_0']},
     {'ParamOut': ['fc_0.b_0']}, ['fc_0.b_0', 'fc_0.b_0@GRAD']),
    ('sgd', {'Grad': ['fc_0.w_0@GRAD'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_0.w_0']},
     {'ParamOut': ['fc_0.w_0']}, ['fc_0.w_0', 'fc_0.w_0@GRAD']),
    ('sgd', {'Grad': ['fc_1.b_0@GRAD'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_1.b_0']},
     {'ParamOut': ['fc_1.b_0']}, ['fc_1.b_0', 'fc_1.b_0@GRAD']),
    ('sgd', {'Grad': ['fc_1.w_0@GRAD'], 'LearningRate': ['learning_rate_0'], 'Param': ['fc_1.w_0']},
     {'ParamOut': ['fc_1.w_0']}, ['fc_1.w_0', 'fc_1.w_0@GRAD']),
]


def test_paramattr_regularizer_takes_precedence_as_paddle():
    main, _ = _build(lambda: paddle.optimizer.SGD(0.1, weight_decay=R.L1Decay(0.01)), weight_reg=R.L2Decay(0.05))
    assert _optimize_ops(main) == PADDLE_331_SGD_L1_PARAMATTR_L2
    ops = main.global_block().ops
    scales = [o.attr("scale") for o in ops if o.type == "scale"]
    assert scales == [np.float32(0.01), np.float32(0.05), np.float32(0.01), np.float32(0.01)]
    assert {o.attr("op_namescope") for o in ops if o.type in ("sign", "scale")} == {"/regularization/"}


# printed by Paddle 3.3.1: (param, regularization_method, regularization_coeff) of each momentum op
PADDLE_331_MOMENTUM = {
    "l2": [('fc_0.b_0', 'l2_decay', 0.009999999776482582), ('fc_0.w_0', 'l2_decay', 0.009999999776482582),
           ('fc_1.b_0', 'l2_decay', 0.009999999776482582), ('fc_1.w_0', 'l2_decay', 0.009999999776482582)],
    "l1_paramattr_l2": [('fc_0.b_0', '', 0.0), ('fc_0.w_0', 'l2_decay', 0.05000000074505806),
                        ('fc_1.b_0', '', 0.0), ('fc_1.w_0', '', 0.0)],
    "float_paramattr_l1": [('fc_0.b_0', 'l2_decay', 0.003000000026077032), ('fc_0.w_0', '', 0.0),
                           ('fc_1.b_0', 'l2_decay', 0.003000000026077032),
                           ('fc_1.w_0', 'l2_decay', 0.003000000026077032)],
}


@pytest.mark.parametrize("case, decay, attr, appended", [
    ("l2", R.L2Decay(0.01), None, []),
    ("l1_paramattr_l2", R.L1Decay(0.01), R.L2Decay(0.05), ["fc_0.b_0", "fc_1.b_0", "fc_1.w_0"]),
    ("float_paramattr_l1", 0.003, R.L1Decay(0.04), ["fc_0.w_0"]),
])
def test_momentum_fuses_l2_as_paddle(case, decay, attr, appended):
    main, _ = _build(lambda: paddle.optimizer.Momentum(0.1, weight_decay=decay), weight_reg=attr)
    ops = main.global_block().ops
    got = [(o.input("Param")[0], o.attr("regularization_method"), float(o.attr("regularization_coeff")))
           for o in ops if o.type == "momentum"]
    assert got == PADDLE_331_MOMENTUM[case]
    assert [o.input("X")[0] for o in ops if o.type == "sign"] == appended


def _pattern(ops):
    """Optimize-role ops with names made generic: P param, G its grad, T a generated var."""
    out = []
    for o in ops:
        p = o["attrs"]["op_role_var"][0]

        def norm(names, p=p):
            return [n.replace(p + "@GRAD", "G").replace(p, "P") if n.startswith(p) else
                    re.sub(r"_generated_var_\d+", "T", n) for n in names]
        attrs = {k: v for k, v in o["attrs"].items() if k not in ("op_role_var", "op_namescope")}
        out.append((o["type"], {k: norm(v) for k, v in o["inputs"].items()},
                    {k: norm(v) for k, v in o["outputs"].items()}, attrs,
                    re.sub(r"_\d+/$", "/", o["attrs"]["op_namescope"])))
    return out


def _recorded_optimize_ops(name):
    d = load(oracle_file(f"zoo/programs/{name}.json"))
    return d, [o for o in d["main"]["blocks"][0]["ops"] if o["attrs"]["op_role"] == 2]


def test_adam_l2decay_matches_resnet_block_recording():
    d, want = _recorded_optimize_ops("01_resnet_block")
    l2 = d["config"].get("l2", 1e-3)
    main, _ = _build(lambda: paddle.optimizer.Adam(learning_rate=0.01, weight_decay=R.L2Decay(l2)))
    got = [o for o in main.to_dict()["blocks"][0]["ops"] if o["attrs"]["op_role"] == 2]
    # per parameter: scale + sum in /regularization/, then one adam per parameter in /optimizer_k/
    gp, wp = _pattern(got), _pattern(want)
    assert [t[0] for t in gp] == ["scale", "sum"] * 4 + ["adam"] * 4
    assert [t[0] for t in wp] == ["scale", "sum"] * (len(wp) // 3) + ["adam"] * (len(wp) // 3)
    assert gp[0] == wp[0] and gp[1] == wp[1]       # the scale and the sum of a parameter
    assert gp[-1] == wp[-1]                        # an adam


def test_adamw_matches_gpt_mini_recording():
    # gpt_mini was recorded by Paddle 2.6.2, whose adamw op has no amsgrad attr / Moment2Max slot (3.3.1's has)
    d, want = _recorded_optimize_ops("02_gpt_mini")
    main, _ = _build(lambda: paddle.optimizer.AdamW(learning_rate=paddle.optimizer.lr.CosineAnnealingDecay(
        0.01, T_max=4), weight_decay=d["config"].get("wd", 0.01)))
    got = [o for o in main.to_dict()["blocks"][0]["ops"] if o["attrs"]["op_role"] == 2]
    assert {o["type"] for o in got} == {o["type"] for o in want} == {"adamw"}
    g, w = _pattern(got)[-1], _pattern(want)[-1]
    assert {k: v for k, v in g[1].items() if k != "Moment2Max"} == w[1]
    assert g[2] == w[2]
    assert {k: v for k, v in g[3].items() if k != "amsgrad"} == w[3]
    assert g[4] == w[4] == "/optimizer/"


# ---- numbers: one step of y = x @ W + b, loss = mean(y ** 2) ---------------------------------
def _one_step(opt, bias_reg=None):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        ba = paddle.ParamAttr(regularizer=bias_reg) if bias_reg is not None else None
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(x, 2, bias_attr=ba)))
        opt.minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
    rng = np.random.default_rng(1)
    w0, b0 = rng.normal(size=(3, 2)).astype("float32"), np.array([0.3, -0.2], "float32")
    xs = rng.normal(size=(4, 3)).astype("float32")
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        scope.var("fc_0.w_0").get_tensor().set(w0)
        scope.var("fc_0.b_0").get_tensor().set(b0)
        exe.run(main, feed={"x": xs})
        w1, b1 = (np.array(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0"))
    y = xs.astype("float64") @ w0 + b0
    dy = 2 * y / y.size
    return (w0, b0), (w1, b1), (xs.T.astype("float64") @ dy, dy.sum(0))


def test_l2_on_optimizer_l1_on_bias_numbers():
    (w0, b0), (w1, b1), (gw, gb) = _one_step(paddle.optimizer.SGD(0.5, weight_decay=R.L2Decay(0.1)),
                                             bias_reg=R.L1Decay(0.2))
    np.testing.assert_allclose(w1, w0 - 0.5 * (gw + 0.1 * w0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b1, b0 - 0.5 * (gb + 0.2 * np.sign(b0)), rtol=1e-5, atol=1e-6)


def test_float_weight_decay_is_l2_numbers():
    (w0, b0), (w1, b1), (gw, gb) = _one_step(paddle.optimizer.SGD(0.5, weight_decay=0.1))
    np.testing.assert_allclose(w1, w0 - 0.5 * (gw + 0.1 * w0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b1, b0 - 0.5 * (gb + 0.1 * b0), rtol=1e-5, atol=1e-6)


def test_str_as_paddle():
    # printed by Paddle 3.3.1
    assert str(R.L2Decay(1e-3)) == 'L2Decay, coeff=0.001000'
    assert str(R.L1Decay(0.5)) == 'L1Decay, coeff=0.500000'


@pytest.mark.parametrize("make, words", [
    (lambda: R.L2Decay(-1.0), ["L2Decay", "coeff", "-1.0"]),
    (lambda: R.L1Decay("big"), ["L1Decay", "coeff", "big"]),
    (lambda: paddle.optimizer.Adam(0.1, weight_decay="l2"), ["Adam", "weight_decay", "str"]),
    (lambda: _build(lambda: paddle.optimizer.SGD(0.1), weight_reg=0.5), ["SGD", "regularizer", "fc_0.w_0", "float"]),
])
def test_bad_input_is_a_typed_error(make, words):
    with pytest.raises(InvalidArgument) as e:
        make()
    assert all(w in str(e.value) for w in words), str(e.value)
