"""``paddle.base``: the 3.x home of the static API that was ``paddle.fluid``.

Mirrors ``python/paddle/base/__init__.py`` as thin re-exports: every name
here is the very object of the refimpl module that implements it
(``base.Program is paddle.static.Program``, ``base.io.DataLoader is
paddle.io.DataLoader``); nothing is implemented twice. A ``paddle.base``
name refimpl lacks raises Unimplemented naming it.
"""
from refimpl.core.place import CPUPlace, CUDAPlace
from refimpl.core.scope import Scope, global_scope, scope_guard
from refimpl.core.tensor import DenseTensor
from refimpl.executor import Executor
from refimpl.flags import get_flags, set_flags
from refimpl.framework import (Parameter, Program, Variable, default_main_program, default_startup_program,
                               device_guard, name_scope, namespace_getattr, program_guard, unique_name)
from refimpl.static import BuildStrategy, CompiledProgram, ParamAttr, cpu_places
from refimpl.static.backward import append_backward, gradients

from . import core, framework, io, layers
from .core import is_compiled_with_cuda
from .framework import in_dygraph_mode
from .data_feeder import DataFeeder
from refimpl.framework import disable_static as enable_dygraph, enable_static as disable_dygraph

__all__ = ["CPUPlace", "CUDAPlace", "Scope", "global_scope", "scope_guard", "DenseTensor", "Executor",
           "get_flags", "set_flags", "Parameter", "Program", "Variable", "default_main_program",
           "default_startup_program", "device_guard", "name_scope", "program_guard", "unique_name",
           "BuildStrategy", "CompiledProgram", "ParamAttr", "cpu_places", "append_backward", "gradients",
           "core", "framework", "io", "layers", "in_dygraph_mode", "is_compiled_with_cuda",
           "DataFeeder", "enable_dygraph", "disable_dygraph"]

__getattr__ = namespace_getattr(__name__)
