"""``paddle.static.WeightNormParamAttr`` and the weight-norm reparametrisation it asks for.

Mirrors ``WeightNormParamAttr`` (``python/paddle/base/param_attr.py``) and
``LayerHelperBase._create_weight_normalize`` (``python/paddle/base/layer_helper_base.py``) of
Paddle 3.3.1: a weight ``w`` created with this attr is two parameters, ``<name>_g`` (the norm:
``[1, ..., 1]``, or ``shape[dim]`` at ``dim``) and ``<name>_v`` (the direction, ``w``'s shape and
initializer), and ``w = v * (g / ||v||)`` with the norm taken over every dim but ``dim`` (all dims
for ``dim=None``). The startup program initialises ``v`` and sets ``g = ||v||`` (so ``w`` starts
as ``v``); the main program computes ``w`` with ``abs``, ``pow``, ``reduce_sum``, ``pow`` (and
``reshape2`` around them for a ``dim``), ``elementwise_div`` and ``elementwise_mul``; the
temporaries are named ``<helper>.weight_norm_{norm,abs,pow,sum,reshape}_N`` from the main
program's counter, ``reshape2``'s XShape is the one var ``Xshape``, as in Paddle. Every such ``w``
is appended to ``WeightNormParamAttr.params_with_weight_norm``.

``create_weight_normalize`` is what ``LayerHelper.create_parameter`` calls for such an attr.
Unlike Paddle, a ``dim`` other than None, 0 or the last one (Paddle transposes there with the
legacy ``transpose`` op, which refimpl does not have) is an Unimplemented error.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper, ParamAttr

__all__ = ["WeightNormParamAttr"]


class WeightNormParamAttr(ParamAttr):
    """A ParamAttr asking for weight normalisation over every dim but ``dim``."""

    params_with_weight_norm: List[Variable] = []

    def __init__(self, dim: Optional[int] = None, name: Optional[str] = None, initializer: Any = None,
                 learning_rate: float = 1.0, regularizer: Any = None, trainable: bool = True,
                 do_model_average: bool = False, need_clip: bool = True) -> None:
        super().__init__(name=name, initializer=initializer, learning_rate=learning_rate, regularizer=regularizer,
                         trainable=trainable, do_model_average=do_model_average, need_clip=need_clip)
        self.dim = dim
        self.do_model_average = do_model_average


def _tmp(helper: LayerHelper, block: Any, what: str, dtype: Any) -> Variable:
    name = helper.main_program.name_generator(f"{helper.name}.weight_norm_{what}")
    return block.create_var(name=name, dtype=dtype, persistable=False)


def _reshape(helper, block, x, shape, out=None):
    out = out if out is not None else _tmp(helper, block, "reshape", x.dtype)
    x_shape = block.create_var(name="Xshape", dtype=x.dtype)
    block.append_op(type="reshape2", inputs={"X": [x]}, outputs={"Out": [out], "XShape": [x_shape]},
                    attrs={"shape": list(shape)})
    return out


def _norm(helper, block, x, out=None, dim=None):
    """(sum |x| ** 2 over ``dim``, all dims for None) ** 0.5."""
    out = out if out is not None else _tmp(helper, block, "norm", x.dtype)
    abs_out = _tmp(helper, block, "abs", x.dtype)
    block.append_op(type="abs", inputs={"X": [x]}, outputs={"Out": [abs_out]})
    pow_out = _tmp(helper, block, "pow", x.dtype)
    block.append_op(type="pow", inputs={"X": [abs_out]}, outputs={"Out": [pow_out]}, attrs={"factor": 2.0})
    sum_out = _tmp(helper, block, "sum", x.dtype)
    block.append_op(type="reduce_sum", inputs={"X": [pow_out]}, outputs={"Out": [sum_out]},
                    attrs={"dim": [0] if dim is None else list(dim), "keep_dim": False, "reduce_all": dim is None})
    block.append_op(type="pow", inputs={"X": [sum_out]}, outputs={"Out": [out]}, attrs={"factor": 0.5})
    return out


def _norm_except_dim(helper, block, x, dim, out=None):
    out = out if out is not None else _tmp(helper, block, "norm", x.dtype)
    nd = len(x.shape)
    if dim is None:
        return _norm(helper, block, x, out)
    if dim == 0:
        flat = _reshape(helper, block, x, [x.shape[0], -1])
        return _reshape(helper, block, _norm(helper, block, flat, dim=[1]), [x.shape[0]] + [1] * (nd - 1), out)
    flat = _reshape(helper, block, x, [-1, x.shape[-1]])
    return _reshape(helper, block, _norm(helper, block, flat, dim=[0]), [1] * (nd - 1) + [x.shape[-1]], out)


def _binary(block, op_type, x, y, axis):
    out = block.create_var(name=LayerHelper(op_type).name, dtype=x.dtype, persistable=False)
    block.append_op(type=op_type, inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]}, attrs={"axis": axis})
    return out


def _weight_normalize(helper, g, v, dim):
    block = helper.main_program.current_block()
    scale = _binary(block, "elementwise_div", g, _norm_except_dim(helper, block, v, dim), -1)
    if dim is not None:
        rh = LayerHelper("reshape2")
        out = rh.create_variable_for_type_inference(scale.dtype)
        x_shape = rh.create_variable_for_type_inference(scale.dtype)
        block.append_op(type="reshape2", inputs={"X": [scale]}, outputs={"Out": [out], "XShape": [x_shape]},
                        attrs={"shape": [v.shape[dim]]})
        scale = out
    return _binary(block, "elementwise_mul", v, scale, -1 if dim is None else dim)


def create_weight_normalize(helper: LayerHelper, attr: WeightNormParamAttr, name: str, shape: Sequence[int],
                            dtype: Any, initializer: Any) -> Variable:
    """The weight ``w = v * g / ||v||`` for ``helper.create_parameter(attr, shape, dtype)`` (see above)."""
    shape = [int(d) for d in shape]
    dim = attr.dim
    if dim is not None and not -len(shape) <= dim < len(shape):
        raise InvalidArgument(f"WeightNormParamAttr: dim {dim} is out of range for the weight {name!r} of "
                              f"shape {shape}")
    if dim is not None and dim < 0:
        dim += len(shape)
    if dim is not None and dim not in (0, len(shape) - 1):
        raise Unimplemented(f"WeightNormParamAttr: dim={dim} of the {len(shape)}-D weight {name!r}: refimpl "
                            f"supports None, 0 and the last dim")
    g_shape = [1] * len(shape)
    if dim is not None:
        g_shape[dim] = shape[dim]
    start = helper.startup_program.global_block()
    g = start.create_parameter(f"{name}_g", g_shape, dtype, trainable=attr.trainable)
    v = start.create_parameter(f"{name}_v", shape, dtype, trainable=attr.trainable, initializer=initializer)
    _norm_except_dim(helper, start, v, dim, out=g)
    _reshape(helper, start, g, g_shape, out=g)
    main = helper.main_program.global_block()
    kw = dict(trainable=attr.trainable, optimize_attr={"learning_rate": attr.learning_rate},
              regularizer=attr.regularizer, need_clip=attr.need_clip, do_model_average=attr.do_model_average)
    g = main.create_parameter(f"{name}_g", g_shape, dtype, **kw)
    v = main.create_parameter(f"{name}_v", shape, dtype, **kw)
    w = _weight_normalize(helper, g, v, dim)
    WeightNormParamAttr.params_with_weight_norm.append(w)
    return w
