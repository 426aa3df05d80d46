"""Run an unmodified Paddle script on refimpl: ``import paddle`` means ``import refimpl``.

``python -m refimpl.compat script.py [args]`` runs ``script.py`` as ``__main__``
(``sys.argv`` = ``[script.py, args...]``, the script's folder first on
``sys.path``, as ``python script.py`` does) with an import hook installed;
from Python, ``refimpl.compat.install()`` installs the same hook.

The hook is an ``importlib`` meta-path finder (PEP 451): ``paddle`` and every
``paddle.<sub>`` resolve to the already-imported ``refimpl`` / ``refimpl.<sub>``
module object itself, so ``paddle.static.Program is refimpl.static.Program``
and no module is loaded twice. ``paddle.fluid`` (Paddle 2.x) resolves to
``refimpl.base``. A ``paddle`` submodule that refimpl does not have raises
:class:`UnimplementedModule` (an ``Unimplemented`` and a
``ModuleNotFoundError``) naming the Paddle module; a missing name inside a
namespace raises ``UnimplementedName`` (an ``Unimplemented`` and an
``AttributeError``) from that namespace's ``__getattr__``, and ``from paddle.x
import y`` of such a name gets a note saying so on its ImportError.
"""
import importlib
import importlib.abc
import importlib.util
import os
import re
import runpy
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import List, Optional, Sequence

from refimpl.core.errors import Unimplemented

__all__ = ["PaddleAliasFinder", "UnimplementedModule", "install", "uninstall", "installed", "target_of", "main"]

# Paddle module prefixes resolved to another refimpl module than refimpl.<same path>.
RENAMED = {"paddle.fluid": "refimpl.base"}


class UnimplementedModule(Unimplemented, ModuleNotFoundError):
    """A ``paddle.<sub>`` module refimpl does not implement (``except ImportError`` still catches it)."""


def target_of(fullname: str) -> str:
    """The refimpl module name a Paddle module name stands for (``paddle.nn.functional``: ``refimpl.nn.functional``)."""
    for prefix, target in RENAMED.items():
        if fullname == prefix or fullname.startswith(prefix + "."):
            return target + fullname[len(prefix):]
    return "refimpl" + fullname[len("paddle"):]


def _resolve(fullname: str) -> ModuleType:
    """Import the refimpl module behind ``fullname``; a module bound as an attribute also counts."""
    target = target_of(fullname)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        if e.name is None or not (target == e.name or target.startswith(e.name + ".")):
            raise   # a module refimpl itself imports is missing: not this alias's business
    parent, _, child = target.rpartition(".")
    found = vars(sys.modules[parent]).get(child) if parent in sys.modules else None
    if isinstance(found, ModuleType):    # paddle.base.unique_name is refimpl.framework.unique_name
        return found
    err = UnimplementedModule(f"{fullname} is not implemented by refimpl (no module or name {target})")
    err.name = target   # not `fullname`: `from paddle.x import y` would then swallow it (importlib._handle_fromlist)
    raise err


class _AliasLoader(importlib.abc.Loader):
    """Hands the import system the existing refimpl module object; nothing is executed again.

    ``importlib`` sets ``__spec__`` of the module ``create_module`` returns to the alias's spec
    (``paddle.static``); ``exec_module`` puts the refimpl module's own spec back, so that
    ``importlib.reload(refimpl.static)`` still finds ``refimpl.static``.
    """

    def __init__(self, fullname: str) -> None:
        self.fullname = fullname
        self.original_spec: Optional[ModuleSpec] = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = _resolve(self.fullname)
        self.original_spec = _own_spec(module)
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The refimpl module is already executed: only its own ``__spec__`` is restored."""
        module.__spec__ = self.original_spec


def _own_spec(module: ModuleType) -> Optional[ModuleSpec]:
    """The module's spec from before any alias import replaced it."""
    spec = getattr(module, "__spec__", None)
    loader = getattr(spec, "loader", None)
    return loader.original_spec if isinstance(loader, _AliasLoader) else spec


class PaddleAliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``paddle`` and ``paddle.*`` as aliases of ``refimpl`` and ``refimpl.*``."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[ModuleSpec]:
        if fullname != "paddle" and not fullname.startswith("paddle."):
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(fullname))


def installed() -> bool:
    """Whether the hook is on ``sys.meta_path``."""
    return any(isinstance(f, PaddleAliasFinder) for f in sys.meta_path)


def install() -> None:
    """Put the hook first on ``sys.meta_path`` (once), so that ``import paddle`` gives refimpl.

    A real Paddle imported earlier in this process is an error: its modules
    would stay in ``sys.modules`` under the names the hook is meant to answer.
    """
    if installed():
        return
    real = sys.modules.get("paddle")
    if real is not None and not getattr(real, "__name__", "").startswith("refimpl"):
        where = getattr(real, "__file__", real)
        raise Unimplemented(f"refimpl.compat.install(): a real paddle is already imported ({where}); "
                            f"install the hook before anything imports paddle")
    sys.meta_path.insert(0, PaddleAliasFinder())


def uninstall() -> None:
    """Remove the hook and the ``paddle`` aliases it put in ``sys.modules`` (the refimpl modules stay)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, PaddleAliasFinder)]
    for name in [n for n in sys.modules if n == "paddle" or n.startswith("paddle.")]:
        module = sys.modules[name]
        if getattr(module, "__name__", "").startswith("refimpl"):
            module.__spec__ = _own_spec(module)   # (exec_module did this already unless an import failed)
            del sys.modules[name]


def main(argv: Optional[List[str]] = None) -> None:
    """``python -m refimpl.compat script.py [args]``: run ``script.py`` as ``__main__`` on refimpl."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m refimpl.compat script.py [args ...]\n"
              "Runs a Paddle script with `import paddle` mapped to refimpl.")
        raise SystemExit(0 if argv else 2)
    script = argv[0]
    if not os.path.isfile(script):
        print(f"refimpl.compat: no such script: {script}", file=sys.stderr)
        raise SystemExit(2)
    install()
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(script))   # where `python script.py` looks first
    try:
        runpy.run_path(script, run_name="__main__")
    except ImportError as e:
        _explain(e)
        raise


def _explain(err: ImportError) -> None:
    """Note on ``from paddle.x import y``'s ImportError that ``paddle.x.y`` is a Paddle name refimpl lacks.

    Python turns the namespace's UnimplementedName (an AttributeError) into
    ``cannot import name 'y' from 'refimpl.x'`` and drops its message.
    """
    found = re.match(r"cannot import name '(\w+)' from '(refimpl(?:\.\w+)*)'", str(err))
    if found and hasattr(err, "add_note"):
        name, module = found.groups()
        err.add_note(f"refimpl: paddle{module[len('refimpl'):]}.{name} is not implemented by refimpl")


if __name__ == "__main__":
    from refimpl.compat import main as _main   # the importable module, not this __main__ copy
    _main()
