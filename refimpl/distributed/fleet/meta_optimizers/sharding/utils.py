"""The program-editing helpers of static sharding: sync, broadcast, reduce and allreduce insertion.

Mirrors ``paddle/distributed/fleet/meta_optimizers/sharding/utils.py`` of
Paddle 3.3.1 (the names, signatures and the ops each inserts: ``broadcast``,
``reduce``, ``all_reduce``, ``c_sync_calc_stream``, ``c_sync_comm_stream``,
``fill_constant``, ``cast``), and re-exports the op predicates of Paddle's
``meta_optimizers/common.py`` (``is_optimizer_op`` ...), which the sharding
helpers use. Every ``insert_*`` inserts at one index, so a list is inserted
in reverse: the first name ends up last, as in Paddle.

The fused variants these dispatch to with ``fuse_all_reduce_ops``
(``FuseHelper``: ``coalesce_tensor`` buffers of at most
``fuse_grad_size_in_MB``) are in ``fuse_helper.py``.
``check_broadcast`` / ``check_allreduce_sum`` (disabled in Paddle) are not
here; ``save_persistables`` is in ``persistables.py``. ``comm_analyse`` takes
the report's path (Paddle: always ``nccl_size.txt``) and returns its histogram.
"""
from __future__ import annotations

import re
from functools import reduce as _fold
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from refimpl.core.dtypes import convert_dtype, to_vartype
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.core.reduce_op import ReduceOp
from refimpl.framework.op_role import OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole

OP_ROLE_KEY = OP_ROLE_ATTR
OP_ROLE_VAR_KEY = OP_ROLE_VAR_ATTR


# ---- Paddle's meta_optimizers/common.py predicates --------------------------------------------
def _role(op: Any) -> int:
    return int(op.all_attrs().get(OP_ROLE_KEY, 0))


def is_update_op(op: Any) -> bool:
    names = op.input_names
    return "Param" in names and "Grad" in names and "LearningRate" in names


def is_loss_grad_op(op: Any) -> bool:
    role = _role(op)
    return bool(role & OpRole.Backward and role & OpRole.Loss)


def is_backward_op(op: Any) -> bool:
    return bool(_role(op) & OpRole.Backward)


def is_optimizer_op(op: Any) -> bool:
    return bool(_role(op) & OpRole.Optimize)


# ---- where an inserted op belongs --------------------------------------------------------------
def rename_input(op: Any, old: str, new: str) -> None:
    """``op._rename_input`` as Paddle's C++ ``OpDesc::RenameInput`` does it: the ``op_role_var`` names are
    renamed too (a backward op reading a parameter's broadcast copy names that copy in its pairs)."""
    op._rename_input(old, new)
    pairs = op.all_attrs().get(OP_ROLE_VAR_KEY)
    if pairs and old in pairs:
        op._set_attr(OP_ROLE_VAR_KEY, [new if n == old else n for n in pairs])


def get_valid_op_role(block: Any, insert_idx: int) -> int:
    """Backward when inserting at the end or before a backward/optimize op, Forward before a
    forward/loss op; any other role (LRSched ...) looks at the next op (Paddle's rule)."""
    if insert_idx >= len(block.ops):
        return OpRole.Backward
    role = _role(block.ops[insert_idx])
    if role in (OpRole.Backward, OpRole.Optimize):
        return OpRole.Backward
    if role in (OpRole.Forward, OpRole.Loss):
        return OpRole.Forward
    return get_valid_op_role(block, insert_idx + 1)


def _insert(block: Any, idx: int, type: str, inputs: Optional[dict], outputs: Optional[dict],
            attrs: dict) -> Any:
    return block._insert_op(idx, type=type, inputs=inputs or {}, outputs=outputs or {}, attrs=attrs)


def insert_sync_calc_op(block: Any, insert_idx: int, calc_dep_vars: Sequence[str]) -> None:
    _insert(block, insert_idx, "c_sync_calc_stream", {"X": list(calc_dep_vars)}, {"Out": list(calc_dep_vars)},
            {OP_ROLE_KEY: get_valid_op_role(block, insert_idx)})


def insert_sync_comm_op(block: Any, insert_idx: int, ring_id: int, comm_dep_vars: Sequence[str]) -> int:
    _insert(block, insert_idx, "c_sync_comm_stream", {"X": list(comm_dep_vars)}, {"Out": list(comm_dep_vars)},
            {"ring_id": ring_id, OP_ROLE_KEY: get_valid_op_role(block, insert_idx)})
    return 1


def insert_sync_comm_ops(block: Any, insert_idx: int, ring_id: int, comm_dep_vars: Sequence[str]) -> int:
    if len(comm_dep_vars) == 0:
        return 0
    return insert_sync_comm_op(block, insert_idx, int(ring_id), comm_dep_vars)


def insert_fill_constant_ops(block: Any, insert_idx: int, fill_constant_vars: Sequence[str]) -> None:
    role = get_valid_op_role(block, insert_idx)
    for name in fill_constant_vars:
        var = block.var(name)
        _insert(block, insert_idx, "fill_constant", None, {"Out": [name]},
                {"shape": list(var.shape), "dtype": to_vartype(var.dtype), "value": 0.0, OP_ROLE_KEY: role})


def insert_cast_ops(block: Any, insert_idx: int, cast_ops: Dict[str, str]) -> None:
    """``cast`` fp32 parameter -> its fp16 copy, for each ``fp16 name -> fp32 name`` of ``cast_ops``."""
    role = get_valid_op_role(block, insert_idx)
    for fp16_name, fp32_name in cast_ops.items():
        _insert(block, insert_idx, "cast", {"X": [fp32_name]}, {"Out": [fp16_name]},
                {"in_dtype": to_vartype("float32"), "out_dtype": to_vartype("float16"), OP_ROLE_KEY: role})


def insert_allreduce_ops(block: Any, insert_idx: int, ring_id: int, allreduce_vars: Sequence[str],
                         op_role: int = OpRole.Backward, use_calc_stream: bool = False,
                         user_defined_strategy: Any = None) -> None:
    """One ``all_reduce`` (sum) per var on ``ring_id``; fused (``insert_fused_allreduce_ops``) when the strategy
    has ``fuse_all_reduce_ops`` and not ``fuse_grad_merge`` (whose vars the gradient merge already fused)."""
    if len(allreduce_vars) == 0:
        return
    s = user_defined_strategy
    if s is not None and s.fuse_all_reduce_ops and not s.fuse_grad_merge:
        from .fuse_helper import insert_fused_allreduce_ops
        insert_fused_allreduce_ops(block, insert_idx, ring_id, allreduce_vars, op_role, use_calc_stream,
                                   s.fuse_grad_size_in_MB)
        return
    for var in allreduce_vars:
        _insert(block, insert_idx, "all_reduce", {"x": [var]}, {"out": [var]},
                {"ring_id": ring_id, "reduce_type": int(ReduceOp.SUM), OP_ROLE_KEY: op_role})


def insert_reduce_ops(block: Any, insert_idx: int, ring_id: int, reduce_vars: Sequence[str], shard: Any,
                      op_role: int = OpRole.Backward, use_calc_stream: bool = False, rank: Optional[int] = None,
                      strategy: Any = None) -> List[str]:
    """A ``reduce`` (sum) of each gradient to its parameter's owner; returns those owned by ``rank``.

    With ``strategy.fuse_all_reduce_ops`` the gradients are fused first (``insert_fused_reduce_ops``),
    unless ``fuse_grad_merge`` already fused them (the ``FusedMergedGrad_<grad>`` buffers, whose owner
    is ``<grad>``'s)."""
    fused = strategy is not None and strategy.fuse_all_reduce_ops
    if fused and not strategy.fuse_grad_merge:
        from .fuse_helper import insert_fused_reduce_ops
        return insert_fused_reduce_ops(block, insert_idx, ring_id, reduce_vars, shard, op_role, use_calc_stream,
                                       rank, strategy.fuse_grad_size_in_MB)
    mine = []
    for var in reduce_vars:
        root = get_grad_device(var.replace("FusedMergedGrad_", "") if fused else var, shard)
        if root < 0:
            raise PreconditionNotMet(f"sharding: gradient {var!r} has no owner (root id {root})")
        if rank is not None and rank == root:
            mine.append(var)
        _insert(block, insert_idx, "reduce", {"x": [var]}, {"out": [var]},
                {"ring_id": ring_id, "root_id": root, "reduce_type": int(ReduceOp.SUM), OP_ROLE_KEY: op_role})
    return mine


def insert_broadcast_param_ops(block: Any, insert_idx: int, ring_id: int, params: Sequence[str], shard: Any,
                               op_role: int = OpRole.Optimize, use_calc_stream: bool = False,
                               rank: Optional[int] = None, strategy: Any = None) -> List[str]:
    """A ``broadcast`` of each parameter from its owner; returns those owned by ``rank`` (fused with
    ``strategy.fuse_all_reduce_ops``: ``insert_fused_broadcast_param_ops``)."""
    if strategy is not None and strategy.fuse_all_reduce_ops:
        from .fuse_helper import insert_fused_broadcast_param_ops
        return insert_fused_broadcast_param_ops(block, insert_idx, ring_id, params, shard, op_role,
                                                use_calc_stream, rank, strategy.fuse_grad_size_in_MB)
    mine = []
    for param in params:
        root = shard.device(param)
        if root < 0:
            raise PreconditionNotMet(f"sharding: parameter {param!r} has no owner (root id {root})")
        if rank is not None and rank == root:
            mine.append(param)
        _insert(block, insert_idx, "broadcast", {"x": [param]}, {"out": [param]},
                {"ring_id": ring_id, "root": root, OP_ROLE_KEY: op_role})
    return mine


def insert_broadcast_ops(block: Any, insert_idx: int, ring_id: int, broadcast2root: Iterable[Tuple[str, int]],
                         use_calc_stream: bool = False) -> None:
    role = get_valid_op_role(block, insert_idx)
    for name, root in broadcast2root:
        _insert(block, insert_idx, "broadcast", {"x": [name]}, {"out": [name]},
                {"ring_id": ring_id, "root": root, OP_ROLE_KEY: role})


# ---- names and sizes ----------------------------------------------------------------------------
#: the gradient-name suffixes, longest first (Paddle's order: the first that occurs is stripped)
_GRAD_SUFFIXES = (".cast_fp16@GRAD@MERGED", ".cast_fp16@GRAD", "@GRAD@MERGED@FP16", "@GRAD@MERGED", "@GRAD")


def get_grad_device(grad_name: str, shard: Any) -> int:
    if "@GRAD" not in grad_name:
        raise InvalidArgument(f"sharding: [{grad_name}] should be a grad variable")
    base = None
    for suffix in _GRAD_SUFFIXES:
        if suffix in grad_name:
            base = re.sub(re.escape(suffix), "", grad_name)
            break
    if base not in shard.global_param2device:
        raise InvalidArgument(f"sharding: [{base}] (from gradient {grad_name!r}) should be a param variable")
    return shard.global_param2device[base]


def get_first_check_finite_and_unscale_op_idx(block: Any, raise_error: bool = True) -> int:
    for idx, op in enumerate(block.ops):
        if op.type == "check_finite_and_unscale":
            return idx
    if raise_error:
        raise PreconditionNotMet("amp is turned on but check_finite_and_unscale op does not exist in main block")
    return -1


def get_first_optimize_op_idx(block: Any) -> Optional[int]:
    """One past the last backward op (Paddle's name for it)."""
    for index in range(len(block.ops) - 1, -1, -1):
        if is_backward_op(block.ops[index]):
            return index + 1
    return None


#: bytes per element of the dtypes Paddle's DtypeToSize knows
_DTYPE_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int16": 2, "int32": 4, "int64": 8,
               "bool": 1, "uint8": 1}


def get_var_size(param: Any) -> float:
    """The size of ``param`` in MB (its shape must be fully known)."""
    shape = list(param.shape)
    if -1 in shape:
        raise InvalidArgument(f"sharding: variable {param.name!r} has an unknown dimension in shape {shape}")
    dtype = convert_dtype(param.dtype)
    if dtype not in _DTYPE_SIZE:
        raise InvalidArgument(f"sharding: variable {param.name!r} has dtype {dtype}, which sharding cannot size")
    return _fold(lambda a, b: a * b, shape, 1) * _DTYPE_SIZE[dtype] / 1024.0 / 1024.0


def insert_scale_loss_grad_ops(block: Any, scale: float = 1.0) -> None:
    """Divide the loss gradient's ``fill_constant`` value by ``scale`` (the data-parallel degree)."""
    for op in reversed(block.ops):
        if is_loss_grad_op(op):
            if op.type != "fill_constant":
                raise PreconditionNotMet(f"loss_grad_op must be fill_constant op, but this op is {op.type}")
            op._set_attr("value", float(op.attr("value")) / scale)
            break


def comm_analyse(main_program: Any, path: str = "nccl_size.txt") -> Dict[int, int]:
    """Print the KB each broadcast / sum-allreduce moves and a histogram of those sizes (1 KB bins), and
    write the histogram to ``path`` (Paddle writes ``nccl_size.txt`` in the working directory)."""
    block = main_program.global_block()
    broadcast_vars: Dict[str, float] = {}
    reduce_vars: Dict[str, float] = {}
    for op in block.ops:
        name = (op.desc.input_arg_names() or [None])[0]
        if op.type in ("c_broadcast", "broadcast"):
            broadcast_vars[name] = get_var_size(block.var(name)) * 1024.0
        elif op.type == "all_reduce" and int(op.attr("reduce_type")) == int(ReduceOp.SUM):
            reduce_vars[name] = get_var_size(block.var(name)) * 1024.0
    count: Dict[int, int] = {}
    for kind, sizes in (("broadcast", broadcast_vars), ("allreduce", reduce_vars)):
        for name, kb in sizes.items():
            print(f"{kind}: {name}: {kb} KB")
            count[int(kb)] = count.get(int(kb), 0) + 1
    with open(path, "w") as f:
        for kb, n in sorted(count.items()):
            print(f"NCCL size {kb}~{kb + 1} KB: {n}")
            f.write(f"NCCL size {kb}~{kb + 1} KB: {n}\n")
    return count


def add_sync_comm(program: Any, sharding_ring_id: int) -> None:
    """Append the ``c_sync_comm_stream`` a test program cloned from a sharded one may have lost."""
    if sharding_ring_id < 0:
        raise InvalidArgument(f"sharding_ring_id should be >= 0, got {sharding_ring_id}")
    block = program.global_block()
    pending: List[str] = []
    for op in block.ops:
        if op.type in ("c_broadcast", "c_allreduce", "broadcast"):
            pending.extend(n for n in op.desc.input_arg_names() if n not in pending)
        if op.type == "c_sync_comm_stream":
            for n in op.desc.input_arg_names():
                pending.remove(n)
    if pending:
        block.append_op(type="c_sync_comm_stream", inputs={"X": pending}, outputs={"Out": pending},
                        attrs={"ring_id": sharding_ring_id, OP_ROLE_KEY: OpRole.Forward})


def append_naive_sync(block: Any, sync_var: Any, ring_id: int) -> None:
    """A barrier on ``ring_id``: fill ``sync_var`` with 1, allreduce it, sync the calc stream."""
    block.append_op(type="fill_constant", outputs={"Out": [sync_var]},
                    attrs={"shape": list(sync_var.shape), "dtype": to_vartype(sync_var.dtype), "value": 1})
    block.append_op(type="all_reduce", inputs={"x": [sync_var]}, outputs={"out": [sync_var]},
                    attrs={"ring_id": ring_id, "reduce_type": int(ReduceOp.SUM), OP_ROLE_KEY: OpRole.Forward})
    block.append_op(type="c_sync_calc_stream", inputs={"X": [sync_var]}, outputs={"Out": [sync_var]},
                    attrs={OP_ROLE_KEY: OpRole.Forward})


__all__ = ["OP_ROLE_KEY", "OP_ROLE_VAR_KEY", "is_update_op", "is_loss_grad_op", "is_backward_op",
           "is_optimizer_op", "rename_input", "get_valid_op_role", "insert_sync_calc_op", "insert_sync_comm_op",
           "insert_sync_comm_ops", "insert_fill_constant_ops", "insert_cast_ops", "insert_allreduce_ops",
           "insert_reduce_ops", "insert_broadcast_param_ops", "insert_broadcast_ops", "get_grad_device",
           "get_first_check_finite_and_unscale_op_idx", "get_first_optimize_op_idx", "get_var_size",
           "insert_scale_loss_grad_ops", "comm_analyse", "add_sync_comm", "append_naive_sync"]
