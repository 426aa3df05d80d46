"""Layering: no module of refimpl or cuda_backend imports a layer above its own.

Every ``import`` and ``from ... import`` is read with ``ast`` (at module level
and inside functions; relative imports resolved; ``from pkg import mod``
counts as importing ``pkg.mod``) and each module is mapped to its layer: the
first package under ``refimpl`` (``refimpl.core``, ``refimpl.ops`` ...), the
``refimpl`` package itself (``import refimpl as paddle``), or
``cuda_backend``. The order the tree keeps, lowest first (a layer may import
its own and lower ranks only):

0. ``core``        (imports only ``refimpl.core``)
1. ``flags``
2. ``ops``         (imports only ``core``, ``flags`` and ``ops``)
3. ``framework``
4. ``executor``, ``io``, ``cuda_backend`` (``cuda_backend`` imports only
   ``core``, ``flags``, ``ops``, itself and ``refimpl.executor.garbage_collector``,
   the collector it extends; the executor loads it lazily, inside functions)
5. ``static``, ``tensor``, ``nn``, ``optimizer``, ``incubate``, ``utils``, ``regularizer``,
   ``hapi``, ``base`` (the user API; they import one another; ``base`` only re-exports)
6. ``refimpl``     (the package: ``import refimpl as paddle``)
7. ``distributed``, ``viz``
8. ``demo``, ``schedule_cli``, ``cli``, ``compat`` (the ``import paddle`` hook)

:data:`KNOWN_UPWARD` lists the imports that still break this order; each
must still exist (remove it from the list once the import is gone).
"""
import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("refimpl", "cuda_backend")

RANK = {"core": 0, "flags": 1, "ops": 2, "framework": 3,
        "executor": 4, "io": 4, "cuda_backend": 4,
        "static": 5, "tensor": 5, "nn": 5, "optimizer": 5, "incubate": 5, "utils": 5, "regularizer": 5,
        "hapi": 5, "base": 5, "pir_utils": 5,
        "refimpl": 6, "distributed": 7, "viz": 7, "demo": 8, "schedule_cli": 8, "cli": 8, "compat": 8}

# (importing module, imported layer) pairs that break the order today.
KNOWN_UPWARD = {
    # CompiledProgram runs its places as in-process ranks with data-parallel passes.
    ("refimpl.static.compiled_program", "distributed"),
    # ``import paddle`` makes paddle.distributed (and its fleet) reachable, as Paddle's __init__ does: the
    # package imports it last (a plain import, so that this checker sees it; it reads no importlib calls).
    ("refimpl", "distributed"),
}

# exactly what the two bottom layers (and the CUDA backend) may import
ALLOWED = {
    "core": ("refimpl.core",),
    "ops": ("refimpl.core", "refimpl.flags", "refimpl.ops"),
    "cuda_backend": ("refimpl.core", "refimpl.flags", "refimpl.ops", "cuda_backend",
                     "refimpl.executor.garbage_collector"),
}


# ---- the checker ---------------------------------------------------------------------------
def all_modules(root=ROOT):
    """{dotted module name: (path, is_package)} for every .py file of PACKAGES."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def imports_of(module, source, is_package, known_modules):
    """Sorted, distinct (line, imported module) of every refimpl / cuda_backend import in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((node.lineno, sub if sub in known_modules else target))
    return sorted({(line, t) for line, t in found if t.split(".")[0] in PACKAGES})


def layer_of(module):
    parts = module.split(".")
    if parts[0] == "cuda_backend":
        return "cuda_backend"
    return parts[1] if len(parts) > 1 else "refimpl"


def within(target, prefixes):
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def violations(module, source, is_package, known_modules, known_upward=frozenset()):
    """Messages ``module:line imports target (...)`` for every import that breaks the layering."""
    src_layer = layer_of(module)
    out = []
    for line, target in imports_of(module, source, is_package, known_modules):
        dst_layer = layer_of(target)
        allowed = ALLOWED.get(src_layer)
        if allowed is not None and not within(target, allowed):
            out.append(f"{module}:{line} imports {target} ({src_layer} may import only {', '.join(allowed)})")
        elif RANK[dst_layer] > RANK[src_layer] and (module, dst_layer) not in known_upward:
            out.append(f"{module}:{line} imports {target} ({src_layer} is below {dst_layer})")
    return out


# ---- the tree --------------------------------------------------------------------------------
MODULES = all_modules()


def test_every_layer_has_a_rank():
    assert {layer_of(m) for m in MODULES} <= set(RANK), sorted({layer_of(m) for m in MODULES} - set(RANK))


def test_no_module_imports_a_higher_layer():
    found = []
    for module, (path, is_pkg) in MODULES.items():
        found += violations(module, path.read_text(), is_pkg, MODULES, KNOWN_UPWARD)
    assert not found, "layering violations:\n  " + "\n  ".join(found)


def test_known_upward_imports_still_exist():
    used = set()
    for module, (path, is_pkg) in MODULES.items():
        for _, target in imports_of(module, path.read_text(), is_pkg, MODULES):
            if (module, layer_of(target)) in KNOWN_UPWARD:
                used.add((module, layer_of(target)))
    assert used == KNOWN_UPWARD, f"no longer imported, drop from KNOWN_UPWARD: {sorted(KNOWN_UPWARD - used)}"


@pytest.mark.parametrize("pkg", ["refimpl.core", "refimpl.ops"])
def test_importing_a_bottom_layer_loads_nothing_above_it(pkg):
    """A fresh interpreter with a bare ``refimpl`` package (its ``__init__`` imports everything)."""
    code = textwrap.dedent(f"""
        import importlib, sys, types
        pkg = types.ModuleType("refimpl"); pkg.__path__ = [{str(ROOT / "refimpl")!r}]
        sys.modules["refimpl"] = pkg
        importlib.import_module({pkg!r})
        print(" ".join(sorted(m for m in sys.modules if m.startswith(("refimpl.", "cuda_backend")))))
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    loaded = res.stdout.split()
    allowed = ("refimpl.core", "refimpl.flags") + (("refimpl.ops",) if pkg == "refimpl.ops" else ())
    assert pkg in loaded
    assert [m for m in loaded if not within(m, allowed)] == []


# ---- the checker checks ------------------------------------------------------------------------
KNOWN = {"refimpl.ops", "refimpl.ops.registry", "refimpl.core", "refimpl.core.errors", "refimpl.executor",
         "refimpl.executor.backend", "refimpl.distributed", "refimpl.framework", "refimpl.flags"}


def test_checker_catches_imports_at_module_level_and_inside_functions():
    src = textwrap.dedent("""\
        import numpy as np
        from refimpl.core.errors import NotFound
        from . import registry
        import refimpl.executor.backend

        def kernel():
            from ..distributed import ReduceOp
            return ReduceOp
    """)
    found = violations("refimpl.ops.fake_ops", src, False, KNOWN)
    assert len(found) == 2, found
    assert found[0].startswith("refimpl.ops.fake_ops:4 imports refimpl.executor.backend")
    assert found[1].startswith("refimpl.ops.fake_ops:7 imports refimpl.distributed")


def test_checker_resolves_relative_and_package_imports():
    src = "from . import registry\nfrom .. import flags, core\nfrom ..core import errors\n"
    assert imports_of("refimpl.ops.fake_ops", src, False, KNOWN) == [
        (1, "refimpl.ops.registry"), (2, "refimpl.core"), (2, "refimpl.flags"), (3, "refimpl.core.errors")]
    assert imports_of("refimpl.ops", "from .registry import OPS\n", True, KNOWN) == [(1, "refimpl.ops.registry")]


def test_checker_orders_layers_above_the_bottom_two():
    assert violations("refimpl.framework.fake", "from refimpl.static import data\n", False, KNOWN) == [
        "refimpl.framework.fake:1 imports refimpl.static (framework is below static)"]
    assert violations("refimpl.static.fake", "from refimpl.framework import Program\n", False, KNOWN) == []
    assert violations("refimpl.core.fake", "from refimpl import flags\n", False, KNOWN) == [
        "refimpl.core.fake:1 imports refimpl.flags (core may import only refimpl.core)"]
    upward = "from refimpl.distributed import x\n"
    assert violations("refimpl.static.fake", upward, False, KNOWN)
    assert violations("refimpl.static.fake", upward, False, KNOWN, {("refimpl.static.fake", "distributed")}) == []


# ---- the hooks that let kernels stay below the layers that fill them ----------------------------
def test_device_transfers_dispatch_per_backend_and_reject_unknown_ones():
    import numpy as np

    from refimpl.core import device
    from refimpl.core.errors import InvalidArgument

    class Boxed:
        def __init__(self, a):
            self.a = a

    a = np.arange(3.0)
    assert device.to_device(a, "numpy") is a
    with pytest.raises(InvalidArgument, match="'no_such_backend'"):
        device.to_device(a, "no_such_backend")
    device.register_converters("boxed_test", Boxed, lambda b: b.a * 2, lambda v: isinstance(v, Boxed))
    try:
        boxed = device.to_device(a, "boxed_test")
        assert isinstance(boxed, Boxed)
        np.testing.assert_array_equal(device.to_host(boxed), [0.0, 2.0, 4.0])
        host = device.to_host(a)
        assert host is not a and np.array_equal(host, a)
    finally:
        device._CONVERTERS.pop("boxed_test")


def test_rank_holder_is_filled_by_distributed(monkeypatch):
    import threading

    import refimpl.distributed as dist
    from refimpl.core import comm_context, reduce_op
    from refimpl.core.errors import PreconditionNotMet
    from refimpl.distributed.communication import context

    assert dist.ReduceOp is reduce_op.ReduceOp
    assert context.current is comm_context.current
    assert isinstance(comm_context.current(), context.RankContext)   # the single-rank default
    mine = object()
    seen = []
    t = threading.Thread(target=lambda: seen.append((comm_context.set_current(mine), comm_context.current())[1]))
    t.start()
    t.join()
    assert seen == [mine] and comm_context.current() is not mine
    monkeypatch.setattr(comm_context, "_default_factory", None)
    with pytest.raises(PreconditionNotMet, match="no rank context"):
        comm_context.current()


def test_eof_exception_is_one_class_everywhere():
    import refimpl
    from refimpl.core.errors import EOFException
    from refimpl.io import blocking_queue

    assert refimpl.core.EOFException is EOFException is refimpl.io.EOFException is blocking_queue.EOFException


def test_ps_ops_find_the_runtime_through_the_rank_context():
    import refimpl  # noqa: F401  (registers the ops, installs the single-rank context)
    from refimpl.core import comm_context
    from refimpl.core.errors import PreconditionNotMet
    from refimpl.distributed.ps.runtime import PSRuntime
    from refimpl.ops.registry import get_op_def

    ps_recv = get_op_def("ps_recv").kernel("numpy")[0]
    with pytest.raises(PreconditionNotMet, match="without a PS runtime"):
        ps_recv(param_names=[])

    class Ctx:
        rank, comms, trace = 0, {}, None
        ps_runtime = PSRuntime.__new__(PSRuntime)   # a runtime whose worker was never initialised
        ps_runtime.client = None

    with comm_context.rank_guard(Ctx()):
        with pytest.raises(PreconditionNotMet, match=r"ps_recv: call fleet.init_worker\(\)"):
            ps_recv(param_names=[])
