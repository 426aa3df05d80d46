"""Static-graph layers: ``static.nn.fc``, ``embedding``, ``layer_norm``, ``conv2d``, ``batch_norm``.

Mirrors ``paddle.static.nn`` (``python/paddle/static/nn/common.py``): each call creates its
parameters (startup initializer + main parameter) and appends the same ops with the same names
and attrs as Paddle's legacy implementation.
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Optional, Sequence, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument
from refimpl.nn.initializer import Constant, Normal

from ..layer_helper import LayerHelper, ParamAttr

if TYPE_CHECKING:
    from refimpl.framework.variable import Variable

__all__ = ['fc', 'embedding', 'layer_norm', 'conv2d', 'batch_norm']


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


def _append_bias(helper: LayerHelper, x: Variable, bias_attr: Any, dim_start: int, dim_end: int) -> Variable:
    """x + b with b of shape x.shape[dim_start:dim_end] (Paddle's ``append_bias_op(dim_start, dim_end)``)."""
    if bias_attr is False:
        return x
    b = helper.create_parameter(bias_attr, list(x.shape[dim_start:dim_end]), x.dtype, is_bias=True)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="elementwise_add", inputs={"X": [x], "Y": [b]}, outputs={"Out": [out]},
                     attrs={"axis": dim_start})
    return out


def conv2d(input: Variable, num_filters: int, filter_size: Any, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: Optional[int] = None, param_attr: Any = None, bias_attr: Any = None,
           use_cudnn: bool = True, act: Optional[str] = None, name: Optional[str] = None,
           data_format: str = "NCHW") -> Variable:
    """Convolution with a new filter ``[num_filters, C / groups, KH, KW]`` (Normal(0, sqrt(2 / (KH*KW*C))))
    and bias ``[num_filters]``, then ``act`` (ops ``conv2d`` or ``depthwise_conv2d``, ``elementwise_add``)."""
    from refimpl.nn.functional.conv import check_data_format, check_fits, check_input, to_list, update_padding
    api = "static.nn.conv2d"
    check_input(api, input, 4)
    if not isinstance(use_cudnn, bool):
        raise InvalidArgument(f"{api}: use_cudnn must be True or False, got {use_cudnn!r}")
    channel_last = check_data_format(api, data_format)
    num_channels = input.shape[3] if channel_last else input.shape[1]
    if num_channels < 0:
        raise InvalidArgument(f"{api}: the channel dim of input {input.name!r} (shape {list(input.shape)}) "
                              "must be known")
    if param_attr is False:
        raise InvalidArgument(f"{api}: param_attr must not be False")
    if groups is not None and (not isinstance(groups, int) or groups <= 0 or num_channels % groups):
        raise InvalidArgument(f"{api}: groups={groups!r} must be an int > 0 dividing the {num_channels} "
                              f"channels of input {input.name!r} (shape {list(input.shape)})")
    op_type = "conv2d"
    if num_channels == groups and num_filters % num_channels == 0 and not use_cudnn:
        op_type = "depthwise_conv2d"
    helper = LayerHelper(op_type, name=name)
    filter_size = to_list(api, "filter_size", filter_size, 2)
    stride = to_list(api, "stride", stride, 2)
    dilation = to_list(api, "dilation", dilation, 2)
    padding, algo = update_padding(api, padding, channel_last)
    check_fits(api, input, filter_size, stride, padding, dilation, algo, channel_last)
    std = (2.0 / (filter_size[0] * filter_size[1] * num_channels)) ** 0.5
    filter_shape = [num_filters, num_channels // (groups or 1), *filter_size]
    w = helper.create_parameter(param_attr, filter_shape, input.dtype, default_initializer=Normal(0.0, std))
    pre_bias = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(type=op_type, inputs={"Input": input, "Filter": w}, outputs={"Output": pre_bias},
                     attrs={"strides": stride, "paddings": padding, "dilations": dilation,
                            "groups": 1 if groups is None else groups, "padding_algorithm": algo,
                            "data_format": data_format})
    dim = 3 if channel_last else 1
    return helper.append_activation(_append_bias(helper, pre_bias, bias_attr, dim, dim + 1), act)


def batch_norm(input: Variable, act: Optional[str] = None, is_test: bool = False, momentum: Any = 0.9,
               epsilon: float = 1e-05, param_attr: Any = None, bias_attr: Any = None,
               data_layout: str = "NCHW", in_place: bool = False, name: Optional[str] = None,
               moving_mean_name: Optional[str] = None, moving_variance_name: Optional[str] = None,
               do_model_average_for_mean_and_var: bool = True, use_global_stats: bool = False) -> Variable:
    """Batch normalisation over the channel dim with new scale / bias parameters and running mean /
    variance (trainable=False, stop_gradient), then ``act`` (op ``batch_norm``)."""
    from refimpl.framework.variable import Variable as _Variable
    api = "static.nn.batch_norm"
    _check_var(input, api)
    if bias_attr is False:
        raise InvalidArgument(f"{api}: bias_attr must not be False")
    shape = list(input.shape)
    if not 2 <= len(shape) <= 5:
        raise InvalidArgument(f"{api}: input {input.name!r} must be 2-D to 5-D, got shape {shape}")
    if data_layout not in ("NCHW", "NHWC"):
        raise InvalidArgument(f"{api}: data_layout must be 'NCHW' or 'NHWC', got {data_layout!r}")
    helper = LayerHelper("batch_norm", name=name)
    dtype = "float32" if str(input.dtype) in ("float16", "bfloat16") else input.dtype
    param_shape = [shape[1] if data_layout == "NCHW" else shape[-1]]
    scale = helper.create_parameter(param_attr, param_shape, dtype, default_initializer=Constant(1.0))
    bias = helper.create_parameter(bias_attr, param_shape, dtype, is_bias=True)
    stats = []
    for stat_name, value in ((moving_mean_name, 0.0), (moving_variance_name, 1.0)):
        attr = ParamAttr(name=stat_name, initializer=Constant(value), trainable=False,
                         do_model_average=do_model_average_for_mean_and_var)
        stat = helper.create_parameter(attr, param_shape, dtype)
        stat.stop_gradient = True
        stats.append(stat)
    mean, variance = stats
    saved_mean = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    saved_variance = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    outputs = {"Y": None, "MeanOut": mean, "VarianceOut": variance, "SavedMean": saved_mean,
               "SavedVariance": saved_variance}
    if not is_test:
        outputs["ReserveSpace"] = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    outputs["Y"] = input if in_place else helper.create_variable_for_type_inference(dtype)
    inputs = {"X": input, "Scale": scale, "Bias": bias, "Mean": mean, "Variance": variance}
    attrs = {"epsilon": epsilon, "is_test": is_test, "data_layout": data_layout,
             "use_global_stats": use_global_stats}
    if isinstance(momentum, _Variable):
        inputs["MomentumTensor"] = momentum
    else:
        attrs["momentum"] = momentum
    helper.append_op(type="batch_norm", inputs=inputs, outputs=outputs, attrs=attrs)
    return helper.append_activation(outputs["Y"], act)
