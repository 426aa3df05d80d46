"""Backward with forward recomputation between checkpoints (legacy IR).

Mirrors ``_append_backward_ops_with_checkpoints_`` and ``ProgramStats`` of Paddle's
``python/paddle/base/backward.py`` (3.3.1), which ``append_backward(..., checkpoints=...)`` and
``paddle.incubate.optimizer.RecomputeOptimizer`` use:

1. the checkpoints are sorted by their last producing op on the loss path (names that the path
   never mentions are dropped), and the ops between two consecutive checkpoints form a segment;
   the ops before the first segment form one more;
2. the vars that cross a segment boundary, the outputs of ``seed`` ops and the inputs of the path
   are held in memory, as are the checkpoints;
3. walking the segments from the last one back, the grad ops of the ops after the segment are
   emitted, then the segment's forward ops that write a var not held in memory (re-emitted with
   role Backward, every non-held var renamed ``{name}.subprog_{k}``), then the grad ops of the
   segment's ops reading the renamed vars;
4. gradients written more than once are summed, and grad ops that produce nothing needed are
   dropped, as in ordinary backward.

As in Paddle, two scratch blocks are left behind that no op refers to: block ``n`` holds copies
of the gap grad ops and of every forward op of the segments, block ``n + 1`` (whose parent is
block ``n``) the re-emitted forward ops. Differences from Paddle: the segment log lines go to
this module's logger (Paddle prints them at INFO level). As in Paddle, a ``seed`` op is put
before every dropout without a ``Seed`` input (:func:`seed_dropouts`), so that both runs draw
the same mask.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Sequence, Set, Tuple

from refimpl.core.errors import Unimplemented
from refimpl.framework import unique_name
from refimpl.framework.op_role import OpRole, OP_DEVICE_ATTR, OP_ROLE_ATTR, OP_ROLE_VAR_ATTR
from refimpl.ops.grad_maker import make_grad_op_descs
from refimpl.ops.registry import get_op_def

_logger = logging.getLogger(__name__)

Desc = Dict[str, Any]


class ProgramStats:
    """Which ops of ``ops`` read and write each var (Paddle's ``ProgramStats``)."""

    def __init__(self, block: Any, ops: Sequence[Any]) -> None:
        self.block, self.ops = block, list(ops)
        self.readers: Dict[str, List[int]] = {}
        self.writers: Dict[str, List[int]] = {}
        for i, op in enumerate(self.ops):
            for n in op.input_arg_names:
                self.readers.setdefault(n, []).append(i)
                self.writers.setdefault(n, [])
            for n in op.output_arg_names:
                self.writers.setdefault(n, []).append(i)
                self.readers.setdefault(n, [])

    def input_nodes(self) -> List[str]:
        """Non-persistable vars read but never written on the path, and what ``read`` ops give."""
        names = [n for n in self.readers if not self.writers[n] and self.readers[n]
                 and not self.block.var(n).persistable]
        for op in self.ops:
            if op.type == "read":
                names.extend(op.output_arg_names)
        return names

    def reserved_vars(self) -> List[str]:
        return [n for op in self.ops if op.type == "seed" for n in op.output_arg_names]

    def out_of_segment_vars(self, begin: int, end: int) -> List[str]:
        """Outputs of ``ops[begin:end]`` read after it and inputs written before it."""
        names = []
        for op in self.ops[begin:end]:
            names.extend(n for n in op.output_arg_names for i in self.readers.get(n, ()) if i >= end)
            names.extend(n for n in op.input_arg_names for i in self.writers.get(n, ()) if i < begin)
        return names

    def segment_between(self, first: str, second: str) -> Tuple[bool, int, int]:
        """Paddle's ``is_subgraph``: (ok, first reader of ``first``, last writer of ``second``)."""
        lo, hi = len(self.ops), -1
        if first not in self.readers or second not in self.readers:
            return False, lo, hi
        lo = min(self.readers[first], default=lo)
        hi = max(self.writers[second], default=hi)
        return lo < hi, lo, hi

    def segment_start(self, lo: int, floor: int = -1) -> int:
        """Pull AMP casts of persistable vars just before ``lo`` into the segment."""
        i = lo - 1
        while i > floor and self.ops[i].type == "cast" and self.block.var(self.ops[i].input_arg_names[0]).persistable:
            lo, i = i, i - 1
        return lo

    def sort_checkpoints(self, names: Sequence[str]) -> List[str]:
        keyed = []
        for n in names:
            if n not in self.readers:
                _logger.info("Recompute Optimizer: deleted %s from checkpoints, because it is not used "
                             "in paddle program.", n)
            else:
                keyed.append((n, max(self.writers[n], default=-1)))
        return [n for n, _ in sorted(keyed, key=lambda x: x[1])]


def _segments(stats: ProgramStats, ckpts: List[str]) -> List[List[int]]:
    segments = []
    if len(ckpts) == 1:
        last = max(stats.writers.get(ckpts[0], ()), default=-1)
        if last > 0:
            segments.append([0, last + 1])
    for first, second in zip(ckpts, ckpts[1:]):
        ok, lo, hi = stats.segment_between(first, second)
        if ok:
            segments.append([stats.segment_start(lo), hi + 1])
        else:
            _logger.info("Could not recompute op range [%d] - [%d]", lo, hi + 1)
    if segments and segments[0][0] != 0:
        segments.insert(0, [0, segments[0][0]])
    return segments


def seed_dropouts(block: Any, path: Sequence[Any]) -> List[Any]:
    """Put a ``seed`` op before every dropout of ``path`` that has no ``Seed`` input, so that the
    forward and its re-run draw the same mask (Paddle's ``modify_forward_desc_for_recompute``):
    its ``seed_k.tmp_m`` output feeds the dropout's ``Seed``, and the dropout loses ``fix_seed`` /
    ``seed`` (a fixed seed moves to the seed op). Returns ``path`` with the seed ops in place."""
    out = []
    for op in path:
        if op.type == "dropout" and not op.input("Seed"):
            op_name = unique_name.generate("seed")
            var = block.create_var(name=unique_name.generate_with_ignorable_key(op_name + ".tmp"),
                                   dtype="int32", persistable=False, stop_gradient=False)
            fixed = op.has_attr("fix_seed") and op.attr("fix_seed")
            seed = int(op.attr("seed")) if fixed else 0
            device = op.attr(OP_DEVICE_ATTR) if op.has_attr(OP_DEVICE_ATTR) else ""
            out.append(block._insert_op(block.ops.index(op), "seed", inputs={}, outputs={"Out": [var]},
                                        attrs={"seed": seed, OP_DEVICE_ATTR: device, "force_cpu": True}))
            op.desc_set_input("Seed", [var.name])
            op._remove_attr("fix_seed")
            op._remove_attr("seed")
        out.append(op)
    return out


def _refuse_sub_block(op: Any) -> None:
    if op.has_attr("sub_block"):
        raise Unimplemented(f"Recompute doesn't support ops with sub_block: op {op.type!r} "
                            f"(inputs {op.input_arg_names}, outputs {op.output_arg_names})")


def _grad_descs(op: Any, no_grad: Set[str], grad_to_var: Dict[str, str]) -> List[Desc]:
    _refuse_sub_block(op)
    descs, g2v = make_grad_op_descs(op.type, op.inputs, op.outputs, op.all_attrs(), no_grad)
    device = op.attr(OP_DEVICE_ATTR) if op.has_attr(OP_DEVICE_ATTR) else ""
    for d in descs:
        d["attrs"][OP_DEVICE_ATTR] = device
    grad_to_var.update(g2v)
    return descs


def _forward_desc(op: Any) -> Desc:
    return {"type": op.type, "inputs": {k: list(v) for k, v in op.inputs.items()},
            "outputs": {k: list(v) for k, v in op.outputs.items()}, "attrs": op.all_attrs()}


def _completed(d: Desc) -> Desc:
    """``d`` as the block re-runs it: the same slots (renamed along with it), its attrs completed with
    the defaults of every attr, as Paddle's ``OpDesc::CheckAttrs`` in ``_append_backward_vars_`` does
    (dropout's ``fix_seed`` / ``seed`` come back there, not in the scratch blocks)."""
    attrs = dict(get_op_def(d["type"]).extra_attrs)
    attrs.update(d["attrs"])
    return {"type": d["type"], "inputs": d["inputs"], "outputs": d["outputs"], "attrs": attrs}


def _rename_all(descs: Sequence[Desc], names: Dict[str, str]) -> None:
    for d in descs:
        for slots in (d["inputs"], d["outputs"]):
            for k, vs in slots.items():
                slots[k] = [names.get(n, n) for n in vs]


def _create_renamed_vars(block: Any, ops: Sequence[Any], keep: Set[str], renamed: Dict[str, str],
                         suffix: str) -> None:
    """Give every var of ``ops`` not kept in memory its ``.subprog_k`` twin (once per var)."""
    glob = block.program.global_block()
    for op in ops:
        _refuse_sub_block(op)
        for n in op.input_arg_names + op.output_arg_names:
            if n in keep or n in renamed or block.var(n).persistable:
                continue
            renamed[n] = n + suffix
            ref = glob.var(n)
            block.create_var(name=renamed[n], shape=ref.shape, dtype=ref.dtype, type=ref.type,
                             persistable=ref.persistable, stop_gradient=ref.stop_gradient)


def _append_scratch(block: Any, entries: Sequence[Desc]) -> None:
    for d in entries:
        attrs = dict(d["attrs"])
        attrs[OP_ROLE_ATTR] = OpRole.Backward
        attrs.setdefault(OP_ROLE_VAR_ATTR, [])
        attrs.setdefault("op_namescope", "")
        block._append_desc_op(d["type"], d["inputs"], d["outputs"], attrs)


def recompute_grad_descs(block: Any, path: Sequence[Any], no_grad: Set[str], checkpoints: Sequence[Any],
                         finish: Callable[[List[Desc]], List[Desc]]
                         ) -> Tuple[List[Desc], Dict[str, str], List[str]]:
    """Grad op descs of ``path`` with the forward ops between ``checkpoints`` recomputed.

    ``no_grad`` holds the ``@GRAD`` names not to compute; ``finish(descs)`` is ordinary backward's
    sum-repeated-gradients and drop-unneeded-branches step (applied to the whole list, as Paddle
    does). Returns the descs for ``block`` (role still to set), the grad-to-var map and the sorted
    checkpoint names (Paddle's ``checkpoint_names``)."""
    program = block.program
    local_block = program._create_block()
    buffer_block = program._create_block()
    program.current_block_idx = block.idx  # the seed ops go into the forward of ``block``
    path = seed_dropouts(block, path)
    stats = ProgramStats(block, path)
    ckpts = stats.sort_checkpoints(list(dict.fromkeys(c.name for c in checkpoints)))
    segments = _segments(stats, ckpts)

    hold = [n for s in segments for n in stats.out_of_segment_vars(*s)]
    hold += stats.reserved_vars() + stats.input_nodes()
    keep = set(hold) | set(ckpts)

    descs: List[Desc] = []
    local: List[Desc] = []     # block ``local_block``: gap grad ops, copies of segment ops
    buffer: List[Desc] = []    # block ``buffer_block``: the re-emitted forward ops
    grad_to_var: Dict[str, str] = {}
    renamed: Dict[str, str] = {}
    done = len(path)
    if not segments:
        for op in reversed(path):
            gd = _grad_descs(op, no_grad, grad_to_var)
            descs += gd
            local += gd
    for k, (begin, end) in enumerate(reversed(segments)):
        for op in reversed(path[end:done]):
            gd = _grad_descs(op, no_grad, grad_to_var)
            descs += gd
            local += gd
        done = begin
        seg = path[begin:end]
        _create_renamed_vars(block, seg, keep, renamed, f".subprog_{k}")
        needed = [_forward_desc(op) for op in seg
                  if any(n not in keep and not (block.has_var(n) and block.var(n).persistable)
                         for n in op.output_arg_names)]
        local += [_forward_desc(op) for op in seg]
        _rename_all(needed, renamed)
        descs += [_completed(d) for d in needed]
        buffer += needed
        for op in reversed(seg):
            gd = _grad_descs(op, no_grad, grad_to_var)
            _rename_all(gd, renamed)
            descs += gd
    descs = finish(descs)
    _append_scratch(local_block, local)
    _append_scratch(buffer_block, buffer)
    program.current_block_idx = block.idx
    return descs, grad_to_var, ckpts


__all__ = ["ProgramStats", "recompute_grad_descs", "seed_dropouts"]
