"""Printed programs (refimpl/framework/program_text.py) against text Paddle 3.3.1 printed.

Every expected literal below was printed by Paddle 3.3.1 (CPU wheel, FLAGS_enable_pir_api=0) for the
same source; the compat scripts V_print_*.py check whole programs the same way.
"""
import refimpl as paddle
from refimpl.framework.program_text import attr_value_text


def _fc_add_mean():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 4], "float32")
        h = paddle.static.nn.fc(x, 3)
        paddle.mean(paddle.add(h, h))
    return main, startup


# print(main) of _fc_add_mean, printed by Paddle 3.3.1
PADDLE_331_MAIN = """\
{ // block_idx:0  parent_idx:-1  forward_idx:-1  backward_idx:-1
    var x : DENSE_TENSOR.shape(-1, 4).dtype(float32).stop_gradient(True)
    persist trainable param fc_0.w_0 : DENSE_TENSOR.shape(4, 3).dtype(float32).stop_gradient(False)
    var fc_0.tmp_0 : DENSE_TENSOR.shape(-1, 3).dtype(float32).stop_gradient(False)
    persist trainable param fc_0.b_0 : DENSE_TENSOR.shape(3,).dtype(float32).stop_gradient(False)
    var fc_0.tmp_1 : DENSE_TENSOR.shape(-1, 3).dtype(float32).stop_gradient(False)
    var elementwise_add_0.tmp_0 : DENSE_TENSOR.shape(-1, 3).dtype(float32).stop_gradient(False)
    var mean_0.tmp_0 : DENSE_TENSOR.shape().dtype(float32).stop_gradient(False)

    {Out=['fc_0.tmp_0']} = mul(inputs={X=['x'], Y=['fc_0.w_0']}, op_device = , op_namescope = /, op_role = 0, op_role_var = [], with_quant_attr = False, x_num_col_dims = 1, y_num_col_dims = 1)
    {Out=['fc_0.tmp_1']} = elementwise_add(inputs={X=['fc_0.tmp_0'], Y=['fc_0.b_0']}, axis = 1, op_device = , op_namescope = /, op_role = 0, op_role_var = [], with_quant_attr = False)
    {Out=['elementwise_add_0.tmp_0']} = elementwise_add(inputs={X=['fc_0.tmp_1'], Y=['fc_0.tmp_1']}, axis = -1, op_device = , op_namescope = /, op_role = 0, op_role_var = [], with_quant_attr = False)
    {Out=['mean_0.tmp_0']} = reduce_mean(inputs={X=['elementwise_add_0.tmp_0']}, dim = [], in_dtype = -1, keep_dim = False, op_device = , op_namescope = /, op_role = 0, op_role_var = [], out_dtype = -1, reduce_all = True, with_quant_attr = False)
}
"""

# the fill_constant of fc_0.b_0 in print(startup), and the sgd op after SGD(0.1).minimize, Paddle 3.3.1
PADDLE_331_FILL = ("{Out=['fc_0.b_0']} = fill_constant(inputs={}, dtype = 5, force_cpu = False, op_device = , "
                   "op_namescope = /, op_role = 0, op_role_var = [], place_type = -1, shape = [3], "
                   "str_value = 0.0, value = 0.0, with_quant_attr = False)")
PADDLE_331_SGD = ("{ParamOut=['fc_0.b_0']} = sgd(inputs={Grad=['fc_0.b_0@GRAD'], LearningRate=['learning_rate_0'], "
                  "MasterParam=[], Param=['fc_0.b_0']}, multi_precision = False, op_device = , "
                  "op_namescope = /optimizer/, op_role = 2, op_role_var = ['fc_0.b_0', 'fc_0.b_0@GRAD'], "
                  "with_quant_attr = False)")
# Variable.to_string(True) / (True, True) of the data var x and of fc_0.w_0, Paddle 3.3.1
PADDLE_331_X = """\
name: "x"
type {
  type: DENSE_TENSOR
  dense_tensor {
    tensor {
      data_type: FP32
      dims: -1
      dims: 4
    }
    legacy_lod_level: 0
  }
}
persistable: false
need_check_feed: true
stop_gradient: true
"""
PADDLE_331_W_DETAILS = """\
name: "fc_0.w_0"
type {
  type: DENSE_TENSOR
  dense_tensor {
    tensor {
      data_type: FP32
      dims: 4
      dims: 3
    }
  }
}
persistable: true
is_parameter: true
stop_gradient: false
error_clip: None
trainable: True
optimize_attr: {'learning_rate': 1.0}
regularizer: None
do_model_average: True
need_clip: True
"""


def test_print_program_equals_paddle():
    main, _ = _fc_add_mean()
    assert str(main) == PADDLE_331_MAIN
    assert main._to_readable_code() == PADDLE_331_MAIN
    assert str(main.global_block()) + "\n" == PADDLE_331_MAIN


def test_print_ops_and_vars_equal_paddle():
    with paddle.utils.unique_name.guard():  # a fresh process in Paddle: learning_rate_0
        main, startup = _fc_add_mean()
        with paddle.static.program_guard(main, startup):
            paddle.optimizer.SGD(0.1).minimize(main.global_block().var("mean_0.tmp_0"))
    assert str(startup.global_block().ops[1]) == PADDLE_331_FILL
    assert [str(op) for op in main.global_block().ops if op.type == "sgd"][0] == PADDLE_331_SGD
    lr = main.global_block().var("learning_rate_0")
    assert repr(lr) == "persist var learning_rate_0 : DENSE_TENSOR.shape().dtype(float32).stop_gradient(True)"


def test_variable_to_string_equals_paddle():
    main, _ = _fc_add_mean()
    x, w = main.global_block().var("x"), main.global_block().var("fc_0.w_0")
    assert x.to_string(True) == PADDLE_331_X
    assert x.to_string(True, True) == PADDLE_331_X + "error_clip: None\n"
    assert w.to_string(True, True) == PADDLE_331_W_DETAILS


def test_non_trainable_param_and_non_tensor_var():
    # Paddle 3.3.1 printed these lines for create_parameter(trainable=False) and cond's scope var
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        paddle.static.create_parameter([3], "float32", attr=paddle.ParamAttr(name="frozen", trainable=False))
    b = main.global_block()
    s = b.create_var(name="_generated_var_0", type="STEP_SCOPES")
    assert str(b.var("frozen")) == "persist param frozen : DENSE_TENSOR.shape(3,).dtype(float32).stop_gradient(True)"
    assert str(s) == "var _generated_var_0 : STEP_SCOPES)"


def test_attr_values_print_as_paddle():
    # Paddle 3.3.1 printed: epsilon = 9.999999747378752e-06, momentum = 0.8999999761581421 (batch_norm),
    # str_value = 0.1 (unquoted), op_role_var = ['a', 'b'], sub_block = block[1]
    assert attr_value_text(1e-5) == "9.999999747378752e-06"
    assert attr_value_text(0.9) == "0.8999999761581421"
    assert attr_value_text("0.1") == "0.1"
    assert attr_value_text(["a", "b"]) == "['a', 'b']"
    assert attr_value_text(True) == "True"
    p = paddle.static.Program()
    sub = p._create_block()
    assert attr_value_text(sub) == "block[1]"
    assert attr_value_text([sub, sub]) == "blocks[1, 1]"


def test_block_header_shows_backward_idx():
    p = paddle.static.Program()
    fwd = p._create_block()
    p._rollback()
    bwd = p._create_block()
    bwd.forward_block_idx = fwd.idx
    assert str(fwd).startswith("{ // block_idx:1  parent_idx:0  forward_idx:-1  backward_idx:2\n")
    assert str(bwd).startswith("{ // block_idx:2  parent_idx:0  forward_idx:1  backward_idx:-1\n")


# The "f:" lines of main.to_string(True), printed by Paddle 3.3.1 (FLAGS_enable_pir_api=0), for scale ops
# appended by hand with these scale attrs (bias 0.0 each): protobuf's float text, not Python's %g.
PADDLE_331_FLOAT_ATTRS = [(0.1234567, "0.123456702"), (1.0, "1"), (0.0, "0"), (123456792.0, "123456792"),
                          (1e-05, "1e-05"), (1e-7, "1e-07"), (3.4028234663852886e+38, "3.40282347e+38"),
                          (-2.5, "-2.5"), (1e20, "1e+20"), (0.5, "0.5")]


def test_float_attrs_in_proto_text_equal_paddle():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        block = main.global_block()
        x = paddle.static.data("x", [2, 3], "float32")
        for i, (v, _) in enumerate(PADDLE_331_FLOAT_ATTRS):
            out = block.create_var(name=f"o{i}", dtype="float32")
            block.append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [out]}, attrs={"scale": v, "bias": 0.0})
    got = [line.strip() for line in main.to_string(True).splitlines() if line.strip().startswith("f: ")]
    want = []
    for _, text in PADDLE_331_FLOAT_ATTRS:
        want += ["f: 0", f"f: {text}"]  # bias sorts before scale
    assert got == want
