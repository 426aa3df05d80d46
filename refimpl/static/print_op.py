"""``paddle.static.Print``: a ``print`` op that shows a tensor each time the program runs.

Mirrors ``Print`` in ``python/paddle/static/nn/control_flow.py``: one ``print``
op from ``input`` to a new ``print_N.tmp_0`` that the program goes on with
(use the returned variable, or the op may be pruned away), attrs as Paddle's
(``print_phase`` upper-cased), and in the backward pass a second ``print`` of
the gradient when the phase allows it. The op writes to stdout (as Paddle's, which writes to ``std::cout``)
(``refimpl/ops/print_ops.py``).
"""
from __future__ import annotations

from typing import Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.ops.print_ops import PHASES

from .layer_helper import LayerHelper

__all__ = ["Print"]

_DTYPES = ("bfloat16", "float16", "float32", "float64", "int32", "int64", "bool", "uint16")


def Print(input: Variable, first_n: int = -1, message: Optional[str] = None, summarize: int = 20,
          print_tensor_name: bool = True, print_tensor_type: bool = True, print_tensor_shape: bool = True,
          print_tensor_layout: bool = True, print_tensor_lod: bool = True,
          print_phase: str = "both") -> Variable:
    """Append a ``print`` op of ``input``; returns its output (``input``'s values)."""
    if not isinstance(input, Variable):
        raise InvalidArgument(f"paddle.static.Print: input must be a static Variable, got {type(input).__name__}")
    if input.dtype not in _DTYPES:
        raise InvalidArgument(f"paddle.static.Print: input {input.name!r} has dtype {input.dtype}; expected one "
                              f"of {list(_DTYPES)}")
    phase = print_phase.upper() if isinstance(print_phase, str) else print_phase
    if phase not in PHASES:
        raise InvalidArgument(f"paddle.static.Print: print_phase must be one of 'forward', 'backward', 'both'; "
                              f"got {print_phase!r}")
    helper = LayerHelper("print")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type="print", inputs={"In": [input]}, outputs={"Out": [out]},
                     attrs={"first_n": int(first_n), "summarize": int(summarize), "message": message or "",
                            "print_tensor_name": print_tensor_name, "print_tensor_type": print_tensor_type,
                            "print_tensor_shape": print_tensor_shape, "print_tensor_layout": print_tensor_layout,
                            "print_tensor_lod": print_tensor_lod, "print_phase": phase})
    return out
