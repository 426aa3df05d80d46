"""Type hints on the public API: mypy passes, and every public signature is annotated.

The public API is every public function, method and property (no leading
underscore) of ``refimpl.static``, ``refimpl.framework``, ``refimpl.executor``,
``refimpl.optimizer`` and ``refimpl.distributed``. mypy runs with the
``[tool.mypy]`` settings of ``pyproject.toml`` (``disallow_incomplete_defs``:
a half-annotated signature is an error; annotated bodies are checked against
the annotations they call). The AST walk below checks what mypy does not:
that no public signature was left unannotated.
"""
import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ["static", "framework", "executor", "optimizer", "distributed"]
SELF_NAMES = ("self", "cls")


def _python_files():
    for pkg in PACKAGES:
        for dirpath, _, names in os.walk(os.path.join(ROOT, "refimpl", pkg)):
            for name in sorted(names):
                if name.endswith(".py"):
                    yield os.path.join(dirpath, name)


def _public_functions(tree):
    """(qualified name, def node, is method) of every public function and method of a module."""
    def visit(node, prefix, in_class):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                yield from visit(child, prefix + child.name + ".", True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                dunder = child.name.startswith("__") and child.name.endswith("__")
                if not child.name.startswith("_") or (dunder and child.name == "__init__"):
                    yield prefix + child.name, child, in_class
    yield from visit(tree, "", False)


def _unannotated(node, is_method):
    """The parameters (and ``->``) of a def that have no annotation."""
    args = node.args
    params = args.posonlyargs + args.args + args.kwonlyargs
    missing = [p.arg for i, p in enumerate(params)
               if p.annotation is None and not (is_method and i == 0 and p.arg in SELF_NAMES)]
    missing += ["*" + v.arg for v in (args.vararg, args.kwarg) if v is not None and v.annotation is None]
    if node.returns is None and node.name != "__init__":
        missing.append("->")
    return missing


def test_unannotated_finds_what_is_missing():
    tree = ast.parse("class A:\n    def f(self, x, *a, y: int = 0, **k) -> None: ...\n"
                     "    def _g(self, x): ...\n"
                     "def h(x: int): ...\n"
                     "def i(x: int) -> int: ...\n")
    found = {name: _unannotated(node, m) for name, node, m in _public_functions(tree)}
    assert found == {"A.f": ["x", "*a", "*k"], "h": ["->"], "i": []}


def test_every_public_signature_is_annotated():
    missing = []
    for path in _python_files():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for name, node, is_method in _public_functions(tree):
            gaps = _unannotated(node, is_method)
            if gaps:
                missing.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: {name} {gaps}")
    assert not missing, "public functions without annotations:\n" + "\n".join(missing)


def test_mypy_passes_on_the_public_packages():
    pytest.importorskip("mypy", reason="mypy is in the test extra")
    cache = os.path.join(ROOT, "build", "mypy_cache")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache]
                          + [os.path.join("refimpl", p) for p in PACKAGES],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mypy failed:\n{proc.stdout}\n{proc.stderr}"
