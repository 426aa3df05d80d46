"""PipelineMemoryEstimator: the peak activation memory of a pipeline job program.

Mirrors ``PipelineMemoryEstimator`` of Paddle's ``pass_utils``. For one
micro-batch's sequence of job types (e.g. ``["forward", "backward"]``) it
first works out which vars each job type must keep for a later one
(``set_program_skip_gc_vars``); ``estimate_memory`` then walks a job
program op by op, allocating a non-persistable var at its first use and
freeing it after its last (unless it is kept), and returns the bytes still
held at the end (``mem_usage``) and the peak (``max_memory``). Vars the
previous job type kept are taken as already allocated.

As in Paddle: a var's size is its declared shape times a per-dtype size
(bool and unknown dtypes count 4 bytes, a 0-D var counts 0 bytes); reader
ops are ignored; a var's uses are counted only where the op needs its
buffer, but every appearance counts down. Differences: an unknown (-1) dim
counts as ``batch_size`` when the estimator is given one (Paddle: 1); with
no ``dist_context`` the vars come from the program itself; ops are taken
block by block (Paddle sorts them by OpDesc creation id, which is the same
order for a cloned or loaded program).

``paddle_quirks=False`` drops the Paddle habits that make the estimate
differ from what refimpl's executor measures: uses counted down where the
op does not need the buffer (which frees a var early), 0-D vars counted as
0 bytes, bool counted as 4 bytes, and feeds counted from their first use
(they are in the scope before the job starts). With it and ``batch_size``
set, ``max_memory`` is the executor's peak of non-persistable bytes, except
for outputs a kernel leaves unwritten (dropout's ``Mask`` in test mode).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Sequence, TYPE_CHECKING, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from . import pass_utils

if TYPE_CHECKING:
    from refimpl.framework.program import Program

_READER_OPS = ("create_py_reader", "create_double_buffer_reader", "read")
_DTYPE_BYTES = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2,
                "int16": 2, "int8": 1, "uint8": 1}


class PipelineMemoryEstimator:
    def __init__(self, batch_size: Optional[int] = None, paddle_quirks: bool = True) -> None:
        self.type_to_skip_gc_vars = {}
        self.program_types = []
        self.batch_size = batch_size
        self.paddle_quirks = paddle_quirks
        self.logger = logging.getLogger(__name__)

    def set_program_skip_gc_vars(self, type_to_program: Dict[str, Program],
                                 program_types: Sequence[str]) -> None:
        """Record, per job type, the vars it must keep for a later job type of ``program_types``.

        ``program_types`` is the order of job types within one micro-batch.
        Raises ``SkipGCVarsError`` if a backward job type would keep anything.
        """
        self.program_types = list(program_types)
        required = {}
        for job_type, program in type_to_program.items():
            required[job_type] = pass_utils._get_required_vars_of_program(program)
            self.type_to_skip_gc_vars[job_type] = {}
        needed_later = set()
        for job_type in reversed(self.program_types):
            skip = required[job_type] & needed_later
            if job_type in ("backward", "backward_w") and skip:
                raise pass_utils.SkipGCVarsError(job_type, skip)
            self.type_to_skip_gc_vars[job_type] = dict.fromkeys(skip, -1)
            needed_later |= required[job_type]

    def estimate_memory(self, program: Program, program_type: str,
                        dist_context: Any = None) -> Tuple[int, int]:
        """``(mem_usage, max_memory)`` in bytes for one run of ``program`` as job ``program_type``."""
        if program_type not in self.type_to_skip_gc_vars:
            raise InvalidArgument(f"Please set the skip_gc_vars before estimating memory for "
                                  f"{program_type} program.")
        ordered_ops = [op for block in program.blocks for op in block.ops]
        var_info = self._get_program_var_info(ordered_ops, dist_context)
        skip_gc_vars = self.type_to_skip_gc_vars[program_type]
        for name in skip_gc_vars:
            if name in var_info:
                skip_gc_vars[name] = var_info[name]["size"]
        visited_vars = {}
        position = self.program_types.index(program_type)
        if position >= 1:
            visited_vars = self.type_to_skip_gc_vars[self.program_types[position - 1]]
        fed = [] if self.paddle_quirks else pass_utils.get_inputs_of_program(program)
        return self._estimate_max_memory(ordered_ops, var_info, skip_gc_vars, visited_vars, fed)

    def _estimate_max_memory(self, ordered_ops, var_info, skip_gc_vars, visited_vars, fed=()):
        mem_usage = max_memory = 0
        has_used_vars = set(visited_vars)  # allocated by the previous job type
        for name in fed:  # inputs already in the scope when the job starts
            if name in var_info and name not in has_used_vars and not var_info[name]["persistable"]:
                has_used_vars.add(name)
                mem_usage += var_info[name]["size"]
        max_memory = mem_usage
        for op in ordered_ops:
            if op.type in _READER_OPS:
                continue
            last_use_vars = []
            for name in op.input_arg_names + op.output_arg_names:
                if name not in var_info or not (self.paddle_quirks or self._needs_buffer(op, name)):
                    continue
                info = var_info[name]
                info["count"] -= 1
                if name not in has_used_vars and not info["persistable"]:
                    has_used_vars.add(name)
                    mem_usage += info["size"]
                    max_memory = max(max_memory, mem_usage)
                if info["count"] == 0 and not info["persistable"] and name not in skip_gc_vars:
                    last_use_vars.append(name)
            for name in set(last_use_vars):
                mem_usage -= var_info[name]["size"]
                if name in visited_vars:
                    visited_vars[name] -= var_info[name]["size"]
        for name, size in visited_vars.items():
            if name not in skip_gc_vars:
                mem_usage -= size
        return mem_usage, max_memory

    @staticmethod
    def _needs_buffer(op, name):
        info = pass_utils.OpInOutInfo()
        info.build_info(op)
        return info.is_needed(name)

    def _get_increase_memory(self, program_type):
        """Bytes the vars kept by ``program_type`` hold (known after ``estimate_memory``)."""
        increase = sum(self.type_to_skip_gc_vars[program_type].values())
        if increase < 0:
            raise InvalidArgument("No size info for skip_gc_vars, please run estimate_memory to get var size info.")
        return increase

    def _get_program_var_info(self, ordered_ops, dist_context):
        var_info = {}
        for op in ordered_ops:
            if op.type in _READER_OPS:
                continue
            info = pass_utils.OpInOutInfo()
            info.build_info(op)
            inputs = set(op.input_arg_names)
            for name in op.input_arg_names + op.output_arg_names:
                if not info.is_needed(name):
                    continue
                var = self._var_of(op, name, name in inputs, dist_context)
                if var is not None:
                    self._update_var_info(name, var, var_info)
        return var_info

    @staticmethod
    def _var_of(op, name, is_input, dist_context):
        if dist_context is None:
            return op.block._find_var_recursive(name)
        dist_op = dist_context.get_dist_op_for_program(op)
        if not dist_op:
            return None
        return dist_op.get_serial_input(name) if is_input else dist_op.get_serial_output(name)

    def _update_var_info(self, name, var, var_info):
        if name in var_info:
            var_info[name]["count"] += 1
            return
        var_info[name] = {"size": 0, "count": 1, "persistable": bool(var.persistable)}
        if not var.persistable:
            var_info[name]["size"] = self._get_var_size(var)

    def _get_var_size(self, var):
        unknown = 1 if self.batch_size is None else int(self.batch_size)
        shape = [unknown if d == -1 else d for d in (var.shape or ())]
        if not self.paddle_quirks:
            return int(np.prod(shape, dtype=np.int64)) * np.dtype(var.dtype).itemsize
        return self._calculate_bytes(shape, var.dtype)

    @staticmethod
    def _calculate_bytes(var_shape, dtype):
        count = 1
        for d in var_shape:
            count *= d
        return (count if var_shape else 0) * _DTYPE_BYTES.get(str(dtype), 4)

    @staticmethod
    def _is_last_used(var_name, var_info):
        return var_name in var_info and var_info[var_name]["count"] == 0

    @staticmethod
    def _is_persistable(var_name, var_info):
        return var_name in var_info and var_info[var_name]["persistable"]
