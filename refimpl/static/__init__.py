"""``paddle.static``: build programs, differentiate them, run them."""
from refimpl.core.place import CPUPlace, CUDAPlace
from refimpl.core.scope import Scope, global_scope, scope_guard
from refimpl.executor import Executor
from refimpl.framework import (Operator, Parameter, Program, Variable, default_main_program,
                               default_startup_program, device_guard, name_scope, namespace_getattr,
                               program_guard)

from . import nn
from .backward import append_backward, gradients
from .input import create_global_var, create_parameter, data
from .input_spec import InputSpec
from .layer_helper import ParamAttr
from .metric import *  # noqa: F401,F403
from .control_flow import cond

nn.cond = cond  # paddle.static.nn.cond; defined in control_flow.py
from .compiled_program import BuildStrategy, CompiledProgram, cpu_places
from .io import load, load_inference_model, load_persistables, save, save_inference_model, save_persistables
from .io_serialize import *  # noqa: F401,F403  (serialize_program, deserialize_*, save_to_file, normalize_program ...)
from .io_vars import *  # noqa: F401,F403  (save_vars, load_vars, load_program_state, set_program_state ...)
from .ema import *  # noqa: F401,F403  (ExponentialMovingAverage)
from .weight_norm_param_attr import *  # noqa: F401,F403  (WeightNormParamAttr)
from .py_func import *  # noqa: F401,F403  (py_func)
from .print_op import Print  # noqa: F401
from . import amp  # noqa: F401  (paddle.static.amp: decorate, bf16)

__getattr__ = namespace_getattr(__name__)   # a paddle.static name refimpl lacks: Unimplemented naming it
