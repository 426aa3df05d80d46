"""The Variable / Program / Block API of Paddle 3.3.1's legacy IR (refimpl/framework).

Names, errors and structure below are what Paddle 3.3.1 (FLAGS_enable_pir_api=0) printed for the same
calls; numbers are checked against NumPy.
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, NotFound


def _net():
    x = paddle.static.data("x", [None, 4], "float32")
    h = paddle.static.nn.fc(x, 3, weight_attr=paddle.ParamAttr(name="shared_w"))
    h2 = paddle.static.nn.fc(x, 3, weight_attr=paddle.ParamAttr(name="shared_w"))
    return paddle.mean(paddle.nn.functional.dropout(h + h2, 0.5))


def _train_and_test():
    startup, train, test = paddle.static.Program(), paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(train, startup), paddle.utils.unique_name.guard():
        loss = _net()
        paddle.optimizer.SGD(0.1).minimize(loss)
    with paddle.static.program_guard(test, startup), paddle.utils.unique_name.guard():
        _net()
    return startup, train, test


def test_two_programs_share_parameters_through_one_startup():
    startup, train, test = _train_and_test()
    # Paddle 3.3.1 printed these lists for the same programs
    assert [p.name for p in train.all_parameters()] == ["shared_w", "fc_0.b_0", "fc_1.b_0"]
    assert [p.name for p in test.all_parameters()] == ["shared_w", "fc_0.b_0", "fc_1.b_0"]
    assert [op.type for op in startup.global_block().ops] == ["uniform_random", "fill_constant",
                                                              "fill_constant", "fill_constant"]
    assert [v.name for v in startup.list_vars()] == ["shared_w", "fc_0.b_0", "fc_1.b_0", "learning_rate_0"]


def test_shared_parameter_shape_mismatch_is_an_error():
    b = paddle.static.Program().global_block()
    p = b.create_parameter("p", [3], "float32")
    assert b.create_parameter("p", [3], "float32") is p
    with pytest.raises(InvalidArgument, match="'p' has been created before. The previous shape is"):
        b.create_parameter("p", [4], "float32")


def test_shared_parameter_dtype_mismatch_is_paddles_error():
    b = paddle.static.Program().global_block()
    b.create_parameter("w", [2], "float32")
    with pytest.raises(ValueError) as err:
        b.create_parameter("w", [2], "float64")
    # Paddle 3.3.1 (FLAGS_enable_pir_api=0) raised ValueError with this text
    assert str(err.value) == ("Variable 'w' has been created before. The previous data type is paddle.float32, "
                              "the new data type is paddle.float64. They are not matched.")


def test_clone_for_test_prunes_and_sets_is_test():
    _, train, _ = _train_and_test()
    test = train.clone(for_test=True)
    b = test.global_block()
    # Paddle 3.3.1: forward ops only, vars sorted by name, no grads, no learning rate
    assert [op.type for op in b.ops] == ["mul", "elementwise_add", "mul", "elementwise_add", "elementwise_add",
                                         "dropout", "reduce_mean"]
    assert list(b.vars) == ["dropout_0.tmp_0", "dropout_0.tmp_1", "fc_0.b_0", "fc_0.tmp_0", "fc_0.tmp_1",
                            "fc_1.b_0", "fc_1.tmp_0", "fc_1.tmp_1", "mean_0.tmp_0", "shared_w", "tmp_0", "x"]
    assert b.ops[5].attr("is_test") is True and train.global_block().ops[5].attr("is_test") is False
    assert b.var("shared_w").is_parameter and b.var("x").is_data
    assert list(train.clone().global_block().vars) == sorted(train.global_block().vars)


def test_block_var_errors_are_paddles():
    b = paddle.static.Program().global_block()
    with pytest.raises(ValueError, match="^var nope not in this block$") as e:
        b.var("nope")
    assert isinstance(e.value, NotFound)
    with pytest.raises(TypeError, match="var require string as parameter"):
        b.var(3)
    with pytest.raises(ValueError, match="Var nope is not found recursively"):
        b._var_recursive("nope")
    assert not b.has_var("nope")


def test_variable_properties():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [None, 4, 2], "float32")
        i = paddle.static.data("i", [3], "int64")
        h = paddle.static.data("h", [3], "float16")
    assert (x.dim(), x.ndimension(), x.grad_name) == (3, 3, "x@GRAD")
    assert (x.element_size(), i.element_size(), h.element_size()) == (4, 8, 2)
    assert main.num_blocks == 1 and main.block(0) is main.global_block()


def test_variable_clone_appends_assign():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [2, 3], "float32")
        c = x.clone()
    # Paddle 3.3.1: x_clone_0, by an assign op, stop_gradient copied from x
    assert c.name == "x_clone_0" and c.stop_gradient is True
    assert [(op.type, op.input("X"), op.output("Out")) for op in main.global_block().ops] == \
        [("assign", ["x"], ["x_clone_0"])]
    exe = paddle.static.Executor(paddle.CPUPlace())
    xv = np.arange(6, dtype="float32").reshape(2, 3)
    out, = exe.run(main, feed={"x": xv}, fetch_list=[c])
    np.testing.assert_array_equal(out, xv)


def test_get_value_set_value_and_state_dict():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
        paddle.optimizer.SGD(0.1).minimize(loss)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup, scope=scope)
    w = main.global_block().var("fc_0.w_0")
    w.set_value(np.ones((4, 2), "float32"), scope)
    np.testing.assert_array_equal(np.array(w.get_value(scope)), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"fc_0.w_0 expected a shape \[4, 2\], but the received shape is \[2\]"):
        w.set_value(np.ones(2, "float32"), scope)
    with pytest.raises(TypeError) as err:
        w.set_value([1.0, 2.0], scope)
    # Paddle 3.3.1 (FLAGS_enable_pir_api=0) raised TypeError with this text
    assert str(err.value) == "`value` should be `numpy.ndarray` or `DenseTensor`, but received <class 'list'>."
    assert isinstance(err.value, InvalidArgument)
    with pytest.raises(ValueError, match="Can not find Variable 'fc_0.w_0' in the Scope"):
        w.get_value(paddle.static.Scope())
    assert sorted(main.state_dict("param", scope)) == ["fc_0.b_0", "fc_0.w_0"]
    assert sorted(main.state_dict("opt", scope)) == ["learning_rate_0"]
    assert sorted(main.state_dict(scope=scope)) == ["fc_0.b_0", "fc_0.w_0", "learning_rate_0"]
    with pytest.raises(ValueError, match="'param', 'opt' or 'all'"):
        main.state_dict("bad", scope)
    with pytest.warns(UserWarning, match="Skip loading for 'nope'"):
        main.set_state_dict({"fc_0.b_0": np.full(2, 3.0, "float32"), "nope": np.zeros(1)}, scope)
    np.testing.assert_array_equal(np.array(main.state_dict("param", scope)["fc_0.b_0"]), [3.0, 3.0])


def test_global_seed():
    p = paddle.static.Program()
    try:
        p.global_seed(7)
        assert p.random_seed == 7 and paddle.static.Program().random_seed == 7
    finally:
        p.global_seed(0)
    assert paddle.static.Program().random_seed == 0


def test_detach_size_cpu_append_paddles_ops_and_run():
    """Printed by Paddle 3.3.1 (FLAGS_enable_pir_api=0) for x.detach(), x.size(), x.cpu() of x [2, 3]:
    share_data X=[x] Out=[detach_x_0] (2, 3); size Input=[x] Out=[x_size_0] () int64;
    memcpy X=[x] Out=[tmp_0] dst_place_type 0; run on arange(6): the same values, 6, the same values."""
    import numpy as np
    import refimpl as paddle
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        with paddle.utils.unique_name.guard():
            x = paddle.static.data("x", [2, 3], "float32")
            a, b, c = x.detach(), x.size(), x.cpu()
    ops = main.global_block().ops
    assert [(op.type, op.input_arg_names, op.output_arg_names) for op in ops] == [
        ("share_data", ["x"], ["detach_x_0"]), ("size", ["x"], ["x_size_0"]), ("memcpy", ["x"], ["tmp_0"])]
    assert ops[2].attr("dst_place_type") == 0
    assert list(b.shape) == [] and b.dtype == "int64" and a.stop_gradient and c.stop_gradient
    feed = np.arange(6, dtype="float32").reshape(2, 3)
    got_a, got_b, got_c = paddle.static.Executor().run(main, feed={"x": feed}, fetch_list=[a, b, c])
    assert np.array_equal(got_a, feed) and int(got_b) == 6 and got_b.dtype == np.int64
    assert np.array_equal(got_c, feed) and got_c.dtype == np.float32


def test_operator_remove_output_and_clone_for_test_drop_reserve_space():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [2, 3, 4, 4], "float32")
        paddle.static.nn.batch_norm(x)
    (bn,) = [op for op in main.global_block().ops if op.type == "batch_norm"]
    assert "ReserveSpace" in bn.output_names
    test = main.clone(for_test=True)
    (tbn,) = [op for op in test.global_block().ops if op.type == "batch_norm"]
    assert "ReserveSpace" not in tbn.output_names and tbn.attr("is_test") is True
    assert "ReserveSpace" in bn.output_names and bn.attr("is_test") is False  # the original is left alone
    bn.remove_output("ReserveSpace")
    bn.remove_output("NoSuchSlot")
    assert "ReserveSpace" not in bn.output_names and bn.output("ReserveSpace") == []


def test_operator_desc_reads_and_writes_the_op_as_paddles_opdesc():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.static.name_scope("s1"):
            a = paddle.static.data(name="a", shape=[None, 2], dtype="float32")
            b = a + 1.0
        with paddle.static.name_scope("s1"):
            paddle.scale(b, 2.0)
    scale_ops = [op for op in main.global_block().ops if op.type == "scale"]
    desc = scale_ops[-1].desc
    assert desc.type() == "scale" and desc.input("X") == [b.name]
    assert desc.attr("op_namescope") == "/s1_1/"       # a second scope of the same name, as Paddle's
    assert desc.has_attr("bias") and "scale" in desc.attr_names()
    desc._set_attr("scale", 3.0)
    assert scale_ops[-1].attr("scale") == 3.0
    desc.set_input("X", [a.name])
    assert scale_ops[-1].input("X") == [a.name] and desc.input_arg_names() == [a.name]


def test_recreating_a_var_with_another_shape_or_dtype_is_paddles_error():
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data(name="x", shape=[1, 4], dtype="float32")
        assert paddle.static.data(name="x", shape=[1, 4], dtype="float32") is x   # same: the same var
        # Paddle 3.3.1: ValueError: Variable 'x' has been created before. The previous shape is (1, 4), ...
        with pytest.raises(InvalidArgument, match=r"Variable 'x' has been created before. The previous shape "
                                                  r"is \(1, 4\), the new shape is \(2, 3\). They are not matched."):
            paddle.static.data(name="x", shape=[2, 3], dtype="float32")
        with pytest.raises(ValueError, match="The previous data type is float32, the new data type is int32"):
            paddle.static.data(name="x", shape=[1, 4], dtype="int32")


def test_unnamed_vars_count_per_program_as_paddles():
    names = []
    for _ in range(2):
        block = paddle.static.Program().global_block()
        names.append([block.create_var(dtype="float32").name for _ in range(2)])
    assert names == [["_generated_var_0", "_generated_var_1"]] * 2


def test_dropout_seed_and_fix_seed_are_extra_attrs_set_by_a_seeded_program():
    for seed in (0, 7):
        main, startup = paddle.static.Program(), paddle.static.Program()
        main.random_seed = seed
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [4, 6], "float32")
            paddle.nn.functional.dropout(x, 0.5)
        op = main.global_block().ops[-1]
        # Paddle 3.3.1: attr_names never list them; a seeded program sets fix_seed=True, seed=7
        assert op.has_attr("fix_seed") == bool(seed)
        if seed:
            assert (op.attr("fix_seed"), op.attr("seed")) == (True, 7)
    exe = paddle.static.Executor(paddle.CPUPlace())
    masks = [exe.run(main, feed={"x": np.ones((4, 6), "float32")}, fetch_list=[main.global_block().ops[-1].output("Mask")[0]])[0]
             for _ in range(2)]
    np.testing.assert_array_equal(masks[0], masks[1])      # a fixed seed: the same mask every run
