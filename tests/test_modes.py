"""The mode switches, grad mode, ``to_tensor``, ``pir_utils`` and ``DataFeeder`` against Paddle 3.3.1.

The expected values are Paddle 3.3.1's (``FLAGS_enable_pir_api=0``, CPU
wheel), pasted as literals where noted, or plain NumPy. The mode is
process-wide, so every test that flips it restores it (``saved_modes``), and
the state at import is checked in a fresh interpreter.
"""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
import refimpl.framework as fw
import refimpl.framework.grad_mode as gm
from refimpl import base
from refimpl.core.errors import InvalidArgument, NotFound, Unimplemented
from refimpl.core.tensor import DenseTensor

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def saved_modes():
    state = (fw._dynamic_mode, fw._dygraph_requested, gm._grad_enabled)
    yield
    fw._dynamic_mode, fw._dygraph_requested, gm._grad_enabled = state


def fresh_python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def programs():
    return paddle.static.Program(), paddle.static.Program()


def ops_of(program):
    return [(op.type, {n: op.input(n) for n in op.input_names}, {n: op.output(n) for n in op.output_names})
            for op in program.global_block().ops]


# ---- the mode switches -------------------------------------------------------------------------
def test_mode_round_trip_from_import():
    # Paddle 3.3.1 printed True / False / True for the docstring example of paddle.base.in_dygraph_mode
    res = fresh_python("import refimpl as paddle\n"
                       "print(paddle.in_dynamic_mode()); paddle.enable_static(); print(paddle.in_dynamic_mode())\n"
                       "paddle.disable_static(); print(paddle.in_dynamic_mode())")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "False", "True"]


def test_base_aliases_are_the_same_switches(saved_modes):
    # Paddle 3.3.1: paddle.disable_static is base.enable_dygraph, paddle.enable_static is base.disable_dygraph
    assert base.enable_dygraph is paddle.disable_static and base.disable_dygraph is paddle.enable_static
    assert base.in_dygraph_mode is paddle.in_dynamic_mode is base.framework.in_dygraph_mode
    base.disable_dygraph()
    assert (paddle.in_dynamic_mode(), base.in_dygraph_mode()) == (False, False)
    base.enable_dygraph(paddle.CPUPlace())
    assert (paddle.in_dynamic_mode(), paddle.framework.in_dynamic_or_pir_mode()) == (True, True)
    assert paddle.framework.in_pir_mode() is False


def test_builds_static_at_import_although_in_dynamic_mode_says_true(saved_modes):
    fw._dynamic_mode, fw._dygraph_requested = True, False  # the state at import
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 3], "float32")
        y = paddle.static.nn.fc(x, 2) + 1.0
    assert paddle.in_dynamic_mode() is True
    assert [op.type for op in main.global_block().ops] == ["mul", "elementwise_add", "scale"]
    assert main.global_block().ops[-1].output("Out") == [y.name]


def _build_calls(x, layer):
    return {
        "paddle.static.data": lambda: paddle.static.data("z", [2], "float32"),
        "fc": lambda: paddle.static.nn.fc(x, 2),
        "elementwise_add": lambda: paddle.add(x, x),
        "Variable.__add__": lambda: x + 1,
        "Variable.__mul__": lambda: x * x,
        "Variable.__neg__": lambda: -x,
        "Variable.__getitem__": lambda: x[0],
        "Variable.astype": lambda: x.astype("int64"),
        "fill_constant": lambda: paddle.full([2], 1.0),
        "paddle.to_tensor": lambda: paddle.to_tensor([1.0]),
        "paddle.nn.Linear.__call__": lambda: layer(x),
        "linear": lambda: paddle.nn.Linear(3, 4),
        "mean": lambda: paddle.mean(x),
    }


@pytest.mark.parametrize("api", list(_build_calls(None, None)))
def test_after_disable_static_each_build_raises_naming_the_api(saved_modes, api):
    paddle.enable_static()
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [2, 3], "float32")
        layer = paddle.nn.Linear(3, 4)
    before = (ops_of(main), sorted(main.global_block().vars), ops_of(startup))
    paddle.disable_static()
    with paddle.static.program_guard(main, startup):
        with pytest.raises(Unimplemented) as err:
            _build_calls(x, layer)[api]()
    msg = str(err.value)
    assert msg.startswith(f"(Unimplemented) {api}") and "paddle.disable_static() was called" in msg
    assert "refimpl implements the static graph only; call paddle.enable_static() first" in msg
    assert (ops_of(main), sorted(main.global_block().vars), ops_of(startup)) == before  # nothing half-built


def test_a_program_built_before_disable_static_still_runs(saved_modes):
    paddle.enable_static()
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 3], "float32")
        y = paddle.mean(x * 2.0)
        test_prog = main.clone(for_test=True)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle.disable_static()
    feed = {"x": np.arange(6, dtype="float32").reshape(2, 3)}
    out, = exe.run(main, feed=feed, fetch_list=[y])
    assert float(out) == pytest.approx(np.mean(feed["x"] * 2.0))
    out, = exe.run(test_prog, feed=feed, fetch_list=[y.name])
    assert float(out) == pytest.approx(5.0)
    paddle.enable_static()  # and building works again
    with paddle.static.program_guard(main, startup):
        paddle.mean(x)
    assert main.global_block().ops[-1].type == "reduce_mean"


# ---- grad mode -----------------------------------------------------------------------------------
def test_grad_mode_as_paddle_answers(saved_modes):
    # Paddle 3.3.1 printed: A True, B False, C True, D False, E True, F False, G True, H False, I True,
    # J False True (tests/compat/scripts/M_grad_mode.py records the same story)
    gm._grad_enabled = True
    seen = [paddle.is_grad_enabled()]
    with paddle.set_grad_enabled(False):
        seen.append(paddle.is_grad_enabled())
    seen.append(paddle.is_grad_enabled())
    paddle.set_grad_enabled(False)
    seen.append(paddle.is_grad_enabled())
    paddle.set_grad_enabled(True)
    paddle.enable_static()
    seen.append(paddle.is_grad_enabled())
    with paddle.set_grad_enabled(False):
        seen.append(paddle.is_grad_enabled())
    seen.append(paddle.is_grad_enabled())
    with paddle.no_grad():
        seen.append(paddle.is_grad_enabled())
        with paddle.enable_grad():
            seen.append(paddle.is_grad_enabled())

    @paddle.no_grad()
    def f():
        return paddle.is_grad_enabled()
    seen += [f(), paddle.is_grad_enabled()]
    assert seen == [True, False, True, False, True, False, True, False, True, False, True]


def test_grad_mode_decorates_generators_and_restores_on_error(saved_modes):
    gm._grad_enabled = True

    @paddle.enable_grad()
    def gen():
        yield paddle.is_grad_enabled()
        yield paddle.is_grad_enabled()
    with paddle.no_grad():
        assert list(gen()) == [True, True] and paddle.is_grad_enabled() is False
    with pytest.raises(KeyError):
        with paddle.no_grad():
            raise KeyError("x")
    assert paddle.is_grad_enabled() is True
    with pytest.raises(InvalidArgument, match=r"paddle.set_grad_enabled: argument 'mode' must be a bool, got 'x'"):
        paddle.set_grad_enabled("x")
    assert paddle.is_grad_enabled() is True


def test_no_grad_changes_nothing_built_in_static_mode(saved_modes):
    # Paddle 3.3.1: y = x * 2 under no_grad() keeps stop_gradient False
    paddle.enable_static()
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [2, 3], "float32")
        x.stop_gradient = False
        with paddle.no_grad():
            y = x * 2.0
    assert y.stop_gradient is False


# ---- pir_utils -----------------------------------------------------------------------------------
def test_pir_utils_guards():
    with paddle.pir_utils.OldIrGuard():
        assert paddle.framework.in_pir_mode() is False
    with paddle.pir_utils.DygraphOldIrGuard():
        pass
    for guard in (paddle.pir_utils.IrGuard, paddle.pir_utils.DygraphPirGuard):
        with pytest.raises(Unimplemented, match=rf"paddle.pir_utils.{guard.__name__}: refimpl implements the "
                                                r"legacy ProgramDesc IR only"):
            with guard():
                pass

    @paddle.pir_utils.IrGuard()
    def on_pir():
        return 1
    with pytest.raises(Unimplemented):
        on_pir()
    assert paddle.pir_utils.OldIrGuard()(lambda: 2)() == 2


# ---- to_tensor ----------------------------------------------------------------------------------
def test_to_tensor_builds_paddles_ops():
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        vs = [paddle.to_tensor(1), paddle.to_tensor(2.0), paddle.to_tensor([1., 2.]),
              paddle.to_tensor(np.ones([2, 2])), paddle.to_tensor([[1, 2]], dtype="float32", stop_gradient=False),
              paddle.to_tensor(True), paddle.to_tensor(np.int32(3)), paddle.to_tensor([1, 2], dtype="int64")]
        x = paddle.static.data("x", [2], "float32")
        assert paddle.to_tensor(x) is x
    # Paddle 3.3.1 printed (name, shape, dtype, stop_gradient) and the ops (type, outputs, dtype, shape, op_device)
    assert [(v.name, tuple(v.shape), v.dtype, v.stop_gradient) for v in vs] == [
        ("assign_0.tmp_0", (), "int64", True), ("assign_1.tmp_0", (), "float32", True),
        ("assign_2.tmp_0", (2,), "float32", True), ("assign_3.tmp_0", (2, 2), "float64", True),
        ("cast_0.tmp_0", (1, 2), "float32", False), ("assign_5.tmp_0", (), "bool", True),
        ("assign_6.tmp_0", (), "int32", True), ("assign_7.tmp_0", (2,), "int64", True)]
    ops = main.global_block().ops
    assert [(op.type, op.output("Out")[0], op.attr("op_device")) for op in ops] == [
        ("assign_value", "assign_0.tmp_0", "cpu"), ("assign_value", "assign_1.tmp_0", "cpu"),
        ("assign_value", "assign_2.tmp_0", "cpu"), ("assign_value", "assign_3.tmp_0", "cpu"),
        ("assign_value", "assign_4.tmp_0", "cpu"), ("cast", "cast_0.tmp_0", "cpu"),
        ("assign_value", "assign_5.tmp_0", "cpu"), ("assign_value", "assign_6.tmp_0", "cpu"),
        ("assign_value", "assign_7.tmp_0", "cpu")]
    values = [(op.attr("dtype"), op.attr("shape")) for op in ops if op.type == "assign_value"]
    assert values == [(3, []), (5, []), (5, [2]), (6, [2, 2]), (3, [1, 2]), (0, []), (2, []), (3, [2])]
    assert (ops[5].attr("in_dtype"), ops[5].attr("out_dtype")) == (3, 5)


def test_to_tensor_stacks_variables_and_keeps_int16():
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [], "float32")
        v = paddle.to_tensor([x, 2.0])
        w = paddle.to_tensor(np.array([1, 2], dtype="int16"))
    # Paddle 3.3.1: assign_value(assign_0) -> stack(x, assign_0.tmp_0) -> assign -> assign_1.tmp_0; int16 goes in
    # as an int32 assign_value (dtype 2) and is cast back to int16
    assert ops_of(main) == [
        ("assign_value", {}, {"Out": ["assign_0.tmp_0"]}),
        ("stack", {"X": ["x", "assign_0.tmp_0"]}, {"Y": ["stack_0.tmp_0"]}),
        ("assign", {"X": ["stack_0.tmp_0"]}, {"Out": ["assign_1.tmp_0"]}),
        ("assign_value", {}, {"Out": ["assign_2.tmp_0"]}),
        ("cast", {"X": ["assign_2.tmp_0"]}, {"Out": ["cast_0.tmp_0"]})]
    assert (v.name, tuple(v.shape), w.name, w.dtype) == ("assign_1.tmp_0", (2,), "cast_0.tmp_0", "int16")
    exe = paddle.static.Executor(paddle.CPUPlace())
    out, = exe.run(main, feed={"x": np.array(7, "float32")}, fetch_list=[v])
    assert out.tolist() == [7.0, 2.0]


def test_to_tensor_values_and_place():
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        a = paddle.to_tensor([[1, 2], [3, 4]], place=paddle.CUDAPlace(0))
        b = paddle.to_tensor(np.float64(0.25), dtype="float32", place="cpu")
    assert [op.attr("op_device") for op in main.global_block().ops] == ["gpu:0", "cpu", "cpu"]
    out = paddle.static.Executor(paddle.CPUPlace()).run(main, fetch_list=[a, b])
    assert out[0].dtype == np.int64 and out[0].tolist() == [[1, 2], [3, 4]]
    assert out[1].dtype == np.float32 and out[1].tolist() == 0.25


@pytest.mark.parametrize("data, kw, match", [
    ("abc", {}, r"to_tensor: cannot make a tensor of str 'abc'"),
    (np.array([1], dtype="uint8"), {}, r"to_tensor: data of dtype 'uint8' is not supported"),
    ([[1, 2], [3]], {}, r"to_tensor: argument 'data' cannot become an array"),
    ([1], {"dtype": "nonsense"}, r"to_tensor: argument 'dtype'"),
    ([1], {"place": "tpu"}, r"to_tensor: argument 'place' must be a CPUPlace, a CUDAPlace, 'cpu' or 'gpu:N', "
                            r"got 'tpu'"),
])
def test_to_tensor_bad_input(data, kw, match):
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        with pytest.raises(InvalidArgument, match=match):
            paddle.to_tensor(data, **kw)
    assert main.global_block().ops == []


def test_name_scope_docstring_example_namescopes():
    # the asserts of Paddle 3.3.1's paddle.static.name_scope example (op_namescope of each op)
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        with paddle.static.name_scope("s1"):
            a = paddle.static.data(name="data", shape=[None, 1], dtype="int32")
            b = a + paddle.to_tensor(1)
            with paddle.static.name_scope("s2"):
                c = b * paddle.to_tensor(1)
        with paddle.static.name_scope("s1"):
            d = paddle.tensor.pow(c, paddle.to_tensor(2.0))
    got = {op.type: op.attr("op_namescope") for op in main.global_block().ops}
    assert got["elementwise_add"] == "/s1/" and got["elementwise_mul"] == "/s1/s2/"
    # a second "s1" scope gets a fresh name, "/s1_1/" in the docstring's fresh process (the counter is global)
    assert got["elementwise_pow"].startswith("/s1_") and main.global_block().ops[-1].output("Out") == [d.name]


# ---- DataFeeder ---------------------------------------------------------------------------------
def test_data_feeder_batches_and_reshapes():
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        img = paddle.static.data("img", [None, 2, 2], "float32")
        paddle.static.data("label", [None, 1], "int64")  # fed by its name
        two_unknown = paddle.static.data("seqlike", [-1, -1], "float64")
    samples = [(np.arange(4) + i, [i], [[i, i + 1]]) for i in range(3)]
    feed = base.DataFeeder([img, "label", two_unknown], paddle.CPUPlace(), program=main).feed(iter(samples))
    assert sorted(feed) == ["img", "label", "seqlike"] and all(isinstance(t, DenseTensor) for t in feed.values())
    want_img = np.stack([np.arange(4) + i for i in range(3)]).astype("float32").reshape(3, 2, 2)
    np.testing.assert_array_equal(np.array(feed["img"]), want_img)
    assert np.array(feed["img"]).dtype == np.float32
    assert np.array(feed["label"]).dtype == np.int64 and np.array(feed["label"]).tolist() == [[0], [1], [2]]
    # two -1 dims: no reshape, the batch keeps the rank the samples give it
    assert np.array(feed["seqlike"]).shape == (3, 1, 2) and np.array(feed["seqlike"]).dtype == np.float64


def test_data_feeder_errors():
    main, startup = programs()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 3], "float32")
        seq = paddle.static.data("seq", [None, 1], "int64", lod_level=1)
    with pytest.raises(Unimplemented, match=r"DataFeeder: variable 'seq' has lod_level 1"):
        base.DataFeeder([seq], paddle.CPUPlace(), main)
    with pytest.raises(NotFound):
        base.DataFeeder(["nope"], paddle.CPUPlace(), main)
    with pytest.raises(InvalidArgument, match=r"feed_list should contain Variables or their names, got int 3"):
        base.DataFeeder([3], paddle.CPUPlace(), main)
    feeder = base.DataFeeder([x], paddle.CPUPlace(), main)
    with pytest.raises(InvalidArgument, match=r"the number of fields in data \(2\) does not match "
                                              r"len\(feed_list\) \(1\)"):
        feeder.feed([([1, 2, 3], [4])])
    with pytest.raises(InvalidArgument, match=r"reshape error for 'x'.*\[-1, 3\], but receive \[2, 1, 4\]"):
        feeder.feed([([[1, 2, 3, 4]],), ([[5, 6, 7, 8]],)])
