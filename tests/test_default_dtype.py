"""``paddle.set_default_dtype`` / ``paddle.get_default_dtype`` and every API that reads the default.

refimpl/framework/dtype_default.py. The expected values are what Paddle 3.3.1
printed (CPU wheel, ``FLAGS_enable_pir_api=0``, ``paddle.enable_static()``;
the creation functions printed the same dtypes in dygraph), pasted as
literals; the run compares with NumPy. The default is process-wide, so every
test goes through the ``default_dtype`` fixture, which restores "float32".
"""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.framework import unique_name

nn = paddle.nn
ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def default_dtype():
    """Yields ``paddle.set_default_dtype``; the default is "float32" again afterwards."""
    assert paddle.get_default_dtype() == "float32"
    yield paddle.set_default_dtype
    paddle.set_default_dtype("float32")


def programs():
    return paddle.static.Program(), paddle.static.Program()


# ---- set / get --------------------------------------------------------------------------------
def test_the_default_is_float32_at_import_and_one_function_in_both_namespaces():
    # Paddle 3.3.1 printed: initial float32 float32 (paddle.get_default_dtype(), paddle.framework's)
    code = "import refimpl as p; print(p.get_default_dtype(), p.framework.get_default_dtype())"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.stdout.split() == ["float32", "float32"], run.stderr
    assert paddle.framework.get_default_dtype is paddle.get_default_dtype
    assert paddle.framework.set_default_dtype is paddle.set_default_dtype


@pytest.mark.parametrize("value, stored", [
    # Paddle 3.3.1 printed: 'float64' -> 'float64' str None, 'float16' -> 'float16', 'bfloat16' -> 'bfloat16',
    # <class 'numpy.float64'> -> 'float64', <class 'numpy.float16'> -> 'float16', dtype('float64') -> 'float64'
    ("float64", "float64"), ("float16", "float16"), ("bfloat16", "bfloat16"), ("float32", "float32"),
    (np.float64, "float64"), (np.float16, "float16"), (np.float32, "float32"),
    (np.dtype("float64"), "float64"), (paddle.float64, "float64"), (paddle.float16, "float16"),
])
def test_set_default_dtype_takes_paddles_four_floats(default_dtype, value, stored):
    assert default_dtype(value) is None
    got = paddle.get_default_dtype()
    assert got == stored and type(got) is str


@pytest.mark.parametrize("value, words", [
    # Paddle 3.3.1 printed (TypeError): "set_default_dtype only supports [float16, float32, float64, bfloat16]
    # , but received int32" (and so on for each of these values)
    ("int32", "[float16, float32, float64, bfloat16] , but received int32"),
    ("float", "[float16, float32, float64, bfloat16] , but received float"),
    ("double", "[float16, float32, float64, bfloat16] , but received double"),
    ("FLOAT64", "[float16, float32, float64, bfloat16] , but received FLOAT64"),
    ("uint16", "[float16, float32, float64, bfloat16] , but received uint16"),
    (None, "[float16, float32, float64, bfloat16] , but received None"),
    (3, "[float16, float32, float64, bfloat16] , but received 3"),
    (np.dtype("int64"), "[float16, float32, float64, bfloat16] , but received int64"),
    ("complex64", "[float16, float32, float64, bfloat16] , but received complex64"),
    # a type: "set_default_dtype only supports [float16, float32, float64] , but received int32"
    (np.int32, "[float16, float32, float64] , but received int32"),
    (float, "[float16, float32, float64] , but received float"),
    (bool, "[float16, float32, float64] , but received bool"),
])
def test_set_default_dtype_refuses_the_rest_with_paddles_type_error(default_dtype, value, words):
    with pytest.raises(TypeError) as info:
        default_dtype(value)
    assert str(info.value) == "set_default_dtype only supports " + words
    assert isinstance(info.value, InvalidArgument)
    assert paddle.get_default_dtype() == "float32"  # unchanged


# ---- what reads it ----------------------------------------------------------------------------
class _OwnParameter(nn.Layer):
    def __init__(self):
        super().__init__()
        self.w = self.create_parameter([2])


LAYERS = {
    "Linear": lambda: nn.Linear(4, 3).weight,
    "Linear.bias": lambda: nn.Linear(4, 3).bias,
    "Embedding": lambda: nn.Embedding(5, 3).weight,
    "Conv2D": lambda: nn.Conv2D(2, 3, 3).weight,
    "Conv2D.bias": lambda: nn.Conv2D(2, 3, 3).bias,
    "Conv1D": lambda: nn.Conv1D(2, 3, 3).weight,
    "Conv2DTranspose": lambda: nn.Conv2DTranspose(2, 3, 3).weight,
    "LayerNorm": lambda: nn.LayerNorm(4).weight,
    "BatchNorm2D": lambda: nn.BatchNorm2D(4).weight,
    "BatchNorm2D._mean": lambda: nn.BatchNorm2D(4)._mean,
    "BatchNorm1D": lambda: nn.BatchNorm1D(4).weight,
    "GroupNorm": lambda: nn.GroupNorm(2, 4).weight,
    "InstanceNorm2D": lambda: nn.InstanceNorm2D(4).scale,
    "PReLU": lambda: nn.PReLU()._weight,
    "Bilinear": lambda: nn.Bilinear(2, 3, 4).weight,
    "SpectralNorm.weight_u": lambda: nn.SpectralNorm([2, 3]).weight_u,
    "Layer.create_parameter": lambda: _OwnParameter().w,
    "static.data": lambda: paddle.static.data("x", [2, 4]),
    "static.data(float32)": lambda: paddle.static.data("x", [2, 4], "float32"),
    "static.create_parameter(float32)": lambda: paddle.static.create_parameter([2], "float32"),
    "static.nn.fc": lambda: paddle.static.nn.fc(paddle.static.data("xf", [2, 4], "float32"), 3),
    "zeros": lambda: paddle.zeros([2]),
    "ones": lambda: paddle.ones([2]),
    "full(1.5)": lambda: paddle.full([2], 1.5),
    "full(1)": lambda: paddle.full([2], 1),
    "full(True)": lambda: paddle.full([2], True),
    "arange(0.,3.)": lambda: paddle.arange(0.0, 3.0),
    "arange(3)": lambda: paddle.arange(3),
    "eye": lambda: paddle.eye(2),
    "to_tensor(1.5)": lambda: paddle.to_tensor(1.5),
    "to_tensor([1.,2.])": lambda: paddle.to_tensor([1.0, 2.0]),
    "to_tensor([1,2])": lambda: paddle.to_tensor([1, 2]),
    "to_tensor(np.float32)": lambda: paddle.to_tensor(np.ones(2, "float32")),
    "to_tensor(np.float64)": lambda: paddle.to_tensor(np.ones(2, "float64")),
    "full_like(int32)": lambda: paddle.full_like(paddle.static.data("xi", [2], "int32"), 1),
    "int32 * 2.0": lambda: paddle.static.data("xi", [2], "int32") * 2.0,
}

# What Paddle 3.3.1 printed for each (``str(v.dtype)`` without the ``paddle.`` prefix) under each default;
# "error": Paddle raised (a TypeError from ``assign``: no float16 / bfloat16 data there), refimpl raises
# InvalidArgument naming to_tensor and the dtype.
_F32_ALWAYS = {"SpectralNorm.weight_u", "static.data(float32)", "static.create_parameter(float32)",
               "static.nn.fc", "int32 * 2.0"}
_OTHER = {"full(True)": "bool", "arange(3)": "int64", "to_tensor([1,2])": "int64",
          "to_tensor(np.float32)": "float32", "to_tensor(np.float64)": "float64", "full_like(int32)": "int32"}


def _paddle_printed(default):
    want = {k: "float32" if k in _F32_ALWAYS else _OTHER.get(k, default) for k in LAYERS}
    if default == "float16":  # _BatchNormBase keeps float32 under float16 (both parameters and statistics)
        want.update({"BatchNorm2D": "float32", "BatchNorm2D._mean": "float32", "BatchNorm1D": "float32"})
    if default in ("float16", "bfloat16"):
        want.update({"to_tensor(1.5)": "error", "to_tensor([1.,2.])": "error"})
    return want


def _built_dtypes():
    got = {}
    for k, make in LAYERS.items():
        main, startup = programs()
        with paddle.static.program_guard(main, startup), unique_name.guard():
            try:
                v = make()
            except InvalidArgument as exc:
                assert "to_tensor" in str(exc), exc
                got[k] = "error"
                continue
            if k == "static.nn.fc":
                v = main.global_block().all_parameters()[-1]
            got[k] = str(v.dtype)
    return got


@pytest.mark.parametrize("default", ["float32", "float64", "float16", "bfloat16"])
def test_every_reader_builds_the_dtype_paddle_built(default_dtype, default):
    default_dtype(default)
    assert _built_dtypes() == _paddle_printed(default)


def test_layer_dtypes_and_reprs_follow_paddle(default_dtype):
    default_dtype("float64")
    with paddle.static.program_guard(*programs()), unique_name.guard():
        # Paddle 3.3.1 printed: Layer()._dtype float32, Linear._dtype float64, Conv2D._dtype None, and
        # Linear(in_features=3, out_features=2, dtype=float64)
        # Bilinear(in1_features=2, in2_features=3, out_features=4, dtype=float64)
        # PReLU(num_parameters=1, data_format=NCHW, init=0.25, dtype=float32)
        assert nn.Layer()._dtype == "float32"
        assert nn.Linear(2, 2)._dtype == "float64" and nn.Conv2D(2, 3, 3)._dtype is None
        assert repr(nn.Linear(3, 2)) == "Linear(in_features=3, out_features=2, dtype=float64)"
        assert repr(nn.Bilinear(2, 3, 4)) == "Bilinear(in1_features=2, in2_features=3, out_features=4, dtype=float64)"
        assert repr(nn.PReLU()) == "PReLU(num_parameters=1, data_format=NCHW, init=0.25, dtype=float32)"
        # an explicit dtype still wins over the default
        assert str(nn.GroupNorm(2, 4, dtype="float32").weight.dtype) == "float32"


def test_mp_ops_default_dtype_is_get_default_dtype(default_dtype):
    from refimpl.distributed.fleet.layers.mpu import mp_ops
    assert mp_ops.default_dtype() == "float32"
    default_dtype("float64")
    assert mp_ops.default_dtype() == "float64"


def test_a_float64_default_program_runs_in_float64(default_dtype):
    default_dtype("float64")
    main, startup = programs()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [2, 3])
        lin = nn.Linear(3, 2)
        y = lin(x)
        z = paddle.zeros([2])
    # Paddle 3.3.1 printed the startup ops [('uniform_random', 6), ('fill_constant', 6)] (6: FP64), then a
    # float64 y and z from the run
    assert [(op.type, op.attr("dtype")) for op in startup.global_block().ops] == [
        ("uniform_random", 6), ("fill_constant", 6)]
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        xv = np.arange(6, dtype="float64").reshape(2, 3) / 7
        got_y, got_z = exe.run(main, feed={"x": xv}, fetch_list=[y, z])
        w = np.asarray(scope.find_var(lin.weight.name).get_tensor())
        b = np.asarray(scope.find_var(lin.bias.name).get_tensor())
    assert got_y.dtype == np.float64 and got_z.dtype == np.float64 and w.dtype == np.float64
    np.testing.assert_allclose(got_y, xv @ w + b, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(got_z, np.zeros(2))
