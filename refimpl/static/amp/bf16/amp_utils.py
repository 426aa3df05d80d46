"""bfloat16 cast insertion: ``rewrite_program_bf16`` (O1) and ``cast_model_to_bf16`` (pure bf16).

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/bf16/amp_utils.py``.
``rewrite_program_bf16`` sorts the global block's ops into a bf16 set (bf16
list; gray ops fed by a bf16 op) and an fp32 set (fp32 list, ops touching a
``fp32_varnames`` var, gray ops fed by an fp32 op, ops in no list), then casts
each fp32-set op's bf16 inputs to ``{var}.cast_fp32`` and each bf16-set op's
float32 inputs to ``{var}.cast_bf16`` (the op's outputs become bfloat16); gray
ops fed by neither stay as they are. ``cast_model_to_bf16`` makes every var
bfloat16 except around the ops that must stay float32 (no bf16 CPU kernel,
learning-rate ops, ops outside ``bf16_guard`` when it is used), which get casts
on both sides, and switches the startup initializers that only feed bf16 ops to
bfloat16. ``convert_float_to_uint16`` is the bit pattern Paddle feeds and
fetches bfloat16 tensors as (truncating, as Paddle's).

Differences: dtypes are refimpl's dtype names; op attrs keep Paddle's VarType
integers; no C++ desc to sync. :func:`cast_parameters_to_bf16` stores the
parameters as Paddle does, by setting the truncated uint16 bit patterns of
``convert_float_to_uint16`` (which a tensor takes as bfloat16, see
``refimpl/core/bfloat16.py``).
"""
from __future__ import annotations

import collections
import contextlib
from typing import Any, Dict, Iterator, List, Optional, Set

import numpy as np

from refimpl.core.dtypes import to_vartype
from refimpl.core.scope import global_scope
from refimpl.framework.program import name_scope

from ..fp16_promote import find_true_prev_op
from ..fp16_utils import _rename_arg, _rename_op_input, find_true_post_op
from .amp_lists import AutoMixedPrecisionListsBF16

__all__ = ["convert_float_to_uint16", "bf16_guard", "rewrite_program_bf16", "cast_model_to_bf16",
           "cast_parameters_to_bf16", "cast_initializers_to_bf16", "are_post_ops_bf16"]

_valid_types = ("DENSE_TENSOR", "SELECTED_ROWS", "DENSE_TENSOR_ARRAY")
_bf16_guard_pattern = "__use_bf16__"
_NORMS = ("batch_norm", "fused_bn_add_activation", "layer_norm")
_FP32, _BF16 = to_vartype("float32"), to_vartype("bfloat16")


def convert_float_to_uint16(in_list: Any) -> np.ndarray:
    """The upper 16 bits of each float32 (bfloat16 by truncation), as uint16, in the input's shape."""
    arr = np.ascontiguousarray(np.asarray(in_list, dtype=np.float32))
    return (arr.view(np.uint32) >> 16).astype(np.uint16)


def _dtype_to_str(dtype: str) -> str:
    return "bf16" if dtype == "bfloat16" else "fp32"


def _insert_cast_op(block: Any, op: Any, idx: int, src_dtype: str, dest_dtype: str) -> int:
    """Cast the ``src_dtype`` inputs of ``op`` to ``dest_dtype`` at ``idx``; fp32 -> bf16 also makes its
    float32 outputs bfloat16. Returns how many casts were inserted."""
    num_cast_ops = 0
    for in_name in sorted(op.input_names):  # Paddle's desc keeps slots sorted by name
        if src_dtype == "float32" and op.type in _NORMS and in_name not in {"X", "Z"}:
            continue
        for in_var_name in op.input(in_name):
            in_var = block.var(in_var_name)
            if in_var.type not in _valid_types or in_var.dtype == dest_dtype:
                continue
            if in_var.dtype != src_dtype:
                if op.has_attr("in_dtype"):
                    op._set_attr("in_dtype", to_vartype(dest_dtype))
                continue
            cast_name = in_var.name + ".cast_" + _dtype_to_str(dest_dtype)
            out_var = block.vars.get(cast_name)
            if out_var is None or out_var.dtype != dest_dtype:
                out_var = block.create_var(name=cast_name, dtype=dest_dtype, persistable=False,
                                           stop_gradient=in_var.stop_gradient)
                block._insert_op(idx, type="cast", inputs={"X": in_var}, outputs={"Out": out_var},
                                 attrs={"in_dtype": to_vartype(in_var.dtype), "out_dtype": to_vartype(dest_dtype)})
                num_cast_ops += 1
            _rename_arg(op, in_var.name, out_var.name)
    if src_dtype == "float32" and dest_dtype == "bfloat16":
        for out_name in op.output_names:
            if op.type in _NORMS and out_name != "Y":
                continue
            for out_var_name in op.output(out_name):
                out_var = block.var(out_var_name)
                if out_var.type in _valid_types and out_var.dtype == "float32":
                    out_var.dtype = "bfloat16"
                    if op.has_attr("out_dtype"):
                        op._set_attr("out_dtype", _BF16)
    return num_cast_ops


def _insert_cast_post_op(block: Any, op: Any, idx: int, src_dtype: str, dest_dtype: str, target_name: str,
                         op_var_rename_map: List[Dict[str, str]]) -> int:
    """Cast ``target_name`` (an output of ``op``) to ``dest_dtype`` at ``idx`` for the ops after it."""
    target_var = block.var(target_name)
    if target_var.type not in _valid_types or target_var.dtype == dest_dtype:
        return 0
    if target_var.dtype != src_dtype:
        from refimpl.core.errors import InvalidArgument
        raise InvalidArgument(f"The real dtype({_dtype_to_str(target_var.dtype)}) is not equal to the src "
                              f"dtype({_dtype_to_str(src_dtype)})")
    cast_name = target_var.name + ".cast_" + _dtype_to_str(dest_dtype)
    cast_var = block.vars.get(cast_name)
    if cast_var is not None and cast_var.dtype == dest_dtype:
        return 0
    cast_var = block.create_var(name=cast_name, dtype=dest_dtype, persistable=False,
                                stop_gradient=target_var.stop_gradient)
    block._insert_op(idx, type="cast", inputs={"X": target_var}, outputs={"Out": cast_var},
                     attrs={"in_dtype": to_vartype(target_var.dtype), "out_dtype": to_vartype(dest_dtype)})
    op_var_rename_map[block.idx][target_var.name] = cast_var.name
    return 1


def _is_in_fp32_varnames(op: Any, amp_lists: Any) -> bool:
    names = amp_lists.fp32_varnames
    if not names:
        return False
    return any(n in names for n in op.input_arg_names) or any(n in names for n in op.output_arg_names)


def _need_keep_fp32(op: Any, unsupported_op_list: Set[str], use_bf16_guard: bool) -> bool:
    if op.type in unsupported_op_list:
        return True
    if any("learning_rate" in n for n in op.input_arg_names + op.output_arg_names):
        return True
    if use_bf16_guard:
        scope = op.attr("op_namescope") if op.has_attr("op_namescope") else ""
        return _bf16_guard_pattern not in (scope or "")
    return False


@contextlib.contextmanager
def bf16_guard() -> Iterator[None]:
    """Ops built inside become bfloat16 under ``use_bf16_guard`` (the ``__use_bf16__`` name scope)."""
    with name_scope(_bf16_guard_pattern):
        yield


def are_post_ops_bf16(post_ops: Any, keep_fp32_ops: Set[Any]) -> bool:
    return not any(op in keep_fp32_ops for group in post_ops for op in group)


def _gray_op_set(op: Any, block: Any, amp_lists: Any, bf16_op_set: Set[Any], fp32_op_set: Set[Any]) -> Optional[str]:
    """A gray op's side: 'fp32' when an input comes from an fp32 op, else 'bf16' when one comes from a bf16 op."""
    is_fp32 = is_bf16 = False
    for in_name in op.input_names:
        for in_var_name in (op.input(in_name) if in_name else []):
            in_var = block.var(in_var_name)
            if in_var.op is None:
                continue
            prev_op = find_true_prev_op(block.ops, op, in_var_name) if in_var.op is op else in_var.op
            if prev_op is None:
                continue
            if prev_op in fp32_op_set or prev_op.type in amp_lists.fp32_list:
                is_fp32 = True
            elif prev_op in bf16_op_set or prev_op.type in amp_lists.bf16_list:
                is_bf16 = True
    return "fp32" if is_fp32 else "bf16" if is_bf16 else None


def rewrite_program_bf16(main_prog: Any, amp_lists: Optional[AutoMixedPrecisionListsBF16] = None) -> None:
    """O1 bf16: insert the casts that run bf16-list ops (and the gray ops they feed) in bfloat16."""
    if amp_lists is None:
        amp_lists = AutoMixedPrecisionListsBF16()
    block = main_prog.global_block()
    bf16_op_set: Set[Any] = set()
    fp32_op_set: Set[Any] = set()
    for op in block.ops:
        if op.type in ("create_py_reader", "read"):
            continue
        if amp_lists.fp32_varnames is not None and _is_in_fp32_varnames(op, amp_lists):
            fp32_op_set.add(op)
        elif op.type in amp_lists.fp32_list:
            fp32_op_set.add(op)
        elif op.type in amp_lists.bf16_list:
            bf16_op_set.add(op)
        elif op.type in amp_lists.gray_list:
            side = _gray_op_set(op, block, amp_lists, bf16_op_set, fp32_op_set)
            if side is not None:
                (fp32_op_set if side == "fp32" else bf16_op_set).add(op)
        else:  # in no list: float32, to be safe
            fp32_op_set.add(op)
    idx = 0
    while idx < len(block.ops):
        op = block.ops[idx]
        num_cast_ops = 0
        if op in fp32_op_set:
            num_cast_ops = _insert_cast_op(block, op, idx, "bfloat16", "float32")
        elif op in bf16_op_set:
            if op.has_attr("dtype") and op.attr("dtype") == _FP32:
                op._set_attr("dtype", _BF16)
            num_cast_ops = _insert_cast_op(block, op, idx, "float32", "bfloat16")
        idx += num_cast_ops + 1


def cast_initializers_to_bf16(startup_prog: Any, amp_lists: Any, block: Any, all_ops: Any, keep_fp32_ops: Set[Any],
                              to_bf16_var_names: Optional[Set[str]] = None) -> None:
    """Make the startup initializers (fill_constant, uniform_random) of vars only bf16 ops read write bf16."""
    for op in startup_prog.global_block().ops:
        if op.type not in amp_lists.bf16_initializer_list:
            continue
        change_op = True
        op_post_ops, op_out_vars = [], []
        for out_name in op.output_names:
            for out_var_name in op.output(out_name):
                out_var = block.vars.get(out_var_name)
                post_op = find_true_post_op(all_ops, op, out_var_name, True)
                if out_var is None or out_var.type not in _valid_types:
                    change_op = False
                    break
                op_post_ops.append(post_op)
                op_out_vars.append(out_var)
        if not (change_op and are_post_ops_bf16(op_post_ops, keep_fp32_ops)):
            continue
        for out_var in op_out_vars:
            if out_var.dtype == "float32":
                out_var.dtype = "bfloat16"
            if to_bf16_var_names is not None and out_var.name in to_bf16_var_names:
                to_bf16_var_names.remove(out_var.name)
        if op.has_attr("dtype") and op.attr("dtype") == _FP32:
            op._set_attr("dtype", _BF16)


def _set_op_bf16(op: Any, block: Any, global_block: Any, to_bf16_var_names: Set[str]) -> None:
    """Pure bf16: every float32 input and output of ``op`` (norm statistics aside) becomes bfloat16."""
    def lookup(name):
        var = block.vars.get(name)
        return var if var is not None else global_block.vars.get(name)

    for in_name in op.input_names:
        if op.type in _NORMS and in_name not in {"X", "Z"}:
            continue
        for name in op.input(in_name):
            var = lookup(name)
            if var is not None and var.type in _valid_types and var.dtype == "float32":
                var.dtype = "bfloat16"
                to_bf16_var_names.add(name)
    for out_name in op.output_names:
        if op.type in _NORMS and out_name != "Y":
            continue
        for name in op.output(out_name):
            var = lookup(name)
            if var is not None and var.type in _valid_types and var.dtype == "float32":
                var.dtype = "bfloat16"
    for attr_name in ("in_dtype", "out_dtype", "dtype"):
        if op.has_attr(attr_name) and op.attr(attr_name) == _FP32:
            op._set_attr(attr_name, _BF16)


def _cast_around_fp32_op(block: Any, op: Any, idx: int, keep_fp32_ops: Set[Any],
                         op_var_rename_map: List[Dict[str, str]]) -> int:
    """Cast a float32 op's bf16 inputs to float32, and its outputs back to bf16 for the bf16 ops after it."""
    pre_cast_num = _insert_cast_op(block, op, idx, "bfloat16", "float32")
    num_cast_ops = pre_cast_num
    for out_var_name in op.output_arg_names:
        out_var = block.vars.get(out_var_name)
        if out_var is None or out_var.type not in _valid_types or out_var.dtype != "bfloat16":
            continue
        out_var.dtype = "float32"
        for post_op in find_true_post_op(block.ops, op, out_var_name):
            if post_op in keep_fp32_ops:
                continue
            num_cast_ops += _insert_cast_post_op(block, op, idx + pre_cast_num + 1, "float32", "bfloat16",
                                                 out_var_name, op_var_rename_map)
    return num_cast_ops


def cast_model_to_bf16(program: Any, startup_prog: Any = None, amp_lists: Optional[AutoMixedPrecisionListsBF16] = None,
                       use_bf16_guard: bool = True) -> Set[str]:
    """Pure bf16: every var bfloat16 but around the ops that must stay float32; returns the bf16 var names."""
    if amp_lists is None:
        amp_lists = AutoMixedPrecisionListsBF16()
    global_block = program.global_block()
    keep_fp32_ops: Set[Any] = set()
    to_bf16_var_names: Set[str] = set()
    origin_ops = [op for block in program.blocks for op in block.ops]
    for block in program.blocks:
        for op in block.ops:
            if op.type in ("create_py_reader", "read"):
                continue
            if _need_keep_fp32(op, amp_lists.unsupported_list, use_bf16_guard):
                keep_fp32_ops.add(op)
            else:
                _set_op_bf16(op, block, global_block, to_bf16_var_names)
        if startup_prog is not None:
            cast_initializers_to_bf16(startup_prog, amp_lists, global_block, block.ops, keep_fp32_ops,
                                      to_bf16_var_names)
    op_var_rename_map: List[Dict[str, str]] = [collections.OrderedDict() for _ in program.blocks]
    for block in program.blocks:
        idx = 0
        while idx < len(block.ops):
            op = block.ops[idx]
            num_cast_ops = _cast_around_fp32_op(block, op, idx, keep_fp32_ops, op_var_rename_map) \
                if op in keep_fp32_ops else 0
            idx += num_cast_ops + 1
    _rename_op_input(program, op_var_rename_map, origin_ops, keep_fp32_ops)
    return to_bf16_var_names


def cast_parameters_to_bf16(place: Any, program: Any, scope: Any = None, to_bf16_var_names: Any = None) -> None:
    """Store the parameters in ``to_bf16_var_names`` as bfloat16 in ``scope`` (pure bf16's ``amp_init``)."""
    names = set(to_bf16_var_names or ())
    var_scope = scope if scope is not None else global_scope()
    for block in program.blocks:
        for param in block.all_parameters():
            if param.name in names:
                tensor = var_scope.find_var(param.name).get_tensor()
                tensor.set(convert_float_to_uint16(np.array(tensor)), place)  # uint16 bits: a bfloat16 tensor

