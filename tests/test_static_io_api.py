"""paddle.static's serialize / vars / program-state APIs and paddle.save / paddle.load.

Expected programs are Paddle 3.3.1's (printed with ``FLAGS_enable_pir_api=0``
from the docstring network of ``paddle.static.normalize_program``); expected
values are the arrays the tests themselves put into the scope, so every
round trip is compared with an independent value.
"""
import io as pyio
import os
import warnings
import zipfile

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, NotFound, Unimplemented
from refimpl.framework import Program, unique_name
from refimpl.static import io as static_io

PARAMS = ("fc_0.b_0", "fc_0.w_0")


@pytest.fixture
def net():
    """The docstring network (img -> fc softmax, cross entropy), SGD, startup run in a fresh scope."""
    paddle.enable_static()
    main, startup, scope = Program(), Program(), paddle.static.Scope()
    with paddle.static.program_guard(main, startup), unique_name.guard(), paddle.static.scope_guard(scope):
        image = paddle.static.data(name="img", shape=[None, 28, 28], dtype="float32")
        label = paddle.static.data(name="label", shape=[None, 1], dtype="int64")
        predict = paddle.static.nn.fc(image, 10, activation="softmax")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(predict, label))
        paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        rng = np.random.default_rng(0)
        values = {"fc_0.w_0": rng.standard_normal((784, 10)).astype("float32"),
                  "fc_0.b_0": rng.standard_normal(10).astype("float32")}
        for n, a in values.items():
            scope.find_var(n).get_tensor().set(a)
        yield dict(main=main, image=image, label=label, predict=predict, loss=loss, exe=exe, scope=scope,
                   values=values)


def _tensor(scope, name):
    return np.array(scope.find_var(name).get_tensor())


def _clobber(scope, names):
    for n in names:
        scope.find_var(n).get_tensor().set(np.zeros_like(_tensor(scope, n)))


# ---- normalize_program / serialize_program ---------------------------------------------------
# Paddle 3.3.1 (legacy IR) printed for normalize_program(main, [image], [predict]):
PADDLE_NORMALIZED_OPS = [
    ("feed", {"X": ["feed"]}, {"Out": ["img"]}),
    ("mul", {"X": ["img"], "Y": ["fc_0.w_0"]}, {"Out": ["fc_0.tmp_0"]}),
    ("elementwise_add", {"X": ["fc_0.tmp_0"], "Y": ["fc_0.b_0"]}, {"Out": ["fc_0.tmp_1"]}),
    ("softmax", {"X": ["fc_0.tmp_1"]}, {"Out": ["fc_0.tmp_2"]}),
    ("fetch", {"X": ["fc_0.tmp_2"]}, {"Out": ["fetch"]}),
]
PADDLE_NORMALIZED_VARS = [  # name, type, persistable, stop_gradient
    ("fc_0.b_0", "DENSE_TENSOR", True, False), ("fc_0.tmp_0", "DENSE_TENSOR", False, False),
    ("fc_0.tmp_1", "DENSE_TENSOR", False, False), ("fc_0.tmp_2", "DENSE_TENSOR", False, False),
    ("fc_0.w_0", "DENSE_TENSOR", True, False), ("img", "DENSE_TENSOR", False, True),
    ("feed", "FEED_MINIBATCH", True, False), ("fetch", "FETCH_LIST", True, True),
]


def _ops(program):
    return [(op.type, {k: op.input(k) for k in op.input_names}, {k: op.output(k) for k in op.output_names})
            for op in program.global_block().ops]


def _vars(program):
    return [(v.name, v.type, v.persistable, v.stop_gradient) for v in program.list_vars()]


def test_normalize_program_gives_paddles_inference_program(net):
    main = net["main"]
    n_ops = len(main.global_block().ops)
    norm = paddle.static.normalize_program(main, [net["image"]], [net["predict"]])
    assert norm is not main and len(main.global_block().ops) == n_ops
    assert _ops(norm) == PADDLE_NORMALIZED_OPS
    assert _vars(norm) == PADDLE_NORMALIZED_VARS
    assert [op.attr("col") for op in norm.global_block().ops if op.type in ("feed", "fetch")] == [0, 0]
    assert all(op.attr("op_device") == "" for op in main.global_block().ops)


def test_normalize_program_orders_feeds_as_paddle_and_prunes_unused_feeds(net):
    main, image, label = net["main"], net["image"], net["label"]
    # Paddle 3.3.1: [('feed', 1), ('feed', 0), ...] — each feed op is prepended
    norm = paddle.static.normalize_program(main, [image, label], [net["loss"]])
    cols = [(op.type, op.attr("col")) for op in norm.global_block().ops if op.type in ("feed", "fetch")]
    assert cols == [("feed", 1), ("feed", 0), ("fetch", 0)]
    with pytest.raises(InvalidArgument, match="feeded_var_names\\[1\\]: 'label' doesn't exist in pruned"):
        paddle.static.normalize_program(main, [image, label], [net["predict"]])


def test_normalize_program_skip_prune_keeps_backward_and_sets_is_test():
    paddle.enable_static()
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        h = paddle.nn.functional.dropout(paddle.static.nn.fc(x, 3), p=0.5)
        loss = paddle.mean(h)
        paddle.optimizer.SGD(0.1).minimize(loss)
    norm = paddle.static.normalize_program(main, [x], [h], skip_prune_program=True)
    types = [op.type for op in norm.global_block().ops]
    assert types[0] == "feed" and types[-1] == "fetch" and "sgd" in types and "dropout_grad" in types
    assert all(op.attr("is_test") for op in norm.global_block().ops if op.type == "dropout")
    assert not any(op.attr("is_test") for op in main.global_block().ops if op.type == "dropout")


def test_normalize_program_bad_arguments(net):
    main, image, predict = net["main"], net["image"], net["predict"]
    with pytest.raises(InvalidArgument, match="normalize_program: program type must be"):
        paddle.static.normalize_program("main", [image], [predict])
    with pytest.raises(InvalidArgument, match="'feed_vars' should be a Variable"):
        paddle.static.normalize_program(main, ["img"], [predict])
    with pytest.raises(InvalidArgument, match="'fetch_vars' should be a Variable"):
        paddle.static.normalize_program(main, [image], 3)
    with pytest.raises(InvalidArgument, match="program must not be empty"):
        paddle.static.normalize_program(Program(), [image], [predict])


def test_serialize_program_round_trip_runs_like_the_original(net):
    main, exe, scope = net["main"], net["exe"], net["scope"]
    data = paddle.static.serialize_program([net["image"]], [net["predict"]], program=main)
    assert isinstance(data, bytes)
    program = paddle.static.deserialize_program(data)
    assert _ops(program) == PADDLE_NORMALIZED_OPS
    img = np.random.default_rng(1).standard_normal((2, 28, 28)).astype("float32")
    with paddle.static.scope_guard(scope):  # the program's own feed / fetch ops: no fetch_list needed
        got, = exe.run(program, feed={"img": img})
        named, = exe.run(program, feed={"img": img}, fetch_list=["fc_0.tmp_2"])
    logits = img.reshape(2, -1) @ net["values"]["fc_0.w_0"] + net["values"]["fc_0.b_0"]
    want = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(named, got)
    with paddle.static.scope_guard(scope), pytest.raises(InvalidArgument, match="feed 'img' is missing"):
        exe.run(program, feed={})


@pytest.mark.parametrize("data,match", [(b"\x00garbage", "not a serialized refimpl program"),
                                        (b'{"format": "other"}', "deserialize_program: "),
                                        ("text", "data must be bytes")])
def test_deserialize_program_rejects_garbage(data, match):
    with pytest.raises(InvalidArgument, match=match):
        paddle.static.deserialize_program(data)


# ---- serialize_persistables ----------------------------------------------------------------
def test_persistables_round_trip_and_archive_contents(net):
    scope, exe, values = net["scope"], net["exe"], net["values"]
    with paddle.static.scope_guard(scope):
        data = paddle.static.serialize_persistables([net["image"]], [net["predict"]], exe, program=net["main"])
        with zipfile.ZipFile(pyio.BytesIO(data)) as z:
            assert sorted(z.namelist()) == ["fc_0.b_0.npy", "fc_0.w_0.npy"]
        program = paddle.static.deserialize_program(
            paddle.static.serialize_program([net["image"]], [net["predict"]], program=net["main"]))
        _clobber(scope, PARAMS)
        assert paddle.static.deserialize_persistables(program, data, exe) is None
        for n in PARAMS:
            np.testing.assert_array_equal(_tensor(scope, n), values[n])


def test_deserialize_persistables_checks_before_setting(net):
    scope, exe, main = net["scope"], net["exe"], net["main"]
    with paddle.static.scope_guard(scope):
        data = paddle.static.serialize_persistables([net["image"]], [net["predict"]], exe, program=main)
        before = {n: _tensor(scope, n) for n in PARAMS}
        # the training program also has learning_rate_0, which the inference persistables lack
        with pytest.raises(NotFound, match="deserialize_persistables: variable 'learning_rate_0'"):
            paddle.static.deserialize_persistables(main, data, exe)
        for n in PARAMS:
            np.testing.assert_array_equal(_tensor(scope, n), before[n])
        with pytest.raises(InvalidArgument, match="deserialize_persistables: data is not a serialized"):
            paddle.static.deserialize_persistables(main, b"PK\x03\x04 not a zip", exe)
        with pytest.raises(InvalidArgument, match="Required 'data' shall be not None"):
            paddle.static.deserialize_persistables(main, None, exe)
        with pytest.raises(InvalidArgument, match="program type must be"):
            paddle.static.deserialize_persistables(None, data, exe)
        other = Program()
        with paddle.static.program_guard(other, Program()), unique_name.guard():
            paddle.static.nn.fc(paddle.static.data("img", [None, 28, 28], "float32"), 7)
        with pytest.raises(InvalidArgument, match="'fc_0.w_0'.*shape \\[784, 10\\].*\\[784, 7\\]"):
            paddle.static.deserialize_persistables(other, data, exe)


def test_save_to_file_and_load_from_file(tmp_path):
    path = str(tmp_path / "blob.bin")
    paddle.static.save_to_file(path, b"\x01\x02bytes")
    assert paddle.static.load_from_file(path) == b"\x01\x02bytes"
    assert os.listdir(tmp_path) == ["blob.bin"]  # no temporary left behind
    with pytest.raises(InvalidArgument, match="'content' type should be bytes"):
        paddle.static.save_to_file(path, "text")
    with pytest.raises(NotFound, match="save_to_file: the directory"):
        paddle.static.save_to_file(str(tmp_path / "no" / "x"), b"")
    with pytest.raises(NotFound, match="load_from_file"):
        paddle.static.load_from_file(str(tmp_path / "missing"))


def test_persistable_helpers(net):
    main = net["main"]
    names = sorted(v.name for v in paddle.static.io.get_program_persistable_vars(main))
    assert names == ["fc_0.b_0", "fc_0.w_0", "learning_rate_0"]
    block = main.global_block()
    assert paddle.static.is_persistable(block.var("fc_0.w_0")) and not paddle.static.is_persistable(net["image"])
    assert paddle.base.io.is_parameter(block.var("fc_0.w_0"))
    assert not paddle.base.io.is_parameter(block.var("learning_rate_0"))
    holder = block.create_var(name="feed", type="FEED_MINIBATCH", persistable=True)
    assert not paddle.base.io.is_persistable(holder)
    assert static_io.save_vars is paddle.static.save_vars and static_io.load_vars is paddle.static.load_vars


# ---- save_vars / load_vars ----------------------------------------------------------------------
def test_save_vars_layouts_and_load_vars(net, tmp_path):
    scope, exe, main, values = net["scope"], net["exe"], net["main"], net["values"]
    params = [main.global_block().var(n) for n in PARAMS]
    with paddle.static.scope_guard(scope):
        paddle.static.save_vars(exe, str(tmp_path / "one"), main, vars=params, filename="vars_file")
        assert os.listdir(tmp_path / "one") == ["vars_file"]
        assert sorted(np.load(tmp_path / "one" / "vars_file")) == sorted(PARAMS)
        paddle.static.save_vars(exe, str(tmp_path / "per"), main, predicate=paddle.base.io.is_parameter)
        assert sorted(os.listdir(tmp_path / "per")) == sorted(PARAMS)
        np.testing.assert_array_equal(np.load(tmp_path / "per" / "fc_0.w_0")["fc_0.w_0"], values["fc_0.w_0"])
        memory = paddle.static.save_vars(exe, None, main, vars=params)
        assert isinstance(memory, bytes)
        for kwargs in ({"dirname": str(tmp_path / "one"), "filename": "vars_file"},
                       {"dirname": str(tmp_path / "per")}, {"dirname": None, "filename": memory}):
            _clobber(scope, PARAMS)
            paddle.static.load_vars(exe, main_program=main, vars=params, **kwargs)
            for n in PARAMS:
                np.testing.assert_array_equal(_tensor(scope, n), values[n])


def test_load_vars_errors_leave_the_scope_alone(net, tmp_path):
    scope, exe, main = net["scope"], net["exe"], net["main"]
    params = [main.global_block().var(n) for n in PARAMS]
    with paddle.static.scope_guard(scope):
        paddle.static.save_vars(exe, str(tmp_path), main, vars=params[:1])  # only fc_0.b_0
        _clobber(scope, PARAMS)
        with pytest.raises(NotFound, match="fc_0.w_0"):
            paddle.static.load_vars(exe, str(tmp_path), main, vars=params)
        assert not _tensor(scope, "fc_0.b_0").any()  # nothing was set
        (tmp_path / "fc_0.w_0").write_bytes(b"not an archive")
        with pytest.raises(InvalidArgument, match="fc_0.w_0"):
            paddle.static.load_vars(exe, str(tmp_path), main, vars=params)
        with pytest.raises(InvalidArgument, match="directory path and params cannot be None"):
            paddle.static.load_vars(exe, None, main, vars=params)
        with pytest.raises(InvalidArgument, match="main_program is invalid"):
            paddle.static.save_vars(exe, str(tmp_path), main_program="main")
        with pytest.raises(NotFound, match="save_vars: variable 'fc_0.tmp_0' holds no value"):
            paddle.static.save_vars(exe, str(tmp_path), main, vars=[main.global_block().var("fc_0.tmp_0")])


# ---- program state -------------------------------------------------------------------------------
def test_load_program_state_reads_static_save_and_set_program_state(net, tmp_path):
    scope, main, values = net["scope"], net["main"], net["values"]
    prefix = str(tmp_path / "ckpt")
    with paddle.static.scope_guard(scope):
        lr = _tensor(scope, "learning_rate_0")
        paddle.static.save(main, prefix)
        state = paddle.static.load_program_state(prefix)
        assert sorted(state) == ["fc_0.b_0", "fc_0.w_0", "learning_rate_0"]  # no refimpl-only entries
        assert sorted(paddle.static.load_program_state(prefix + ".pdopt")) == sorted(state)
        _clobber(scope, PARAMS)
        paddle.static.set_program_state(main, state)
        for n in PARAMS:
            np.testing.assert_array_equal(_tensor(scope, n), values[n])
        np.testing.assert_array_equal(_tensor(scope, "learning_rate_0"), lr)


def test_load_program_state_of_directories_and_files(net, tmp_path):
    scope, exe, main, values = net["scope"], net["exe"], net["main"], net["values"]
    params = [main.global_block().var(n) for n in PARAMS]
    with paddle.static.scope_guard(scope):
        paddle.static.save_vars(exe, str(tmp_path / "per"), main, vars=params)
        (tmp_path / "per" / "README").write_text("not a variable")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            state = paddle.static.load_program_state(str(tmp_path / "per"))
        assert sorted(state) == sorted(PARAMS)
        assert any("README" in str(w.message) for w in caught)
        paddle.static.save_vars(exe, str(tmp_path / "one"), main, vars=params, filename="all")
        state = paddle.static.load_program_state(str(tmp_path / "one" / "all"), var_list=params)
        for n in PARAMS:
            np.testing.assert_array_equal(state[n], values[n])
        paddle.static.save_persistables(exe, str(tmp_path / "pers"), main)
        assert sorted(paddle.static.load_program_state(str(tmp_path / "pers"))) == [
            "fc_0.b_0", "fc_0.w_0", "learning_rate_0"]
    with pytest.raises(InvalidArgument, match="var_list can not be None when model_path is a file"):
        paddle.static.load_program_state(str(tmp_path / "one" / "all"))
    with pytest.raises(NotFound, match="load_program_state"):
        paddle.static.load_program_state(str(tmp_path / "nothing"))


def test_set_program_state_checks_everything_first(net):
    scope, main, values = net["scope"], net["main"], net["values"]
    with paddle.static.scope_guard(scope):
        _clobber(scope, PARAMS)
        bad = {"fc_0.b_0": values["fc_0.b_0"], "fc_0.w_0": np.zeros((3, 3), "float32")}
        with pytest.raises(InvalidArgument, match="shape does not match.*fc_0.w_0"):
            paddle.static.set_program_state(main, bad)
        assert not _tensor(scope, "fc_0.b_0").any()  # the good entry was not set either
        with pytest.raises(InvalidArgument, match="data type does not match"):
            paddle.static.set_program_state(main, {"fc_0.b_0": values["fc_0.b_0"].astype("float64")})
        with pytest.warns(UserWarning, match="not set.*There are: extra"):
            paddle.static.set_program_state(main, {"fc_0.b_0": values["fc_0.b_0"], "extra": np.zeros(1)})
        np.testing.assert_array_equal(_tensor(scope, "fc_0.b_0"), values["fc_0.b_0"])
    with paddle.static.scope_guard(paddle.static.Scope()):
        with pytest.raises(NotFound, match="Variable \\[ \\S+ \\] Not found, Please make sure run startup"):
            paddle.static.set_program_state(main, {})


# ---- paddle.save / paddle.load -------------------------------------------------------------------
def test_paddle_save_state_dict_tensor_and_program(net, tmp_path):
    scope, main, values = net["scope"], net["main"], net["values"]
    with paddle.static.scope_guard(scope):
        state = main.state_dict("param")
        paddle.save(state, str(tmp_path / "sub" / "model.pdparams"))  # the directory is created
        assert sorted(np.load(tmp_path / "sub" / "model.pdparams")) == sorted(PARAMS + ("@PADDLE_SAVE@",))
        loaded = paddle.load(str(tmp_path / "sub" / "model.pdparams"))
        assert sorted(loaded) == sorted(PARAMS)
        assert all(type(v).__name__ == "DenseTensor" for v in loaded.values())
        for n in PARAMS:
            np.testing.assert_array_equal(np.array(loaded[n]), values[n])
        paddle.save(main.global_block().var("fc_0.w_0"), str(tmp_path / "w.pdtensor"))
        w = paddle.load(str(tmp_path / "w.pdtensor"), return_numpy=True)
        np.testing.assert_array_equal(w, values["fc_0.w_0"])
        paddle.save(main, str(tmp_path / "main.pdmodel"))
        program = paddle.load(str(tmp_path / "main.pdmodel"))
        assert isinstance(program, Program)
        assert [op.type for op in program.global_block().ops] == [op.type for op in main.global_block().ops]
        paddle.static.save(main, str(tmp_path / "ckpt"))  # static.save's archives read as {name: tensor}
        assert sorted(paddle.load(str(tmp_path / "ckpt.pdparams"))) == sorted(PARAMS)


def test_paddle_save_nested_objects_round_trip(tmp_path):
    obj = {"model": {"w": np.arange(6, dtype="float32").reshape(2, 3)}, "epoch": 100, "name": "run",
           "steps": [1, 2.5, None, True, b"raw"], "pair": (np.float32(0.5), "a"), 3: "int key"}
    path = str(tmp_path / "obj.pdparams")
    paddle.save(obj, path)
    back = paddle.load(path, return_numpy=True)
    assert back.keys() == obj.keys()
    np.testing.assert_array_equal(back["model"]["w"], obj["model"]["w"])
    assert (back["epoch"], back["name"], back["steps"], back[3]) == (100, "run", [1, 2.5, None, True, b"raw"],
                                                                     "int key")
    assert back["pair"] == (np.float32(0.5), "a") and type(back["pair"][0]) is np.float32
    assert type(paddle.load(path)["model"]["w"]).__name__ == "DenseTensor"


def test_paddle_save_to_bytesio_reads_objects_in_order():
    buf = pyio.BytesIO()
    paddle.save({"a": np.ones(2, "float32")}, buf)
    paddle.save([1, "two"], buf)
    buf.seek(0)
    np.testing.assert_array_equal(paddle.load(buf, return_numpy=True)["a"], np.ones(2, "float32"))
    assert paddle.load(buf) == [1, "two"]
    with pytest.raises(InvalidArgument, match="does not hold an object saved"):
        paddle.load(buf)


def test_paddle_save_and_load_errors(tmp_path):
    with pytest.raises(InvalidArgument, match="is a directory; give the path of a file"):
        paddle.save({"a": np.ones(2)}, str(tmp_path))
    with pytest.raises(InvalidArgument, match="paddle.save: cannot save an object of type builtins.set"):
        paddle.save({"s": {1, 2}}, str(tmp_path / "x"))
    with pytest.raises(InvalidArgument, match="paddle.save: cannot save an object of type"):
        paddle.save(object(), str(tmp_path / "x"))
    with pytest.raises(InvalidArgument, match="MUST be format of dirname/filename"):
        paddle.save({}, str(tmp_path) + "/")
    with pytest.raises(InvalidArgument, match="Expected 1<'protocol'<5"):
        paddle.save(np.zeros(2), str(tmp_path / "x"), protocol=5)
    with pytest.raises(InvalidArgument, match="config \\(foo\\) of `paddle.save`"):
        paddle.save({}, str(tmp_path / "x"), foo=1)
    with pytest.raises(Unimplemented, match="use_binary_format"):
        paddle.save({}, str(tmp_path / "x"), use_binary_format=True)
    with pytest.raises(InvalidArgument, match="only supports saving objects to file and `BytesIO`"):
        paddle.save({}, 3)
    assert not os.path.exists(tmp_path / "x")
    with pytest.raises(NotFound, match="to load model not exists"):
        paddle.load(str(tmp_path / "missing"))
    (tmp_path / "garbage").write_bytes(b"\x00\x01garbage")
    with pytest.raises(InvalidArgument, match="can not parse the file"):
        paddle.load(str(tmp_path / "garbage"))
    (tmp_path / "trunc").write_bytes(b"PK\x03\x04truncated")
    with pytest.raises(InvalidArgument, match="truncated or corrupted"):
        paddle.load(str(tmp_path / "trunc"))
    with pytest.raises(InvalidArgument, match="config \\(foo\\) of `paddle.load`"):
        paddle.load(str(tmp_path / "garbage"), foo=1)
    assert paddle.framework.save is paddle.save and paddle.framework.load is paddle.load


def test_a_compiled_program_with_its_own_feed_fetch_ops_runs_as_paddles(net):
    main, exe, scope = net["main"], net["exe"], net["scope"]
    norm = paddle.static.normalize_program(main, [net["image"]], [net["predict"]])
    compiled = paddle.static.CompiledProgram(norm)
    assert compiled.program is norm
    img = np.random.default_rng(2).standard_normal((2, 28, 28)).astype("float32")
    with paddle.static.scope_guard(scope):
        got, = exe.run(compiled, feed={"img": img})
        want, = exe.run(norm, feed={"img": img})
    logits = img.reshape(2, -1) @ net["values"]["fc_0.w_0"] + net["values"]["fc_0.b_0"]
    softmax = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(got, softmax / softmax.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got, want)
