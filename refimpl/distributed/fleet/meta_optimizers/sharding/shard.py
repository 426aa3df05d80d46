"""``Shard`` and ``ProgramSegment``: which rank owns which parameter, and one broadcast segment.

Mirrors ``paddle/distributed/fleet/meta_optimizers/sharding/shard.py`` of
Paddle 3.3.1. ``Shard.setup`` walks the parameters in ``params_grads`` order,
adding up their sizes in MB, and moves to the next owner once the running sum
has passed ``(owner + 1) / worker_num`` of the total — so the owners hold
contiguous runs of parameters of roughly equal bytes. An optimizer
accumulator (``<param>_moment1_0``, ``_velocity_0`` ...) belongs to its
parameter's owner; any other variable to everyone (device ``-1``).
``find_broadcast_params`` names the parameters a segment must broadcast: those
read by a non-optimizer op, and, under AMP, the fp16 casts of parameters
instead of the fp32 parameters they are cast from.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Sequence, Set, Tuple

from .utils import get_var_size, is_optimizer_op

#: suffixes of the optimizer accumulators that follow their parameter's owner (Paddle's list)
_ACCUMULATOR_SUFFIXES = ("_moment1_0", "_moment2_0", "_beta1_pow_acc_0", "_beta2_pow_acc_0", "_velocity_0")


class Shard:
    """Parameter -> owner assignment of one sharding group (see the module docstring)."""

    def __init__(self) -> None:
        self.global_params: Set[str] = set()
        self.worker_idx = -1
        self.worker_num = -1
        self.global_param2device: Dict[str, int] = {}
        self.device2global_params: Dict[int, List[str]] = {}

    def setup(self, params_grads: Sequence[Tuple[Any, Any]], worker_idx: int, worker_num: int) -> None:
        self.global_params = {p.name for p, _ in params_grads}
        self.worker_idx, self.worker_num = worker_idx, worker_num
        # global_param2device gains the fp16 casts later (find_broadcast_params); device2global_params does not
        self.global_param2device, self.device2global_params = self._split_params(params_grads, worker_idx,
                                                                                 worker_num)

    def has_param(self, var_name: str) -> bool:
        return var_name in self.global_param2device and self._var_device_id(var_name) == self.worker_idx

    def has_opt_var(self, var_name: str) -> bool:
        return self._var_device_id(var_name) == self.worker_idx

    def has_var(self, var_name: str) -> bool:
        return self._var_device_id(var_name) in (-1, self.worker_idx)

    def _split_params(self, params_grads: Sequence[Tuple[Any, Any]], worker_idx: int,
                      worker_num: int) -> Tuple[Dict[str, int], Dict[int, List[str]]]:
        sizes = [(p.name, get_var_size(p)) for p, _ in params_grads]
        total = sum(mem for _, mem in sizes)
        param2device: Dict[str, int] = {}
        device2params: Dict[int, List[str]] = {d: [] for d in range(worker_num)}
        device, accumulated = 0, 0.0
        for name, mem in sizes:
            # Paddle's test: strictly more than this owner's share already placed -> next owner
            if accumulated > total * 1.0 * (device + 1) / worker_num:
                device += 1
            device2params[device].append(name)
            param2device[name] = device
            accumulated += mem
        return param2device, device2params

    def _base_param(self, var_name: str) -> str:
        """The parameter ``var_name`` is an accumulator of (Paddle strips each suffix with ``re.sub``)."""
        for suffix in _ACCUMULATOR_SUFFIXES:
            base = re.sub(suffix, "", var_name)
            if base in self.global_param2device:
                return base
        return ""

    def _var_device_id(self, var_name: str) -> int:
        if var_name in self.global_param2device:
            return self.global_param2device[var_name]
        base = self._base_param(var_name)
        return self.global_param2device[base] if base else -1

    def find_broadcast_params(self, block: Any) -> Set[str]:
        from .fp16_helper import FP16Utils  # the AMP helper reads Shard too
        broadcast_vars: Set[str] = set()
        usage = dict.fromkeys(self.global_params, 0)
        for op in block.ops:
            if is_optimizer_op(op):
                continue
            for name in op.desc.input_arg_names():
                if name in self.global_params:
                    usage[name] += 1
        for op in block.ops:
            if not FP16Utils.is_fp16_cast_op(block, op, self.global_params):
                continue
            fp32, fp16 = op.input_arg_names[0], op.output_arg_names[0]
            broadcast_vars.add(fp16)
            usage[fp32] -= 1
            self.global_param2device[fp16] = self.global_param2device[fp32]
        broadcast_vars.update(p for p, n in usage.items() if n > 0)
        return broadcast_vars

    def device(self, var_name: str) -> int:
        return self._var_device_id(var_name)

    def is_param(self, var_name: str) -> bool:
        return var_name in self.global_params

    def is_opti_var(self, var_name: str) -> bool:
        if var_name in self.global_params:
            return True
        return any(re.sub(s, "", var_name) in self.global_params for s in _ACCUMULATOR_SUFFIXES)

    def filter_grads(self, grads: Sequence[str]) -> List[str]:
        return [g for g in grads if self.has_param(g.split("@")[0])]


class ProgramSegment:
    """One stretch of the main block whose parameters are broadcast together before it."""

    def __init__(self, block: Any) -> None:
        self._block = block
        self._allreduce_vars: List[str] = []
        self._start_idx = -1  # first op of the segment
        self._end_idx = -1  # one past its last op
        self._param2broadcast: Dict[str, str] = {}  # parameter -> the var broadcast for it
        self._broadcast_vars: List[Tuple[str, int]] = []  # (broadcast var, root)
        self._cast_ops: Dict[str, str] = {}  # fp16 cast name -> fp32 parameter name
        self._fill_constant_vars: List[str] = []
        self._param_mem = 0.0


__all__ = ["Shard", "ProgramSegment"]
