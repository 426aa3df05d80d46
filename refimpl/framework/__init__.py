"""The static-graph IR: Program, Block, Operator, Variable (Paddle's ``base.framework``).

Also ``paddle.framework``'s names (``python/paddle/framework/__init__.py``):
the places, ``in_dynamic_mode`` / ``enable_static`` / ``in_pir_mode`` and the
flags.
``ParamAttr`` and ``LayerHelper`` live in ``refimpl.static`` (above this
layer); the ``refimpl`` package binds them here once it has imported both.

Differences: refimpl has the static graph only. ``in_dynamic_mode()`` answers
as Paddle does (True until ``enable_static()``), but programs are built the
static way whatever it says, and ``disable_static()`` raises Unimplemented.
"""
import importlib
import importlib.util
import sys
from typing import Any, Callable

from refimpl.core.errors import Unimplemented
from refimpl.core.place import CPUPlace, CUDAPlace
from refimpl.flags import get_flags, set_flags

from . import unique_name
from .block import Block
from .op_role import OpRole
from .operator import Operator
from .program import (Program, default_main_program, default_startup_program, device_guard,
                      name_scope, program_guard, switch_main_program, switch_startup_program)
from .variable import Parameter, Variable
from .io import *  # noqa: F401,F403  (paddle.framework.save / load)
from .grad_mode import *  # noqa: F401,F403  (is_grad_enabled, set_grad_enabled, no_grad)

# Paddle starts in dygraph mode (python/paddle/base/framework.py: global_var._in_eager_mode_).
_dynamic_mode = True


def in_dynamic_mode() -> bool:
    """Paddle's ``paddle.in_dynamic_mode()``: True until ``enable_static()`` is called."""
    return _dynamic_mode


def enable_static() -> None:
    """Paddle's ``paddle.enable_static()``: from now on ``in_dynamic_mode()`` is False."""
    global _dynamic_mode
    _dynamic_mode = False


def in_pir_mode() -> bool:
    """Paddle's ``paddle.framework.in_pir_mode()``: always False, refimpl builds the legacy ProgramDesc IR."""
    return False


def in_dynamic_or_pir_mode() -> bool:
    """Paddle's ``paddle.framework.in_dynamic_or_pir_mode()``."""
    return in_dynamic_mode() or in_pir_mode()


def disable_static(place: Any = None) -> None:
    """Paddle's ``paddle.disable_static()``: dygraph mode, which refimpl does not have."""
    raise Unimplemented("paddle.disable_static(): refimpl implements the static graph only, there is no "
                        "dygraph mode to switch to; keep the script in static mode (paddle.enable_static())")


class UnimplementedName(Unimplemented, AttributeError):
    """A Paddle name refimpl lacks: Unimplemented, and an AttributeError so ``hasattr`` / ``getattr(m, n, d)`` work."""


def namespace_getattr(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the refimpl module ``module`` standing for a Paddle namespace.

    A submodule not imported yet is imported (``paddle.static.nn``); any other
    name is one of Paddle's that refimpl lacks: :class:`UnimplementedName`
    naming it as ``paddle.<namespace>.<name>``. Dunder names stay plain
    AttributeErrors.
    """
    def __getattr__(name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        is_package = hasattr(sys.modules[module], "__path__")
        if is_package and importlib.util.find_spec(f"{module}.{name}") is not None:
            return importlib.import_module(f"{module}.{name}")
        paddle_name = "paddle" + module[len("refimpl"):] + "." + name
        raise UnimplementedName(f"{paddle_name} is not implemented by refimpl (no {name!r} in {module})")
    return __getattr__


__getattr__ = namespace_getattr(__name__)
