"""Math: mean, sum, square, matmul, add, tanh, abs, clip, cumsum, max, min, prod ... in static mode.

Mirrors the legacy static branch of ``python/paddle/tensor/math.py`` as
Paddle 2.6.2 runs it (3.3.1 binds ``matmul``, ``tanh``, ``abs``, ``multiply``
... straight to PIR-only C++ functions). Each function makes a LayerHelper
named as Paddle's (``tanh_0``, ``max_0``, ``reduce_prod_0``,
``matmul_v2_0``, ``scale_0``) whose temporaries name the outputs.
``add``, ``subtract`` and ``pow`` of two Variables name their output as
3.3.1 does, a temporary of the helper (``elementwise_add_0.tmp_0``,
``nm.tmp_0`` for ``name="nm"``, ``elementwise_pow_0.tmp_0``); ``multiply`` /
``divide`` / ``maximum`` / ``minimum`` go through 2.6.2's ``_elementwise_op``
(3.3.1 runs ``divide`` that way too, and has no legacy-IR ``multiply`` /
``maximum`` / ``minimum``), which names the output after the helper itself
(``elementwise_div_0``). :func:`binary`, :func:`constant_like` and
:func:`new_tmp` are what the Python operators of ``patch.py`` use
(``tmp_k`` names, as ``math_op_patch``). :func:`check_variable` and
:func:`unary_op` are the helpers the other ``refimpl.tensor`` and
``refimpl.nn.functional`` modules build on; like ``binary`` they are not in
``__all__`` (Paddle has no ``paddle.check_variable``).
"""
import builtins
from typing import Any, Optional

import numpy as np

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.framework import check_static_mode
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

__all__ = ['abs', 'add', 'add_n', 'ceil', 'clip', 'cumsum', 'divide', 'exp', 'increment', 'log', 'matmul', 'max', 'maximum',
           'mean', 'min', 'minimum', 'multiply', 'pow', 'prod', 'reciprocal', 'scale', 'sigmoid', 'sign', 'sqrt',
           'square', 'subtract', 'sum', 'tanh']


def check_variable(x: Any, api: str) -> Variable:
    """x itself when it is a static Variable, else InvalidArgument naming ``api`` (used by every refimpl API).

    After ``disable_static()`` it raises Unimplemented naming ``api`` (Paddle would run ``api`` eagerly).
    """
    check_static_mode(api)
    if not isinstance(x, Variable):
        raise InvalidArgument(f"{api}: expected a static Variable, got {type(x).__name__}")
    return x


def _reduce_axis(axis, x):
    if axis is None or axis == [] or axis == ():
        return [], True
    axis = [axis] if isinstance(axis, int) else list(axis)
    reduce_all = len(axis) == len(x.shape)
    return axis, reduce_all


def _reduce(op_type, helper_name, x, axis, keepdim, name=None, set_reduce_all=True):
    check_variable(x, helper_name)
    helper = LayerHelper(helper_name, name=name)
    dim, reduce_all = _reduce_axis(axis, x)
    reduce_all = reduce_all and set_reduce_all
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs={"X": x}, outputs={"Out": out},
                     attrs={"dim": dim, "keep_dim": keepdim, "reduce_all": reduce_all})
    return out


def mean(x, axis=None, keepdim=False, name=None):
    return _reduce("reduce_mean", "mean", x, axis, keepdim, name)


def sum(x, axis=None, dtype=None, keepdim=False, name=None):
    # 2.6.2's static sum leaves reduce_all at its default False (an empty dim reduces every dim)
    return _reduce("reduce_sum", "sum", x, axis, keepdim, name, set_reduce_all=False)


def unary_op(op_type: str, x: Variable, name: Optional[str] = None, **attrs: Any) -> Variable:
    """One ``op_type`` op from X to an Out of x's dtype, helper named ``op_type`` (relu, tanh, square ...)."""
    check_variable(x, op_type)
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs={"X": x}, outputs={"Out": out}, attrs=attrs)
    return out


def square(x, name=None):
    return unary_op("square", x, name)


def new_tmp(x: Variable, dtype: Any = None) -> Variable:
    """A ``tmp_k`` of ``dtype`` (default x's) in x's program's current block, counted per program as
    Paddle 3.3.1's math-op temporaries."""
    block = x.block.program.current_block()
    return block.create_var(name=block.program.fresh_name("tmp", block), dtype=x.dtype if dtype is None else dtype)


def binary(op_type, x, y, attrs=None):
    """An elementwise / matmul op between two Variables, out named ``tmp_k`` (math_op_patch)."""
    check_variable(x, op_type)
    check_variable(y, op_type)
    out = new_tmp(x)
    x.block.program.current_block().append_op(type=op_type, inputs={"X": [x], "Y": [y]},
                                              outputs={"Out": out}, attrs=attrs or {"axis": -1})
    return out


def scale(x, scale=1.0, bias=0.0, bias_after_scale=True, act=None, name=None):
    """``scale`` (helper ``scale``: ``scale_0.tmp_0``), then ``act`` if given."""
    check_variable(x, "scale")
    if isinstance(scale, Variable) or isinstance(bias, Variable):
        raise InvalidArgument("scale: a Variable 'scale' or 'bias' (ScaleTensor) is not supported here")
    helper = LayerHelper("scale", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"scale": float(scale), "bias": float(bias), "bias_after_scale": bias_after_scale})
    return helper.append_activation(out, act)


def matmul(x, y, transpose_x=False, transpose_y=False, name=None):
    """``matmul_v2`` (helper ``matmul_v2``: ``matmul_v2_0.tmp_0``; ``x @ y`` names its output ``tmp_k``)."""
    check_variable(x, "matmul")
    check_variable(y, "matmul")
    helper = LayerHelper("matmul_v2", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="matmul_v2", inputs={"X": x, "Y": y}, outputs={"Out": out},
                     attrs={"trans_x": transpose_x, "trans_y": transpose_y})
    return out


def _elementwise(op_type, x, y, name=None):
    """2.6.2's ``_elementwise_op``: the helper fills in ``name``, and the output takes it."""
    check_variable(x, op_type)
    check_variable(y, op_type)
    helper = LayerHelper(op_type, name=name)
    out = helper.main_program.current_block().create_var(name=helper.name, dtype=x.dtype, persistable=False)
    helper.append_op(type=op_type, inputs={"X": x, "Y": y}, outputs={"Out": out}, attrs={"axis": -1})
    return out


def _elementwise_tmp(op_type, x, y, name=None):
    """3.3.1's legacy ``add`` / ``subtract``: the output is a temporary of the helper (``elementwise_add_0.tmp_0``)."""
    check_variable(x, op_type)
    check_variable(y, op_type)
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs={"X": x, "Y": y}, outputs={"Out": out}, attrs={"axis": -1})
    return out


def add(x, y, name=None):
    return _elementwise_tmp("elementwise_add", x, y, name)


def subtract(x, y, name=None):
    return _elementwise_tmp("elementwise_sub", x, y, name)


def multiply(x, y, name=None):
    return _elementwise("elementwise_mul", x, y, name)


def divide(x, y, name=None):
    return _elementwise("elementwise_div", x, y, name)


def maximum(x, y, name=None):
    return _elementwise("elementwise_max", x, y, name)


def minimum(x, y, name=None):
    return _elementwise("elementwise_min", x, y, name)


def increment(x, value=1.0, name=None):
    check_variable(x, "increment")
    x.block.program.current_block().append_op(type="increment", inputs={"X": [x]},
                                              outputs={"Out": [x]}, attrs={"step": float(value)})
    return x


def add_n(inputs, name=None):
    xs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    for v in xs:
        check_variable(v, "add_n")
    helper = LayerHelper("add_n", name=name)
    out = helper.create_variable_for_type_inference(xs[0].dtype)
    helper.append_op(type="sum", inputs={"X": xs}, outputs={"Out": out})
    return out


def pow(x, y, name=None):
    """x ** y: op ``pow`` for a number y, ``elementwise_pow`` for a Variable."""
    if isinstance(y, (int, float)):
        check_variable(x, "pow")
        helper = LayerHelper("pow", name=name)
        out = helper.create_variable_for_type_inference(x.dtype)
        helper.append_op(type="pow", inputs={"X": x}, outputs={"Out": out}, attrs={"factor": float(y)})
        return out
    return _elementwise_tmp("elementwise_pow", x, y, name)


def reciprocal(x, name=None):
    return unary_op("reciprocal", x, name)


def exp(x, name=None):
    return unary_op("exp", x, name)


def log(x, name=None):
    return unary_op("log", x, name)


def sqrt(x, name=None):
    return unary_op("sqrt", x, name)


def ceil(x, name=None):
    return unary_op("ceil", x, name)


def tanh(x, name=None):
    return unary_op("tanh", x, name)


def sigmoid(x, name=None):
    return unary_op("sigmoid", x, name)


def abs(x, name=None):
    return unary_op("abs", x, name)


def sign(x, name=None):
    return unary_op("sign", x, name)


def _clip_bounds(dtype):
    """clip's defaults for a missing min / max, as Paddle picks them per dtype."""
    if dtype == "int32":
        return float(np.iinfo(np.int32).min), float(np.iinfo(np.int32).max - 2 ** 7)
    if dtype == "int64":
        return float(np.iinfo(np.int64).min), float(np.iinfo(np.int64).max - 2 ** 39)
    finfo = np.finfo(np.float16 if dtype == "float16" else np.float32)
    return float(finfo.min), float(finfo.max)


def clip(x, min=None, max=None, name=None):
    """``clip`` with number bounds (a missing one is the dtype's extreme); Variable bounds are not built here."""
    check_variable(x, "clip")
    for arg, v in (("min", min), ("max", max)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise InvalidArgument(f"clip: argument '{arg}' must be a number or None, got {v!r}")
    lo, hi = _clip_bounds(x.dtype)
    lo, hi = lo if min is None else float(min), hi if max is None else float(max)
    if min is not None and max is not None and lo > hi:
        raise InvalidArgument(f"clip: min {min} is greater than max {max}")
    helper = LayerHelper("clip", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="clip", inputs={"X": x}, outputs={"Out": [out]}, attrs={"min": lo, "max": hi})
    return out


def cumsum(x, axis=None, dtype=None, name=None):
    """``cumsum``; axis None flattens (``flatten=True``, ``axis=-1``); dtype casts x first."""
    check_variable(x, "cumsum")
    if axis is not None:
        _check_reduce_axis("cumsum", [axis], x)
    if dtype is not None and dtype != x.dtype:
        from .manipulation import cast
        x = cast(x, dtype)
    attrs = {"axis": -1 if axis is None else axis, "flatten": axis is None}
    return unary_op("cumsum", x, name, **attrs)


def _check_reduce_axis(api, axis, x):
    rank = len(x.shape) if x.shape is not None else 0
    for a in axis:
        if not isinstance(a, int) or isinstance(a, bool):
            raise InvalidArgument(f"{api}: argument 'axis' must be an int or a list of ints, got {a!r}")
        if not -rank <= a < builtins.max(rank, 1):
            raise InvalidArgument(f"{api}: argument 'axis' = {a} is out of range for a tensor of rank {rank}")


def _minmax(op_type, helper_name, x, axis, keepdim, name):
    check_variable(x, helper_name)
    if not (axis is None or isinstance(axis, (int, list, tuple))) or isinstance(axis, bool):
        raise InvalidArgument(f"{helper_name}: argument 'axis' must be an int, a list of ints or None, got {axis!r}")
    dim, _ = _reduce_axis(axis, x)
    _check_reduce_axis(helper_name, dim, x)
    return _reduce(op_type, helper_name, x, axis, keepdim, name)


def max(x, axis=None, keepdim=False, name=None):
    return _minmax("reduce_max", "max", x, axis, keepdim, name)


def min(x, axis=None, keepdim=False, name=None):
    return _minmax("reduce_min", "min", x, axis, keepdim, name)


def prod(x, axis=None, keepdim=False, dtype=None, name=None):
    """``reduce_prod`` (helper ``reduce_prod``); dtype casts x first."""
    if dtype is not None and check_variable(x, "prod").dtype != dtype:
        from .manipulation import cast
        x = cast(x, dtype)
    return _minmax("reduce_prod", "reduce_prod", x, axis, keepdim, name)


def constant_like(x, value, shape):
    """A ``fill_constant`` var (named ``tmp_k``) holding ``value``, as math_op_patch makes for scalars."""
    out = new_tmp(x)
    out.shape = tuple(shape)
    x.block.program.current_block().append_op(
        type="fill_constant", outputs={"Out": [out]},
        attrs={"shape": list(shape), "dtype": to_vartype(x.dtype), "value": float(value),
               "force_cpu": False})
    return out
