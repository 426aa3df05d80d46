"""cuda_backend.compile_check: kernels recorded under the simulator compile with the real toolchain.

Runs in the default (non-simulator) pytest process: recording happens in a
simulator subprocess, compiling here, with NVVM and nvJitLink from the
``numba-cuda[cu13]`` wheels — no GPU or driver. The full set (every launch of
the conformance suite) is compiled by ``.ci/run``.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

numba = pytest.importorskip("numba")  # the test extra installs it; without it there is no CUDA backend
from numba import cuda  # noqa: E402

from cuda_backend import compile_check  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@cuda.jit
def not_for_the_gpu(x, out):
    """The simulator runs this (it is Python); a GPU kernel cannot allocate a NumPy array."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        t = np.zeros(3)
        out[i] = t[0] + x[i]


@cuda.jit
def fine(x, out, shape, a):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = x[i % shape[0]] * a


def test_described_types_are_the_types_numba_gives_the_values():
    values = [np.zeros(3, np.float32), np.zeros((2, 3), np.int64), np.zeros((2, 3), np.float64).T,
              np.zeros((4, 4), np.float32)[:, ::2], np.float32(1.5), np.int32(2), np.bool_(True), True, 7,
              2.5, (1, 2, 3), (np.float32(1), 2)]
    for v in values:
        assert compile_check.numba_type(compile_check.describe(v)) == numba.typeof(v), v


def test_a_kernel_the_simulator_runs_but_nvvm_rejects_is_named():
    me = __name__
    launches = [[["global", me, "fine"], [["array", "<f4", 1, "C"], ["array", "<f4", 1, "C"],
                                           ["tuple", [["int"]]], ["scalar", "<f4"]]],
                [["global", me, "not_for_the_gpu"], [["array", "<f4", 1, "C"], ["array", "<f8", 1, "C"]]]]
    with pytest.raises(compile_check.CompileError) as err:
        compile_check.compile_all(launches, "sm_90", cubin=False)
    text = str(err.value)
    assert "1 of 2" in text and f"{me}:not_for_the_gpu" in text and "fine" not in text.replace(me, "")


def test_ptx_and_cubin_for_the_target_architecture():
    rec, descs = ["functor", "cuda_backend.ops_math", "f_add", "<f4", 1], \
        [["array", "<f4", 1, "C"]] * 3 + [["tuple", [["int"]] * 6]] * 3 + [["scalar", "<f4"]] * 2
    for arch in ("sm_80", "sm_90"):
        ptx, size = compile_check.compile_one(rec, descs, arch)
        assert f".target {arch}" in ptx and size > 1000


def test_recorded_conformance_launches_compile(tmp_path):
    """Record a program's launches under the simulator (another process), compile them here."""
    out = tmp_path / "launches.json"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", REFIMPL_RECORD_LAUNCHES=str(out))
    test = "tests/conformance/test_oracle_programs.py::test_same_numbers_and_gc_on_both_backends[02_residual_adam.json]"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    launches = json.loads(out.read_text())
    kernels = {compile_check.name_of(rec) for rec, _ in launches}
    assert any("_bmm" in k for k in kernels) and any("adam" in k for k in kernels), kernels
    done = compile_check.compile_all(launches, "sm_90")
    assert set(done) == kernels


def test_cli_reports_and_fails_on_an_empty_record(tmp_path):
    empty = tmp_path / "none.json"
    empty.write_text("[]")
    r = subprocess.run([sys.executable, "-m", "cuda_backend.compile_check", str(empty)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "records no launches" in r.stderr


def test_kernels_round_the_product_and_the_sum_separately_as_numpy():
    """x * a + b must not become one FMA (NVVM's default contracts it): device.py turns that off."""
    rec = ["functor", "cuda_backend.ops_math", "f_scale_after", "<f4", 0]
    ptx, _ = compile_check.compile_one(rec, [["array", "<f4", 1, "C"]] * 2 + [["scalar", "<f4"]] * 2, "sm_90",
                                       cubin=False)
    assert "mul.rn.f32" in ptx and "add.rn.f32" in ptx and "fma.rn.f32" not in ptx


# ---- a launches file is data: only cuda_backend modules are imported ---------------------------
@pytest.mark.parametrize("entry, culprit", [
    ([["global", "os", "system"], []], "names module 'os'"),
    ([["global", "refimpl.x", "k"], []], "names module 'refimpl.x'"),
    ([["global", "/tmp/evil", "k"], []], "names module '/tmp/evil'"),
    ([["global", "cuda_backend.ops_math/../../evil", "k"], []], "names module 'cuda_backend.ops_math/../../evil'"),
    ([["global", "cuda_backend.__main__", "k"], []], "names module 'cuda_backend.__main__'"),
    ([["factory", "refimpl_launch_probe", "k", "<f4"], []], "names module 'refimpl_launch_probe'"),
    ([["global", "cuda_backend.ops_math", "__class__.__init__"], []], "'__class__.__init__'"),
    ([["exec", "cuda_backend.ops_math", "k"], []], "unknown recipe"),
    ("not a launch", "is not [recipe, argument types]"),
])
def test_launches_naming_other_modules_are_refused_before_any_import(tmp_path, monkeypatch, entry, culprit):
    """The file's second entry is bad; a module that records its import sits on sys.path."""
    import sys as _sys
    from refimpl.core.errors import InvalidArgument
    probe = tmp_path / "refimpl_launch_probe.py"
    probe.write_text("import os\nos.environ['REFIMPL_LAUNCH_PROBE_IMPORTED'] = '1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("REFIMPL_LAUNCH_PROBE_IMPORTED", raising=False)
    good = [["functor", "cuda_backend.ops_math", "f_add", "<f4", 1], [["array", "<f4", 1, "C"]]]
    path = tmp_path / "launches.json"
    path.write_text(json.dumps([good, entry]))
    with pytest.raises(InvalidArgument) as err:
        compile_check.load_launches(str(path))
    assert f"entry 1 of {path}" in str(err.value) and culprit in str(err.value), str(err.value)
    assert "REFIMPL_LAUNCH_PROBE_IMPORTED" not in os.environ and "refimpl_launch_probe" not in _sys.modules


def test_cli_refuses_a_launches_file_naming_another_module(tmp_path):
    path = tmp_path / "launches.json"
    path.write_text(json.dumps([[["global", "os", "system"], [["int"]]]]))
    r = subprocess.run([sys.executable, "-m", "cuda_backend.compile_check", str(path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and f"entry 0 of {path} names module 'os'" in r.stderr, r.stderr
