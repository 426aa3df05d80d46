"""Stage partitioning: one training program -> per-rank, per-chunk stage programs.

Mirrors what Paddle's pipeline passes do to a single-device program before
scheduling (legacy ``PipelineOptimizer`` / auto-parallel ``pipeline_pass``):
forward ops are cut into ``pp_degree * vpp_degree`` virtual stages (by
``op_device`` annotations such as ``device_guard("stage:1")``, or by explicit
forward-op indices, e.g. the evenly spaced ones of :func:`even_cuts`); virtual stage ``v`` runs on rank ``v % pp_degree`` as its
chunk ``v // pp_degree``. Every other op follows the forward op it belongs to
(a gradient op goes where the forward var of its output gradient was made, an
optimizer op where its parameter is used, learning-rate ops everywhere). A
non-persistable variable made on one virtual stage and read on another
travels through a ``send_v2`` right after its producer and a ``recv_v2``
before its first reader. Run ``accumulate_gradients`` first so that backward
jobs leave their gradients in persistable buffers.

Job programs: ``job_programs`` cuts each stage program by op role into the job
types a schedule uses (``forward``, ``backward``, ``backward_b``/``backward_w``
for zero-bubble schedules, ``recv_forward``/``send_backward`` when the
schedule has separate communication jobs, chunk suffixes for VPP).
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Sequence

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.distributed.passes.pipeline_scheduler_pass.action import parse_job_type
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole, is_forward
from refimpl.framework.program import Program
from refimpl.framework.variable import Parameter, Variable
from refimpl.ops.registry import GRAD_SUFFIX

from refimpl.core.dtypes import to_vartype

LR = "lr"  # stage marker for ops every stage runs


def _is_forward(op):
    return is_forward(op.role())


def even_cuts(program: Program, num_stages: int) -> list:
    """Cut points (see :func:`assign_stages`) giving ``num_stages`` stages about as many forward ops each."""
    n = sum(1 for op in program.global_block().ops if _is_forward(op))
    return [round(n * k / num_stages) for k in range(1, num_stages)]


def _fwd_name(name):
    pos = name.find(GRAD_SUFFIX)
    name = name[:pos] if pos != -1 else name
    # a var that recompute re-runs (``x.subprog_k``, static/backward_recompute.py) lives where ``x`` does
    return _SUBPROG.sub("", name)


_SUBPROG = re.compile(r"\.subprog_\d+$")


def _device_stage(op):
    dev = op.attr("op_device") if op.has_attr("op_device") else ""
    m = re.match(r"^(?:stage|gpu|cpu):(\d+)$", dev or "")
    return int(m.group(1)) if m else None


def assign_stages(program: Program, num_virtual: int, cuts: Optional[Sequence[int]] = None) -> List[Any]:
    """[virtual stage or LR] for every op of the global block."""
    ops = program.global_block().ops
    fwd = [i for i, op in enumerate(ops) if _is_forward(op)]
    stage_of = {}
    if cuts is not None:
        if len(cuts) != num_virtual - 1 or list(cuts) != sorted(cuts):
            raise InvalidArgument(f"partition: need {num_virtual - 1} increasing cut points, got {list(cuts)}")
        for k, i in enumerate(fwd):
            stage_of[i] = sum(1 for c in cuts if k >= c)
    else:
        cur = 0
        for i in fwd:
            s = _device_stage(ops[i])
            cur = cur if s is None else s
            if not 0 <= cur < num_virtual:
                raise InvalidArgument(f"partition: op {ops[i].type!r} (op {i}) is annotated for stage {cur}, "
                                      f"but there are {num_virtual} virtual stages")
            stage_of[i] = cur
    if sorted(set(stage_of.values())) != list(range(num_virtual)):
        raise InvalidArgument(f"partition: every one of the {num_virtual} virtual stages needs forward ops; "
                              f"got stages {sorted(set(stage_of.values()))}")
    home = _var_homes(program, stage_of)
    out: List[Any] = []  # a virtual stage (int) or LR per op
    for i, op in enumerate(ops):
        if i in stage_of:
            out.append(stage_of[i])
        elif op.role() & OpRole.LRSched:
            out.append(LR)
        else:
            out.append(_follow(op, home, i))
    return out


def _var_homes(program, stage_of):
    """The virtual stage that makes each forward var (parameters: their first user)."""
    ops = program.global_block().ops
    home = {}
    for i in sorted(stage_of):
        for n in ops[i].input_arg_names:
            v = program.global_block()._find_var_recursive(n)
            if v is not None and v.persistable:
                home.setdefault(n, stage_of[i])
        for n in ops[i].output_arg_names:
            home.setdefault(n, stage_of[i])
    return home


def _follow(op, home, i):
    names = [n for n in op.input_arg_names if GRAD_SUFFIX in n] or \
        [n for n in op.output_arg_names if GRAD_SUFFIX in n] or \
        [n for n in op.output_arg_names if _SUBPROG.search(n)] or op.input_arg_names  # recompute: its outputs' stage
    if op.role() & OpRole.Optimize and op.input("Param"):
        names = op.input("Param")
    for n in names:
        s = home.get(_fwd_name(n))
        if s is not None:
            return s
    raise InvalidArgument(f"partition: cannot tell which stage op {i} ({op.type}) belongs to")


def partition(program: Program, pp_degree: int, vpp_degree: int = 1, cuts: Optional[Sequence[int]] = None,
              stage_map: str = "interleaved", ring_offset: int = 0) -> List[List[Program]]:
    """``[rank][chunk] -> Program`` with send_v2/recv_v2 between virtual stages.

    ``stage_map`` places virtual stages on ranks: "interleaved" (stage
    ``c*P + r`` is chunk c of rank r) or "vshape" (odd chunks run backwards,
    as ZB-VPP places them). ``ring_offset`` shifts the transfer rings (one
    pipeline per data-parallel replica needs rings of its own).
    """
    from .simulator import stage_owner
    nv = pp_degree * vpp_degree
    owner = [stage_owner(v, pp_degree, stage_map) for v in range(nv)]
    stages = assign_stages(program, nv, cuts)
    block = program.global_block()
    ops = list(block.ops)
    _check_shared_params(block, ops, stages)
    per_stage = {v: [] for v in range(nv)}   # items: ("op", Operator) or ("recv", _Spec)
    sends = {}                                # id(producer item) -> [send _Spec]
    producer, moved = {}, set()
    reader_recvs = {v: 0 for v in range(nv)}  # recvs of `read` outputs, hoisted (see below)
    for i, op in enumerate(ops):
        for v in (range(nv) if stages[i] == LR else [stages[i]]):
            for n in op.input_arg_names:
                src = producer.get(n)
                if src is None or src[0] == v or (n, v) in moved or not _transferable(block, n, src[1][1]):
                    continue
                moved.add((n, v))
                send, recv = _transfer(block, n, src[0], owner[src[0]][0], owner[v][0], op, ring_offset)
                if send is not None:
                    sends.setdefault(id(src[1]), []).append(send)
                    if src[1][1].type == "read":  # sent right after the first op: received first too
                        per_stage[v].insert(reader_recvs[v], ("recv", recv))
                        reader_recvs[v] += 1
                    else:
                        per_stage[v].append(("recv", recv))
            item = ("op", op)
            per_stage[v].append(item)
            if stages[i] != LR:
                for n in op.output_arg_names:
                    producer[n] = (v, item)
    at = {owner[v]: v for v in range(nv)}
    return [[_build(block, per_stage[at[(r, c)]], sends) for c in range(vpp_degree)]
            for r in range(pp_degree)]


def _transferable(block, name, producer=None):
    v = block._find_var_recursive(name)
    # a data var written by a DataLoader's `read` op (refimpl/io) travels like an activation:
    # the first stage reads one batch per micro-batch and sends what later stages use
    from_reader = producer is not None and producer.type == "read"
    return v is not None and not v.persistable and (not v.is_data or from_reader)


def _check_shared_params(block, ops, stages):
    users = {}
    for i, op in enumerate(ops):
        if _is_forward(op):
            for n in op.input_arg_names:
                if isinstance(block._find_var_recursive(n), Parameter):
                    users.setdefault(n, set()).add(stages[i])
    for n, s in users.items():
        if len(s) > 1:
            raise Unimplemented(f"partition: parameter {n!r} is used on stages {sorted(s)}; "
                                f"sharing a parameter across pipeline stages is not supported")


def transfer_ring(src_stage: int, backward: bool) -> int:
    """The ring a transfer leaving virtual stage ``src_stage`` uses (one per stage and direction).

    Every ring then carries the messages of one stage boundary in micro-batch
    order, whatever order the ranks interleave their chunks in.
    """
    return 1 + 2 * src_stage + int(backward)


def _transfer(block, name, src_stage, src_rank, dst_rank, reader, ring_offset=0):
    """The send_v2 / recv_v2 pair that moves ``name``; (None, None) within one rank."""
    if src_rank == dst_rank:
        return None, None
    var = block._find_var_recursive(name)
    backward = bool(reader.role() & OpRole.Backward) or GRAD_SUFFIX in name
    role = OpRole.Backward if backward else OpRole.Forward
    common = {"ring_id": ring_offset + transfer_ring(src_stage, backward), OP_ROLE_ATTR: role,
              "use_calc_stream": True,
              "dynamic_shape": True}
    send = _Spec("send_v2", {"X": [name]}, {}, dict(common, peer=dst_rank))
    recv = _Spec("recv_v2", {}, {"Out": [name]},
                 dict(common, peer=src_rank, out_shape=list(var.shape or []),
                      dtype=to_vartype(var.dtype or "float32")))
    return send, recv


class _Spec:
    def __init__(self, type, inputs, outputs, attrs):
        self.type, self.inputs, self.outputs, self.attrs = type, inputs, outputs, attrs


def _build(src_block, items, sends, src_blocks=None):
    """A new single-block Program holding these ops, each producer followed by its sends."""
    prog = Program()
    b = prog.global_block()
    for item in items:
        kind, op = item
        specs = [op if isinstance(op, _Spec) else _Spec(op.type, op.inputs, op.outputs, op.all_attrs())]
        specs += sends.get(id(item), [])
        for sp in specs:
            for n in [x for ns in list(sp.inputs.values()) + list(sp.outputs.values()) for x in ns]:
                if n not in b.vars:
                    _copy_var(_block_with(src_blocks, n) if src_blocks else src_block, b, n)
            b._append_desc_op(sp.type, {k: list(v) for k, v in sp.inputs.items()},
                              {k: list(v) for k, v in sp.outputs.items()}, dict(sp.attrs))
    return prog


def _block_with(blocks, name):
    return next((bl for bl in blocks if bl._find_var_recursive(name) is not None), blocks[0])


def _copy_var(src_block, dst_block, name):
    v = src_block._find_var_recursive(name)
    if v is None:
        dst_block.create_var(name=name)
        return
    if isinstance(v, Parameter):
        nv = Parameter(dst_block, name, v.shape, v.dtype, trainable=v.trainable)
    else:
        nv = Variable(dst_block, name, shape=v.shape, dtype=v.dtype, type=v.type, persistable=v.persistable,
                      stop_gradient=v.stop_gradient, is_data=v.is_data)
    dst_block.vars[name] = nv


# ---- job programs -----------------------------------------------------------


def job_programs(chunks: Sequence[Program], job_types: Iterable[str]) -> Dict[str, Program]:
    """{job type: Program} for one rank from its chunk programs."""
    bases = {parse_job_type(t)[0] for t in job_types}
    comm_jobs = "recv_forward" in bases or "send_backward" in bases
    zero_bubble = "backward_b" in bases
    parts = [_split_chunk(p, comm_jobs, zero_bubble) for p in chunks]
    out = {}
    for t in job_types:
        base, c = parse_job_type(t)
        c = c or 0
        if base == "optimizer":
            out[t] = _build(chunks[0].global_block(), [it for p in parts for it in p["_optimizer_items"]], {},
                            src_blocks=[ch.global_block() for ch in chunks])
        else:
            if c >= len(parts):
                raise InvalidArgument(f"job type {t!r} names chunk {c}, but this rank has {len(parts)} chunks")
            out[t] = parts[c][base]
    return out


def _kind(op):
    role = op.role()
    if role & (OpRole.Optimize | OpRole.LRSched):
        return "_optimizer_items"
    return "backward" if role & OpRole.Backward else "forward"


def _split_chunk(prog, comm_jobs, zero_bubble):
    """Job programs of one chunk. ``recv_forward``/``send_backward`` jobs are markers here.

    Their transfers stay inside the forward and backward programs: a receive
    then happens right where its data is needed, which keeps every recorded
    schedule free of deadlock (with a separate blocking receive job some
    recorded VPP job lists would wait on each other).
    """
    block = prog.global_block()
    items = {"forward": [], "backward": [], "recv_forward": [], "send_backward": [], "_optimizer_items": []}
    for op in block.ops:
        items[_kind(op)].append(("op", op))
    out = {k: _build(block, v, {}) for k, v in items.items() if k != "_optimizer_items"}
    out["_optimizer_items"] = items["_optimizer_items"]
    if zero_bubble:
        b_items, w_items = _split_backward(block, items["backward"])
        out["backward_b"], out["backward_w"] = _build(block, b_items, {}), _build(block, w_items, {})
    return out


def _is_weight_grad(block, name):
    if name.endswith("@GRAD@MERGE"):
        return True
    v = block._find_var_recursive(_fwd_name(name)) if GRAD_SUFFIX in name else None
    return isinstance(v, Parameter)


def _split_backward(block, items):
    """Zero-bubble split: weight-gradient work (backward_w) apart from the rest (backward_b).

    A grad op that makes both input and weight gradients is run twice, each
    copy with the other outputs' slots emptied (the kernels skip outputs
    nobody reads), so backward_b sends input gradients as early as possible.
    """
    from refimpl.ops.registry import get_op_def
    b_items, w_items = [], []
    for kind, op in items:
        outs = op.output_arg_names
        w = [n for n in outs if _is_weight_grad(block, n)]
        if op.type in ("send_v2", "recv_v2") or not w:
            b_items.append((kind, op))
        elif len(w) == len(outs):
            w_items.append((kind, op))
        elif get_op_def(op.type).kernel("numpy")[2]:  # the kernel honours empty output slots
            b_items.append(("recv", _without(op, lambda n: n in w)))
            w_items.append(("recv", _without(op, lambda n: n not in w)))
        else:
            b_items.append((kind, op))
    return b_items, w_items


def _without(op, drop):
    outs = {k: [n for n in v if not drop(n)] for k, v in op.outputs.items()}
    return _Spec(op.type, op.inputs, outs, op.all_attrs())
