"""The static-graph IR: Program, Block, Operator, Variable (Paddle's ``base.framework``).

Also ``paddle.framework``'s names (``python/paddle/framework/__init__.py``):
the places, the mode switches and the flags.
``ParamAttr`` and ``LayerHelper`` live in ``refimpl.static`` (above this
layer); the ``refimpl`` package binds them here once it has imported both.

The mode (``python/paddle/base/framework.py`` ``in_dygraph_mode`` and
``python/paddle/base/dygraph/base.py`` ``enable_dygraph`` /
``disable_dygraph``): ``in_dynamic_mode()`` answers as Paddle 3.3.1 does --
True at import, False after ``enable_static()``, True again after
``disable_static()``. refimpl has the static graph only, so the answer and
what is built part ways in one case:

- at import, before any switch, ``in_dynamic_mode()`` says True yet every
  API builds static programs as if ``enable_static()`` had been called
  (scripts and tests that never call it keep working);
- after an explicit ``disable_static()`` (until the next
  ``enable_static()``), every call that would run eagerly in Paddle --
  ``static.data``, a ``LayerHelper`` parameter, temporary or op, a tensor
  function or operator, a layer call, ``to_tensor`` -- raises
  Unimplemented naming the API (:func:`check_static_mode`, one
  module-level bool read). The Executor,
  the passes and the optimizer's internals never check: a program built
  before the switch still runs (Paddle 3.3.1 refuses ``Executor.run`` in
  dygraph mode with an AssertionError; refimpl is more lenient there).

``in_pir_mode()`` is always False: refimpl builds the legacy ProgramDesc IR
(``paddle.pir_utils.IrGuard`` raises Unimplemented when entered).
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
from .dtype_default import get_default_dtype, set_default_dtype  # noqa: F401  (paddle.framework's)

# Paddle starts in dygraph mode (python/paddle/base/framework.py: global_var._in_eager_mode_).
_dynamic_mode = True
# True only between an explicit disable_static() and the next enable_static(): the calls that would run
# eagerly then raise (check_static_mode). At import it is False although _dynamic_mode is True.
_dygraph_requested = False

_STATIC_ONLY = "refimpl implements the static graph only; call paddle.enable_static() first"


def in_dynamic_mode() -> bool:
    """Paddle's ``paddle.in_dynamic_mode()``: True at import and after ``disable_static()``, else False."""
    return _dynamic_mode


def enable_static() -> None:
    """Paddle's ``paddle.enable_static()`` (``base.disable_dygraph``): ``in_dynamic_mode()`` is False from now on."""
    global _dynamic_mode, _dygraph_requested
    _dynamic_mode = _dygraph_requested = False


def disable_static(place: Any = None) -> None:
    """Paddle's ``paddle.disable_static(place=None)`` (``base.enable_dygraph``): ``in_dynamic_mode()`` is True.

    refimpl has no dygraph: from now on (until ``enable_static()``) each call
    that would run eagerly raises Unimplemented (:func:`check_static_mode`).
    ``place`` is accepted and ignored, as refimpl runs no eager op anywhere.
    """
    global _dynamic_mode, _dygraph_requested
    _dynamic_mode = _dygraph_requested = True


def check_static_mode(api: str) -> None:
    """Raise Unimplemented naming ``api`` when the script switched to dygraph with ``disable_static()``.

    Called by the APIs that build a program: ``static.data``,
    ``LayerHelper``'s ``create_parameter`` / ``create_variable_for_type_inference``
    / ``append_op``, the tensor functions and operators, a layer call and
    ``to_tensor``; never by the Executor, passes or optimizer internals.
    """
    if _dygraph_requested:
        raise Unimplemented(f"{api}: the mode is dynamic (paddle.disable_static() was called), where Paddle "
                            f"would run this call eagerly; {_STATIC_ONLY}")


def in_pir_mode() -> bool:
    """Paddle's ``paddle.framework.in_pir_mode()``: always False, refimpl builds the legacy ProgramDesc IR."""
    return False


def in_dynamic_or_pir_mode() -> bool:
    """Paddle's ``paddle.framework.in_dynamic_or_pir_mode()``."""
    return in_dynamic_mode() or in_pir_mode()


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
