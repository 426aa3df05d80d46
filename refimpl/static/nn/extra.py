"""``paddle.static.nn.bilinear_tensor_product`` and ``paddle.static.nn.py_func``.

Both live in Paddle's ``python/paddle/static/nn/common.py``. ``bilinear_tensor_product`` is its
legacy static layer: a helper ``bilinear_tensor_product_N`` (or ``name``) creates the weight
``[size, x's dim, y's dim]`` (``.w_0``, Xavier-uniform by default), the output ``.tmp_0``, then,
unless ``bias_attr=False``, the bias ``[1, size]`` (``.b_0``, zeros), appends one
``bilinear_tensor_product`` op and the activation ``act`` (``.tmp_1``). ``py_func`` is
``refimpl/static/py_func.py``'s, re-exported.
"""
from typing import Any, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.nn.functional.bilinear import check_float
from refimpl.static.layer_helper import LayerHelper
from refimpl.static.py_func import py_func

__all__ = ["bilinear_tensor_product", "py_func"]


def bilinear_tensor_product(x: Variable, y: Variable, size: int, act: Optional[str] = None,
                            name: Optional[str] = None, param_attr: Any = None,
                            bias_attr: Any = None) -> Variable:
    """out[i, k] = act(x[i] @ W[k] @ y[i] + b[0, k]) for k < size."""
    check_float(x, "bilinear_tensor_product", "x")
    check_float(y, "bilinear_tensor_product", "y")
    helper = LayerHelper("bilinear_tensor_product", name=name)
    dtype = x.dtype
    xs, ys = tuple(x.shape or ()), tuple(y.shape or ())
    if len(xs) != 2 or len(ys) != 2:
        raise InvalidArgument(f"bilinear_tensor_product: x and y must be 2-D, got shapes {list(xs)} and {list(ys)}")
    w = helper.create_parameter(param_attr, [size, xs[1], ys[1]], dtype, is_bias=False)
    out = helper.create_variable_for_type_inference(dtype)
    inputs = {"X": [x], "Y": [y], "Weight": [w]}
    if bias_attr is not False:
        inputs["Bias"] = [helper.create_parameter(bias_attr, [1, size], dtype, is_bias=True)]
    helper.append_op(type="bilinear_tensor_product", inputs=inputs, outputs={"Out": [out]})
    return helper.append_activation(out, act)
