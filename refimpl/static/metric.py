"""``paddle.static.accuracy`` (``paddle/static/nn/metric.py``).

The legacy static-graph branch: a ``top_k_v2`` op (``k``, ``sorted=False``; a Variable ``k``
goes to its ``K`` input) into ``accuracy_N.tmp_0`` / ``tmp_1`` (values, int64 indices), then an
``accuracy`` op into ``accuracy_N.tmp_2`` (the float32 rate it returns) and ``tmp_3`` /
``tmp_4`` (correct and total counts, int32, unless ``correct`` / ``total`` are given).
"""
from typing import Any, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

__all__ = ['accuracy']

_INPUT_DTYPES = ("float16", "uint16", "bfloat16", "float32", "float64")


def accuracy(input: Variable, label: Variable, k: Any = 1, correct: Optional[Variable] = None,
             total: Optional[Variable] = None) -> Variable:
    for arg, v in (("input", input), ("label", label)):
        if not isinstance(v, Variable):
            raise InvalidArgument(f"accuracy: argument '{arg}' must be a static Variable, got {type(v).__name__}")
    if input.dtype not in _INPUT_DTYPES:
        raise InvalidArgument(f"accuracy: argument 'input' must be one of {list(_INPUT_DTYPES)}, got {input.dtype}")
    helper = LayerHelper("accuracy")
    topk_out = helper.create_variable_for_type_inference(input.dtype)
    topk_indices = helper.create_variable_for_type_inference("int64")
    inputs = {"X": [input]}
    attrs = {"sorted": False}
    if isinstance(k, Variable):
        inputs["K"] = [k]
    else:
        attrs = {"k": k, "sorted": False}
    helper.append_op(type="top_k_v2", inputs=inputs, outputs={"Out": [topk_out], "Indices": [topk_indices]},
                     attrs=attrs)
    acc_out = helper.create_variable_for_type_inference("float32")
    if correct is None:
        correct = helper.create_variable_for_type_inference("int32")
    if total is None:
        total = helper.create_variable_for_type_inference("int32")
    helper.append_op(type="accuracy", inputs={"Out": [topk_out], "Indices": [topk_indices], "Label": [label]},
                     outputs={"Accuracy": [acc_out], "Correct": [correct], "Total": [total]})
    return acc_out
