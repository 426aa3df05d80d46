"""Job programs for pipeline schedules: forward / backward / optimizer, stream syncs, matmul split.

Mirrors the program-rewriting half of ``paddle.distributed.passes.pass_utils``
(legacy ProgramDesc side): ``_program_for_fthenb_and_1f1b`` cuts a training
program into forward, backward and optimizer programs,
``_insert_sync_for_fthenb_1f1b`` puts ``c_sync_calc_stream`` /
``c_sync_comm_stream`` around ``send_v2``, and ``split_matmul_grad_to_matmul``
rewrites one ``matmul_v2_grad`` into plain ``matmul_v2`` ops (what zero-bubble
schedules use to separate input and weight gradients). ``pass_utils``
re-exports all three under their Paddle names; see its docstring for how they
differ from Paddle.
"""
from __future__ import annotations

import copy
from typing import Any, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented
from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.framework.block import Block
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole, is_backward, is_forward, is_lr_sched, is_optimize
from refimpl.framework.operator import Operator
from refimpl.framework.program import Program

from .pass_utils import _input_args, pass_assert

if TYPE_CHECKING:
    from refimpl.framework.block import Block

# ---------------------------------------------------------------- fwd / bwd / opt programs
def _copy_var(src_block, dst_block, name):
    if name in dst_block.vars or not src_block.has_var(name):
        return
    var = copy.copy(src_block.var(name))
    var.block, var.op = dst_block, None
    dst_block.vars[name] = var


def _create_program(src_block, dst_block, src_op):
    """Append a copy of ``src_op`` to ``dst_block`` with the vars of ``src_block`` it uses."""
    op = Operator(dst_block, src_op.type, {k: list(v) for k, v in src_op.inputs.items()},
                  {k: list(v) for k, v in src_op.outputs.items()}, None, fill_proto=False)
    op._attrs = {k: list(v) if isinstance(v, list) else v for k, v in src_op.all_attrs().items()}
    dst_block.ops.append(op)
    for name in src_op.input_arg_names + src_op.output_arg_names:
        _copy_var(src_block, dst_block, name)
    dst_block.program._bump()
    return op


def _add_ops_into_block(src_block, dst_block, ops):
    for op in ops:
        _create_program(src_block, dst_block, op)


def _is_fetch_op(op):
    return op.type in ("fetch", "fetch_v2")


def _op_kind(op, with_lr):
    role = op.role()
    if _is_fetch_op(op):
        return "fetch"
    if with_lr and is_lr_sched(role):
        return "lr"
    for kind, test in (("fwd", is_forward), ("bwd", is_backward), ("opt", is_optimize)):
        if test(role):
            return kind
    raise InvalidArgument(f"The op role: {role} isn't one of Forward, Backward or Optimizer.")


def _whole_block_copy(src_block, program, copies):
    """A copy of ``src_block`` with all its ops, appended to ``program`` (once per source block).

    Paddle's op copy keeps pointing at the source program's block, so a
    ``conditional_block`` in a partial program runs its whole sub-block.
    """
    if src_block.idx not in copies:
        parent = src_block.program.block(src_block.parent_idx)
        parent_idx = 0 if parent.idx == 0 else _whole_block_copy(parent, program, copies).idx
        dst = copies[src_block.idx] = program._create_block(parent_idx=parent_idx)
        dst.forward_block_idx = src_block.forward_block_idx
        for name in src_block.vars:
            _copy_var(src_block, dst, name)
        _add_ops_into_block(src_block, dst, src_block.ops)
    return copies[src_block.idx]


def _remap_block_attrs(program):
    """Point the block attrs copied from the source program at whole copies of those blocks."""
    copies = {}
    for block in program.blocks:  # grows while copies are appended
        for op in block.ops:
            for key, value in op.all_attrs().items():
                if isinstance(value, Block) and value.program is not program:
                    op._attrs[key] = _whole_block_copy(value, program, copies)
                elif isinstance(value, list) and value and isinstance(value[0], Block) \
                        and value[0].program is not program:
                    op._attrs[key] = [_whole_block_copy(b, program, copies) for b in value]
    program.current_block_idx = 0


@paused_cyclic_gc
def _program_for_fthenb_and_1f1b(program, enable_send_recv_overlap=False, with_lr=False):
    """Split a training program by op role into ``[forward, backward, optimizer]`` programs.

    First prepares the send/recv ops in place (``_insert_sync_for_fthenb_1f1b``,
    or ``_overlap_send_recv``). A fetch op goes to the first program that
    has its var. An op of another role (e.g. LRSched) is refused, as in
    Paddle 3.x; ``with_lr=True`` instead returns ``[lr, forward, backward,
    optimizer]`` with LRSched ops first, as older Paddle did. Sub-blocks
    are split by role too, but an op that runs a sub-block runs all of it.
    """
    if enable_send_recv_overlap:
        _overlap_send_recv(program)
    else:
        _insert_sync_for_fthenb_1f1b(program)
    kinds = ("lr", "fwd", "bwd", "opt") if with_lr else ("fwd", "bwd", "opt")
    progs = {k: Program() for k in kinds}
    current = {}
    for src_block in program.blocks:
        groups = {k: [] for k in kinds + ("fetch",)}
        for op in src_block.ops:
            groups[_op_kind(op, with_lr)].append(op)
        for k in kinds:
            if src_block.idx == 0 or groups[k]:
                dst = progs[k].global_block() if src_block.idx == 0 else \
                    progs[k]._create_block(parent_idx=src_block.parent_idx)
                dst.forward_block_idx = src_block.forward_block_idx
                current[k] = dst
                _add_ops_into_block(src_block, dst, groups[k])
        for fetch_op in groups["fetch"]:
            name = fetch_op.input_arg_names[0]
            dst = next((current[k] for k in ("fwd", "bwd", "opt") if current[k]._find_var_recursive(name)), None)
            if dst is not None:
                _create_program(src_block, dst, fetch_op)
    for k in kinds:
        _remap_block_attrs(progs[k])
    return [progs[k] for k in kinds]


# ---------------------------------------------------------------- send / recv streams
def _insert_sync_for_fthenb_1f1b(program, dist_context=None):
    """Put ``send_v2`` on the comm stream: ``c_sync_calc_stream`` before it, ``c_sync_comm_stream`` after.

    The comm sync of a backward send goes before the first optimize op;
    that of a forward send right after the send (flagged ``pipeline_flag``,
    and removed again when it precedes the first backward ``recv_v2``).
    """
    for block in program.blocks:
        first_opt = next((i for i, op in enumerate(block.ops) if is_optimize(op.role())), None)
        offset = 0
        for index, op in enumerate(list(block.ops)):
            if op.type in ("send_v2", "recv_v2"):
                op._set_attr("dynamic_shape", False)
            if op.type != "send_v2":
                continue
            op._set_attr("use_calc_stream", False)
            role, var = op.attr(OP_ROLE_ATTR), _input_args(op)[0]
            block._insert_op(index + offset, "c_sync_calc_stream", inputs={"X": [var]},
                             outputs={"Out": [var]}, attrs={OP_ROLE_ATTR: role})
            offset += 1
            if role == OpRole.Backward:
                if first_opt is None:
                    raise PreconditionNotMet("a backward send_v2 needs an optimize op to sync before")
                at, new_role = first_opt + offset, OpRole.Optimize
            else:
                at, new_role = index + offset + 1, OpRole.Backward
            sync = block._insert_op(at, "c_sync_comm_stream", inputs={"X": [var]}, outputs={"Out": [var]},
                                    attrs={OP_ROLE_ATTR: new_role, "ring_id": op.attr("ring_id")})
            if role == OpRole.Forward:
                sync._set_attr("pipeline_flag", "")
                offset += 1
        _drop_forward_comm_syncs(block)


def _drop_forward_comm_syncs(block):
    recv = next((i for i, op in enumerate(block.ops)
                 if op.type == "recv_v2" and is_backward(op.role())), None)
    if recv is None:
        return
    keep = [op for i, op in enumerate(block.ops)
            if not (i < recv and op.type == "c_sync_comm_stream" and op.has_attr("pipeline_flag"))]
    block.ops[:] = keep
    block.program._bump()


def _overlap_send_recv(program):
    """Let send/recv run on their own streams (recorded as ``execution_stream`` attrs)."""
    for block in program.blocks:
        for op in block.ops:
            if op.type == "send_v2":
                stream = f"send_stream_{op.attr('ring_id')}"
            elif op.type == "recv_v2":
                stream = "recv_stream"
            else:
                continue
            op._set_attr("dynamic_shape", False)
            op._set_attr("use_calc_stream", True)
            op._set_attr("execution_stream", stream)
            op._set_attr("stream_priority", 0)


# ---------------------------------------------------------------- matmul_v2_grad -> matmul_v2
def _insert_reshape_op(block, index, x, shape, op_role, chunk_id=None, dist_context=None, out=None,
                       op_namescope="/"):
    """Insert ``reshape2(x) -> out`` at ``index``; ``out`` defaults to a new ``<x>@reshape.out``."""
    var_x = block.var(x[0])
    if out is None:
        out = [block.create_var(name=f"{x[0]}@reshape.out", dtype=var_x.dtype, persistable=False).name]
    x_shape = block.create_var(name=f"{x[0]}@reshape.xshape", dtype=var_x.dtype)
    op = block._insert_op(index, "reshape2", inputs={"X": x}, outputs={"Out": out, "XShape": [x_shape.name]},
                          attrs={"shape": list(shape), OP_ROLE_ATTR: op_role, "op_namescope": op_namescope})
    _set_chunk(op, chunk_id)
    return out


def _folded(dims):
    """``[a, b, ...] -> [a * b, ...]`` (-1 when a or b is the unknown batch dim)."""
    lead = -1 if dims[0] < 0 or dims[1] < 0 else dims[0] * dims[1]
    return [lead, *dims[2:]]


def split_matmul_grad_to_matmul(block: Block, matmul_grad_id: int, dist_context: Any = None,
                                op_namescope: str = "/") -> None:
    """Replace ``block.ops[matmul_grad_id]`` (a ``matmul_v2_grad``) by forward ``matmul_v2`` ops.

    ``X@GRAD = Out@GRAD @ Y^T``; ``Y@GRAD = X^T @ Out@GRAD`` computed, for a
    rank-3 X, on X and Out@GRAD with their first two dims folded (reshape2),
    then reshaped to Y's shape, as Paddle does. Differences: a rank-2 X is
    used without folding (Paddle would fold it to 1-D and fail), an unknown
    batch dim folds to -1, a missing X@GRAD or Y@GRAD is not computed, and
    shapes the fold cannot handle (rank > 3, a batched Y) are refused.
    """
    op = block.ops[matmul_grad_id]
    pass_assert(not op.attr("trans_x"), f"matmul_grad(id={matmul_grad_id}) with tran_x == True is not "
                "supported for splitting matmul_grad to matmul")
    pass_assert(not op.attr("trans_y"), f"matmul_grad(id={matmul_grad_id}) with tran_y == True is not "
                "supported for splitting matmul_grad to matmul")
    x, y, out_grad = op.input("X"), op.input("Y"), op.input("Out@GRAD")
    x_grad, y_grad = op.output("X@GRAD"), op.output("Y@GRAD")
    role = op.attr(OP_ROLE_ATTR)
    chunk_id = op.attr("chunk_id") if op.has_attr("chunk_id") else None
    x_dims, og_dims = list(block.var(x[0]).shape), list(block.var(out_grad[0]).shape)
    pass_assert(len(x_dims) == len(og_dims), f"The rank of x must be equal to that of out_grad, but got "
                f"x rank = {len(x_dims)} and out_grad rank = {len(og_dims)}.")
    if len(x_dims) > 2:
        pass_assert(x_dims[0:2] == og_dims[0:2], f"The first two dimensions of x must be equal to that of "
                    f"out_grad, but got x_dims:{x_dims} and out_grad_dims:{og_dims}.")
    if len(x_dims) > 3 or len(block.var(y[0]).shape) != 2:
        raise Unimplemented("split_matmul_grad_to_matmul: only a rank-2 or rank-3 X times a 2-D Y is supported, "
                            f"got X {x_dims} and Y {list(block.var(y[0]).shape)}")
    common = {OP_ROLE_ATTR: role, "op_namescope": op_namescope}
    at = matmul_grad_id + 1
    if x_grad:
        new = block._insert_op(at, "matmul_v2", inputs={"X": out_grad, "Y": y}, outputs={"Out": x_grad},
                               attrs={"trans_x": False, "trans_y": True, **common})
        _set_chunk(new, chunk_id)
        at += 1
    if y_grad:
        _insert_y_grad_ops(block, at, x, out_grad, y_grad, x_dims, og_dims, role, chunk_id, op_namescope)
    block._remove_op(matmul_grad_id)


def _insert_y_grad_ops(block, at, x, out_grad, y_grad, x_dims, og_dims, role, chunk_id, op_namescope):
    common = {OP_ROLE_ATTR: role, "op_namescope": op_namescope}
    if len(x_dims) == 2:
        new = block._insert_op(at, "matmul_v2", inputs={"X": x, "Y": out_grad}, outputs={"Out": y_grad},
                               attrs={"trans_x": True, "trans_y": False, **common})
        _set_chunk(new, chunk_id)
        return
    var_y_grad = block.var(y_grad[0])
    new_x = _insert_reshape_op(block, at, x, _folded(x_dims), role, chunk_id, op_namescope=op_namescope)
    new_og = _insert_reshape_op(block, at + 1, out_grad, _folded(og_dims), role, chunk_id,
                                op_namescope=op_namescope)
    folded = block.create_var(name=f"{y_grad[0]}@reshape.out", dtype=var_y_grad.dtype, persistable=False)
    new = block._insert_op(at + 2, "matmul_v2", inputs={"X": new_x, "Y": new_og}, outputs={"Out": [folded.name]},
                           attrs={"trans_x": True, "trans_y": False, **common})
    _set_chunk(new, chunk_id)
    _insert_reshape_op(block, at + 3, [folded.name], var_y_grad.shape, role, chunk_id, out=y_grad,
                       op_namescope=op_namescope)


def _set_chunk(op, chunk_id):
    if chunk_id is not None:
        op._set_attr("chunk_id", chunk_id)
