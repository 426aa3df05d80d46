"""The fused communication of static sharding: ``coalesce_tensor`` buffers, one collective per buffer.

Mirrors ``FuseHelper``, ``insert_fused_allreduce_ops``, ``insert_fused_reduce_ops``,
``insert_fused_broadcast_param_ops`` and ``fuse_opt_broadcast_param_ops`` of
``paddle/distributed/fleet/meta_optimizers/sharding/utils.py`` (Paddle 3.3.1); ``utils.py``'s
``insert_allreduce_ops`` / ``insert_reduce_ops`` / ``insert_broadcast_param_ops`` call them when the
strategy has ``fuse_all_reduce_ops``. Gradients (or parameters) are grouped per owner, in order, into
buffers of at most ``fuse_grad_size_in_MB`` of one dtype; a group of one var is not coalesced. Every op
goes in at one index, as in Paddle, so the last owner's ops come first. Hybrid dp's fused allreduce
and the pipeline's fused reduces / broadcasts (optimizer sharding) are what Paddle writes with them.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from refimpl.core.dtypes import convert_dtype, to_vartype
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.core.reduce_op import ReduceOp
from refimpl.framework import unique_name
from refimpl.framework.op_role import OpRole

from .utils import OP_ROLE_KEY, _insert, get_grad_device, get_var_size, is_optimizer_op

__all__ = ["FuseHelper", "insert_fused_allreduce_ops", "insert_fused_reduce_ops", "insert_fused_broadcast_param_ops",
           "fuse_opt_broadcast_param_ops"]


class FuseHelper:
    """Gradients grouped into ``coalesce_tensor`` buffers of at most ``fuse_size`` MB, one dtype each."""

    @staticmethod
    def sort_vars_by_dtype(block: Any, vars_name: Sequence[str]) -> List[str]:
        by = {"float32": [], "float16": []}  # type: Dict[str, List[str]]
        for name in vars_name:
            dtype = convert_dtype(block.var(name).dtype)
            if dtype not in by:
                raise InvalidArgument(f"sharding fuse: only float32/float16 vars fuse, {name!r} is {dtype}")
            by[dtype].append(name)
        return by["float32"] + by["float16"]

    @staticmethod
    def get_fused_groups(block: Any, vars_name: Sequence[str], fuse_size: float = 32.0) -> List[List[Any]]:
        groups: List[List[Any]] = []
        cur_size, last_dtype = 0.0, None
        for name in vars_name:
            var = block.var(name)
            size = get_var_size(var)
            if cur_size + size > fuse_size or not groups or var.dtype != last_dtype:
                groups.append([var])
                cur_size, last_dtype = size, var.dtype
            else:
                groups[-1].append(var)
                cur_size += size
        return groups

    @staticmethod
    def insert_coalesce_tensor(block: Any, index: int, groups: Sequence[Sequence[Any]],
                               op_role: int = OpRole.Backward, prefix: str = "Output") -> Tuple[List[Any], int]:
        fused_vars, insert_num = [], 0
        for group in groups:
            if len(group) == 1:  # nothing to fuse
                fused_vars.append(group[0])
                continue
            fused = block.create_var(name=unique_name.generate(f"Fused{prefix}_{group[0].name}"),
                                     dtype=group[0].dtype, persistable=False, stop_gradient=True)
            fused_vars.append(fused)
            _insert(block, index, "coalesce_tensor", {"Input": list(group)},
                    {"Output": list(group), "FusedOutput": [fused]},
                    {"copy_data": True, "use_align": True, "dtype": to_vartype(group[0].dtype),
                     OP_ROLE_KEY: op_role})
            insert_num += 1
        return fused_vars, insert_num


def insert_fused_allreduce_ops(block: Any, insert_idx: int, ring_id: int, allreduce_vars: Sequence[str],
                               op_role: int = OpRole.Backward, use_calc_stream: bool = False,
                               fuse_grad_size_in_MB: float = 32) -> None:
    """``coalesce_tensor`` per group, then per fused buffer a ``c_sync_calc_stream`` and an ``all_reduce``."""
    groups = FuseHelper.get_fused_groups(block, allreduce_vars, fuse_grad_size_in_MB)
    fused_vars, insert_num = FuseHelper.insert_coalesce_tensor(block, insert_idx, groups, op_role, prefix="Grad")
    for fused in fused_vars:
        _insert(block, insert_idx + insert_num, "all_reduce", {"x": [fused]}, {"out": [fused]},
                {"ring_id": ring_id, "reduce_type": int(ReduceOp.SUM), OP_ROLE_KEY: op_role})
        if not use_calc_stream:
            _insert(block, insert_idx + insert_num, "c_sync_calc_stream", {"X": [fused]}, {"Out": [fused]},
                    {OP_ROLE_KEY: op_role})


def _owners(vars_name: Sequence[str], shard: Any, root_of: Any, what: str) -> List[List[str]]:
    """``vars_name`` grouped by owner (index = sharding rank), each in the given order."""
    by_owner: List[List[str]] = [[] for _ in range(shard.worker_num)]
    for name in vars_name:
        root = root_of(name)
        if not 0 <= root < shard.worker_num:
            raise PreconditionNotMet(f"sharding: the {what} {name!r} has owner {root}, not one of the "
                                     f"{shard.worker_num} ranks")
        by_owner[root].append(name)
    return by_owner


def _insert_fused(block: Any, insert_idx: int, by_owner: Sequence[Sequence[str]], op_type: str, root_attr: str,
                  ring_id: int, op_role: int, fuse_size: float, prefix: str, sync_calc: bool,
                  sort: bool = False) -> None:
    """Per owner: its vars in ``coalesce_tensor`` groups of at most ``fuse_size`` MB, then per fused
    buffer one ``op_type`` (``reduce`` / ``broadcast``) to / from that owner, each after a
    ``c_sync_calc_stream`` when ``sync_calc``. Everything goes in at ``insert_idx`` (as in Paddle), so
    the last owner's ops come first and, within an owner, the last group's."""
    for root, vars_name in enumerate(by_owner):
        if sort:
            vars_name = FuseHelper.sort_vars_by_dtype(block, vars_name)
        groups = FuseHelper.get_fused_groups(block, vars_name, fuse_size)
        fused_vars, insert_num = FuseHelper.insert_coalesce_tensor(block, insert_idx, groups, op_role,
                                                                   prefix=prefix)
        for fused in fused_vars:
            attrs = {"ring_id": ring_id, root_attr: root, OP_ROLE_KEY: op_role}
            if op_type == "reduce":
                attrs["reduce_type"] = int(ReduceOp.SUM)
            _insert(block, insert_idx + insert_num, op_type, {"x": [fused]}, {"out": [fused]}, attrs)
            if sync_calc:
                _insert(block, insert_idx + insert_num, "c_sync_calc_stream", {"X": [fused]}, {"Out": [fused]},
                        {OP_ROLE_KEY: op_role})


def insert_fused_reduce_ops(block: Any, insert_idx: int, ring_id: int, reduce_vars: Sequence[str], shard: Any,
                            op_role: int = OpRole.Backward, use_calc_stream: bool = False,
                            rank: Optional[int] = None, fuse_grad_size: float = 32) -> List[str]:
    """The gradients of each owner fused into buffers, each ``reduce``d to that owner; returns ``rank``'s."""
    by_owner = _owners(reduce_vars, shard, lambda v: get_grad_device(v, shard), "gradient")
    _insert_fused(block, insert_idx, by_owner, "reduce", "root_id", ring_id, op_role, fuse_grad_size, "Grad",
                  not use_calc_stream)
    return [] if rank is None else list(by_owner[rank])


def insert_fused_broadcast_param_ops(block: Any, insert_idx: int, ring_id: int, params: Sequence[str], shard: Any,
                                     op_role: int = OpRole.Optimize, use_calc_stream: bool = False,
                                     rank: Optional[int] = None, fuse_size: float = 32) -> List[str]:
    """The parameters of each owner fused into buffers, each ``broadcast`` from that owner; returns ``rank``'s."""
    by_owner = _owners(params, shard, shard.device, "parameter")
    _insert_fused(block, insert_idx, by_owner, "broadcast", "root", ring_id, op_role, fuse_size, "Param",
                  not use_calc_stream)
    return [] if rank is None else list(by_owner[rank])


def fuse_opt_broadcast_param_ops(block: Any, ring_id: int, shard: Any, op_role: int = OpRole.Optimize,
                                 strategy: Any = None) -> None:
    """With ``strategy.fuse_all_reduce_ops``: the parameter ``broadcast`` ops that end ``block`` (optimizer
    sharding's, after ``optimize_cast`` renamed them to the fp16 copies) become fused ones, per owner its
    params sorted float32 first, each fused buffer broadcast from that owner (no calc-stream sync)."""
    if strategy is None or not strategy.fuse_all_reduce_ops:
        return
    by_owner: List[List[str]] = [[] for _ in range(shard.worker_num)]
    idx = len(block.ops)
    while idx > 0:
        op = block.ops[idx - 1]
        if not is_optimizer_op(op) or op.type not in ("c_broadcast", "broadcast"):
            break
        by_owner[int(op.attr("root"))].insert(0, op.input_arg_names[0])
        block._remove_op(idx - 1, sync=False)
        idx -= 1
    _insert_fused(block, idx, by_owner, "broadcast", "root", ring_id, op_role, strategy.fuse_grad_size_in_MB,
                  "Param", sync_calc=False, sort=True)
