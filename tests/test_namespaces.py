"""The namespaces Paddle scripts import (``paddle.base``, ``paddle.framework`` ...) and the import hook.

Literals marked "Paddle 3.3.1 printed" were printed by the CPU wheel with
``FLAGS_enable_pir_api=0``; the whole-script comparisons are in
``tests/compat/`` (run by ``tests/test_compat.py``).
"""
import os
import pathlib
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import refimpl
import refimpl.base as base
from refimpl import compat
from refimpl.core.errors import InvalidArgument, Unimplemented

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_python(code: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, *args] if not code else [sys.executable, "-c", code, *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


@pytest.fixture
def hook():
    compat.install()
    yield
    compat.uninstall()


# ---- paddle.base -----------------------------------------------------------------------------
def test_base_names_are_the_objects_of_the_modules_that_implement_them():
    assert base.Program is refimpl.static.Program is base.framework.Program
    assert base.program_guard is refimpl.static.program_guard
    assert base.Executor is refimpl.static.Executor
    assert base.default_main_program is refimpl.static.default_main_program
    assert base.ParamAttr is refimpl.ParamAttr is refimpl.static.ParamAttr
    assert base.unique_name is refimpl.unique_name is refimpl.framework.unique_name
    assert base.core.Scope is base.Scope is refimpl.static.Scope
    assert base.core.CPUPlace is refimpl.CPUPlace and base.core.CUDAPlace is refimpl.CUDAPlace
    assert base.global_scope is refimpl.static.global_scope
    assert base.core.EOFException is refimpl.io.EOFException
    assert base.layers.math_op_patch is refimpl.tensor.patch
    assert base.framework.in_dygraph_mode is refimpl.in_dynamic_mode
    assert base.framework.in_pir_mode is refimpl.framework.in_pir_mode and base.framework.in_pir_mode() is False


def test_base_io_dataloader_is_paddle_io_dataloader_and_from_generator_feeds_a_program():
    assert base.io.DataLoader is refimpl.io.DataLoader
    main, startup = refimpl.static.Program(), refimpl.static.Program()
    with refimpl.static.program_guard(main, startup):
        x = refimpl.static.data("x", [None, 2], "float32")
        y = x * 2.0
        loader = base.io.DataLoader.from_generator(feed_list=[x], capacity=2, iterable=True)
    loader.set_batch_generator(lambda: iter([[np.full((1, 2), 3, "float32")]]), places=[refimpl.CPUPlace()])
    exe = refimpl.static.Executor(refimpl.CPUPlace())
    got = [exe.run(main, feed=data, fetch_list=[y])[0].tolist() for data in loader()]
    assert got == [[[6.0, 6.0]]]


def test_vartype_compares_equal_to_var_dtype_and_type():
    main = refimpl.static.Program()
    with refimpl.static.program_guard(main, refimpl.static.Program()):
        x = refimpl.static.data("x", [2], "float32")
        i = refimpl.static.data("i", [2], "int64")
    vt = base.core.VarDesc.VarType
    assert x.dtype == vt.FP32 and i.dtype == vt.INT64 and x.dtype != vt.FP64
    assert x.type == vt.LOD_TENSOR == vt.DENSE_TENSOR


def test_get_eager_deletion_vars_gives_what_paddle_gives():
    main = refimpl.static.Program()
    with refimpl.static.program_guard(main, refimpl.static.Program()), refimpl.unique_name.guard():
        x = refimpl.static.data("x", [2, 3], "float32")
        refimpl.mean(refimpl.nn.functional.relu(x))
    # Paddle 3.3.1 printed, for core._get_eager_deletion_vars(main.desc, []) and (..., ['x']):
    assert base.core._get_eager_deletion_vars(main, []) == [[["x"], ["mean_0.tmp_0", "relu_0.tmp_0"]]]
    assert base.core._get_eager_deletion_vars(main, ["x"]) == [[[], ["mean_0.tmp_0", "relu_0.tmp_0"]]]
    with pytest.raises(InvalidArgument, match="_get_eager_deletion_vars.*got list"):
        base.core._get_eager_deletion_vars([], [])


def test_op_proto_and_checker_maker_and_cuda_build_answer_as_paddle(monkeypatch):
    maker = base.core.op_proto_and_checker_maker
    # Paddle 3.3.1 printed: op_role op_role_var op_device op_namescope op_callstack with_quant_attr
    assert [maker.kOpRoleAttrName(), maker.kOpRoleVarAttrName(), maker.kOpDeviceAttrName(),
            maker.kOpNameScopeAttrName(), maker.kOpCreationCallstackAttrName(), maker.kOpWithQuantAttrName()] == [
        "op_role", "op_role_var", "op_device", "op_namescope", "op_callstack", "with_quant_attr"]
    # Paddle 3.3.1 printed, int() of each member: Backward 1, Dist 8, Forward 0, LRSched 16, Loss 256, Optimize 2, RPC 4
    assert {n: int(getattr(maker.OpRole, n)) for n in ("Backward", "Dist", "Forward", "LRSched", "Loss", "Optimize",
                                                       "RPC")} == {"Backward": 1, "Dist": 8, "Forward": 0,
                                                                   "LRSched": 16, "Loss": 256, "Optimize": 2, "RPC": 4}
    monkeypatch.setitem(refimpl.executor.backend._default, "backend", "numpy")
    assert base.core.is_compiled_with_cuda() is False
    assert refimpl.is_compiled_with_cuda is base.core.is_compiled_with_cuda
    monkeypatch.setitem(refimpl.executor.backend._default, "backend", "cuda")
    assert base.core.is_compiled_with_cuda() is True


# ---- paddle.framework and the top level --------------------------------------------------------
def test_framework_names():
    fw = refimpl.framework
    assert fw.CPUPlace is refimpl.CPUPlace and fw.CUDAPlace is refimpl.CUDAPlace
    assert fw.ParamAttr is refimpl.ParamAttr and fw.LayerHelper is refimpl.static.layer_helper.LayerHelper
    assert fw.in_dynamic_mode is refimpl.in_dynamic_mode
    assert fw.get_flags is refimpl.get_flags and fw.Program is refimpl.static.Program


def test_create_parameter_is_statics():
    assert refimpl.create_parameter is refimpl.static.create_parameter
    main, startup = refimpl.static.Program(), refimpl.static.Program()
    with refimpl.static.program_guard(main, startup):
        w = refimpl.create_parameter([2, 3], "float32", attr=refimpl.ParamAttr(name="w_named"))
    assert w.name == "w_named" and list(w.shape) == [2, 3]
    assert [p.name for p in main.all_parameters()] == ["w_named"]


def test_in_dynamic_mode_answers_as_paddle_and_import_makes_fleet_reachable():
    # Paddle 3.3.1 printed "True" then "False" for
    # print(paddle.in_dynamic_mode()); paddle.enable_static(); print(paddle.in_dynamic_mode())
    res = run_python("import refimpl as paddle\n"
                     "print(paddle.in_dynamic_mode()); paddle.enable_static(); print(paddle.in_dynamic_mode())\n"
                     "print(paddle.distributed.fleet.DistributedStrategy.__name__)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "False", "DistributedStrategy"]


def test_disable_static_switches_and_the_first_build_says_there_is_no_dygraph():
    # Paddle 3.3.1 printed "True" for paddle.disable_static(); print(paddle.in_dynamic_mode()); refimpl has no
    # dygraph, so the next call that would run eagerly raises (a subprocess: the mode is process-wide)
    res = run_python("import refimpl as paddle\n"
                     "paddle.enable_static(); paddle.disable_static(); print(paddle.in_dynamic_mode())\n"
                     "paddle.static.data('x', [2], 'float32')")
    assert res.stdout.split() == ["True"]
    assert "Unimplemented" in res.stderr and "paddle.static.data: the mode is dynamic" in res.stderr
    assert "call paddle.enable_static() first" in res.stderr


def test_input_spec():
    spec = refimpl.static.InputSpec([None, 784], "float32", "x")
    # Paddle 3.3.1 printed:
    assert repr(spec) == "InputSpec(shape=(-1, 784), dtype=paddle.float32, name=x, stop_gradient=False)"
    assert spec.batch(4) is spec and spec.shape == (4, -1, 784)
    assert spec.unbatch().shape == (-1, 784)
    with pytest.raises(InvalidArgument, match="Length of batch_size: \\[1, 2\\] shall be 1, but received 2."):
        spec.batch([1, 2])
    with pytest.raises(InvalidArgument, match="should be one of \\(tuple, list\\), but received str"):
        refimpl.static.InputSpec("abc")


# ---- names refimpl lacks -----------------------------------------------------------------------
@pytest.mark.parametrize("module, paddle_name", [
    (refimpl, "paddle.no_such_api"), (refimpl.static, "paddle.static.no_such_api"),
    (refimpl.framework, "paddle.framework.no_such_api"), (base, "paddle.base.no_such_api"),
    (base.core, "paddle.base.core.no_such_api"), (base.layers, "paddle.base.layers.no_such_api"),
    (refimpl.io, "paddle.io.no_such_api"), (refimpl.incubate.distributed, "paddle.incubate.distributed.no_such_api"),
    (refimpl.nn, "paddle.nn.no_such_api"), (refimpl.nn.functional, "paddle.nn.functional.no_such_api"),
    (refimpl.optimizer, "paddle.optimizer.no_such_api"), (refimpl.static.nn, "paddle.static.nn.no_such_api"),
    (refimpl.distributed.fleet, "paddle.distributed.fleet.no_such_api"),
])
def test_a_missing_paddle_name_raises_unimplemented_naming_it(module, paddle_name):
    with pytest.raises(Unimplemented, match=f"^\\(Unimplemented\\) {paddle_name} is not implemented by refimpl"):
        getattr(module, "no_such_api")


def test_a_missing_name_is_also_an_attribute_error_so_probing_works():
    assert not hasattr(refimpl.static, "no_such_api") and getattr(refimpl.nn, "NoSuchLayer", 3) == 3
    assert not hasattr(refimpl, "__wrapped__")   # dunders: plain AttributeErrors
    with pytest.raises(ImportError, match="cannot import name 'NoSuchLayer'"):
        from refimpl.static import NoSuchLayer  # noqa: F401
    res = run_python("import refimpl, sys\nassert 'refimpl.framework.serialize' not in sys.modules\n"
                     "print(refimpl.framework.serialize.__name__)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "refimpl.framework.serialize"


# ---- the import hook -----------------------------------------------------------------------------
def test_hook_maps_paddle_modules_to_the_refimpl_objects(hook):
    import paddle
    import paddle.nn.functional as F
    from paddle.static import InputSpec
    from paddle.base import core, unique_name
    import paddle.fluid as fluid
    import paddle.distributed.fleet as fleet
    assert paddle is refimpl and F is refimpl.nn.functional and InputSpec is refimpl.static.InputSpec
    assert core is base.core and unique_name is refimpl.framework.unique_name and fluid is base
    assert fleet is sys.modules["refimpl.distributed.fleet"]
    assert compat.target_of("paddle.fluid.layers") == "refimpl.base.layers"


def test_hook_names_a_missing_paddle_module_and_uninstalls(hook):
    with pytest.raises(compat.UnimplementedModule, match="paddle.no_such_module is not implemented by refimpl"):
        import paddle.no_such_module  # noqa: F401
    with pytest.raises(ImportError) as info:     # scripts that probe with `except ImportError` keep working
        import paddle.static.no_such_module  # noqa: F401
    assert isinstance(info.value, Unimplemented) and "paddle.static.no_such_module is not impl" in str(info.value)
    compat.uninstall()
    assert not compat.installed() and "paddle" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        import paddle  # noqa: F401


def test_install_refuses_when_a_real_paddle_is_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "paddle", types.ModuleType("paddle"))
    with pytest.raises(Unimplemented, match="a real paddle is already imported"):
        compat.install()
    assert not compat.installed()


def test_compat_notes_on_a_from_import_that_the_paddle_name_is_not_implemented(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import paddle\nfrom paddle.static.nn import no_such_layer\n")
    res = run_python("", "-m", "refimpl.compat", str(script))
    assert res.returncode == 1
    assert "refimpl: paddle.static.nn.no_such_layer is not implemented by refimpl" in res.stderr


def test_python_m_refimpl_compat_runs_a_script_as_main(tmp_path):
    (tmp_path / "helper_mod.py").write_text("VALUE = 7\n")
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""\
        import sys
        import paddle
        from paddle.base import core
        import helper_mod                      # found next to the script, as with `python s.py`
        print(__name__, paddle.__name__, sys.argv[1:], helper_mod.VALUE)
    """))
    res = run_python("", "-m", "refimpl.compat", str(script), "--lr", "0.1", cwd=str(ROOT))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "__main__ refimpl ['--lr', '0.1'] 7"
    missing = run_python("", "-m", "refimpl.compat", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and "no such script" in missing.stderr


@pytest.mark.parametrize("module", ["nn", "nn.functional", "nn.initializer", "optimizer", "optimizer.lr", "tensor",
                                    "utils", "regularizer", "static.nn", "static.io", "incubate.optimizer",
                                    "distributed", "distributed.fleet"])
def test_each_namespace_defines_its_own_getattr(module):
    """The line is in the module's own source (nothing else writes it into the module's dict)."""
    import ast
    import importlib
    mod = importlib.import_module(f"refimpl.{module}")
    tree = ast.parse(open(mod.__file__, encoding="utf-8").read())
    assigned = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                if isinstance(t, ast.Name)]
    assert "__getattr__" in assigned
    with pytest.raises(AttributeError, match=f"paddle.{module}.no_such_name is not implemented by refimpl"):
        getattr(mod, "no_such_name")
