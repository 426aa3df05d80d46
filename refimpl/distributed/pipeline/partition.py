"""Stage partitioning: one training program -> per-rank, per-chunk stage programs.

Mirrors what Paddle's pipeline passes do to a single-device program before
scheduling (legacy ``PipelineOptimizer`` / auto-parallel ``pipeline_pass``):
forward ops are cut into ``pp_degree * vpp_degree`` virtual stages (by
``op_device`` annotations such as ``device_guard("stage:1")``, or by explicit
forward-op indices, e.g. the evenly spaced ones of :func:`even_cuts`);
``device_guard("gpu:all")`` forward ops run on every stage, as Paddle's
legacy pipeline copies them into every section program;
virtual stage ``v`` runs on rank ``v % pp_degree`` as its chunk
``v // pp_degree``. Every other op follows the forward op it belongs to (a
gradient op goes where the forward var of its output gradient was made, an
optimizer op where its parameter is used, learning-rate ops everywhere).
AMP's loss-scaling ops run on every stage, each copy on that stage's
gradients, with the found-inf flag all-reduced across stages (``amp.py``). A
non-persistable variable made on one virtual stage and read on another
travels through a ``send_v2`` / ``recv_v2`` pair placed at its reader
(``transfer.py`` says in which pass); a persistable one that a stage updates
may be read on that stage only. Run ``accumulate_gradients`` first so that
backward jobs leave their gradients in persistable buffers.

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
from refimpl.framework.op_role import OpRole, is_forward
from refimpl.framework.program import Program
from refimpl.framework.variable import Parameter, Variable
from refimpl.ops.registry import GRAD_SUFFIX

from .amp import AMP, AMP_RING, is_amp_op, stage_copy
from .transfer import SUBPROG, Router, Spec, transfer_ring  # noqa: F401  (transfer_ring: re-exported)

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
    return SUBPROG.sub("", name)


def _device_stage(op):
    dev = op.attr("op_device") if op.has_attr("op_device") else ""
    m = re.match(r"^(?:stage|gpu|cpu):(\d+)$", dev or "")
    return int(m.group(1)) if m else None


def _on_every_stage(op):
    """``device_guard("gpu:all")``: Paddle's legacy pipeline copies the op into every section program."""
    dev = op.attr("op_device") if op.has_attr("op_device") else ""
    return bool(re.match(r"^(?:stage|gpu|cpu):all$", dev or ""))


def assign_stages(program: Program, num_virtual: int, cuts: Optional[Sequence[int]] = None) -> List[Any]:
    """[virtual stage or LR] for every op of the global block."""
    ops = program.global_block().ops
    fwd = [i for i, op in enumerate(ops) if _is_forward(op) and not _on_every_stage(op)]
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
        elif op.role() & OpRole.LRSched or (_is_forward(op) and _on_every_stage(op)):
            out.append(LR)
        elif is_amp_op(op):
            out.append(AMP)
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
        [n for n in op.output_arg_names if SUBPROG.search(n)] or op.input_arg_names  # recompute: its outputs' stage
    if op.role() & OpRole.Optimize and op.input("Param"):
        names = op.input("Param")
    for n in names:
        s = home.get(_fwd_name(n))
        if s is not None:
            return s
    raise InvalidArgument(f"partition: cannot tell which stage op {i} ({op.type}) belongs to")


def partition(program: Program, pp_degree: int, vpp_degree: int = 1, cuts: Optional[Sequence[int]] = None,
              stage_map: str = "interleaved", ring_offset: int = 0) -> List[List[Program]]:
    """``[rank][chunk] -> Program`` with send_v2/recv_v2 between virtual stages (see ``transfer.py``).

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
    if AMP in stages and vpp_degree > 1:
        raise Unimplemented(f"partition: AMP loss scaling with {vpp_degree} chunks per stage (one loss "
                            f"scaling update per rank is needed)")
    home = _var_homes(program, {i: s for i, s in enumerate(stages) if isinstance(s, int)})
    amp_made: Dict[int, set] = {v: set() for v in range(nv)}
    _check_shared_params(block, ops, stages)
    _check_persistables(block, ops, stages, nv)
    per_stage: Dict[int, list] = {v: [] for v in range(nv)}  # items: ("op", Operator) or ("spec", Spec)
    router = Router(block, per_stage, owner, ring_offset)
    for i, op in enumerate(ops):
        if stages[i] == AMP:
            for v in range(nv):
                owns = (lambda n, v=v: home.get(_fwd_name(n)) == v)
                for sp in stage_copy(op, owns, amp_made[v], ring_offset + AMP_RING, nv, block):
                    for n in [x for ns in sp.inputs.values() for x in ns]:
                        router.read(op, v, n)
                    per_stage[v].append(("spec", sp))
            continue
        for v in (range(nv) if stages[i] == LR else [stages[i]]):
            for n in op.input_arg_names:
                router.read(op, v, n)
            per_stage[v].append(("op", op))
        if stages[i] != LR:
            router.wrote(op, stages[i])
    at = {owner[v]: v for v in range(nv)}
    return [[_build(block, per_stage[at[(r, c)]]) for c in range(vpp_degree)]
            for r in range(pp_degree)]


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


def _check_persistables(block: Any, ops: List[Any], stages: List[Any], nv: int) -> None:
    """A persistable var one stage updates may be read on that stage only.

    Every rank starts with its own copy of every persistable var; a copy that
    another stage's ops update (a parameter by its optimizer, a running
    statistic, a gradient buffer) would be stale from the second step on.
    Learning-rate ops run on every stage and update every copy alike.
    """
    writers: Dict[str, Dict[int, Any]] = {}
    for i, op in enumerate(ops):
        if stages[i] in (LR, AMP):  # AMP's copies: each stage updates its own gradients, the same scaling
            continue
        for n in op.output_arg_names:
            v = block._find_var_recursive(n)
            if v is not None and v.persistable:
                writers.setdefault(n, {}).setdefault(stages[i], (i, op))
    for n, w in writers.items():
        if len(w) > 1:
            (s0, (i0, op0)), (s1, (i1, op1)) = list(w.items())[:2]
            raise Unimplemented(f"partition: persistable var {n!r} is updated on virtual stages {s0} "
                                f"(op {i0}, {op0.type!r}) and {s1} (op {i1}, {op1.type!r}); each stage would "
                                f"update its own copy")
    for i, op in enumerate(ops):
        if stages[i] == AMP:  # each stage's copy reads only its own gradients
            continue
        for n in op.input_arg_names:
            if n not in writers:
                continue
            ((u, (j, wop)),) = writers[n].items()
            for v in (range(nv) if stages[i] == LR else [stages[i]]):
                if v != u:
                    raise Unimplemented(f"partition: op {i} ({op.type!r}) on virtual stage {v} reads persistable "
                                        f"var {n!r}, which op {j} ({wop.type!r}) updates on virtual stage {u}; "
                                        f"its copy on stage {v} would be stale (a stage reads only the "
                                        f"persistable vars of its own stage)")


def _build(src_block, items, src_blocks=None):
    """A new single-block Program holding these ops (Operators or Specs)."""
    prog = Program()
    b = prog.global_block()
    for item in items:
        kind, op = item
        for sp in [op if isinstance(op, Spec) else Spec(op.type, op.inputs, op.outputs, op.all_attrs())]:
            for n in [x for ns in list(sp.inputs.values()) + list(sp.outputs.values()) for x in ns]:
                if n not in b.vars:
                    _copy_var(_block_with(src_blocks, n) if src_blocks else src_block, b, n)
            b._append_desc_op(sp.type, {k: list(v) for k, v in sp.inputs.items()},
                              {k: list(v) for k, v in sp.outputs.items()}, dict(sp.attrs))
    return prog


def join_programs(programs: Sequence[Program]) -> Program:
    """One new Program holding the ops of ``programs``, in order (each var copied from the first that has it)."""
    return _build(programs[0].global_block(), [("op", op) for p in programs for op in p.global_block().ops],
                  src_blocks=[p.global_block() for p in programs])


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
            out[t] = _build(chunks[0].global_block(), [it for p in parts for it in p["_optimizer_items"]],
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
    out = {k: _build(block, v) for k, v in items.items() if k != "_optimizer_items"}
    out["_optimizer_items"] = items["_optimizer_items"]
    if zero_bubble:
        b_items, w_items = _split_backward(block, items["backward"])
        out["backward_b"], out["backward_w"] = _build(block, b_items), _build(block, w_items)
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
            b_items.append(("spec", _without(op, lambda n: n in w)))
            w_items.append(("spec", _without(op, lambda n: n not in w)))
        else:
            b_items.append((kind, op))
    return b_items, w_items


def _without(op, drop):
    outs = {k: [n for n in v if not drop(n)] for k, v in op.outputs.items()}
    return Spec(op.type, op.inputs, outs, op.all_attrs())
