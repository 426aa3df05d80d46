"""LayerHelper: what every layer function uses to add vars, params and ops.

Mirrors ``paddle.base.layer_helper.LayerHelper`` (and ``layer_helper_base.py``)
of Paddle 3.3.1: a helper named ``{layer_type}_{n}`` (``fc_0``) creates
temporaries ``fc_0.tmp_k``, parameters ``fc_0.w_0`` / ``fc_0.b_0`` (a startup
copy with its initializer op, then the main copy), and appends ops to the
current block of the default main program.

Names: in static mode Paddle 3.3.1 numbers the helper's name, its temporaries
and its parameters with the main program's own generator
(``Program._name_generator``), not the global one of ``unique_name`` that
``nn.Layer`` full names use. So the first ``nn.Linear`` is the layer
``linear_0`` (global counter) and its call the helper ``linear_0`` (program
counter): ``linear_0.tmp_0``, as 3.3.1 records it (2.6.2 took both from the
global counter: ``linear_1.tmp_0``). ``Program.name_generator`` holds those
counters (a clone copies them, as Paddle's does) and ``Program.fresh_name``
skips a generated name the program already has (a program read from a file
starts counting afresh). A parameter name given twice
(``ParamAttr(name="shared")``) is the same parameter again, initialised once,
as in Paddle's ``Block.create_parameter``.

After an explicit ``paddle.disable_static()`` (``refimpl.framework``'s
docstring) ``create_parameter``, ``create_variable_for_type_inference`` and
``append_op`` raise Unimplemented naming the layer: Paddle would run the
layer eagerly; refimpl builds static programs only.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument
from refimpl.framework import check_static_mode, unique_name
from refimpl.framework.program import default_main_program, default_startup_program
from refimpl.nn.initializer import Constant, XavierUniform

if TYPE_CHECKING:
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Parameter, Variable


class ParamAttr:
    """Mirrors ``paddle.ParamAttr``: name, initializer, trainable."""

    def __init__(self, name: Optional[str] = None, initializer: Any = None, learning_rate: float = 1.0,
                 regularizer: Any = None, trainable: bool = True, do_model_average: bool = True,
                 need_clip: bool = True) -> None:
        self.name, self.initializer, self.trainable = name, initializer, trainable
        self.learning_rate, self.regularizer, self.need_clip = learning_rate, regularizer, need_clip
        self.do_model_average = do_model_average

    @staticmethod
    def _to_attr(arg):
        if arg is None:
            return ParamAttr()
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if arg is False:
            return False
        from refimpl.nn.initializer import Initializer
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        raise TypeError(f"cannot use {type(arg).__name__} as a ParamAttr")


class LayerHelper:
    def __init__(self, layer_type: str, name: Optional[str] = None, **kwargs: Any) -> None:
        self.layer_type = layer_type
        self.name = name if name is not None else self.main_program.name_generator(layer_type)
        self.kwargs = kwargs

    @property
    def main_program(self) -> Program:
        return default_main_program()

    @property
    def startup_program(self) -> Program:
        return default_startup_program()

    def create_variable_for_type_inference(self, dtype: Any, stop_gradient: bool = False,
                                           shape: Optional[Sequence[int]] = None) -> Variable:
        check_static_mode(self.layer_type)  # after disable_static(): before anything is added
        return self.main_program.current_block().create_var(
            name=self.main_program.fresh_name(f"{self.name}.tmp"),
            dtype=dtype, shape=shape, persistable=False, stop_gradient=stop_gradient)

    def create_parameter(self, attr: Any, shape: Sequence[int], dtype: Any, is_bias: bool = False,
                         default_initializer: Any = None) -> Optional[Variable]:
        check_static_mode(self.layer_type)
        attr = ParamAttr._to_attr(attr)
        if attr is False:
            return None
        name = attr.name or self.main_program.fresh_name(f"{self.name}.{'b' if is_bias else 'w'}")
        init = attr.initializer or default_initializer or (Constant(0.0) if is_bias else XavierUniform())
        from refimpl.static.weight_norm_param_attr import WeightNormParamAttr, create_weight_normalize
        if isinstance(attr, WeightNormParamAttr):  # w = g * v / ||v||, built from the two parameters
            return create_weight_normalize(self, attr, name, shape, dtype, init)
        shape = [int(d) for d in shape]
        shared = self._existing_parameter(name, shape)
        if shared is not None:
            return shared
        self.startup_program.global_block().create_parameter(
            name, shape, dtype, trainable=attr.trainable, initializer=init)
        return self.main_program.global_block().create_parameter(
            name, shape, dtype, trainable=attr.trainable,
            optimize_attr={"learning_rate": attr.learning_rate}, regularizer=attr.regularizer,
            need_clip=attr.need_clip, do_model_average=attr.do_model_average)

    def _existing_parameter(self, name: str, shape: Sequence[int]) -> Optional[Parameter]:
        """The parameter ``name`` when both programs have it already (a shared parameter), else None."""
        main_vars = self.main_program.global_block().vars
        start_vars = self.startup_program.global_block().vars
        old = main_vars.get(name)
        if old is None or not old.is_parameter or name not in start_vars:
            return None
        if list(old.shape) != list(shape):
            raise InvalidArgument(f"{self.layer_type}: parameter {name!r} was created with shape "
                                  f"{list(old.shape)}, now asked for with shape {list(shape)}")
        return old

    def create_global_variable(self, name: Optional[str] = None, persistable: bool = False,
                               **kwargs: Any) -> Variable:
        name = name or unique_name.generate(f"{self.name}.tmp")
        return self.main_program.global_block().create_var(name=name, persistable=persistable, **kwargs)

    def set_variable_initializer(self, var: Variable, initializer: Any) -> Variable:
        sv = self.startup_program.global_block().create_var(
            name=var.name, type=var.type, dtype=var.dtype, shape=var.shape, persistable=True)
        initializer(sv, self.startup_program.global_block())
        return sv

    def append_op(self, **kwargs: Any) -> Operator:
        check_static_mode(f"{self.layer_type} (op {kwargs.get('type')!r})")
        return self.main_program.current_block().append_op(**kwargs)

    def append_bias_op(self, x: Variable, bias_attr: Any, dim_start: int = 1) -> Variable:
        if bias_attr is False:
            return x
        size = list(x.shape[dim_start:])
        b = self.create_parameter(bias_attr, size, x.dtype, is_bias=True)
        out = self.create_variable_for_type_inference(x.dtype)
        self.append_op(type="elementwise_add", inputs={"X": [x], "Y": [b]}, outputs={"Out": [out]},
                       attrs={"axis": dim_start})
        return out

    def append_activation(self, x: Variable, act: Optional[str]) -> Variable:
        if act is None:
            return x
        act = {"type": act} if isinstance(act, str) else dict(act)
        act_type = act.pop("type")
        out = self.create_variable_for_type_inference(x.dtype)
        self.append_op(type=act_type, inputs={"X": [x]}, outputs={"Out": [out]}, attrs=act)
        return out
