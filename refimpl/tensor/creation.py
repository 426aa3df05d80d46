"""Creation: full, zeros, ones, arange, eye, full_like, zeros_like, ones_like, tril, triu, assign, to_tensor.

Mirrors the legacy static branch of ``python/paddle/tensor/creation.py`` as
Paddle 2.6.2 runs it (the recorded reference: 3.3.1 binds ``tril`` and others
straight to PIR-only C++ functions). Names follow 2.6.2's helpers:

- ``fill_constant`` makes two ``LayerHelper("fill_constant")`` objects, so
  each call takes two numbers of the counter and its output is
  ``fill_constant_1.tmp_0``, ``fill_constant_3.tmp_0`` ...;
- ``tril`` / ``triu`` pass their ``name=None`` to the helper, which fills it
  in, so the output is named after the helper itself (``tril_0``).

``to_tensor`` is 3.3.1's static branch (``_to_tensor_static``): an
``assign_value`` (``assign_k.tmp_0``), then a ``cast`` when ``dtype`` asks
for another dtype, under ``device_guard`` of the place (``op_device`` "cpu"
for the default CPU place).

A dtype left None is Paddle's default dtype (``paddle.get_default_dtype()``,
``refimpl/framework/dtype_default.py``) for ``full`` / ``zeros`` / ``ones`` /
``eye``, ``arange`` of a float and ``to_tensor`` of Python floats; ``full`` of
a Python bool is bool, as 3.3.1's; the ``*_like`` functions take ``x``'s dtype.

Not here: ``empty`` (no ``empty`` op in the registry); shapes given as
Variables (``ShapeTensor``), which refimpl does not build.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from refimpl.core.dtypes import convert_dtype, to_numpy_dtype, to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.core.place import CPUPlace, CUDAPlace
from refimpl.executor.backend import default_place
from refimpl.framework import check_static_mode
from refimpl.framework.dtype_default import get_default_dtype
from refimpl.framework.program import device_guard
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

from .math import check_variable

__all__ = ['arange', 'assign', 'eye', 'fill_constant', 'full', 'full_like', 'ones', 'ones_like', 'tril', 'triu',
           'to_tensor', 'zeros', 'zeros_like']

_INT_DTYPES = ('int8', 'uint8', 'int16', 'int32', 'int64')


def _dtype(dtype: Any, api: str, default: Optional[str] = None) -> str:
    """``dtype`` by its name; None is ``default``, or else Paddle's default dtype (``get_default_dtype()``)."""
    if dtype is None:
        return get_default_dtype() if default is None else default
    try:
        return convert_dtype(dtype)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{api}: argument 'dtype': {exc}") from None


def _shape(shape: Any, api: str) -> list:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = [shape]
    if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in shape):
        raise InvalidArgument(f"{api}: argument 'shape' must be a list or tuple of ints, got {shape!r}")
    if any(int(d) < -1 for d in shape):
        raise InvalidArgument(f"{api}: argument 'shape' has a dim below -1: {list(shape)}")
    return [int(d) for d in shape]


def _number(value: Any, api: str, arg: str) -> None:
    if isinstance(value, Variable) or not isinstance(value, (int, float, bool, np.number, np.bool_)):
        raise InvalidArgument(f"{api}: argument '{arg}' must be a Python number, got {type(value).__name__}")


def fill_constant(shape: Sequence[int], dtype: Any, value: Any, force_cpu: bool = False,
                  out: Optional[Variable] = None, name: Optional[str] = None) -> Variable:
    """A ``fill_constant`` op (stop_gradient output); ``str_value`` is ``str(int)`` for int dtypes."""
    dtype = _dtype(dtype, "fill_constant")
    shape = _shape(shape, "fill_constant")
    _number(value, "fill_constant", "value")
    if dtype in _INT_DTYPES:
        attrs = {"force_cpu": force_cpu, "str_value": str(int(value)), "value": float(int(value))}
    else:
        attrs = {"force_cpu": force_cpu, "str_value": str(float(value)), "value": float(value)}
    LayerHelper("fill_constant", name=name)  # Paddle builds the helper twice: the counter moves twice
    helper = LayerHelper("fill_constant", name=name)
    if out is None:
        out = helper.create_variable_for_type_inference(dtype)
    attrs.update(shape=shape, dtype=to_vartype(dtype))
    helper.append_op(type="fill_constant", inputs={}, outputs={"Out": [out]}, attrs=attrs)
    out.stop_gradient = True
    return out


def full(shape: Sequence[int], fill_value: Any, dtype: Any = None, name: Optional[str] = None) -> Variable:
    _number(fill_value, "full", "fill_value")
    if dtype is None and isinstance(fill_value, bool):  # Paddle 3.3.1's full: a bool fill is bool
        dtype = "bool"
    return fill_constant(_shape(shape, "full"), _dtype(dtype, "full"), fill_value, name=name)


def zeros(shape: Sequence[int], dtype: Any = None, name: Optional[str] = None) -> Variable:
    return fill_constant(_shape(shape, "zeros"), _dtype(dtype, "zeros"), 0.0, name=name)


def ones(shape: Sequence[int], dtype: Any = None, name: Optional[str] = None) -> Variable:
    return fill_constant(_shape(shape, "ones"), _dtype(dtype, "ones"), 1.0, name=name)


def arange(start: Any = 0, end: Any = None, step: Any = 1, dtype: Any = None,
           name: Optional[str] = None) -> Variable:
    """``range`` over three ``fill_constant([1], force_cpu=True)`` made under ``device_guard("cpu")``.

    dtype None: int64 when start, end and step are all ints, else the default dtype.
    """
    if end is None:
        start, end = 0, start
    for arg, v in (("start", start), ("end", end), ("step", step)):
        _number(v, "arange", arg)
    if step == 0:
        raise InvalidArgument("arange: argument 'step' must not be 0")
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, end, step))
        dtype = "int64" if ints else get_default_dtype()
    dtype = _dtype(dtype, "arange")
    n = int(np.ceil((end - start) / step))
    with device_guard("cpu"):
        bounds = [fill_constant([1], dtype, v, force_cpu=True) for v in (start, end, step)]
    helper = LayerHelper("range", name=name)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(type="range", inputs={"Start": bounds[0], "End": bounds[1], "Step": bounds[2]},
                     outputs={"Out": out})
    out.shape = (max(n, 0),)  # known from the numbers, as Paddle's Python sets it (the op's InferShape cannot)
    out.stop_gradient = True
    return out


def full_like(x: Variable, fill_value: Any, dtype: Any = None, name: Optional[str] = None) -> Variable:
    """``fill_any_like`` (helper ``full_like``), a stop_gradient output of x's shape."""
    check_variable(x, "full_like")
    _number(fill_value, "full_like", "fill_value")
    dtype = _dtype(dtype, "full_like", default=x.dtype)
    helper = LayerHelper("full_like", name=name)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(type="fill_any_like", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"value": float(fill_value), "dtype": to_vartype(dtype)})
    out.stop_gradient = True
    return out


def zeros_like(x: Variable, dtype: Any = None, name: Optional[str] = None) -> Variable:
    return full_like(x, 0.0, dtype, name)


def ones_like(x: Variable, dtype: Any = None, name: Optional[str] = None) -> Variable:
    return full_like(x, 1.0, dtype, name)


def _tril_triu(api: str, x: Variable, diagonal: int, name: Optional[str]) -> Variable:
    check_variable(x, api)
    if not isinstance(diagonal, int) or isinstance(diagonal, bool):
        raise InvalidArgument(f"{api}: argument 'diagonal' must be an int, got {diagonal!r}")
    if x.shape is not None and len(x.shape) < 2:
        raise InvalidArgument(f"{api}: input {x.name!r} must have at least 2 dims, got shape {list(x.shape)}")
    helper = LayerHelper(api, name=name)
    # Paddle's helper fills in name=None, and the output then takes that name
    out = helper.main_program.current_block().create_var(name=helper.name, dtype=x.dtype, persistable=False)
    helper.append_op(type="tril_triu", inputs={"X": x}, outputs={"Out": out},
                     attrs={"diagonal": diagonal, "lower": api == "tril"})
    return out


def eye(num_rows: int, num_columns: Optional[int] = None, dtype: Any = None, name: Optional[str] = None) -> Variable:
    """The ``eye`` op: a [num_rows, num_columns] (square by default) identity, stop_gradient like Paddle's."""
    for arg, v in (("num_rows", num_rows), ("num_columns", num_columns)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0):
            raise InvalidArgument(f"eye: argument {arg!r} must be a non-negative int, got {v!r}")
    num_columns = num_rows if num_columns is None else num_columns
    dtype = _dtype(dtype, "eye")
    helper = LayerHelper("eye", name=name)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op(type="eye", inputs={}, outputs={"Out": [out]},
                     attrs={"num_rows": int(num_rows), "num_columns": int(num_columns), "dtype": to_vartype(dtype)})
    return out


def tril(x: Variable, diagonal: int = 0, name: Optional[str] = None) -> Variable:
    return _tril_triu("tril", x, diagonal, name)


def triu(x: Variable, diagonal: int = 0, name: Optional[str] = None) -> Variable:
    return _tril_triu("triu", x, diagonal, name)


_ASSIGN_VALUE_DTYPES = ("bool", "int32", "int64", "float32", "float64")


def assign(x: Any, output: Optional[Variable] = None) -> Variable:
    """``assign`` of a Variable; ``assign_value`` of a NumPy array, list or number.

    ``assign_value`` follows Paddle 3.3.1 (the op as registered here): the
    array keeps its dtype and the numbers go in one ``values`` attr, where
    2.6.2 turned float64 into float32 and spread them over ``fp32_values``,
    ``int64_values`` ...
    """
    helper = LayerHelper("assign")
    if isinstance(x, Variable):
        if output is None:
            output = helper.create_variable_for_type_inference(x.dtype)
        helper.append_op(type="assign", inputs={"X": [x]}, outputs={"Out": [output]})
        return output
    return _assign_value(helper, x, output)


def _assign_value(helper: LayerHelper, x: Any, output: Optional[Variable]) -> Variable:
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        x = [x]
    if not isinstance(x, (list, tuple, np.ndarray)):
        raise InvalidArgument(f"assign: argument 'x' must be a Variable, a NumPy array, a list or a number, "
                              f"got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"assign: argument 'x' cannot become an array: {exc}") from None
    dtype = arr.dtype.name
    if dtype not in _ASSIGN_VALUE_DTYPES:
        raise InvalidArgument(f"assign: argument 'x' has dtype {dtype!r}; expected one of {list(_ASSIGN_VALUE_DTYPES)}")
    if output is None:
        output = helper.create_variable_for_type_inference(dtype)
    helper.append_op(type="assign_value", outputs={"Out": [output]},
                     attrs={"dtype": to_vartype(dtype), "shape": list(arr.shape), "values": arr.ravel().tolist()})
    return output


def to_tensor(data: Any, dtype: Any = None, place: Any = None, stop_gradient: bool = True) -> Variable:
    """Paddle's ``paddle.to_tensor`` in static mode: a Variable holding ``data`` (``assign_value``, maybe ``cast``).

    A number or nested list becomes an array first, its floats of the default
    dtype (``get_default_dtype()``) and its int32s int64 (NumPy arrays and scalars keep
    their dtype); int16 becomes int32. A Variable is returned as is (or cast).
    A list holding Variables is ``stack``-ed. ``stop_gradient`` is set on the
    result.
    """
    check_static_mode("paddle.to_tensor")
    with device_guard(_place_device(place)):
        return _to_tensor_static(data, None if dtype is None else _dtype(dtype, "to_tensor"), stop_gradient)


def _place_device(place: Any) -> str:
    """The ``device_guard`` string of a place ("cpu", "gpu:0"), as Paddle's ``str(place)`` gives it."""
    if place is None:
        place = default_place()
    if isinstance(place, str):
        name, _, idx = place.partition(":")
        if name == "cpu" and not idx:
            return "cpu"
        if name == "gpu" and (not idx or idx.isdigit()):
            return f"gpu:{idx or 0}"
    elif isinstance(place, CPUPlace):
        return "cpu"
    elif isinstance(place, CUDAPlace):
        return f"gpu:{place.get_device_id()}"
    raise InvalidArgument(f"to_tensor: argument 'place' must be a CPUPlace, a CUDAPlace, 'cpu' or 'gpu:N', "
                          f"got {place!r}")


def _to_tensor_static(data: Any, dtype: Optional[str], stop_gradient: bool) -> Variable:
    if isinstance(data, Variable):
        out = data if dtype is None or dtype == data.dtype else _cast(data, dtype)
    else:
        if isinstance(data, (list, tuple)) and any(isinstance(d, Variable) for d in data):
            from .manipulation import stack
            stacked = stack([_to_tensor_static(d, dtype, stop_gradient) for d in data])
            target = dtype or stacked.dtype
            out = assign(stacked)
        else:
            arr = _as_array(data)
            target = dtype or arr.dtype.name  # taken before int16 -> int32: Paddle casts back to int16
            if arr.dtype.name == "int16":
                arr = arr.astype("int32")
            if arr.dtype.name not in _ASSIGN_VALUE_DTYPES:
                raise InvalidArgument(f"to_tensor: data of dtype {arr.dtype.name!r} is not supported; expected "
                                      f"one of {list(_ASSIGN_VALUE_DTYPES)} or int16")
            out = _assign_value(LayerHelper("assign"), arr, None)
        if target != out.dtype:
            out = _cast(out, target)
    out.stop_gradient = stop_gradient
    return out


def _as_array(data: Any) -> np.ndarray:
    """``data`` as an array: NumPy input as is, Python numbers and lists with Paddle's default dtypes."""
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, (np.number, np.bool_)):
        return np.array(data)
    if isinstance(data, (bool, int, float, list, tuple)):
        try:
            arr = np.array(data)
        except ValueError as exc:  # ragged lists
            raise InvalidArgument(f"to_tensor: argument 'data' cannot become an array: {exc}") from None
        if arr.dtype.kind == "f":
            return arr.astype(to_numpy_dtype(get_default_dtype()))
        return arr.astype("int64") if arr.dtype.name == "int32" else arr
    raise InvalidArgument(f"to_tensor: cannot make a tensor of {type(data).__name__} {data!r}")


def _cast(x: Variable, dtype: str) -> Variable:
    from .manipulation import cast
    return cast(x, dtype)
