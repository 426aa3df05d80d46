"""``paddle.base.framework``: Program, Block, Variable and the mode switches.

Mirrors ``python/paddle/base/framework.py`` by re-exporting
``refimpl.framework`` (the IR) and ``refimpl.static``'s ``ParamAttr``;
``in_dygraph_mode`` is ``in_dynamic_mode``.
"""
from refimpl.core.place import CPUPlace, CUDAPlace
from refimpl.framework import (Block, Operator, Parameter, Program, Variable, default_main_program,
                               default_startup_program, device_guard, disable_static, enable_static,
                               in_dynamic_mode, in_dynamic_or_pir_mode, in_pir_mode, name_scope,
                               namespace_getattr, program_guard, switch_main_program, switch_startup_program,
                               unique_name)
from refimpl.static.layer_helper import LayerHelper, ParamAttr

in_dygraph_mode = in_dynamic_mode


__all__ = ["CPUPlace", "CUDAPlace", "Block", "Operator", "Parameter", "Program", "Variable",
           "default_main_program", "default_startup_program", "device_guard", "disable_static",
           "enable_static", "in_dynamic_mode", "in_dygraph_mode", "in_pir_mode", "in_dynamic_or_pir_mode",
           "name_scope", "program_guard", "switch_main_program", "switch_startup_program", "unique_name",
           "LayerHelper", "ParamAttr"]

__getattr__ = namespace_getattr(__name__)
