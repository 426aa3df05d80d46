"""``paddle.static.accuracy`` and ``paddle.static.auc`` (``paddle/static/nn/metric.py``).

The legacy static-graph branch: a ``top_k_v2`` op (``k``, ``sorted=False``; a Variable ``k``
goes to its ``K`` input) into ``accuracy_N.tmp_0`` / ``tmp_1`` (values, int64 indices), then an
``accuracy`` op into ``accuracy_N.tmp_2`` (the float32 rate it returns) and ``tmp_3`` /
``tmp_4`` (correct and total counts, int32, unless ``correct`` / ``total`` are given).

``auc``, Paddle 3.3.1's legacy branch: without ``ins_tag_weight`` a ``fill_constant`` ``[1, 1]``
of 1.0 (``fill_constant_N.tmp_0``); two float64 outputs ``auc_N.tmp_0`` (global AUC) and
``tmp_1`` (batch AUC); four persistable int64 histograms named ``_generated_var_N`` — the batch
pair ``[(1 + slide_steps) * (num_thresholds + 1) + 1]``, the global pair
``[1, num_thresholds + 1]`` — each zero-filled in the startup program; then the batch ``auc`` op
(``slide_steps``) and the global one (``slide_steps=0``), each updating its pair in place. As in
Paddle 3.3.1 the ``InsTagWeight`` slot is left empty whatever ``ins_tag_weight`` is (its
``fill_constant`` is still built), and ``topk`` is not used.
"""
from typing import Any, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.nn.initializer import Constant
from refimpl.static.layer_helper import LayerHelper

__all__ = ['accuracy', 'auc']

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


def _check_dtype(api: str, arg: str, v: Any, dtypes: tuple) -> None:
    if not isinstance(v, Variable):
        raise InvalidArgument(f"{api}: argument '{arg}' must be a static Variable, got {type(v).__name__}")
    if str(v.dtype) not in dtypes:
        raise InvalidArgument(f"{api}: argument '{arg}' ({v.name!r}) must be one of {list(dtypes)}, got {v.dtype}")


def auc(input: Variable, label: Variable, curve: str = "ROC", num_thresholds: int = 4095, topk: int = 1,
        slide_steps: int = 1, ins_tag_weight: Optional[Variable] = None) -> tuple:
    """(global AUC, batch AUC, [batch_stat_pos, batch_stat_neg, stat_pos, stat_neg])."""
    from refimpl.tensor.creation import fill_constant
    helper = LayerHelper("auc")
    if ins_tag_weight is None:
        ins_tag_weight = fill_constant(shape=[1, 1], dtype="float32", value=1.0)
    _check_dtype("auc", "input", input, ("float32", "float64"))
    _check_dtype("auc", "label", label, ("int32", "int64"))
    auc_out = helper.create_variable_for_type_inference("float64")
    batch_auc_out = helper.create_variable_for_type_inference("float64")
    batch_shape = [(1 + slide_steps) * (num_thresholds + 1) + 1]
    glob = helper.main_program.global_block()  # unnamed: _generated_var_N, counted per program
    stats = [glob.create_var(persistable=True, dtype="int64", shape=shape)
             for shape in (batch_shape, batch_shape, [1, num_thresholds + 1], [1, num_thresholds + 1])]
    for var in stats:
        helper.set_variable_initializer(var, Constant(value=0.0, force_cpu=False))
    batch_stat_pos, batch_stat_neg, stat_pos, stat_neg = stats
    for out, pos, neg, steps in ((batch_auc_out, batch_stat_pos, batch_stat_neg, slide_steps),
                                 (auc_out, stat_pos, stat_neg, 0)):
        helper.append_op(type="auc",
                         inputs={"Predict": [input], "Label": [label], "StatPos": [pos], "StatNeg": [neg]},
                         attrs={"curve": curve, "num_thresholds": num_thresholds, "slide_steps": steps},
                         outputs={"AUC": [out], "StatPosOut": [pos], "StatNegOut": [neg]})
    return auc_out, batch_auc_out, [batch_stat_pos, batch_stat_neg, stat_pos, stat_neg]
