"""``ProgramDeps``: which ops of a sharded program feed only the optimizer state another rank owns.

Mirrors ``paddle/distributed/fleet/meta_optimizers/sharding/prune.py`` of
Paddle 3.3.1. Starting from the reduced gradients (``start_vars``) it records,
for every var reachable from them, the ops that read it and the ops that
write it; ``end_vars`` (the optimizer state of other ranks' parameters) start
out as removable. Walking the block backwards, an op all of whose outputs are
removable is removed (``remove_op``), which crops its inputs: an input with no
reader left becomes removable too, so the gradient's whole optimizer chain
(clip, decay, update) goes, and a var no op writes any more is dropped from
the block. A ``conditional_block`` gets its own ``ProgramDeps`` over its sub-block.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set

from refimpl.core.errors import PreconditionNotMet

#: ops that never make a var reachable (Paddle's list)
_SKIPPED = ("c_sync_comm_stream", "c_calc_comm_stream", "all_reduce")


class ProgramDeps:
    """The read/write map of ``block`` from ``start_vars`` on (see the module docstring)."""

    def __init__(self, block: Any, start_vars: Sequence[str], end_vars: Sequence[str]) -> None:
        self._block = block
        self._start_vars = list(start_vars)
        self._end_vars = list(end_vars)
        self._var_to_use_op: Dict[str, List[int]] = {}
        self._sub_block_deps: Dict[int, "ProgramDeps"] = {}
        self._var_to_generate_op: Dict[str, List[int]] = {}
        self._should_removed_var: Set[str] = set()
        self._father_block_deps: Optional["ProgramDeps"] = None
        self._build_deps()

    def get_sub_block_deps(self, idx: int) -> Optional["ProgramDeps"]:
        return self._sub_block_deps.get(idx)

    def get_var_deps(self, var_name: str) -> Optional[List[int]]:
        return self._var_to_use_op.get(var_name)

    def _build_deps(self) -> None:
        for name in self._start_vars:
            self._var_to_use_op[name] = []
            self._var_to_generate_op[name] = []
        for idx, op in enumerate(self._block.ops):
            if op.type in _SKIPPED:
                continue
            ins, outs = op.desc.input_arg_names(), op.desc.output_arg_names()
            if not any(n in self._var_to_use_op for n in ins):
                continue
            for n in ins:
                if n in self._var_to_use_op:
                    self._var_to_use_op[n].append(idx)
            for n in outs:
                self._var_to_use_op.setdefault(n, [])
                self._var_to_generate_op.setdefault(n, []).append(idx)
            if op.type == "conditional_block":
                sub_idx = op._block_attr_id("sub_block")
                sub = ProgramDeps(self._block.program.block(sub_idx), ins, outs)
                self._sub_block_deps[sub_idx] = sub
                sub._father_block_deps = self

    def crop_input_var_from_op(self, op_idx: int, var_name: str) -> None:
        if var_name not in self._var_to_use_op:
            return
        users = self._var_to_use_op[var_name]
        if users:
            if op_idx not in users:
                raise PreconditionNotMet(f"sharding prune: op {op_idx} is not a reader of {var_name!r} "
                                         f"(readers {users})")
            users.remove(op_idx)
        if var_name in self._start_vars:
            self._should_removed_var.discard(var_name)
        elif not users:  # nobody reads it any more
            self._should_removed_var.add(var_name)
        elif self._var_to_generate_op[var_name][-1] >= users[-1]:  # a cycle: written after its last read
            self._should_removed_var.add(var_name)
        else:
            self._should_removed_var.discard(var_name)

    def crop_output_var_from_op(self, op_idx: int, var_name: str) -> None:
        writers = self._var_to_generate_op.get(var_name)
        if writers is not None:
            if op_idx not in writers:
                raise PreconditionNotMet(f"sharding prune: op {op_idx} is not a writer of {var_name!r}")
            writers.remove(op_idx)
        if self._block.has_var(var_name) and not writers:
            self._block._remove_var(var_name)

    def remove_op(self, op_idx: int, reserved_vars: Optional[Set[str]] = None) -> None:
        op = self._block.ops[op_idx]
        for n in op.desc.input_arg_names():
            if reserved_vars is None or n not in reserved_vars:
                self.crop_input_var_from_op(op_idx, n)
        for n in op.desc.output_arg_names():
            if reserved_vars is None or n not in reserved_vars:
                self.crop_output_var_from_op(op_idx, n)
        self._block._remove_op(op_idx, sync=False)

    def should_remove_op(self, op_idx: int) -> bool:
        outs = self._block.ops[op_idx].desc.output_arg_names()
        # an op without outputs (send_v2 ...) runs on every rank
        return bool(outs) and all(n in self._should_removed_var for n in outs)


__all__ = ["ProgramDeps"]
