"""Static-graph layers: ``static.nn.fc``, ``embedding``, ``layer_norm``.

Mirrors ``paddle.static.nn``: each call creates its parameters (startup
initializer + main parameter) and appends the same ops with the same names
and attrs as Paddle's legacy implementation.
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Optional, Sequence, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument
from refimpl.nn.initializer import Constant

from .layer_helper import LayerHelper

if TYPE_CHECKING:
    from refimpl.framework.variable import Variable


def _check_var(x, api):
    from refimpl.framework.variable import Variable
    if not isinstance(x, Variable):
        raise InvalidArgument(f"{api}: input must be a static Variable, got {type(x).__name__}")


def fc(x: Variable, size: int, num_flatten_dims: int = 1, weight_attr: Any = None, bias_attr: Any = None,
       activation: Optional[str] = None, name: Optional[str] = None) -> Variable:
    """y = activation(x @ W + b), flattening x from ``num_flatten_dims`` on (op ``mul``)."""
    inputs = x if isinstance(x, (list, tuple)) else [x]
    helper = LayerHelper("fc", name=name)
    results = []
    for inp in inputs:
        _check_var(inp, "fc")
        nfd = len(inp.shape) - 1 if num_flatten_dims == -1 else num_flatten_dims
        if not 0 < nfd < len(inp.shape) + 1 or any(d < 0 for d in inp.shape[nfd:]):
            raise InvalidArgument(f"fc: input {inp.name!r} of shape {list(inp.shape)} cannot be flattened "
                                  f"at num_flatten_dims={num_flatten_dims}")
        k = functools.reduce(operator.mul, inp.shape[nfd:], 1)
        w = helper.create_parameter(weight_attr, [k, size], inp.dtype)
        tmp = helper.create_variable_for_type_inference(inp.dtype)
        helper.append_op(type="mul", inputs={"X": inp, "Y": w}, outputs={"Out": tmp},
                         attrs={"x_num_col_dims": nfd, "y_num_col_dims": 1})
        results.append(tmp)
    if len(results) == 1:
        pre_bias = results[0]
    else:
        pre_bias = helper.create_variable_for_type_inference(results[0].dtype)
        helper.append_op(type="sum", inputs={"X": results}, outputs={"Out": pre_bias})
    pre_act = helper.append_bias_op(pre_bias, bias_attr, dim_start=nfd)
    return helper.append_activation(pre_act, activation)


def embedding(input: Variable, size: Sequence[int], is_sparse: bool = False, is_distributed: bool = False,
              padding_idx: Optional[int] = None, param_attr: Any = None, dtype: Any = "float32") -> Variable:
    """Look up rows of a [vocab, dim] table (op ``lookup_table_v2``)."""
    _check_var(input, "embedding")
    helper = LayerHelper("embedding")
    w = helper.create_parameter(param_attr, size, dtype)
    out = helper.create_variable_for_type_inference(dtype)
    if padding_idx is None:
        padding_idx = -1
    elif padding_idx < 0:
        padding_idx += size[0]
    helper.append_op(type="lookup_table_v2", inputs={"Ids": input, "W": w}, outputs={"Out": out},
                     attrs={"padding_idx": padding_idx})
    return out


def layer_norm(input: Variable, scale: bool = True, shift: bool = True, begin_norm_axis: int = 1,
               epsilon: float = 1e-05, param_attr: Any = None, bias_attr: Any = None,
               act: Optional[str] = None, name: Optional[str] = None) -> Variable:
    """Normalise over the dims from ``begin_norm_axis`` on (op ``layer_norm``)."""
    _check_var(input, "layer_norm")
    helper = LayerHelper("layer_norm", name=name)
    norm_shape = [functools.reduce(operator.mul, input.shape[begin_norm_axis:], 1)]
    inputs = {"X": input}
    if scale:
        inputs["Scale"] = helper.create_parameter(param_attr, norm_shape, input.dtype,
                                                  default_initializer=Constant(1.0))
    if shift:
        inputs["Bias"] = helper.create_parameter(bias_attr, norm_shape, input.dtype, is_bias=True)
    mean = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    var = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type="layer_norm", inputs=inputs,
                     outputs={"Y": out, "Mean": mean, "Variance": var},
                     attrs={"epsilon": epsilon, "begin_norm_axis": begin_norm_axis})
    return helper.append_activation(out, act)
