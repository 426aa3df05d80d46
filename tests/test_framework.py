"""Program / Block / Operator / Variable, unique names, op roles and program JSON."""
import json

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import InvalidArgument, NotFound, OutOfRange
from refimpl.framework import OpRole, Program, unique_name


def mlp():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        h = paddle.static.nn.fc(x, 8, activation="relu")
        loss = paddle.mean(paddle.static.nn.fc(h, 3))
        paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main, startup, loss


def test_op_role_bits_are_paddles():
    assert (OpRole.Forward, OpRole.Backward, OpRole.Optimize, OpRole.RPC, OpRole.Dist,
            OpRole.LRSched, OpRole.Loss) == (0, 1, 2, 4, 8, 16, 256)


def test_unique_name_guard_restarts_counters():
    with unique_name.guard():
        assert unique_name.generate("fc") == "fc_0"
        assert unique_name.generate("fc") == "fc_1"
        with unique_name.guard():
            assert unique_name.generate("fc") == "fc_0"
        assert unique_name.generate("fc") == "fc_2"


def test_block_and_operator_api():
    main, startup, loss = mlp()
    b = main.global_block()
    assert b.idx == 0 and b.parent_idx == -1 and main.block(0) is b and main.num_blocks == 1
    assert b.has_var("fc_0.w_0") and b.var("fc_0.w_0").is_parameter
    w = b.var("fc_0.w_0")
    assert (w.name, list(w.shape), w.dtype, w.persistable, w.stop_gradient, w.trainable) == \
        ("fc_0.w_0", [4, 8], "float32", True, False, True)
    x = b.var("x")
    assert x.is_data and x.stop_gradient and list(x.shape) == [-1, 4]
    op = b.ops[0]
    assert op.type == "mul" and op.input("X") == ["x"] and op.output("Out") == ["fc_0.tmp_0"]
    assert op.input_names == ["X", "Y"] and op.output_arg_names == ["fc_0.tmp_0"]
    assert op.attr("x_num_col_dims") == 1 and op.has_attr("op_role") and "op_role" in op.attr_names
    op._set_attr("x_num_col_dims", 1)
    assert loss.op.attr("op_role") == OpRole.Forward | OpRole.Loss
    assert [p.name for p in main.all_parameters()] == ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]
    assert b._find_var_recursive("nope") is None
    with pytest.raises(NotFound):
        b.var("nope")
    with pytest.raises(OutOfRange):
        main.block(3)


def test_insert_and_remove_op_and_sub_blocks():
    main = Program()
    b = main.global_block()
    x = b.create_var(name="x", shape=[2], dtype="float32")
    y = b.create_var(name="y", shape=[2], dtype="float32")
    b.append_op(type="scale", inputs={"X": x}, outputs={"Out": y}, attrs={"scale": 2.0})
    b._insert_op(0, type="relu", inputs={"X": x}, outputs={"Out": x})
    assert [op.type for op in b.ops] == ["relu", "scale"]
    b._remove_op(0)
    assert [op.type for op in b.ops] == ["scale"]
    sub = main._create_block()
    assert sub.parent_idx == 0 and sub._find_var_recursive("x") is x
    main._rollback()
    assert main.current_block() is b


def test_stop_gradient_passes_from_inputs_to_outputs():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        t = paddle.transpose(x, [1, 0])
        y = paddle.static.nn.fc(x, 2)
    assert t.stop_gradient and not y.stop_gradient


def test_float_attrs_are_stored_as_float32_like_paddle():
    main, _, _ = mlp()
    sgd_lr = [op for op in main.global_block().ops if op.type == "sgd"]
    assert sgd_lr
    op = main.global_block().append_op(type="scale", inputs={"X": "x"}, outputs={"Out": "x"},
                                       attrs={"scale": 0.1})
    assert op.attr("scale") == float(np.float32(0.1))


def test_program_json_round_trip_and_text():
    main, startup, _ = mlp()
    d = main.to_dict()
    assert d["format"] == "program/v1"
    again = Program.from_dict(json.loads(json.dumps(d)))
    assert again.to_dict() == d
    text = str(main)
    assert "block_idx:0" in text and "mul(inputs={X=['x'], Y=['fc_0.w_0']}" in text


def test_clone_for_test_drops_backward_and_optimizer_ops():
    main, _, _ = mlp()
    test_prog = main.clone(for_test=True)
    types = [op.type for op in test_prog.global_block().ops]
    assert types == ["mul", "elementwise_add", "relu", "mul", "elementwise_add", "reduce_mean"]
    assert not any("@GRAD" in n for n in test_prog.global_block().vars)
    assert len(main.global_block().ops) > len(types)  # the original is untouched


@pytest.mark.parametrize("bad, culprit", [
    ({"format": "program/v2", "blocks": []}, "format"),
    ({"blocks": "x"}, "blocks"),
    ({"blocks": [{"idx": 0, "parent_idx": -1, "vars": [{"shape": [1]}], "ops": []}]}, "vars[0]"),
    ({"blocks": [{"idx": 0, "parent_idx": -1, "vars": [{"name": "a", "dtype": "float99"}], "ops": []}]}, "float99"),
    ({"blocks": [{"idx": 0, "parent_idx": -1, "vars": [],
                  "ops": [{"type": "mul", "inputs": {"X": "a"}, "outputs": {}, "attrs": {}}]}]}, "inputs.X"),
    ({"blocks": [{"idx": 0, "parent_idx": 3, "vars": [], "ops": []}]}, "parent_idx"),
])
def test_malformed_program_json_raises_invalid_argument(bad, culprit):
    with pytest.raises(InvalidArgument, match=culprit.replace("[", r"\[").replace("]", r"\]")):
        Program.from_dict(bad)


def test_unknown_op_type_in_json_raises_not_found():
    bad = {"blocks": [{"idx": 0, "parent_idx": -1, "vars": [],
                       "ops": [{"type": "no_such_op", "inputs": {}, "outputs": {}, "attrs": {}}]}]}
    with pytest.raises(NotFound, match="no_such_op"):
        Program.from_dict(bad)


def test_parameter_with_negative_dim_is_rejected():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup):
        with pytest.raises(InvalidArgument, match="p_bad"):
            paddle.static.create_parameter([-1, 3], "float32", name="p_bad")
