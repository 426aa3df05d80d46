"""``paddle.nn.functional.bilinear`` (``python/paddle/nn/functional/common.py``).

Paddle's legacy static branch: one ``bilinear_tensor_product`` op (X, Y, Weight and, when given,
Bias) into a temporary of the helper ``bilinear`` (``bilinear_N.tmp_0``). x1 and x2 must be
float32 or float64 static Variables; shapes are checked by the op's infer-shape.
"""
from typing import Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import check_variable

__all__ = ["bilinear"]

_DTYPES = ("float32", "float64")


def check_float(x: Variable, api: str, arg: str) -> None:
    """InvalidArgument unless ``x`` is a float32 / float64 static Variable."""
    check_variable(x, api)
    if str(x.dtype) not in _DTYPES:
        raise InvalidArgument(f"{api}: argument '{arg}' ({x.name!r}) must be float32 or float64, got {x.dtype}")


def bilinear(x1: Variable, x2: Variable, weight: Variable, bias: Optional[Variable] = None,
             name: Optional[str] = None) -> Variable:
    """out[i, k] = x1[i] @ weight[k] @ x2[i] (+ bias[0, k]); weight is [out, in1, in2]."""
    check_float(x1, "bilinear", "x")
    check_float(x2, "bilinear", "y")
    inputs = {"X": [x1], "Y": [x2], "Weight": [weight]}
    if bias is not None:
        inputs["Bias"] = [bias]
    helper = LayerHelper("bilinear", name=name)
    out = helper.create_variable_for_type_inference(x1.dtype)
    helper.append_op(type="bilinear_tensor_product", inputs=inputs, outputs={"Out": [out]})
    return out
