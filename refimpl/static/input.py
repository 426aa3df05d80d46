"""``static.data``, ``create_parameter`` and ``create_global_var``.

Mirrors ``paddle.static.data`` (a data variable: -1 for ``None`` dims,
``stop_gradient=True``, ``is_data=True``, checked when fed),
``paddle.static.create_parameter`` and ``paddle.static.create_global_var``
(a persistable variable initialised by a ``fill_constant`` in the startup
program).
"""
from refimpl.core.dtypes import convert_dtype
from refimpl.core.errors import InvalidArgument
from refimpl.framework.program import default_main_program
from refimpl.nn.initializer import Constant

from .layer_helper import LayerHelper


def data(name, shape, dtype="float32", lod_level=0):
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"static.data: name must be a non-empty string, got {name!r}")
    if not isinstance(shape, (list, tuple)):
        raise InvalidArgument(f"static.data({name!r}): shape must be a list, got {shape!r}")
    dims = []
    for d in shape:
        if d is None:
            d = -1
        if not isinstance(d, int) or d < -1:
            raise InvalidArgument(f"static.data({name!r}): bad dim {d!r} in shape {list(shape)}")
        dims.append(d)
    return default_main_program().global_block().create_var(
        name=name, shape=dims, dtype=convert_dtype(dtype), stop_gradient=True,
        is_data=True, need_check_feed=True)


def create_parameter(shape, dtype, name=None, attr=None, is_bias=False, default_initializer=None):
    helper = LayerHelper("create_parameter")
    from .layer_helper import ParamAttr
    attr = ParamAttr._to_attr(attr)
    if name is not None:
        attr.name = name
    return helper.create_parameter(attr, shape, convert_dtype(dtype), is_bias, default_initializer)


def create_global_var(shape, value, dtype, persistable=False, force_cpu=False, name=None):
    helper = LayerHelper("global_var")
    var = helper.create_global_variable(name=name, shape=list(shape), dtype=convert_dtype(dtype),
                                        persistable=persistable, stop_gradient=True)
    helper.set_variable_initializer(var, Constant(float(value), force_cpu=force_cpu))
    return var
