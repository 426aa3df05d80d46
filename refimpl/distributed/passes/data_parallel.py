"""Data parallelism as a program rewrite: gradients combined across ranks.

Mirrors the graph passes Paddle's ``BuildStrategy`` applies when a
CompiledProgram runs on several places (``multi_devices_graph_pass.cc``:
``all_reduce_mode_multi_devices_pass`` and ``reduce_mode_multi_devices_pass``;
``coalesce_grad_tensor_pass`` + ``fuse_all_reduce_op_pass`` for fused
buckets; the hierarchical allreduce of ``nccl_op_handle.h``). Paddle builds
an SSA graph of op handles; refimpl writes the same communication as ops into
the Program, as Paddle's static fleet optimizers do, so it can be printed,
traced and run by the plain executor on every rank:

* **AllReduce** (``all_reduce_mode_multi_devices_pass``): right after the op
  that produces a parameter's gradient (the backward op whose
  ``op_role_var`` names the pair), ``c_allreduce_sum(g)`` and
  ``scale(g, 1/nranks)``. (Paddle scales ``loss@GRAD`` by 1/nranks
  beforehand instead; the result is the same mean.)
* **Reduce** (``reduce_mode_multi_devices_pass``): each gradient gets an
  owner rank, chosen as Paddle's ``GetAppropriateDeviceID`` does (the rank
  with the fewest elements so far, first one on ties, here over all
  ranks); ``c_reduce_sum(g, root=owner)``, then on the owner only
  ``scale(g, 1/nranks)`` and the optimizer ops of that parameter; at the end
  of the block, ``c_broadcast(param, root=owner)`` for every parameter. The
  rewrite therefore depends on ``rank``: one program per rank.
* **Fused** (``fuse_all_reduce_ops``): gradients are grouped in the order
  they are produced, one dtype per group, a group closing once it holds
  ``fuse_grad_size_in_MB`` (Paddle's ``coalesce_grad_tensor_pass`` rule).
  After the group's last producer, ``coalesce_tensor(copy_data=True)``
  makes the gradients views of one buffer ``@FUSEDVAR@@GRAD@<first grad>``
  and a single collective runs on it (refimpl kernels do not write into
  existing buffers, so the copy is made after the gradients exist instead
  of before, as Paddle does).
* **Hierarchical** (``use_hierarchical_allreduce``): ranks form nodes of
  ``hierarchical_allreduce_inter_nranks`` consecutive ranks; an allreduce is
  ``c_reduce_sum`` to the node's first rank on the node's ring, then
  ``c_allreduce_sum`` over the nodes' first ranks, then ``c_broadcast`` on
  the node's ring (Paddle's InterReduce / ExterAllReduce / InterBroadCast).
  Node ``k``'s ring id is ``1 + k``; the ring of first ranks is
  ``1 + nranks / inter_nranks`` (see :func:`hierarchical_rings`).

Hierarchical allreduce applies to AllReduce mode only (Paddle's Reduce mode
never uses it either). Ops added carry ``op_role`` Backward (communication, scale, coalesce) or
Optimize (the broadcasts of Reduce mode).
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, TYPE_CHECKING, Tuple

import numpy as np

from refimpl.core.dtypes import to_numpy_dtype, to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.framework.op_role import OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole

from .pass_base import PassBase, PassType, register_pass

if TYPE_CHECKING:
    from refimpl.framework.block import Block
    from refimpl.framework.program import Program
    from refimpl.static.build_strategy import BuildStrategy

ALLREDUCE, REDUCE, BROADCAST = "c_allreduce_sum", "c_reduce_sum", "c_broadcast"
FUSED_PREFIX = "@FUSEDVAR@@GRAD@"
_MB = 1 << 20


# ---- what to synchronise ----------------------------------------------------------
def param_grads(block: Block) -> List[Tuple[str, str, int]]:
    """[(param, grad, index of the op producing grad)] from backward ops' ``op_role_var``."""
    out, seen = [], set()
    for i, op in enumerate(block.ops):
        if not op.role() & OpRole.Backward or op.role() & OpRole.Optimize or not op.has_attr(OP_ROLE_VAR_ATTR):
            continue
        rv = op.attr(OP_ROLE_VAR_ATTR)
        for p, g in zip(rv[0::2], rv[1::2]):
            param = block._find_var_recursive(p)
            if param is None or getattr(param, "is_distributed", False) or g in seen:
                continue
            seen.add(g)
            out.append((p, g, i))
    return out


def _nbytes(block, p, g):
    var = block._find_var_recursive(p)
    numel = int(np.prod([max(int(d), 1) for d in (var.shape or ())], dtype=np.int64))
    dtype = (block._find_var_recursive(g) or var).dtype or var.dtype
    return numel, numel * to_numpy_dtype(dtype).itemsize, dtype


def buckets(block: Block, pairs: Sequence[Tuple[str, str, int]], fuse: bool, size_mb: float) -> List[Any]:
    """Units of synchronisation: one per gradient, or fused groups (see the module docstring)."""
    if not fuse:
        return [[pg] for pg in pairs]
    limit = size_mb * _MB if size_mb and size_mb > 0 else None
    done, open_ = [], {}  # dtype -> [pairs, bytes]
    for pg in pairs:
        _, nbytes, dtype = _nbytes(block, pg[0], pg[1])
        cur = open_.setdefault(dtype, [[], 0])
        cur[0].append(pg)
        cur[1] += nbytes
        if limit is not None and cur[1] >= limit:
            done.append(cur[0])
            del open_[dtype]
    done.extend(c[0] for c in open_.values())
    return sorted(done, key=lambda u: max(i for _, _, i in u))


def hierarchical_rings(nranks: int, inter_nranks: int) -> Dict[int, List[int]]:
    """{ring id: ranks}: node ``k`` (ring ``1 + k``) and the ring of node roots (last id)."""
    if inter_nranks <= 1 or nranks % inter_nranks:
        raise InvalidArgument(f"hierarchical allreduce: {nranks} ranks cannot form nodes of "
                              f"{inter_nranks} ranks")
    nodes = nranks // inter_nranks
    rings = {1 + k: list(range(k * inter_nranks, (k + 1) * inter_nranks)) for k in range(nodes)}
    rings[1 + nodes] = [k * inter_nranks for k in range(nodes)]
    return rings


# ---- the ops ------------------------------------------------------------------
def _op(type, x, attrs, role=OpRole.Backward, slots=("X", "Out")):
    return type, {slots[0]: [x]}, {slots[1]: [x]}, dict(attrs, **{OP_ROLE_ATTR: role})


def _coalesce(block, unit):
    grads = [g for _, g, _ in unit]
    dtype = _nbytes(block, unit[0][0], grads[0])[2]
    fused = FUSED_PREFIX + grads[0]
    block.create_var(name=fused, shape=[-1], dtype=dtype, persistable=False, stop_gradient=True)
    attrs = {"dtype": to_vartype(dtype), "copy_data": True, "use_align": True, OP_ROLE_ATTR: OpRole.Backward}
    return fused, [("coalesce_tensor", {"Input": grads}, {"Output": grads, "FusedOutput": [fused]}, attrs)]


def _allreduce_ops(var, rank, nranks, inter_nranks):
    """A sum over all ranks, flat or hierarchical."""
    if not inter_nranks:
        return [_op(ALLREDUCE, var, {"ring_id": 0})]
    rings = hierarchical_rings(nranks, inter_nranks)
    node_ring, exter_ring = 1 + rank // inter_nranks, max(rings)
    ops = [_op(REDUCE, var, {"ring_id": node_ring, "root_id": 0})]
    if rank % inter_nranks == 0:
        ops.append(_op(ALLREDUCE, var, {"ring_id": exter_ring}))
    ops.append(_op(BROADCAST, var, {"ring_id": node_ring, "root": 0}))
    return ops


def _scale_ops(unit, nranks):
    return [_op("scale", g, {"scale": 1.0 / nranks, "bias": 0.0, "bias_after_scale": True}) for _, g, _ in unit]


def _insert_units(block, placed):
    """Insert each unit's ops right after its last producer, keeping unit order at equal positions."""
    for k, (pos, ops) in sorted(enumerate(placed), key=lambda kv: (kv[1][0], kv[0]), reverse=True):
        for j, (type, ins, outs, attrs) in enumerate(ops):
            block._insert_op(pos + j, type, ins, outs, attrs)


# ---- the passes -----------------------------------------------------------------
class _MultiDevicesPass(PassBase):
    """Shared attrs: ``nranks``, ``rank``, ``fuse_all_reduce_ops``, ``fuse_grad_size_in_MB``."""

    def __init__(self):
        super().__init__()
        for k, v in {"nranks": 1, "rank": 0, "fuse_all_reduce_ops": False, "fuse_grad_size_in_MB": 32,
                     "use_hierarchical_allreduce": False, "hierarchical_allreduce_inter_nranks": 0}.items():
            self.set_attr(k, v)

    def _check_self(self):
        n, r = self.get_attr("nranks"), self.get_attr("rank")
        if not isinstance(n, int) or n < 1 or not isinstance(r, int) or not 0 <= r < n:
            raise InvalidArgument(f"{self.name}: needs 0 <= rank < nranks, got rank={r!r} nranks={n!r}")
        return n > 1

    def _check_conflict(self, other_pass):
        return not isinstance(other_pass, _MultiDevicesPass)

    def _type(self):
        return PassType.PARALLEL_OPT

    def _units(self, block):
        pairs = param_grads(block)
        return buckets(block, pairs, self.get_attr("fuse_all_reduce_ops"), self.get_attr("fuse_grad_size_in_MB"))

    def _sync_var(self, block, unit):
        """(the variable the collective runs on, the coalesce ops it needs first)."""
        if self.get_attr("fuse_all_reduce_ops"):
            return _coalesce(block, unit)
        return unit[0][1], []


@register_pass("all_reduce_mode_multi_devices_pass")
class AllReduceModePass(_MultiDevicesPass):
    """allreduce + scale(1/nranks) after each gradient (or fused group)."""

    def _apply_single_impl(self, main_program, startup_program, context):
        block = main_program.global_block()
        n, rank = self.get_attr("nranks"), self.get_attr("rank")
        inter = self.get_attr("hierarchical_allreduce_inter_nranks") if self.get_attr(
            "use_hierarchical_allreduce") else 0
        placed = []
        for unit in self._units(block):
            var, ops = self._sync_var(block, unit)
            ops += _allreduce_ops(var, rank, n, inter) + _scale_ops(unit, n)
            placed.append((max(i for _, _, i in unit) + 1, ops))
        _insert_units(block, placed)
        context.set_attr("data_parallel_units", len(placed))


@register_pass("reduce_mode_multi_devices_pass")
class ReduceModePass(_MultiDevicesPass):
    """Reduce each gradient to its owner, update there, broadcast the parameter back."""

    def _apply_single_impl(self, main_program, startup_program, context):
        block = main_program.global_block()
        n, rank = self.get_attr("nranks"), self.get_attr("rank")
        load, owner_of, placed = [0] * n, {}, []
        for unit in self._units(block):
            owner = int(np.argmin(load))  # Paddle's GetAppropriateDeviceID: first least-loaded
            load[owner] += sum(_nbytes(block, p, g)[0] for p, g, _ in unit)
            var, ops = self._sync_var(block, unit)
            ops.append(_op(REDUCE, var, {"ring_id": 0, "root_id": owner}))
            if rank == owner:
                ops += _scale_ops(unit, n)
            placed.append((max(i for _, _, i in unit) + 1, ops))
            owner_of.update({p: owner for p, _, _ in unit})
            owner_of.update({g: owner for _, g, _ in unit})
        _insert_units(block, placed)
        self._keep_owned_updates(block, owner_of, rank)
        for p in sorted({p for p in owner_of if block._find_var_recursive(p).is_parameter}):
            t, ins, outs, attrs = _op(BROADCAST, p, {"ring_id": 0, "root": owner_of[p]}, OpRole.Optimize)
            block.append_op(t, ins, outs, attrs)
        context.set_attr("data_parallel_owners", {p: o for p, o in owner_of.items()})

    @staticmethod
    def _keep_owned_updates(block, owner_of, rank):
        """Drop the optimizer ops of parameters another rank owns."""
        for i in range(len(block.ops) - 1, -1, -1):
            op = block.ops[i]
            if not op.role() & OpRole.Optimize or not op.has_attr(OP_ROLE_VAR_ATTR):
                continue
            names = op.attr(OP_ROLE_VAR_ATTR)
            owners = {owner_of[n] for n in names if n in owner_of}
            if owners and rank not in owners:
                block._remove_op(i)


def apply_data_parallel(program: Program, nranks: int, rank: int, build_strategy: BuildStrategy) -> Any:
    """Rewrite ``program`` in place for ``rank`` of ``nranks`` as ``build_strategy`` says; return it."""
    from refimpl.static.build_strategy import ReduceStrategy
    name = ("reduce_mode_multi_devices_pass" if build_strategy.reduce_strategy == ReduceStrategy.Reduce
            else "all_reduce_mode_multi_devices_pass")
    from .pass_base import new_pass
    attrs = {"nranks": nranks, "rank": rank, "fuse_all_reduce_ops": build_strategy.fuse_all_reduce_ops,
             "fuse_grad_size_in_MB": build_strategy.fuse_grad_size_in_MB,
             "use_hierarchical_allreduce": build_strategy.use_hierarchical_allreduce,
             "hierarchical_allreduce_inter_nranks": build_strategy.hierarchical_allreduce_inter_nranks}
    new_pass(name, attrs).apply([program], [None])
    return program
