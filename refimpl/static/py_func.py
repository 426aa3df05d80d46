"""``paddle.static.py_func`` (``python/paddle/static/nn/common.py``).

Registers ``func`` (and ``backward_func``) in the process-wide list of
``refimpl/ops/py_func_ops.py`` — a new id for every call, as Paddle's ``PyFuncRegistry`` —
and appends one ``py_func`` op (X: ``x``; Out: ``out``, whose variables the caller creates
with their shapes and dtypes; attrs ``forward_callable_id``, ``backward_callable_id``
(-1 without ``backward_func``) and ``backward_skip_vars``, the names of
``skip_vars_in_backward_input``). Returns ``out`` as given. The backward function gets the
forward inputs, then the forward outputs (minus the skipped ones), then the gradients of the
outputs, and returns one gradient (or None) per forward input.
"""
from typing import Any, Callable, List, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.ops.py_func_ops import register_callable
from refimpl.static.layer_helper import LayerHelper

__all__ = ["py_func"]


def _var_list(v: Any, arg: str) -> List[Variable]:
    if v is None:
        return []
    items = [v] if isinstance(v, Variable) else list(v) if isinstance(v, (list, tuple)) else None
    if items is None or not all(isinstance(i, Variable) for i in items):
        raise InvalidArgument(f"py_func: argument '{arg}' must be a Variable or a list / tuple of Variables, "
                              f"got {type(v).__name__}")
    return items


def _spec(v: Variable, suffix: str = "") -> tuple:
    return (v.name + suffix, tuple(v.shape) if v.shape is not None else None, str(v.dtype))


def py_func(func: Callable[..., Any], x: Any, out: Any, backward_func: Optional[Callable[..., Any]] = None,
            skip_vars_in_backward_input: Any = None) -> Any:
    """Run ``func`` (NumPy arrays in, arrays out) as an op of the current block."""
    xs, outs = _var_list(x, "x"), _var_list(out, "out")
    helper = LayerHelper("py_func")
    fwd_id = register_callable(func, [_spec(o) for o in outs])
    bwd_id = register_callable(backward_func, [_spec(v, "@GRAD") for v in xs]) if backward_func is not None else -1
    for o in outs:
        if not o.shape:
            raise InvalidArgument(f"py_func: the shape of output {o.name!r} must be given by the caller "
                                  f"(create it with a shape)")
    skip: List[str] = []
    if backward_func is not None and skip_vars_in_backward_input is not None:
        fwd_names = {v.name for v in xs + outs}
        for v in _var_list(skip_vars_in_backward_input, "skip_vars_in_backward_input"):
            if v.name not in fwd_names:
                raise InvalidArgument(f"py_func: variable {v.name!r} of skip_vars_in_backward_input is not "
                                      f"among the forward inputs and outputs")
            if v.name not in skip:
                skip.append(v.name)
    helper.append_op(type="py_func", inputs={"X": xs}, outputs={"Out": outs},
                     attrs={"forward_callable_id": fwd_id, "backward_callable_id": bwd_id,
                            "backward_skip_vars": skip})
    return out
