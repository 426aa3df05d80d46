"""The ``py_func`` op: a registered Python callable run as an op (+ its grad, another py_func).

Mirrors Paddle's ``py_func`` (``paddle/fluid/operators/py_func_op.cc``; the Python side is
``PyFuncRegistry`` in ``python/paddle/static/nn/common.py``): every callable handed to
``paddle.static.py_func`` is appended to one process-wide list and the op stores its index in
``forward_callable_id`` (``backward_callable_id``: the backward function's, -1 for none). The
kernel calls the callable with the arrays of X and stores what it returns in Out, one value per
output (a single value may be returned bare; a function with no outputs returns None).

The grad op is a ``py_func`` whose ``forward_callable_id`` is the backward function: its X is the
forward X, then the forward Out (minus ``backward_skip_vars``), then the gradients of Out; its Out
is the gradient of each forward X, ``@EMPTY@`` for those not wanted, as Paddle's
``PyFuncOpGradDescMaker`` builds it. The backward function returns one value (or None) per
forward input.

Unlike Paddle, which stores whatever the callable returns, a result whose dtype or shape differs
from the output variable's (-1 matching any size) is an InvalidArgument naming the variable, and
an exception raised by the callable becomes an External error naming py_func and the function
(Paddle re-raises the callable's own exception).
"""
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import EnforceNotMet, External, InvalidArgument, NotFound

from .registry import EMPTY_VAR_NAME, register_op

__all__ = ["register_callable", "registered_callable", "call_registered"]

Spec = Tuple[str, Tuple[int, ...], str]  # what a result must look like: var name, shape, dtype


class _Registered:
    __slots__ = ("func", "outputs")

    def __init__(self, func: Callable[..., Any], outputs: Sequence[Spec]) -> None:
        self.func, self.outputs = func, list(outputs)


_CALLABLES: List[_Registered] = []


def register_callable(func: Callable[..., Any], outputs: Sequence[Spec]) -> int:
    """Append ``func`` to the process-wide list; returns its id. ``outputs``: the spec of each result."""
    if func is None or not callable(func):
        raise InvalidArgument(f"py_func: func must be a Python callable, got {type(func).__name__}")
    _CALLABLES.append(_Registered(func, outputs))
    return len(_CALLABLES) - 1


def registered_callable(callable_id: int) -> Callable[..., Any]:
    return _entry(callable_id).func


def _entry(callable_id: int) -> _Registered:
    if not 0 <= callable_id < len(_CALLABLES):
        raise NotFound(f"py_func: no Python callable is registered with id {callable_id} "
                       f"({len(_CALLABLES)} registered in this process)")
    return _CALLABLES[callable_id]


def _func_name(func: Callable[..., Any]) -> str:
    return getattr(func, "__qualname__", None) or type(func).__name__


def call_registered(callable_id: int, args: Sequence[Any]) -> List[Optional[np.ndarray]]:
    """Call callable ``callable_id`` on ``args``; its results checked against the registered specs."""
    entry = _entry(callable_id)
    name = _func_name(entry.func)
    try:
        ret = entry.func(*args)
    except EnforceNotMet:
        raise
    except Exception as exc:
        raise External(f"py_func: the Python function {name!r} raised {type(exc).__name__}: {exc}") from exc
    ret = tuple(ret) if isinstance(ret, (list, tuple)) else (ret,)
    specs = entry.outputs
    if len(ret) != len(specs):
        if not specs and ret == (None,):
            return []
        raise InvalidArgument(f"py_func: the Python function {name!r} returned {len(ret)} value(s), "
                              f"but the op has {len(specs)} output(s) {[s[0] for s in specs]}")
    return [None if r is None else _checked(np.asarray(r), spec, name) for r, spec in zip(ret, specs)]


def _checked(value: np.ndarray, spec: Spec, func_name: str) -> np.ndarray:
    var, shape, dtype = spec
    if dtype is not None and value.dtype != np.dtype(dtype):
        raise InvalidArgument(f"py_func: the Python function {func_name!r} returned dtype {value.dtype} "
                              f"for output {var!r}, which is {dtype}")
    if shape is not None and (len(shape) != value.ndim
                              or any(d not in (-1, v) for d, v in zip(shape, value.shape))):
        raise InvalidArgument(f"py_func: the Python function {func_name!r} returned shape {list(value.shape)} "
                              f"for output {var!r}, which is {list(shape)}")
    return np.ascontiguousarray(value)


def _py_func_grad_maker(g):
    fwd_attrs = g.attrs()
    backward_id = fwd_attrs.get("backward_callable_id", -1)
    if backward_id < 0:
        return []
    skip = set(fwd_attrs.get("backward_skip_vars", []))
    grads = [n + "@GRAD" for n in g.input("X")]
    if all(n in g.no_grad_set for n in grads):
        return []
    ins = [n for n in g.input("X") + g.output("Out") if n not in skip] + g.output_grad("Out")
    outs = [EMPTY_VAR_NAME if n in g.no_grad_set else n for n in grads]
    attrs = {"forward_callable_id": backward_id, "backward_callable_id": -1, "backward_skip_vars": []}
    return [g.op("py_func", {"X": ins}, {"Out": outs}, attrs)]


@register_op("py_func", ["X*"], ["Out*"],
             {"forward_callable_id": 0, "backward_callable_id": -1, "backward_skip_vars": []},
             grad=_py_func_grad_maker)
def py_func(X, *, forward_callable_id):
    return call_registered(forward_callable_id, list(X))
