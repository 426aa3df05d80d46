"""Static-graph layers: ``static.nn.group_norm``, ``instance_norm``, ``prelu``, ``spectral_norm``.

Mirrors those functions of ``python/paddle/static/nn/common.py`` (Paddle 3.3.1, legacy IR): each
creates its parameters and appends one op with Paddle's names and attrs. Paddle's quirks kept:
group_norm creates its scale / bias only for a truthy ``param_attr`` / ``bias_attr`` (so by default
it has neither) and names its outputs ``_generated_var_N``; instance_norm creates scale and bias only
when both attrs are truthy (by default neither); spectral_norm's output is a ``_generated_var_N`` too.
Bad arguments raise ``InvalidArgument`` at the call (Paddle's ValueError / assertion messages).
"""
from __future__ import annotations

import math
from typing import Any, Optional, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument
from refimpl.nn.initializer import Constant, Normal

from ..layer_helper import LayerHelper, ParamAttr

if TYPE_CHECKING:
    from refimpl.framework.variable import Variable

__all__ = ["group_norm", "instance_norm", "prelu", "spectral_norm"]

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _check_input(x: Any, api: str, dtypes: Any = _FLOATS) -> None:
    from refimpl.framework.variable import Variable
    if not isinstance(x, Variable):
        raise InvalidArgument(f"{api}: input must be a static Variable, got {type(x).__name__}")
    if str(x.dtype) not in dtypes:
        raise InvalidArgument(f"{api}: input {x.name!r} must be of dtype {', '.join(dtypes)}, got {x.dtype}")


def _generated_var(helper: LayerHelper, dtype: Any, stop_gradient: bool = False) -> Variable:
    """A variable named ``_generated_var_N`` (Paddle's ``LayerHelper.create_variable`` without a name):
    ``Block.create_var`` without a name counts N per program, as Paddle 3.3.1 does."""
    return helper.main_program.current_block().create_var(dtype=dtype, persistable=False,
                                                          stop_gradient=stop_gradient)


def group_norm(input: Variable, groups: int, epsilon: float = 1e-05, param_attr: Any = None,
               bias_attr: Any = None, act: Optional[str] = None, data_layout: str = "NCHW",
               name: Optional[str] = None) -> Variable:
    """Group normalisation (op ``group_norm``), then ``act``."""
    api = "static.nn.group_norm"
    _check_input(input, api)
    if len(input.shape) < 2:
        raise InvalidArgument(f"{api}: the dimensions of input {input.name!r} should be more than 1, "
                              f"but received {len(input.shape)} (shape {list(input.shape)})")
    if data_layout not in ("NCHW", "NHWC"):
        raise InvalidArgument(f"{api}: data_layout got wrong value: received {data_layout!r} but only NCHW or "
                              "NHWC supported")
    helper = LayerHelper("group_norm", name=name)
    dtype = input.dtype
    param_shape = [input.shape[1] if data_layout == "NCHW" else input.shape[-1]]
    inputs = {"X": input}
    if param_attr:
        inputs["Scale"] = helper.create_parameter(param_attr, param_shape, dtype, default_initializer=Constant(1.0))
    if bias_attr:
        inputs["Bias"] = helper.create_parameter(bias_attr, param_shape, dtype, is_bias=True)
    mean = _generated_var(helper, dtype, stop_gradient=True)
    variance = _generated_var(helper, dtype, stop_gradient=True)
    out = _generated_var(helper, dtype)
    helper.append_op(type="group_norm", inputs=inputs, outputs={"Y": out, "Mean": mean, "Variance": variance},
                     attrs={"epsilon": epsilon, "groups": groups, "data_layout": data_layout})
    return helper.append_activation(out, act)


def instance_norm(input: Variable, epsilon: float = 1e-05, param_attr: Any = None, bias_attr: Any = None,
                  name: Optional[str] = None) -> Variable:
    """Instance normalisation (op ``instance_norm``)."""
    api = "static.nn.instance_norm"
    _check_input(input, api)
    if param_attr is False and bias_attr is not False:
        raise InvalidArgument(f"{api}: param_attr and bias_attr must be set to False at the same time, "
                              f"got bias_attr={bias_attr!r}")
    shape = list(input.shape)
    if not 2 <= len(shape) <= 5:
        raise InvalidArgument(f"{api}: expected 2D or 3D or 4D or 5D input (got {len(shape)}D input "
                              f"{input.name!r}, input shape is: {tuple(shape)})")
    helper = LayerHelper("instance_norm", name=name)
    dtype = "float32" if str(input.dtype) == "float16" else input.dtype
    inputs = {"X": input}
    if param_attr and bias_attr:
        inputs["Scale"] = helper.create_parameter(param_attr, [shape[1]], dtype, default_initializer=Constant(1.0))
        inputs["Bias"] = helper.create_parameter(bias_attr, [shape[1]], dtype, is_bias=True,
                                                 default_initializer=Constant(0.0))
    saved_mean = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    saved_variance = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(type="instance_norm", inputs=inputs,
                     outputs={"Y": out, "SavedMean": saved_mean, "SavedVariance": saved_variance},
                     attrs={"epsilon": epsilon})
    return out


_PRELU_FORMATS = ("NC", "NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC")


def prelu(x: Variable, mode: str, param_attr: Any = None, data_format: str = "NCHW",
          name: Optional[str] = None) -> Variable:
    """PReLU with a new alpha (Constant(0.25)) of shape ``[1]`` (``all``), ``[1, C, 1, 1]`` / ``[1, 1, 1, C]``
    (``channel``) or ``[1, *x.shape[1:]]`` (``element``) (op ``prelu``)."""
    api = "static.nn.prelu"
    _check_input(x, api, ("float16", "float32", "float64"))
    if mode not in ("all", "channel", "element"):
        raise InvalidArgument(f"{api}: mode should be one of all, channel, element, got {mode!r}")
    alpha_shape = [1]
    if mode == "channel":
        if data_format not in _PRELU_FORMATS:
            raise InvalidArgument(f"{api}: data_format must be one of {', '.join(_PRELU_FORMATS)} but receive "
                                  f"{data_format!r}")
        data_format = "NCHW" if data_format[1] == "C" else "NHWC"
        if len(x.shape) < 2:
            raise InvalidArgument(f"{api}: the input {x.name!r} must be at least 2-D when mode is 'channel', "
                                  f"got shape {list(x.shape)}")
        alpha_shape = [1, 1, 1, x.shape[-1]] if data_format == "NHWC" else [1, x.shape[1], 1, 1]
    elif mode == "element":
        if len(x.shape) < 1:
            raise InvalidArgument(f"{api}: the input {x.name!r} must be at least 1-D when mode is 'element'")
        alpha_shape = [1, *list(x.shape)[1:]]
    helper = LayerHelper("prelu", name=name)
    alpha = helper.create_parameter(param_attr, alpha_shape, x.dtype, default_initializer=Constant(0.25))
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="prelu", inputs={"X": x, "Alpha": alpha}, outputs={"Out": out},
                     attrs={"mode": mode, "data_format": data_format})
    return out


def append_spectral_norm(helper: LayerHelper, weight: Variable, u: Variable, v: Variable, dim: int,
                         power_iters: int, eps: float, out: Variable) -> Variable:
    """The ``spectral_norm`` op writing ``out`` (shared by ``static.nn.spectral_norm`` and ``nn.SpectralNorm``)."""
    helper.append_op(type="spectral_norm", inputs={"Weight": weight, "U": u, "V": v}, outputs={"Out": out},
                     attrs={"dim": dim, "power_iters": power_iters, "eps": eps})
    return out


def spectral_norm(weight: Variable, dim: int = 0, power_iters: int = 1, eps: float = 1e-12,
                  name: Optional[str] = None) -> Variable:
    """weight / sigma(weight) by power iteration, with new vectors U ([h]) and V ([w]) drawn from
    Normal(0, 1) and not trained (op ``spectral_norm``)."""
    api = "static.nn.spectral_norm"
    _check_input(weight, api, ("float32", "float64"))
    for arg, value, kind in (("dim", dim, int), ("power_iters", power_iters, int), ("eps", eps, float)):
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InvalidArgument(f"{api}: {arg} must be of type {kind.__name__}, got {value!r}")
    shape = list(weight.shape)
    if 0 in shape:
        raise InvalidArgument(f"{api}: any dimension of input {weight.name!r} cannot be equal to 0, got {shape}")
    if dim not in (0, 1):
        raise InvalidArgument(f"{api}: the input dim must be 0 (if weight in fc) or 1 (if weight in conv), "
                              f"but received dim={dim}")
    if len(shape) < 2:
        raise InvalidArgument(f"{api}: the rank of input {weight.name!r} should be greater equal than 2, "
                              f"but received shape {shape}")
    helper = LayerHelper("spectral_norm", name=name)
    h = shape[dim]
    w = math.prod(shape) // h
    u = helper.create_parameter(ParamAttr(), [h], weight.dtype, default_initializer=Normal(0.0, 1.0))
    u.stop_gradient = True
    v = helper.create_parameter(ParamAttr(), [w], weight.dtype, default_initializer=Normal(0.0, 1.0))
    v.stop_gradient = True
    return append_spectral_norm(helper, weight, u, v, dim, power_iters, eps, _generated_var(helper, weight.dtype))
