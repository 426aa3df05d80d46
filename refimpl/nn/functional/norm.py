"""Normalisation: layer_norm, batch_norm, group_norm, instance_norm (``python/paddle/nn/functional/norm.py``,
static branch).

``layer_norm`` appends one ``layer_norm`` op normalising the trailing dims that
``normalized_shape`` names (``begin_norm_axis = x.ndim - len(normalized_shape)``);
``Scale`` / ``Bias`` are left empty when no weight / bias is given. ``batch_norm``
appends one ``batch_norm`` op whose ``MeanOut`` / ``VarianceOut`` are the running
statistics themselves, with Paddle's rule for ``is_test`` / ``use_global_stats`` /
``trainable_statistics`` and a ``ReserveSpace`` output only when training or when
``trainable_statistics``. Temporaries are named ``layer_norm_k.tmp_*`` /
``batch_norm_k.tmp_*`` in Paddle's order (saved mean, saved variance, output, reserve).
``group_norm`` appends one ``group_norm`` op (``data_format`` ``NC*`` → ``NCHW``, ``N*C`` → ``NHWC``;
temporaries mean, variance, output); ``instance_norm`` one ``instance_norm`` op whose Scale / Bias
are set only when both weight and bias are given, as in Paddle (temporaries saved mean, saved
variance, output). Paddle's static instance_norm also passes ``momentum`` / ``data_format`` attrs
that the op does not declare and that Paddle's program then does not hold; refimpl leaves them out.
"""
from __future__ import annotations

import numbers
from typing import Optional, Sequence, Union

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import check_variable

__all__ = ["layer_norm", "batch_norm", "group_norm", "instance_norm"]

_BN_FORMATS = ("NC", "NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC")
_GN_FORMATS = ("NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC")
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _param_dtype(x: Variable) -> str:
    return "float32" if x.dtype in ("float16", "bfloat16") else x.dtype


def _check_float(x: Variable, api: str) -> None:
    if x.dtype not in _FLOATS:
        raise InvalidArgument(f"{api}: input {x.name!r} must be float16, bfloat16, float32 or float64, got {x.dtype}")


def layer_norm(x: Variable, normalized_shape: Union[int, Sequence[int]], weight: Optional[Variable] = None,
               bias: Optional[Variable] = None, epsilon: float = 1e-05, name: Optional[str] = None) -> Variable:
    """Normalise ``x`` over its last ``len(normalized_shape)`` dims (op ``layer_norm``)."""
    check_variable(x, "layer_norm")
    _check_float(x, "layer_norm")
    if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
        normalized_shape = [int(normalized_shape)]
    elif isinstance(normalized_shape, (list, tuple)):
        normalized_shape = list(normalized_shape)
    else:
        raise InvalidArgument(f"layer_norm: normalized_shape should be int, list of ints or tuple of ints, "
                              f"got {normalized_shape!r}")
    shape = list(x.shape)
    begin = len(shape) - len(normalized_shape)
    tail = shape[begin:] if begin >= 0 else []
    if begin < 0 or any(a != b and -1 not in (a, b) for a, b in zip(tail, normalized_shape)):
        raise InvalidArgument(f"layer_norm: given normalized_shape is {normalized_shape}, expected input with "
                              f"shape [*, {str(normalized_shape)[1:]}, but got input shape {shape}")
    helper = LayerHelper("layer_norm", name=name)
    inputs = {"X": [x]}
    if weight is not None:
        inputs["Scale"] = [weight]
    if bias is not None:
        inputs["Bias"] = [bias]
    mean = helper.create_variable_for_type_inference(_param_dtype(x), stop_gradient=True)
    variance = helper.create_variable_for_type_inference(_param_dtype(x), stop_gradient=True)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="layer_norm", inputs=inputs, outputs={"Y": out, "Mean": mean, "Variance": variance},
                     attrs={"epsilon": float(epsilon), "begin_norm_axis": begin})
    return out


def batch_norm(x: Variable, running_mean: Variable, running_var: Variable, weight: Optional[Variable] = None,
               bias: Optional[Variable] = None, training: bool = False, momentum: float = 0.9,
               epsilon: float = 1e-05, data_format: str = "NCHW", use_global_stats: Optional[bool] = None,
               name: Optional[str] = None) -> Variable:
    """Batch normalisation over the channel dim (op ``batch_norm``); updates the running statistics."""
    check_variable(x, "batch_norm")
    _check_float(x, "batch_norm")
    if len(x.shape) < 2:
        raise InvalidArgument(f"batch_norm: input {x.name!r} must be at least 2-D, got shape {list(x.shape)}")
    if data_format not in _BN_FORMATS:
        raise InvalidArgument(f"batch_norm: data_format must be one of {', '.join(_BN_FORMATS)}, "
                              f"got {data_format!r}")
    layout = "NCHW" if data_format[1] == "C" else "NHWC"
    if use_global_stats is None:
        use_global_stats, trainable_statistics = not training, False
    else:
        trainable_statistics = not use_global_stats
    inputs = {"X": [x], "Mean": [running_mean], "Variance": [running_var]}
    if weight is not None:
        inputs["Scale"] = [weight]
    if bias is not None:
        inputs["Bias"] = [bias]
    helper = LayerHelper("batch_norm", name=name)
    saved_mean = helper.create_variable_for_type_inference(_param_dtype(x), stop_gradient=True)
    saved_var = helper.create_variable_for_type_inference(_param_dtype(x), stop_gradient=True)
    out = helper.create_variable_for_type_inference(x.dtype)
    outputs = {"Y": [out], "MeanOut": [running_mean], "VarianceOut": [running_var],
               "SavedMean": [saved_mean], "SavedVariance": [saved_var]}
    if training or trainable_statistics:
        outputs["ReserveSpace"] = [helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)]
    helper.append_op(type="batch_norm", inputs=inputs, outputs=outputs,
                     attrs={"momentum": float(momentum), "epsilon": float(epsilon), "is_test": not training,
                            "data_layout": layout, "use_global_stats": bool(use_global_stats),
                            "trainable_statistics": bool(trainable_statistics)})
    return out


def group_norm(x: Variable, num_groups: int, epsilon: float = 1e-05, weight: Optional[Variable] = None,
               bias: Optional[Variable] = None, data_format: str = "NCHW", name: Optional[str] = None) -> Variable:
    """Normalise each group of ``num_groups`` consecutive channels (op ``group_norm``)."""
    check_variable(x, "group_norm")
    _check_float(x, "group_norm")
    if data_format not in _GN_FORMATS:
        raise InvalidArgument(f"group_norm: unsupported data layout {data_format!r}, expected one of "
                              f"{', '.join(_GN_FORMATS)}")
    layout = "NCHW" if data_format[1] == "C" else "NHWC"
    helper = LayerHelper("group_norm", name=name)
    mean = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    variance = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    inputs = {"X": [x]}
    if bias is not None:
        inputs["Bias"] = [bias]
    if weight is not None:
        inputs["Scale"] = [weight]
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="group_norm", inputs=inputs, outputs={"Y": out, "Mean": mean, "Variance": variance},
                     attrs={"epsilon": float(epsilon), "groups": num_groups, "data_layout": layout})
    return out


def instance_norm(x: Variable, running_mean: Optional[Variable] = None, running_var: Optional[Variable] = None,
                  weight: Optional[Variable] = None, bias: Optional[Variable] = None, use_input_stats: bool = True,
                  momentum: float = 0.9, eps: float = 1e-05, data_format: str = "NCHW",
                  name: Optional[str] = None) -> Variable:
    """Normalise every (sample, channel) over its remaining dims (op ``instance_norm``); ``running_mean``,
    ``running_var``, ``use_input_stats`` and ``momentum`` are accepted and unused, as in Paddle."""
    check_variable(x, "instance_norm")
    _check_float(x, "instance_norm")
    inputs = {"X": [x]}
    if weight is not None and bias is not None:
        inputs["Scale"], inputs["Bias"] = [weight], [bias]
    helper = LayerHelper("instance_norm", name=name)
    saved_mean = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    saved_variance = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="instance_norm", inputs=inputs,
                     outputs={"Y": [out], "SavedMean": [saved_mean], "SavedVariance": [saved_variance]},
                     attrs={"epsilon": float(eps)})
    return out
