"""``static.data``, ``create_parameter`` and ``create_global_var``.

Mirrors ``paddle.static.data`` (a data variable of the default dtype unless
``dtype`` is given (``paddle.get_default_dtype()``): -1 for ``None`` dims,
``stop_gradient=True``, ``is_data=True``, checked when fed; a dim is an
int >= -1 or ``None``, never a boolean, as Paddle's ``check_shape``),
``paddle.static.create_parameter`` and ``paddle.static.create_global_var``
(a persistable variable initialised by a ``fill_constant`` in the startup
program).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, TYPE_CHECKING

from refimpl.core.dtypes import convert_dtype
from refimpl.core.errors import InvalidArgument
from refimpl.framework import check_static_mode
from refimpl.framework.dtype_default import get_default_dtype
from refimpl.framework.program import default_main_program
from refimpl.nn.initializer import Constant

from .layer_helper import LayerHelper

if TYPE_CHECKING:
    from refimpl.framework.variable import Parameter, Variable
    from .layer_helper import ParamAttr


def data(name: str, shape: Sequence[Optional[int]], dtype: Any = None, lod_level: int = 0) -> Variable:
    """A data variable; ``dtype`` None is the default dtype (``paddle.get_default_dtype()``), as Paddle's."""
    check_static_mode("paddle.static.data")  # Paddle: static only, an error after disable_static()
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"static.data: name must be a non-empty string, got {name!r}")
    if not isinstance(shape, (list, tuple)):
        raise InvalidArgument(f"static.data({name!r}): shape must be a list, got {shape!r}")
    dims = []
    for d in shape:
        if d is None:
            d = -1
        if not isinstance(d, int) or isinstance(d, bool) or d < -1:  # True is no dim of 1
            raise InvalidArgument(f"static.data({name!r}): bad dim {d!r} in shape {list(shape)}")
        dims.append(d)
    return default_main_program().global_block().create_var(
        name=name, shape=dims, dtype=get_default_dtype() if dtype is None else convert_dtype(dtype),
        stop_gradient=True, is_data=True, need_check_feed=True, lod_level=lod_level)


def create_parameter(shape: Sequence[int], dtype: Any, name: Optional[str] = None,
                     attr: Optional[ParamAttr] = None, is_bias: bool = False,
                     default_initializer: Any = None) -> Optional[Variable]:
    helper = LayerHelper("create_parameter")
    from .layer_helper import ParamAttr
    attr = ParamAttr._to_attr(attr)
    if name is not None:
        attr.name = name
    return helper.create_parameter(attr, shape, convert_dtype(dtype), is_bias, default_initializer)


def create_global_var(shape: Sequence[int], value: float, dtype: Any, persistable: bool = False,
                      force_cpu: bool = False, name: Optional[str] = None) -> Variable:
    helper = LayerHelper("global_var")
    var = helper.create_global_variable(name=name, shape=list(shape), dtype=convert_dtype(dtype),
                                        persistable=persistable, stop_gradient=True)
    helper.set_variable_initializer(var, Constant(float(value), force_cpu=force_cpu))
    return var
