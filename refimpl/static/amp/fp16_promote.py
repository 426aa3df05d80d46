"""Which dtype one op runs in under float16 / bfloat16 AMP, and what that does to its vars.

The per-op rules of Paddle 3.3.1's ``python/paddle/static/amp/fp16_utils.py``
(``_keep_fp32_input`` / ``_keep_fp32_output``, ``_need_keep_fp32``,
``op_need_keep_fp32``, ``get_promote_dtype``, ``get_amp_dst_dtype``,
``process_op_input_and_outputs``, ``set_var_dst_dtype``), kept apart from the
program walk and the cast insertion of :mod:`.fp16_utils` so that each file
reads in one sitting. Paddle keeps them in that one file (its private names are
re-exported there).

The rules, highest first: an op with no low-precision kernel
(``unsupported_list``), one that touches a learning-rate variable, or (with
``use_fp16_guard``) one outside ``fp16_guard`` runs in float32; so does one
that touches a ``black_varnames`` var or is a black op; a white op runs low; a
gray op at O1 follows the op that produced its inputs (float32 when any
producer is float32 or black, else low when one is low or white); any other op
is float32 at O1 and low at O2. With ``use_promote`` an op runs low unless it
has a float32 input. batch_norm, layer_norm and the fused norms keep their
scale / bias / statistics in float32.
"""
from __future__ import annotations

from typing import Any, Optional, Set, Tuple

from refimpl.core.errors import InvalidArgument

__all__ = ["find_true_prev_op", "FLOAT_TYPES", "SUPPORT_FLOAT_TYPES", "keep_layer_norm_scale_bias_to_fp32",
           "keep_fp32_input", "keep_fp32_output", "need_keep_fp32", "op_need_keep_fp32", "get_promote_dtype",
           "get_amp_dst_dtype", "process_op_input_and_outputs", "set_var_dst_dtype"]

FLOAT_TYPES = {"float32", "float16", "bfloat16", "float64"}
SUPPORT_FLOAT_TYPES = {"float32", "float16", "bfloat16"}
_VALID_TYPES = ("DENSE_TENSOR", "SELECTED_ROWS", "DENSE_TENSOR_ARRAY")
_GUARD_PATTERN = "__use_fp16__"
_layer_norm_fp32 = {"flag": True}


def keep_layer_norm_scale_bias_to_fp32(*args: bool) -> bool:
    """Paddle's switch: with no argument, whether layer_norm keeps Scale/Bias float32; with one, set it
    (returns the old value)."""
    if not args:
        return _layer_norm_fp32["flag"]
    if len(args) != 1 or not isinstance(args[0], bool):
        raise InvalidArgument(f"_keep_layer_norm_scale_bias_to_fp32 takes one bool, got {args!r}")
    old, _layer_norm_fp32["flag"] = _layer_norm_fp32["flag"], args[0]
    return old


def keep_fp32_input(op: Any, in_name: str) -> bool:
    """Whether input slot ``in_name`` of ``op`` stays float32 whatever the op runs in."""
    t = op.type
    if t in ("batch_norm", "instance_norm") or (t == "layer_norm" and keep_layer_norm_scale_bias_to_fp32()):
        return in_name != "X"
    if t == "fused_bn_add_activation":
        return in_name not in {"X", "Z"}
    if t == "resnet_unit":
        return in_name not in {"X", "FilterX", "Z", "FilterZ"}
    if t in ("fused_attention", "fused_feedforward"):
        return in_name in {"LnScale", "LnBias", "Ln2Scale", "Ln2Bias", "Ln1Scale", "Ln1Bias"}
    if t == "fused_multi_transformer":
        return in_name in {"LnScale", "LnBias", "FFNLnScale", "FFNLnBias"}
    return False


def keep_fp32_output(op: Any, out_name: str) -> bool:
    """Whether output slot ``out_name`` of ``op`` stays float32 whatever the op runs in."""
    t = op.type
    if t in ("batch_norm", "fused_bn_add_activation") or (t == "layer_norm" and keep_layer_norm_scale_bias_to_fp32()):
        return out_name != "Y"
    if t == "resnet_unit":
        return out_name not in {"Y", "ConvX", "ConvZ"}
    if t in ("fused_attention", "fused_feedforward"):
        return out_name in {"LnMean", "LnVariance", "Ln2Mean", "Ln2Variance", "Ln1Mean", "Ln1Variance"}
    return False


def need_keep_fp32(op: Any, unsupported_op_list: Set[str], use_fp16_guard: bool) -> bool:
    """Unsupported ops, learning-rate ops and (under ``use_fp16_guard``) ops outside ``fp16_guard``."""
    if op.type in unsupported_op_list:
        return True
    if any("learning_rate" in n for n in op.input_arg_names + op.output_arg_names):
        return True
    if use_fp16_guard:
        scope = op.attr("op_namescope") if op.has_attr("op_namescope") else ""
        return _GUARD_PATTERN not in (scope or "")
    return False


def _is_in_black_varnames(op: Any, amp_lists: Any) -> bool:
    names = amp_lists.black_varnames
    return any(n in names for n in op.input_arg_names) or any(n in names for n in op.output_arg_names)


def op_need_keep_fp32(op: Any, amp_lists: Any, use_fp16_guard: bool,
                      params_list: Any) -> Tuple[bool, Set[str]]:
    """(whether ``op`` stays float32, the parameters a black op reads, which stay low for other readers)."""
    if need_keep_fp32(op, amp_lists.unsupported_list, use_fp16_guard):
        return True, set()
    if amp_lists.black_varnames is not None and _is_in_black_varnames(op, amp_lists):
        return True, set()
    if op.type in amp_lists.black_list:
        read = {n for slot in op.input_names for n in op.input(slot)}
        return True, {p.name for p in params_list if p.name in read}
    return False, set()


def get_promote_dtype(op: Any, amp_dtype: str, block: Any) -> str:
    """``use_promote``: float32 when any (not kept-float32) input is float32, else ``amp_dtype``."""
    dst_dtype = amp_dtype
    for in_name in op.input_names:
        if keep_fp32_input(op, in_name):
            continue
        if not in_name:
            dst_dtype = "float32"
            continue
        for in_var_name in op.input(in_name):
            in_var = block._find_var_recursive(in_var_name)
            if in_var is not None and in_var.dtype == "float32":
                dst_dtype = "float32"
                break
    return dst_dtype


def find_true_prev_op(ops: Any, cur_op: Any, var_name: str) -> Any:
    """The one op before ``cur_op`` in ``ops`` that writes ``var_name`` (None when none)."""
    prev_op = []
    for op in ops:
        if op is cur_op:
            break
        if var_name in op.output_arg_names:
            prev_op.append(op)
    if len(prev_op) > 1:
        raise InvalidArgument(f"There must be only one previous op that outputs {var_name} variable")
    return prev_op[0] if prev_op else None


def _producer(op: Any, in_var: Any, in_var_name: str, ops: Any) -> Optional[Any]:
    if in_var.op is None:
        return None
    if in_var.op is op:  # the op writes its own input: the writer before it counts
        return find_true_prev_op(ops, op, in_var_name)
    return in_var.op


def get_amp_dst_dtype(op: Any, amp_dtype: str, level: str, block: Any, amp_lists: Any,
                      keep_fp32_ops: Set[Any], keep_fp16_ops: Set[Any]) -> str:
    """The O1 gray-list rule (O2: always ``amp_dtype``); ops in no list run in float32."""
    if level == "O2":
        return amp_dtype
    if op.type not in amp_lists.gray_list:
        return "float32"
    dst_dtype = amp_dtype
    for in_name in op.input_names:
        for in_var_name in (op.input(in_name) if in_name else []):
            in_var = block._find_var_recursive(in_var_name)
            prev_op = _producer(op, in_var, in_var_name, block.ops) if in_var is not None else None
            if prev_op is None:
                continue
            if prev_op in keep_fp32_ops or prev_op.type in amp_lists.black_list:
                dst_dtype = "float32"
            elif prev_op in keep_fp16_ops or prev_op.type in amp_lists.white_list:
                dst_dtype = amp_dtype
    return dst_dtype


def set_var_dst_dtype(op: Any, var_names: Any, block: Any, global_block: Any, dtype: str,
                      need_set_dtype: bool) -> Set[str]:
    """The float vars among ``var_names`` (set to ``dtype`` when ``need_set_dtype``)."""
    low: Set[str] = set()
    for var_name in var_names:
        var = block._find_var_recursive(var_name)
        if var is None:
            var = global_block.vars.get(var_name)
        if var is None or var.type not in _VALID_TYPES:
            continue
        if var.dtype in FLOAT_TYPES:
            low.add(var_name)
            if need_set_dtype:
                var.dtype = dtype
    return low


def process_op_input_and_outputs(op: Any, block: Any, global_block: Any, dtype: str) -> Set[str]:
    """Set the op's float outputs to ``dtype``; return its float inputs (the casts come later)."""
    low: Set[str] = set()
    for in_name in op.input_names:
        if not keep_fp32_input(op, in_name):
            low |= set_var_dst_dtype(op, op.input(in_name), block, global_block, dtype, need_set_dtype=False)
    for out_name in op.output_names:
        if not keep_fp32_output(op, out_name):
            set_var_dst_dtype(op, op.output(out_name), block, global_block, dtype, need_set_dtype=True)
    return low
