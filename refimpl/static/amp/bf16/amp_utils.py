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
from refimpl.core.errors import InvalidArgument
from refimpl.core.scope import global_scope
from refimpl.framework.program import name_scope

from ..fp16_promote import find_true_prev_op
from ..fp16_utils import (_rename_arg, _rename_op_input, cast_var_name, find_true_post_op, insert_before_each_op,
                          insert_cast)
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


def _suffix(dtype: str) -> str:
    return "bf16" if dtype == "bfloat16" else "fp32"


def _skips_slot(op: Any, slot: str, inputs: bool) -> bool:
    """A norm's statistics (its inputs but X / Z, its outputs but Y) keep their dtype."""
    if op.type not in _NORMS:
        return False
    return slot not in ({"X", "Z"} if inputs else {"Y"})


def _insert_cast_op(block: Any, op: Any, idx: int, src_dtype: str, dest_dtype: str) -> int:
    """Cast the ``src_dtype`` inputs of ``op`` to ``dest_dtype`` at ``idx``; fp32 -> bf16 also makes its
    float32 outputs bfloat16. Returns how many casts were inserted."""
    inserted = 0
    for slot in sorted(op.input_names):  # Paddle's desc keeps slots sorted by name
        if src_dtype == "float32" and _skips_slot(op, slot, inputs=True):
            continue
        tensors = [block.var(name) for name in op.input(slot)]
        for var in (v for v in tensors if v.type in _valid_types and v.dtype != dest_dtype):
            if var.dtype == src_dtype:
                casted, made = insert_cast(block, idx, var, cast_var_name(var.name, dest_dtype, "bf16"),
                                           dest_dtype)
                inserted += made
                _rename_arg(op, var.name, casted.name)
            elif op.has_attr("in_dtype"):  # a third dtype: the op itself now takes dest_dtype
                op._set_attr("in_dtype", to_vartype(dest_dtype))
    if (src_dtype, dest_dtype) == ("float32", "bfloat16"):
        _outputs_to_bf16(block, op)
    return inserted


def _outputs_to_bf16(block: Any, op: Any) -> None:
    for slot in op.output_names:
        if _skips_slot(op, slot, inputs=False):
            continue
        for var in (block.var(name) for name in op.output(slot)):
            if var.type in _valid_types and var.dtype == "float32":
                var.dtype = "bfloat16"
                if op.has_attr("out_dtype"):
                    op._set_attr("out_dtype", _BF16)


def _insert_cast_post_op(block: Any, op: Any, idx: int, src_dtype: str, dest_dtype: str, target_name: str,
                         op_var_rename_map: List[Dict[str, str]]) -> int:
    """Cast ``target_name`` (an output of ``op``) to ``dest_dtype`` at ``idx`` for the ops after it."""
    target = block.var(target_name)
    if target.type not in _valid_types or target.dtype == dest_dtype:
        return 0
    if target.dtype != src_dtype:
        raise InvalidArgument(f"The real dtype({_suffix(target.dtype)}) is not equal to the src "
                              f"dtype({_suffix(src_dtype)})")
    casted, made = insert_cast(block, idx, target, cast_var_name(target.name, dest_dtype, "bf16"), dest_dtype)
    if made:
        op_var_rename_map[block.idx][target.name] = casted.name
    return made


def _touches_fp32_varnames(op: Any, amp_lists: Any) -> bool:
    names = amp_lists.fp32_varnames
    return bool(names) and any(n in names for n in op.input_arg_names + op.output_arg_names)


def _need_keep_fp32(op: Any, unsupported_op_list: Set[str], use_bf16_guard: bool) -> bool:
    """Pure bf16 keeps float32: ops without a bf16 kernel, learning-rate ops, ops outside ``bf16_guard``."""
    if op.type in unsupported_op_list:
        return True
    if any("learning_rate" in n for n in op.input_arg_names + op.output_arg_names):
        return True
    if not use_bf16_guard:
        return False
    scope = op.attr("op_namescope") if op.has_attr("op_namescope") else ""
    return _bf16_guard_pattern not in (scope or "")


@contextlib.contextmanager
def bf16_guard() -> Iterator[None]:
    """Ops built inside become bfloat16 under ``use_bf16_guard`` (the ``__use_bf16__`` name scope)."""
    with name_scope(_bf16_guard_pattern):
        yield


def are_post_ops_bf16(post_ops: Any, keep_fp32_ops: Set[Any]) -> bool:
    return not any(op in keep_fp32_ops for group in post_ops for op in group)


_READERS = ("create_py_reader", "read")


def _gray_op_precision(op: Any, block: Any, amp_lists: Any, decided: Dict[Any, str]) -> Optional[str]:
    """A gray op follows its producers: 'fp32' when any is a float32 op, else 'bf16' when any is a bf16
    op, else None (left as it is)."""
    seen = set()
    for name in op.input_arg_names:
        var = block.var(name)
        if var.op is None:
            continue
        producer = find_true_prev_op(block.ops, op, name) if var.op is op else var.op
        if producer is None:
            continue
        if decided.get(producer) == "fp32" or producer.type in amp_lists.fp32_list:
            seen.add("fp32")
        elif decided.get(producer) == "bf16" or producer.type in amp_lists.bf16_list:
            seen.add("bf16")
    return "fp32" if "fp32" in seen else "bf16" if seen else None


def _o1_precision(op: Any, block: Any, amp_lists: Any, decided: Dict[Any, str]) -> Optional[str]:
    """O1's choice for one op: 'fp32', 'bf16' or None (no change)."""
    if _touches_fp32_varnames(op, amp_lists) or op.type in amp_lists.fp32_list:
        return "fp32"
    if op.type in amp_lists.bf16_list:
        return "bf16"
    if op.type in amp_lists.gray_list:
        return _gray_op_precision(op, block, amp_lists, decided)
    return "fp32"  # in no list: float32, to be safe


def rewrite_program_bf16(main_prog: Any, amp_lists: Optional[AutoMixedPrecisionListsBF16] = None) -> None:
    """O1 bf16: insert the casts that run bf16-list ops (and the gray ops they feed) in bfloat16."""
    lists = amp_lists if amp_lists is not None else AutoMixedPrecisionListsBF16()
    block = main_prog.global_block()
    decided: Dict[Any, str] = {}  # op -> 'fp32' | 'bf16', in program order (gray ops look back)
    for op in block.ops:
        choice = None if op.type in _READERS else _o1_precision(op, block, lists, decided)
        if choice is not None:
            decided[op] = choice

    def insert(op: Any, idx: int) -> int:
        choice = decided.get(op)
        if choice == "fp32":
            return _insert_cast_op(block, op, idx, "bfloat16", "float32")
        if choice == "bf16":
            if op.has_attr("dtype") and op.attr("dtype") == _FP32:
                op._set_attr("dtype", _BF16)
            return _insert_cast_op(block, op, idx, "float32", "bfloat16")
        return 0

    insert_before_each_op(block, insert)


def _initializer_outputs(op: Any, block: Any, all_ops: Any) -> Optional[tuple]:
    """(the vars an initializer writes, the ops reading each), or None when one is no tensor of ``block``."""
    written, readers = [], []
    for name in op.output_arg_names:
        var = block.vars.get(name)
        if var is None or var.type not in _valid_types:
            return None
        written.append(var)
        readers.append(find_true_post_op(all_ops, op, name, True))
    return written, readers


def cast_initializers_to_bf16(startup_prog: Any, amp_lists: Any, block: Any, all_ops: Any, keep_fp32_ops: Set[Any],
                              to_bf16_var_names: Optional[Set[str]] = None) -> None:
    """Make the startup initializers (fill_constant, uniform_random) of vars only bf16 ops read write bf16."""
    for op in startup_prog.global_block().ops:
        found = _initializer_outputs(op, block, all_ops) if op.type in amp_lists.bf16_initializer_list else None
        if found is None or not are_post_ops_bf16(found[1], keep_fp32_ops):
            continue
        for var in found[0]:
            if var.dtype == "float32":
                var.dtype = "bfloat16"
            if to_bf16_var_names is not None:
                to_bf16_var_names.discard(var.name)  # written bf16 already: amp_init leaves it
        if op.has_attr("dtype") and op.attr("dtype") == _FP32:
            op._set_attr("dtype", _BF16)


def _set_op_bf16(op: Any, block: Any, global_block: Any, to_bf16_var_names: Set[str]) -> None:
    """Pure bf16: every float32 input and output of ``op`` (norm statistics aside) becomes bfloat16."""
    def lookup(name):
        var = block.vars.get(name)
        return var if var is not None else global_block.vars.get(name)

    for inputs, slots in ((True, op.input_names), (False, op.output_names)):
        for slot in (s for s in slots if not _skips_slot(op, s, inputs)):
            for name in (op.input(slot) if inputs else op.output(slot)):
                var = lookup(name)
                if var is None or var.type not in _valid_types or var.dtype != "float32":
                    continue
                var.dtype = "bfloat16"
                if inputs:  # what amp_init converts in the scope
                    to_bf16_var_names.add(name)
    for attr_name in ("in_dtype", "out_dtype", "dtype"):
        if op.has_attr(attr_name) and op.attr(attr_name) == _FP32:
            op._set_attr(attr_name, _BF16)


def _cast_around_fp32_op(block: Any, op: Any, idx: int, keep_fp32_ops: Set[Any],
                         op_var_rename_map: List[Dict[str, str]]) -> int:
    """Cast a float32 op's bf16 inputs to float32, and its outputs back to bf16 for the bf16 ops after it."""
    before = _insert_cast_op(block, op, idx, "bfloat16", "float32")
    after = 0
    for name in op.output_arg_names:
        var = block.vars.get(name)
        if var is None or var.type not in _valid_types or var.dtype != "bfloat16":
            continue
        var.dtype = "float32"  # what the op really writes
        if any(r not in keep_fp32_ops for r in find_true_post_op(block.ops, op, name)):  # a bf16 reader
            after += _insert_cast_post_op(block, op, idx + before + 1, "float32", "bfloat16", name,
                                          op_var_rename_map)
    return before + after


def cast_model_to_bf16(program: Any, startup_prog: Any = None, amp_lists: Optional[AutoMixedPrecisionListsBF16] = None,
                       use_bf16_guard: bool = True) -> Set[str]:
    """Pure bf16: every var bfloat16 but around the ops that must stay float32; returns the bf16 var names."""
    lists = amp_lists if amp_lists is not None else AutoMixedPrecisionListsBF16()
    global_block = program.global_block()
    ops_before = [op for block in program.blocks for op in block.ops]
    fp32_ops: Set[Any] = set()
    bf16_names: Set[str] = set()
    # first every op's side (bf16 ops switch their vars at once), block by block; each block's pass
    # also lets the startup initializers whose readers are all bf16 write bf16
    for block in program.blocks:
        for op in (o for o in block.ops if o.type not in _READERS):
            if _need_keep_fp32(op, lists.unsupported_list, use_bf16_guard):
                fp32_ops.add(op)
            else:
                _set_op_bf16(op, block, global_block, bf16_names)
        if startup_prog is not None:
            cast_initializers_to_bf16(startup_prog, lists, global_block, block.ops, fp32_ops, bf16_names)
    # then the casts around the float32 ops; the bf16 readers of their outputs are renamed at the end
    renames: List[Dict[str, str]] = [collections.OrderedDict() for _ in program.blocks]
    for block in program.blocks:
        insert_before_each_op(block, lambda op, idx: _cast_around_fp32_op(op.block, op, idx, fp32_ops, renames)
                              if op in fp32_ops else 0)
    _rename_op_input(program, renames, ops_before, fp32_ops)
    return bf16_names


def cast_parameters_to_bf16(place: Any, program: Any, scope: Any = None, to_bf16_var_names: Any = None) -> None:
    """Store the parameters in ``to_bf16_var_names`` as bfloat16 in ``scope`` (pure bf16's ``amp_init``)."""
    names = set(to_bf16_var_names or ())
    var_scope = scope if scope is not None else global_scope()
    for block in program.blocks:
        for param in block.all_parameters():
            if param.name in names:
                tensor = var_scope.find_var(param.name).get_tensor()
                tensor.set(convert_float_to_uint16(np.array(tensor)), place)  # uint16 bits: a bfloat16 tensor

