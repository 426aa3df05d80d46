"""Cast insertion for float16 / bfloat16 AMP on the legacy program (O1, O2, OD).

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/fp16_utils.py``:
``cast_model_to_fp16`` sorts every op of the program into a float32 set and a
low-precision set (unsupported / learning-rate / black ops and, with
``use_fp16_guard``, ops outside :func:`fp16_guard` stay float32; white ops go
low; the rest follow their inputs: O1 by the gray-list rule of
:mod:`.fp16_promote`, O2 and ``use_promote`` by "any float32 input keeps it
float32"), marks the outputs' dtypes, then inserts a ``cast`` before each op
whose input has the other dtype: the cast writes ``{var}.cast_fp16`` (bf16 as
well: Paddle keeps the ``fp16`` key) or ``{var}.cast_fp32``, takes the op's
``op_role`` and ``op_device``, and the op reads it instead. Parameters become
low precision at O2 (``set_param_dtype``) and their scope values are
converted by :func:`cast_parameters_to_fp16` (``amp_init``).
:func:`update_role_var_grad` moves the float32 ``cast`` of each parameter
gradient behind the backward, as the decorator's ``apply_gradients`` needs.

Differences: dtypes are refimpl's dtype names (``VarDesc.VarType.FP16`` is
``"float16"``); op attrs keep Paddle's VarType integers. There is no C++ desc
to sync, so Paddle's ``_sync_with_cpp`` steps have no counterpart. Paddle 3.3.1
has no fp16 ``rewrite_program`` any more (O1 goes through ``cast_model_to_fp16``);
``rewrite_program_bf16`` lives in :mod:`.bf16.amp_utils`.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import numpy as np

from refimpl.core.bfloat16 import BITS, from_bits, round_to_bfloat16
from refimpl.core.dtypes import to_vartype, VARTYPE_TO_NAME
from refimpl.core.errors import InvalidArgument, NotFound
from refimpl.core.scope import global_scope
from refimpl.framework.op_role import OP_DEVICE_ATTR, OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole
from refimpl.framework.program import name_scope

from .fp16_lists import AutoMixedPrecisionLists, black_list, get_low_precision_vartype, od_lists
from .fp16_promote import (FLOAT_TYPES, SUPPORT_FLOAT_TYPES, find_true_prev_op, get_amp_dst_dtype, get_promote_dtype,
                           keep_fp32_input, keep_fp32_output, keep_layer_norm_scale_bias_to_fp32, need_keep_fp32,
                           op_need_keep_fp32, process_op_input_and_outputs)

__all__ = ["fp16_guard", "cast_model_to_fp16", "cast_parameters_to_fp16", "find_true_prev_op",
           "find_true_post_op", "find_op_index", "update_role_var_grad", "set_param_dtype"]

_logger = logging.getLogger(__name__)

# Paddle's private names for the dtype rules (scripts and Paddle's tests call some of them)
_keep_fp32_input, _keep_fp32_output, _need_keep_fp32 = keep_fp32_input, keep_fp32_output, need_keep_fp32
_keep_layer_norm_scale_bias_to_fp32 = keep_layer_norm_scale_bias_to_fp32

_valid_types = ("DENSE_TENSOR", "SELECTED_ROWS", "DENSE_TENSOR_ARRAY")
_fp16_guard_pattern = "__use_fp16__"
_FLOAT_ATTR_CODES = {to_vartype(t) for t in FLOAT_TYPES}


def _rename_arg(op: Any, old_name: str, new_name: str) -> None:
    """The op reads (and writes) ``new_name`` where it had ``old_name``."""
    op._rename_input(old_name, new_name)
    op._rename_output(old_name, new_name)


def _rename_op_input(program: Any, op_var_rename_map: List[Dict[str, str]], origin_ops: Any,
                     keep_fp32_ops: Any) -> None:
    for block in program.blocks:
        for op in block.ops:
            if op not in origin_ops or op in keep_fp32_ops:
                continue
            for name in op.input_arg_names:
                if name in op_var_rename_map[block.idx]:
                    op._rename_input(name, op_var_rename_map[block.idx][name])


def _set_float_dtype_attrs(op: Any, dest_dtype: str) -> None:
    for attr_name in ("in_dtype", "out_dtype", "dtype"):
        if op.has_attr(attr_name) and op.attr(attr_name) in _FLOAT_ATTR_CODES:
            op._set_attr(attr_name, to_vartype(dest_dtype))


def _device_of(op: Any) -> str:
    return op.attr(OP_DEVICE_ATTR) if op.has_attr(OP_DEVICE_ATTR) else ""


def _cast_device(block: Any, op: Any, in_var: Any, in_var_name: str, src_dtype: str) -> str:
    """The cast's ``op_device``: the op's, or, for a float32 stop-gradient input, an ``all`` device of
    the op that produced it (Paddle's pipeline rule: one send less)."""
    own = _device_of(op)
    if src_dtype != "float32" or not in_var.stop_gradient or in_var.op is None:
        return own
    writer = find_true_prev_op(block.ops, op, in_var_name) if in_var.op is op else in_var.op
    writer_device = "" if writer is None else _device_of(writer)
    return writer_device if "all" in writer_device else own


def cast_var_name(name: str, dest_dtype: str, low_key: str) -> str:
    """``{name}.cast_{key}``: ``low_key`` for a low-precision target ('fp16' or 'bf16'), 'fp32' otherwise."""
    return f"{name}.cast_{'fp32' if dest_dtype == 'float32' else low_key}"


def insert_cast(block: Any, idx: int, src: Any, cast_name: str, dest_dtype: str,
                extra_attrs: Optional[Dict[str, Any]] = None) -> Tuple[Any, int]:
    """The var ``cast_name`` holding ``src`` as ``dest_dtype``, and how many ``cast`` ops that took (0: a
    var of that name and dtype is in ``block`` already; 1: a new one is written at ``idx``)."""
    existing = block.vars.get(cast_name)
    if existing is not None and existing.dtype == dest_dtype:
        return existing, 0
    out = block.create_var(name=cast_name, dtype=dest_dtype, persistable=False, stop_gradient=src.stop_gradient)
    attrs = {"in_dtype": to_vartype(src.dtype), "out_dtype": to_vartype(dest_dtype)}
    attrs.update(extra_attrs or {})
    block._insert_op(idx, type="cast", inputs={"X": src}, outputs={"Out": out}, attrs=attrs)
    return out, 1


def insert_before_each_op(block: Any, insert: Callable[[Any, int], int]) -> None:
    """Call ``insert(op, idx)`` for each op of ``block`` that was there before; it returns how many ops it
    put into the block (before or right after ``op``), which the walk steps over."""
    idx = 0
    while idx < len(block.ops):
        idx += insert(block.ops[idx], idx) + 1


def _insert_cast_op(block: Any, op: Any, idx: int, src_dtype: str, dest_dtype: str) -> int:
    """Cast each ``src_dtype`` input of ``op`` to ``dest_dtype`` before it (at ``idx``); returns how many casts."""
    inserted = 0
    for slot in sorted(op.input_names):  # Paddle's desc keeps slots sorted by name
        if src_dtype == "float32" and keep_fp32_input(op, slot):
            continue
        for name in op.input(slot):
            var = block._find_var_recursive(name)
            if var is None or var.type not in _valid_types or var.dtype == dest_dtype:
                continue
            cast_name = cast_var_name(var.name, dest_dtype, "fp16")  # bf16 too: Paddle keeps the fp16 key
            earlier = block._find_var_recursive(cast_name)
            if earlier is not None and earlier.dtype == dest_dtype:  # cast before (maybe in a parent block)
                _rename_arg(op, var.name, earlier.name)
                continue
            if var.dtype != src_dtype:
                continue
            role = op.attr(OP_ROLE_ATTR) if op.has_attr(OP_ROLE_ATTR) else int(OpRole.Forward)
            device = _cast_device(block, op, var, name, src_dtype)
            casted, made = insert_cast(block, idx, var, cast_name, dest_dtype,
                                       {OP_DEVICE_ATTR: device, OP_ROLE_ATTR: role})
            inserted += made
            _rename_arg(op, var.name, casted.name)
    _set_float_dtype_attrs(op, dest_dtype)
    return inserted


def find_true_post_op(ops: Any, cur_op: Any, var_name: str, search_all: bool = False) -> List[Any]:
    """The ops after ``cur_op`` in ``ops`` that read ``var_name`` (with ``search_all``: every op of ``ops``)."""
    start = 0
    if not search_all:
        for i, op in enumerate(ops):
            if op is cur_op:
                start = i + 1
                break
        else:
            start = len(ops)
    return [op for op in ops[start:] for n in op.input_arg_names if n == var_name]


def find_op_index(block: Any, cur_op: Any) -> int:
    """The index of ``cur_op`` in ``block`` (Paddle passes the block desc), -1 when absent."""
    for idx, op in enumerate(block.ops):
        if op is cur_op:
            return idx
    return -1


@contextlib.contextmanager
def fp16_guard() -> Iterator[None]:
    """Ops built inside run in float16 under ``use_fp16_guard`` (the ``__use_fp16__`` name scope)."""
    with name_scope(_fp16_guard_pattern):
        yield


def _inputs_kept_fp32(op: Any, amp_lists: Any, use_fp16_guard: bool) -> Set[str]:
    """The inputs of ``op`` that must stay float32: all of a float32-only op's, else its float32 slots'."""
    if need_keep_fp32(op, amp_lists.unsupported_list, use_fp16_guard):
        return set(op.input_arg_names)
    return {name for slot in op.input_names if keep_fp32_input(op, slot) for name in op.input(slot)}


def set_param_dtype(program: Any, dtype: str, amp_lists: Any, use_fp16_guard: bool, level: str) -> Set[str]:
    """O2: make every parameter ``dtype`` except those a float32 op reads; returns the kept names.

    Black ops do not keep their parameters float32 here: a cast in front of them does."""
    kept: Set[str] = set()
    if level in ("O1", "OD"):  # the parameters stay float32
        return kept
    for block in program.blocks:
        for op in block.ops:
            if op.type not in amp_lists.black_list:
                kept |= _inputs_kept_fp32(op, amp_lists, use_fp16_guard)
    for param in (p for block in program.blocks for p in block.all_parameters()):
        if param.name not in kept:
            param.dtype = dtype
    return kept


def _need_process(op: Any) -> bool:
    """False for ops AMP leaves alone: readers, and creators whose float dtype is an attr (fill_constant ...)."""
    def is_support_type(name):
        var = op.block._find_var_recursive(name)
        if var is None:
            return True
        return var.type == "DENSE_TENSOR" and var.dtype in SUPPORT_FLOAT_TYPES

    if op.input_arg_names and not any(is_support_type(n) for n in op.input_arg_names):
        return False
    if op.type == "set_value":
        return True
    if op.type in ("create_py_reader", "read"):
        return False
    for attr_name in ("out_dtype", "dtype"):
        if not op.has_attr("in_dtype") and op.has_attr(attr_name) and op.attr(attr_name) in _FLOAT_ATTR_CODES:
            return False
    return True


def _classify_op(op: Any, block: Any, global_block: Any, amp_lists: Any, use_fp16_guard: bool,
                 dest_type: str, level: str, use_promote: bool, keep_fp32_ops: Set[Any],
                 keep_fp16_ops: Set[Any]) -> Set[str]:
    """Put ``op`` into one of the two sets (marking its outputs' dtypes); returns low-precision var names."""
    to_fp16: Set[str] = set()
    op_keep_fp32, fp16_in_fp32_op = op_need_keep_fp32(op, amp_lists, use_fp16_guard,
                                                      global_block.all_parameters())
    to_fp16 |= fp16_in_fp32_op
    if op_keep_fp32:
        keep_fp32_ops.add(op)
        process_op_input_and_outputs(op, block, global_block, "float32")
        return to_fp16
    if op.type in amp_lists.white_list:
        keep_fp16_ops.add(op)
        return to_fp16 | process_op_input_and_outputs(op, block, global_block, dest_type)
    if op.type == "cast":  # a cast of the model: only its in_dtype and output dtype follow
        in_var = block._find_var_recursive(op.input("X")[0])
        out_var = block._find_var_recursive(op.output("Out")[0])
        op._set_attr("in_dtype", to_vartype(in_var.dtype))
        out_var.dtype = VARTYPE_TO_NAME[op.attr("out_dtype")]
        return to_fp16
    if use_promote:
        dst_dtype = get_promote_dtype(op, dest_type, block)
    else:
        dst_dtype = get_amp_dst_dtype(op, dest_type, level, block, amp_lists, keep_fp32_ops, keep_fp16_ops)
    if dst_dtype == dest_type:
        keep_fp16_ops.add(op)
        return to_fp16 | process_op_input_and_outputs(op, block, global_block, dest_type)
    keep_fp32_ops.add(op)
    process_op_input_and_outputs(op, block, global_block, "float32")
    return to_fp16


def _lists_for_level(amp_lists: Optional[AutoMixedPrecisionLists], dest_type: str,
                     level: str) -> AutoMixedPrecisionLists:
    """OD: fresh lists where only the white ops are low precision; O2: the lists without the default black
    ops (edited in place, as Paddle edits the caller's lists); O1: the lists as given."""
    if level == "OD":
        return od_lists(dest_type)
    lists = amp_lists if amp_lists is not None else AutoMixedPrecisionLists(dtype=dest_type)
    if level == "O2":
        lists.black_list = lists.black_list - black_list
    return lists


def cast_model_to_fp16(program: Any, amp_lists: Optional[AutoMixedPrecisionLists] = None,
                       use_fp16_guard: bool = True, dest_type: Any = "float16", level: str = "O2",
                       use_promote: bool = False) -> Set[str]:
    """Rewrite ``program`` for AMP at ``level``; returns the names of the vars that became low precision."""
    dest_type = get_low_precision_vartype(dest_type)
    amp_lists = _lists_for_level(amp_lists, dest_type, level)
    global_block = program.global_block()
    keep_fp32_ops: Set[Any] = set()
    keep_fp16_ops: Set[Any] = set()
    to_fp16_var_names: Set[str] = set()
    keep_fp32_var_names = set_param_dtype(program, dest_type, amp_lists, use_fp16_guard, level)
    for block in program.blocks:
        for op in block.ops:
            if _need_process(op):
                to_fp16_var_names |= _classify_op(op, block, global_block, amp_lists, use_fp16_guard, dest_type,
                                                  level, use_promote, keep_fp32_ops, keep_fp16_ops)
    def insert(op: Any, idx: int) -> int:
        made = _insert_cast_op(op.block, op, idx, "float32", dest_type) if op in keep_fp16_ops else 0
        if op in keep_fp32_ops:
            made += _insert_cast_op(op.block, op, idx, dest_type, "float32")
        return made

    for block in program.blocks:
        insert_before_each_op(block, insert)
    return to_fp16_var_names - keep_fp32_var_names


def _low_precision_array(data: np.ndarray, dest_type: str) -> np.ndarray:
    """``data`` rounded to ``dest_type`` (round to nearest even, as Paddle's ``cast``); bfloat16 as the
    uint16 bit patterns Paddle hands such tensors over as."""
    if dest_type == "bfloat16":
        return round_to_bfloat16(np.asarray(data, np.float32)).view(BITS)
    return np.asarray(data, dtype=np.float16)


def _to_float(low: np.ndarray) -> np.ndarray:
    """float32 of a low-precision array (bfloat16 given as its uint16 bits)."""
    return np.asarray(from_bits(low) if low.dtype == BITS else low, np.float32)


def cast_parameters_to_fp16(place: Any, program: Any, scope: Any = None, to_fp16_var_names: Any = None,
                            dest_type: Any = "float16", rewrite_master_weight: bool = False,
                            master_weights: Optional[Dict[str, Any]] = None) -> None:
    """Convert the scope values of the parameters in ``to_fp16_var_names`` to ``dest_type`` (O2's amp_init)."""
    dest_type = get_low_precision_vartype(dest_type)
    names = set(to_fp16_var_names or ())
    var_scope = scope if scope is not None else global_scope()
    master_weights = master_weights or {}
    for block in program.blocks:
        for param in block.all_parameters():
            if param.name not in names:
                continue
            holder = var_scope.find_var(param.name)
            if holder is None:
                _logger.warning("Cannot find %s", param.name)
                continue
            tensor = holder.get_tensor()
            low = _low_precision_array(np.array(tensor), dest_type)
            tensor.set(low, place)
            if rewrite_master_weight and param.name in master_weights:
                master = var_scope.find_var(master_weights[param.name].name)
                master.get_tensor().set(_to_float(low), place)


def _last_writer(block: Any, name: str) -> Any:
    """The last op of ``block`` that writes ``name`` (Paddle's ``Variable.op`` once backward is built)."""
    for op in reversed(block.ops):
        if name in op.output_arg_names:
            return op
    return None


def _grad_cast(block: Any, grad: Any) -> Any:
    """The backward ``cast`` that makes the float32 ``grad`` out of a low-precision one, or None."""
    if grad.dtype != "float32":
        return None
    writer = _last_writer(block, grad.name)
    return writer if writer is not None and writer.type == "cast" else None


def _hand_role_var_over(block: Any, cast: Any, param_name: str) -> None:
    """The op making the low-precision gradient takes ``[param, low grad]`` as its ``op_role_var`` (in
    front of what it had); the cast loses its own and becomes an Optimize op."""
    if not (cast.attr(OP_ROLE_ATTR) & int(OpRole.Backward) and cast.has_attr(OP_ROLE_VAR_ATTR)):
        raise InvalidArgument(f"The cast op {cast} must be in BACKWARD role and have op_role_var attr.")
    cast._remove_attr(OP_ROLE_VAR_ATTR)
    low_grad = cast.input("X")[0]
    maker = find_true_prev_op(block.ops, cast, low_grad)
    earlier = list(maker.attr(OP_ROLE_VAR_ATTR)) if maker.has_attr(OP_ROLE_VAR_ATTR) else []
    maker._set_attr(OP_ROLE_VAR_ATTR, [param_name, low_grad] + earlier)
    cast._set_attr(OP_ROLE_ATTR, int(OpRole.Optimize))


def _move_to_end(block: Any, op: Any, out_name: str) -> None:
    """Move ``op`` behind every other op of ``block``; nothing may read ``out_name`` after it."""
    if op is block.ops[-1]:
        return
    readers = find_true_post_op(block.ops, op, out_name)
    if readers:
        raise InvalidArgument(f"The cast op {op}'s output should not be used by a non-optimize op, "
                              f"however, it is used by {readers[0]}")
    idx = find_op_index(block, op)
    if idx == -1:
        raise NotFound(f"The op {op} is not in program")
    block._remove_op(idx)
    block.ops.append(op)
    block.program._bump()


def update_role_var_grad(main_prog: Any, params_grads: Any) -> None:
    """Move each parameter gradient's float32 ``cast`` behind the backward, under role Optimize.

    The op that made the low-precision gradient takes the ``op_role_var``
    (so gradients cross devices in low precision), as Paddle does.
    """
    block = main_prog.global_block()
    for param, grad in params_grads:
        cast = _grad_cast(block, grad)
        if cast is not None:
            _hand_role_var_over(block, cast, param.name)
            _move_to_end(block, cast, grad.name)
