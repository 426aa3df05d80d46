"""Initializers of float16 parameters: Paddle 3.3.1 draws them in float32 and casts.

The expected startup program below was printed by Paddle 3.3.1 (legacy IR,
``FLAGS_enable_pir_api=0``) for the same three fc layers on a float16 input: the default Xavier
uniform weight, a Xavier normal weight, a Uniform weight and a Normal bias.
"""
import numpy as np

import refimpl as paddle
from refimpl.framework import Program, unique_name

PADDLE_STARTUP = [  # (type, outputs, dtype attrs) from Paddle 3.3.1
    ("uniform_random", ["xavier_init.fc_0.w_0.tmp_0"], 5),
    ("cast", ["fc_0.w_0"], None),
    ("fill_constant", ["fc_0.b_0"], 4),
    ("gaussian_random", ["xavier_init.fc_1.w_0.tmp_0"], 5),
    ("cast", ["fc_1.w_0"], None),
    ("fill_constant", ["fc_1.b_0"], 4),
    ("uniform_random", ["uniform_random.fc_2.w_0.tmp_0"], 5),
    ("cast", ["fc_2.w_0"], None),
    ("gaussian_random", ["fc_2.b_0"], 4),
]


def _build(dtype="float16"):
    main, startup = Program(), Program()
    init = paddle.nn.initializer
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 4], dtype)
        h = paddle.static.nn.fc(x, 3)
        h = paddle.static.nn.fc(h, 2, weight_attr=paddle.ParamAttr(initializer=init.XavierNormal()))
        paddle.static.nn.fc(h, 2, weight_attr=paddle.ParamAttr(initializer=init.Uniform(-0.5, 0.5)),
                            bias_attr=paddle.ParamAttr(initializer=init.Normal(0.0, 0.1)))
    return main, startup


def test_float16_parameters_are_drawn_in_float32_and_cast_as_paddle():
    _, startup = _build()
    got = [(op.type, op.output_arg_names, op.attr("dtype") if op.has_attr("dtype") else None)
           for op in startup.global_block().ops]
    assert got == PADDLE_STARTUP
    for op in startup.global_block().ops:
        if op.type == "cast":
            assert (op.attr("in_dtype"), op.attr("out_dtype")) == (5, 4)
    tmp = startup.global_block().var("xavier_init.fc_0.w_0.tmp_0")
    assert tmp.dtype == "float32" and not tmp.persistable


def _parameters(dtype):
    main, startup = _build(dtype)
    paddle.seed(3)
    scope = paddle.static.Scope()
    paddle.static.Executor(paddle.CPUPlace()).run(startup, scope=scope)
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def test_each_float16_parameter_is_the_float32_draw_rounded():
    """The float32 net draws the same numbers (same random ops, shapes and seed); the float16 net
    holds them rounded to float16 — not a float16 draw."""
    half, full = _parameters("float16"), _parameters("float32")
    for name, w in half.items():
        assert w.dtype == np.float16, name
        np.testing.assert_array_equal(w, full[name].astype(np.float16), err_msg=name)
