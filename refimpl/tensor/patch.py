"""Python operators and methods on static Variables (Paddle's ``math_op_patch`` and ``_getitem_static``).

Mirrors ``python/paddle/base/layers/math_op_patch.py`` as Paddle 2.6.2 runs
it (3.3.1's legacy branch is the same for these cases):

- ``x + c``, ``x - c``, ``c - x``, ``x * c``, ``x / c`` with a Python number
  append one ``scale`` op; a float with an integer x first casts x to
  float32 (``astype``), an int divides only after that cast;
- other ops with a number make it a tensor: a 0-D ``fill_constant`` on the
  right, or, reversed (``c / x``, ``c ** x``), a ``fill_constant`` of x's
  shape (``fill_constant_batch_size_like`` when x has a -1 dim);
- two Variables of different dtypes: ``+ - *`` promote two float dtypes to
  the wider one (with 2.6.2's "auto-promoted" UserWarning), everything else
  casts the right one to the left's dtype (a float one cast to an integer
  dtype warns too, where 2.6.2 is silent and 3.3.1 raises TypeError);
- ``<``, ``<=``, ``>``, ``>=``, ``!=`` append ``less_than`` ... with a bool
  output; all outputs are named ``tmp_k``.

Unlike Paddle, ``==`` and hashing keep Python identity semantics (the
runtime keys dicts and sets by Variable). ``x[...]`` is Paddle's
``_getitem_static`` for ints, slices (``strided_slice`` when a step is not
1), None and Ellipsis; tensor indices (advanced indexing) are not built.
``x.reshape(...)``, ``x.sum()`` ...: the ``paddle.<fn>`` of the same name, as
Paddle binds ``tensor_method_func``.
"""
from __future__ import annotations

import builtins
import warnings
from typing import Any, Callable, Optional

from refimpl.core.dtypes import convert_dtype, to_vartype
from refimpl.core.errors import InvalidArgument, OutOfRange, Unimplemented
from refimpl.framework import check_static_mode, unique_name
from refimpl.framework.variable import Variable

from .math import constant_like, new_tmp

_INT_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64"}
_FLOAT_WIDTH = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
_PROMOTING = {"__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__"}
_COMPARE = {"__ne__", "__lt__", "__le__", "__gt__", "__ge__"}
MAX_INTEGER = 2 ** 31 - 1


def _block(x: Variable):
    return x.block.program.current_block()


def astype(self: Variable, dtype: Any) -> Variable:
    """A ``cast`` to ``tmp_k`` (2.6.2 casts even to the same dtype); stop_gradient follows x."""
    check_static_mode("Variable.astype")
    out = new_tmp(self, convert_dtype(dtype))
    _block(self).append_op(type="cast", inputs={"X": [self]}, outputs={"Out": [out]},
                           attrs={"in_dtype": to_vartype(self.dtype), "out_dtype": to_vartype(out.dtype)})
    out.stop_gradient = self.stop_gradient
    return out


def _scalar_op(x: Variable, scale: float, bias: float) -> Variable:
    out = new_tmp(x, x.dtype)
    _block(x).append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [out]},
                        attrs={"scale": scale, "bias": bias})
    return out


def _batch_size_like(ref: Variable, value: float) -> Variable:
    """math_op_patch's ``create_tensor_with_batchsize``: the first -1 dim follows ref's, later ones are 1."""
    out = new_tmp(ref, ref.dtype)
    batch_dim, shape = -1, []
    for i, d in enumerate(ref.shape):
        if d < 0 and batch_dim < 0:
            batch_dim = i
        shape.append(1 if d < 0 and batch_dim != i else d)
    _block(ref).append_op(type="fill_constant_batch_size_like", inputs={"Input": [ref]}, outputs={"Out": [out]},
                          attrs={"shape": shape, "value": value, "input_dim_idx": batch_dim,
                                 "output_dim_idx": batch_dim})
    out.stop_gradient = True
    return out


def _promote(method: str, lhs: str, rhs: str) -> Optional[str]:
    """The common dtype of two float dtypes for ``+ - *`` (None: cast the right operand to the left's)."""
    if method not in _PROMOTING or lhs not in _FLOAT_WIDTH or rhs not in _FLOAT_WIDTH:
        return None
    if _FLOAT_WIDTH[lhs] == _FLOAT_WIDTH[rhs] == 16:
        return "float32"
    return lhs if _FLOAT_WIDTH[lhs] > _FLOAT_WIDTH[rhs] else rhs


def _warn_dtypes(op_type: str, lhs: str, rhs: str, common: Optional[str]) -> None:
    """2.6.2's UserWarning for a float promotion; refimpl's own, in the same words, for a float cast to int.

    With an integer and a float Variable 2.6.2 casts the right one to the left's dtype without a word
    (``int64_var * float32_var`` truncates to int64) and 3.3.1 raises TypeError; refimpl builds 2.6.2's
    program and says so.
    """
    if common is not None:
        warnings.warn(f"The input dtypes of OP {op_type} are paddle.{lhs} and paddle.{rhs}, the output will be "
                      f"auto-promoted to paddle.{common}")
    elif lhs in _INT_DTYPES and rhs in _FLOAT_WIDTH:  # the float operand loses its fraction
        warnings.warn(f"The input dtypes of OP {op_type} are paddle.{lhs} and paddle.{rhs}, the output will be "
                      f"auto-converted to paddle.{lhs} (the right operand is cast to the left's dtype, as Paddle "
                      f"2.6.2 does; 3.3.1 raises TypeError)")


def _creator(method: str, op_type: str, reverse: bool = False,
             scalar: Optional[Callable[[Variable, float], Variable]] = None) -> Callable:
    def impl(self: Variable, other: Any) -> Any:
        check_static_mode(f"Variable.{method}")
        if isinstance(other, float):
            if self.dtype in _INT_DTYPES:
                self = astype(self, "float32")
            if scalar is not None:
                return scalar(self, other)
        elif isinstance(other, int):
            other = float(other)
            if op_type == "elementwise_div" and self.dtype in _INT_DTYPES:
                self = astype(self, "float32")
            if scalar is not None:
                return scalar(self, other)
        elif not isinstance(other, Variable):
            return NotImplemented
        lhs = self.dtype
        if not isinstance(other, Variable):
            if not reverse:
                other = constant_like(self, other, [])
            elif any(d < 0 for d in self.shape):
                other = _batch_size_like(self, other)
            else:
                other = constant_like(self, other, list(self.shape))
        if other.dtype != lhs:
            common = _promote(method, lhs, other.dtype)
            _warn_dtypes(op_type, lhs, other.dtype, common)
            if common is None:
                other = astype(other, lhs)
            else:
                other = other if other.dtype == common else astype(other, common)
                self = self if lhs == common else astype(self, common)
        if reverse:
            self, other = other, self
        if op_type == "elementwise_div" and self.dtype in _INT_DTYPES:
            self, other = astype(self, "float32"), astype(other, "float32")
        out = new_tmp(self, "bool" if method in _COMPARE else self.dtype)
        attrs = {} if op_type == "matmul_v2" else {"axis": -1}
        _block(self).append_op(type=op_type, inputs={"X": [self], "Y": [other]}, outputs={"Out": out},
                               attrs=attrs)
        return out
    impl.__name__ = method
    return impl


_OPERATORS = {
    "__add__": _creator("__add__", "elementwise_add", False, lambda x, c: _scalar_op(x, 1.0, c)),
    "__radd__": _creator("__radd__", "elementwise_add", False, lambda x, c: _scalar_op(x, 1.0, c)),
    "__sub__": _creator("__sub__", "elementwise_sub", False, lambda x, c: _scalar_op(x, 1.0, -c)),
    "__rsub__": _creator("__rsub__", "elementwise_sub", True, lambda x, c: _scalar_op(x, -1.0, c)),
    "__mul__": _creator("__mul__", "elementwise_mul", False, lambda x, c: _scalar_op(x, c, 0.0)),
    "__rmul__": _creator("__rmul__", "elementwise_mul", False, lambda x, c: _scalar_op(x, c, 0.0)),
    "__truediv__": _creator("__truediv__", "elementwise_div", False, lambda x, c: _scalar_op(x, 1.0 / c, 0.0)),
    "__rtruediv__": _creator("__rtruediv__", "elementwise_div", True),
    "__pow__": _creator("__pow__", "elementwise_pow"),
    "__rpow__": _creator("__rpow__", "elementwise_pow", True),
    "__mod__": _creator("__mod__", "elementwise_mod"),
    "__matmul__": _creator("__matmul__", "matmul_v2"),
    "__ne__": _creator("__ne__", "not_equal"),
    "__lt__": _creator("__lt__", "less_than"),
    "__le__": _creator("__le__", "less_equal"),
    "__gt__": _creator("__gt__", "greater_than"),
    "__ge__": _creator("__ge__", "greater_equal"),
}


def _neg(self: Variable) -> Variable:
    check_static_mode("Variable.__neg__")
    return _scalar_op(self, -1.0, 0.0)


# ---- x[...] ----------------------------------------------------------------------------------
def _expand_ellipsis(x: Variable, items: list) -> list:
    count = builtins.sum(1 for it in items if it is Ellipsis)
    if count == 0:
        return items
    if count > 1:
        raise OutOfRange(f"Variable.__getitem__ of {x.name!r}: an index can only have a single ellipsis ('...')")
    i = items.index(Ellipsis)
    if i == len(items) - 1:
        return items[:-1]
    return items[:i] + [builtins.slice(None)] * (len(x.shape) - len(items) + items.count(None) + 1) + items[i + 1:]


def _parse_index(x: Variable, index: Any):
    """(axes, starts, ends, steps, decrease_axes, none_axes) of a basic index, as Paddle's ``parse_index``."""
    items = _expand_ellipsis(x, list(index) if isinstance(index, tuple) else [index])
    none_axes = [i for i, it in enumerate(items) if it is None]
    items = [it for it in items if it is not None]
    if len(items) > len(x.shape):
        raise OutOfRange(f"Variable.__getitem__ of {x.name!r}: {len(items)} indices for a tensor of rank "
                         f"{len(x.shape)}")
    axes, starts, ends, steps, decrease = [], [], [], [], []
    for dim, it in enumerate(items):
        if isinstance(it, bool) or not isinstance(it, (int, builtins.slice)):
            raise Unimplemented(f"Variable.__getitem__ of {x.name!r}: index {it!r} ({type(it).__name__}) is "
                                f"advanced indexing, which refimpl does not build; use ints, slices, None, ...")
        if isinstance(it, int):
            size = x.shape[dim]
            if size >= 0 and not -size <= it < size:
                raise OutOfRange(f"Variable.__getitem__ of {x.name!r}: index {it} is out of range for dim {dim} "
                                 f"of size {size}")
            decrease.append(dim)
            start, end, step = it, (it + 1 if it != -1 else MAX_INTEGER), 1
        else:
            if it.start is None and it.stop is None and it.step is None:
                continue
            for part in (it.start, it.stop, it.step):
                if part is not None and (isinstance(part, bool) or not isinstance(part, int)):
                    raise Unimplemented(f"Variable.__getitem__ of {x.name!r}: slice bound {part!r} must be an "
                                        f"int (tensor bounds are not built)")
            step = 1 if it.step is None else it.step
            if step == 0:
                raise InvalidArgument(f"Variable.__getitem__ of {x.name!r}: slice step must not be 0")
            start = it.start if it.start is not None else (0 if step > 0 else MAX_INTEGER)
            end = it.stop if it.stop is not None else (MAX_INTEGER if step > 0 else -MAX_INTEGER - 1)  # 3.3.1's; 2.6.2 wrote -1
        axes.append(dim)
        starts.append(start)
        ends.append(end)
        steps.append(step)
    return axes, starts, ends, steps, decrease, none_axes


def _getitem(self: Variable, index: Any) -> Variable:
    check_static_mode("Variable.__getitem__")
    axes, starts, ends, steps, decrease, none_axes = _parse_index(self, index)
    out = self
    if axes:
        strided = any(s != 1 for s in steps)
        op_type = "strided_slice" if strided else "slice"
        attrs = {"axes": axes, "starts": starts, "ends": ends, "decrease_axis": decrease}
        if strided:
            attrs["strides"] = steps
        attrs["infer_flags"] = [1] * len(axes)
        block = _block(self)
        out = block.create_var(name=unique_name.generate_with_ignorable_key(f"{self.name}_{op_type}"),
                               dtype=self.dtype)
        block.append_op(type=op_type, inputs={"Input": [self]}, outputs={"Out": [out]}, attrs=attrs)
    if none_axes:
        from .manipulation import unsqueeze
        out = unsqueeze(out, [a - builtins.sum(1 for d in decrease if d < a) for a in none_axes])
    return out


# Paddle's ``tensor_method_func`` names that refimpl.tensor implements become methods (x.reshape(...)).
_METHODS = ("abs", "add", "argmax", "broadcast_to", "cast", "clip", "concat", "cumsum", "divide", "exp", "expand",
            "flatten", "gather", "gather_nd", "log", "matmul", "max", "maximum", "mean", "min", "minimum",
            "multiply", "pow", "prod", "reciprocal", "reshape", "scale", "sigmoid", "sign", "slice", "split", "sqrt",
            "square", "squeeze", "stack", "subtract", "sum", "tanh", "tile", "topk", "transpose", "tril", "triu",
            "unsqueeze", "where")


def _install() -> None:
    from refimpl import tensor
    for name, fn in _OPERATORS.items():
        setattr(Variable, name, fn)
    Variable.__neg__ = _neg
    Variable.__getitem__ = _getitem
    Variable.astype = astype
    for name in _METHODS:
        fn = getattr(tensor, name, None)
        if fn is not None and not hasattr(Variable, name):
            setattr(Variable, name, fn)


_install()
