"""Inputs: embedding, one_hot (``python/paddle/nn/functional/input.py``, static branch).

``embedding`` is one ``lookup_table_v2`` op (a negative ``padding_idx`` counts
from the end of the table, ``None`` is -1: no padding row); ``one_hot`` is one
``one_hot_v2`` op writing float32. Differences: ``max_norm`` and
``scale_grad_by_freq`` are not supported (``Unimplemented``); ``one_hot`` needs
``num_classes`` (Paddle's ``-1`` reads ``x.max()`` at build time, which a static
Variable has no value for).
"""
from __future__ import annotations

from typing import Optional

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import check_variable

__all__ = ["embedding", "one_hot"]

_INTS = ("uint8", "int8", "int16", "int32", "int64")


def embedding(x: Variable, weight: Variable, padding_idx: Optional[int] = None, max_norm: Optional[float] = None,
              norm_type: float = 2.0, sparse: bool = False, scale_grad_by_freq: bool = False,
              name: Optional[str] = None) -> Variable:
    """Rows of ``weight`` [vocab, dim] picked by the ids ``x`` (op ``lookup_table_v2``)."""
    check_variable(x, "embedding")
    check_variable(weight, "embedding")
    if x.dtype not in _INTS:
        raise InvalidArgument(f"embedding: ids {x.name!r} must be an integer tensor, got {x.dtype}")
    if max_norm or scale_grad_by_freq:
        raise Unimplemented("embedding: max_norm and scale_grad_by_freq are not supported")
    vocab = weight.shape[0]
    idx = -1 if padding_idx is None else (padding_idx if padding_idx >= 0 else vocab + padding_idx)
    if vocab != 0 and (idx >= vocab or idx < -vocab):
        raise InvalidArgument(f"embedding: padding_idx must be within [-{vocab}, {vocab}), got {padding_idx}")
    helper = LayerHelper("embedding", name=name)
    out = helper.create_variable_for_type_inference(weight.dtype)
    helper.append_op(type="lookup_table_v2", inputs={"Ids": x, "W": weight}, outputs={"Out": out},
                     attrs={"padding_idx": idx})
    return out


def one_hot(x: Variable, num_classes: int, name: Optional[str] = None) -> Variable:
    """float32 ``[..., num_classes]`` with a 1 at each label (op ``one_hot_v2``)."""
    check_variable(x, "one_hot")
    if x.dtype not in ("int32", "int64"):
        raise InvalidArgument(f"one_hot: input {x.name!r} must be int32 or int64, got {x.dtype}")
    helper = LayerHelper("one_hot_v2", name=name)
    out = helper.create_variable_for_type_inference("float32")
    if isinstance(num_classes, Variable):
        num_classes.stop_gradient = True
        inputs, attrs = {"X": x, "depth_tensor": num_classes}, {"allow_out_of_range": False}
    else:
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise InvalidArgument(f"one_hot: num_classes must be a positive int, got {num_classes!r}")
        inputs, attrs = {"X": x}, {"depth": num_classes, "allow_out_of_range": False}
    helper.append_op(type="one_hot_v2", inputs=inputs, outputs={"Out": out}, attrs=attrs)
    return out
