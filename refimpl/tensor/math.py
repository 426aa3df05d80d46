"""``paddle.mean``, ``square``, ``matmul``, ``add`` ... in static mode."""
from refimpl.core.errors import InvalidArgument
from refimpl.framework import unique_name
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

__all__ = ['add', 'add_n', 'divide', 'exp', 'log', 'pow', 'reciprocal', 'sqrt', 'increment', 'matmul', 'mean',
           'multiply', 'scale', 'square', 'subtract', 'sum']


def _var(x, api):
    if not isinstance(x, Variable):
        raise InvalidArgument(f"{api}: expected a static Variable, got {type(x).__name__}")
    return x


def _reduce_axis(axis, x):
    if axis is None or axis == [] or axis == ():
        return [], True
    axis = [axis] if isinstance(axis, int) else list(axis)
    reduce_all = len(axis) == len(x.shape)
    return axis, reduce_all


def _reduce(op_type, helper_name, x, axis, keepdim, name=None):
    _var(x, helper_name)
    helper = LayerHelper(helper_name, name=name)
    dim, reduce_all = _reduce_axis(axis, x)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs={"X": x}, outputs={"Out": out},
                     attrs={"dim": dim, "keep_dim": keepdim, "reduce_all": reduce_all})
    return out


def mean(x, axis=None, keepdim=False, name=None):
    return _reduce("reduce_mean", "mean", x, axis, keepdim, name)


def sum(x, axis=None, dtype=None, keepdim=False, name=None):
    return _reduce("reduce_sum", "sum", x, axis, keepdim, name)


def _unary(op_type, x, name=None, **attrs):
    _var(x, op_type)
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs={"X": x}, outputs={"Out": out}, attrs=attrs)
    return out


def square(x, name=None):
    return _unary("square", x, name)


def _tmp_like(x):
    return x.block.program.current_block().create_var(
        name=unique_name.generate_with_ignorable_key("tmp"), dtype=x.dtype)


def binary(op_type, x, y, attrs=None):
    """An elementwise / matmul op between two Variables, out named ``tmp_k`` (math_op_patch)."""
    _var(x, op_type)
    _var(y, op_type)
    out = _tmp_like(x)
    x.block.program.current_block().append_op(type=op_type, inputs={"X": [x], "Y": [y]},
                                              outputs={"Out": out}, attrs=attrs or {"axis": -1})
    return out


def scale(x, scale=1.0, bias=0.0, bias_after_scale=True, act=None, name=None):
    _var(x, "scale")
    out = _tmp_like(x)
    x.block.program.current_block().append_op(
        type="scale", inputs={"X": [x]}, outputs={"Out": [out]},
        attrs={"scale": float(scale), "bias": float(bias), "bias_after_scale": bias_after_scale})
    return out


def matmul(x, y, transpose_x=False, transpose_y=False, name=None):
    return binary("matmul_v2", x, y, {"trans_x": transpose_x, "trans_y": transpose_y})


def add(x, y, name=None):
    return binary("elementwise_add", x, y)


def subtract(x, y, name=None):
    return binary("elementwise_sub", x, y)


def multiply(x, y, name=None):
    return binary("elementwise_mul", x, y)


def divide(x, y, name=None):
    return binary("elementwise_div", x, y)


def increment(x, value=1.0, name=None):
    _var(x, "increment")
    x.block.program.current_block().append_op(type="increment", inputs={"X": [x]},
                                              outputs={"Out": [x]}, attrs={"step": float(value)})
    return x


def add_n(inputs, name=None):
    xs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    for v in xs:
        _var(v, "add_n")
    helper = LayerHelper("add_n", name=name)
    out = helper.create_variable_for_type_inference(xs[0].dtype)
    helper.append_op(type="sum", inputs={"X": xs}, outputs={"Out": out})
    return out


def pow(x, y, name=None):
    """x ** y: op ``pow`` for a number y, ``elementwise_pow`` for a Variable."""
    if isinstance(y, (int, float)):
        _var(x, "pow")
        helper = LayerHelper("pow", name=name)
        out = helper.create_variable_for_type_inference(x.dtype)
        helper.append_op(type="pow", inputs={"X": x}, outputs={"Out": out}, attrs={"factor": float(y)})
        return out
    return binary("elementwise_pow", x, y)


def reciprocal(x, name=None):
    return _unary("reciprocal", x, name)


def exp(x, name=None):
    return _unary("exp", x, name)


def log(x, name=None):
    return _unary("log", x, name)


def sqrt(x, name=None):
    return _unary("sqrt", x, name)


def constant_like(x, value, shape):
    """A ``fill_constant`` var (named ``tmp_k``) holding ``value``, as math_op_patch makes for scalars."""
    from refimpl.core.dtypes import to_vartype
    out = _tmp_like(x)
    out.shape = tuple(shape)
    x.block.program.current_block().append_op(
        type="fill_constant", outputs={"Out": [out]},
        attrs={"shape": list(shape), "dtype": to_vartype(x.dtype), "value": float(value),
               "force_cpu": False})
    return out
