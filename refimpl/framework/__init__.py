"""The static-graph IR: Program, Block, Operator, Variable (Paddle's ``base.framework``)."""
from . import unique_name
from .block import Block
from .op_role import OpRole
from .operator import Operator
from .program import (Program, default_main_program, default_startup_program, device_guard,
                      name_scope, program_guard, switch_main_program, switch_startup_program)
from .variable import Parameter, Variable
