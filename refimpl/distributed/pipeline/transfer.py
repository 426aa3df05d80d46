"""Cross-stage reads -> ``send_v2`` / ``recv_v2`` pairs that keep the numbers of the whole program.

Mirrors ``PipelineOptimizer._insert_sendrecv_ops_for_boundaries`` of Paddle's
legacy pipeline (``python/paddle/incubate/optimizer/pipeline.py``): walking
the ops in program order, every read of a var made on another stage gets a
send on the producer's stage and a recv on the reader's, both at the
reader's place in the program. Sends and recvs between two stages therefore
come in the same order on both sides, which is what pairs them: a ring is a
FIFO per (sender, receiver), and a message carries no name.

How a read travels depends on the phases of its producer and its reader:

* forward reads forward: in the forward jobs (a var may only move to a later
  stage; Paddle asserts the same);
* backward reads a var of a later stage: in the backward jobs, as gradients;
* backward reads a *forward* var of an earlier stage: in the forward jobs
  (sent and received at their ends), then kept for the backward job of the
  same micro-batch (``skip_gc_vars``). Paddle refuses this case;
* backward reads ``x.subprog_k`` (recompute's re-run of ``x``) made on an
  earlier stage: ``x`` travels as above and an ``assign`` makes the copy, as
  Paddle's 1F1B mode does -- the re-run gives ``x``'s value again;
* any other backward read from an earlier stage would make the later
  stage's backward wait for the earlier one's: refused (Unimplemented);
* optimizer ops read optimizer vars in the optimizer jobs; a forward or
  backward var (one value per micro-batch) of another stage: refused.

Unlike Paddle (one ring per pair of stages, relays through the stages in
between), rings are one per sending stage and direction
(:func:`transfer_ring`), and a var goes straight to the stage that reads it.
Only where one stage sends to two chunks of one rank does the second pair
get a ring of its own (``Router._ring``).
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, NamedTuple, Tuple

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole, is_forward

FORWARD, BACKWARD, OPTIMIZE = "forward", "backward", "optimize"
_ROLE = {FORWARD: OpRole.Forward, BACKWARD: OpRole.Backward, OPTIMIZE: OpRole.Optimize}
SUBPROG = re.compile(r"\.subprog_\d+$")


def phase_of(op: Any) -> str:
    """The job kind an op runs in: forward, backward or optimize (learning-rate ops too)."""
    role = op.role()
    if role & (OpRole.Optimize | OpRole.LRSched):
        return OPTIMIZE
    return FORWARD if is_forward(role) else BACKWARD


def transfer_ring(src_stage: int, backward: bool) -> int:
    """The ring a transfer leaving virtual stage ``src_stage`` uses (one per stage and direction).

    Every ring then carries the messages of one sending stage in micro-batch
    order, whatever order the ranks interleave their chunks in (see
    ``Router._ring`` for the one exception).
    """
    return 1 + 2 * src_stage + int(backward)


class Spec:
    """An op to be appended to a stage program (type, slots, attrs)."""

    def __init__(self, type: str, inputs: Dict[str, List[str]], outputs: Dict[str, List[str]],
                 attrs: Dict[str, Any]) -> None:
        self.type, self.inputs, self.outputs, self.attrs = type, inputs, outputs, attrs


class _Made(NamedTuple):
    stage: int
    op: Any
    phase: str


def _transferable(block, name, producer):
    v = block._find_var_recursive(name)
    # a data var written by a DataLoader's `read` op (refimpl/io) travels like an activation:
    # the first stage reads one batch per micro-batch and sends what later stages use
    from_reader = producer.type == "read"
    return v is not None and not v.persistable and (not v.is_data or from_reader)


class Router:
    """Adds the transfers of one partition to ``per_stage`` (virtual stage -> list of items)."""

    def __init__(self, block: Any, per_stage: Dict[int, list], owner: List[Tuple[int, int]],
                 ring_offset: int = 0) -> None:
        self.block, self.per_stage, self.owner, self.ring_offset = block, per_stage, owner, ring_offset
        self.producer: Dict[str, _Made] = {}      # var -> its latest writer (not an LR op)
        self.moved: Dict[Tuple[str, int], _Made] = {}  # (var, stage) -> the writer whose value it holds
        self.channels: Dict[tuple, int] = {}      # (ring, dst rank, optimizer?) -> the stage it feeds
        self.extra: Dict[tuple, int] = {}         # (src stage, dst stage, backward?) -> an extra ring

    def wrote(self, op: Any, stage: int) -> None:
        made = _Made(stage, op, phase_of(op))
        for n in op.output_arg_names:
            self.producer[n] = made

    def read(self, op: Any, stage: int, name: str) -> None:
        """``op`` (about to be appended to ``stage``) reads ``name``: bring it there if it is made elsewhere."""
        src = self.producer.get(name)
        if src is None or src.stage == stage or self.moved.get((name, stage)) is src \
                or not _transferable(self.block, name, src.op):
            return
        phase, u = phase_of(op), src.stage
        if phase == FORWARD and u > stage:
            raise InvalidArgument(self._where(op, stage, name, src) + "; in the forward pass a var can "
                                  "only move to a later stage (check the ops' device_guard)")
        if phase == FORWARD or (phase == BACKWARD and (u > stage or src.phase == FORWARD)):
            self._move(name, src, stage, FORWARD if u < stage else BACKWARD, op)
        elif phase == BACKWARD and SUBPROG.search(name) and self._rerun_copy(op, stage, name, src):
            pass
        elif phase == OPTIMIZE and src.phase == OPTIMIZE:
            self._move(name, src, stage, OPTIMIZE, op)
        elif phase == BACKWARD:
            raise Unimplemented(self._where(op, stage, name, src) + f" in the backward pass; sending it "
                                f"would make stage {stage}'s backward job wait for stage {u}'s, the reverse of "
                                f"the order the pipeline schedules run them in")
        else:
            raise Unimplemented(self._where(op, stage, name, src) + f" in the {src.phase} pass, one value per "
                                f"micro-batch; an optimizer op may read such a var on its own stage only")

    def _where(self, op, stage, name, src):
        return (f"partition: op {op.type!r} on virtual stage {stage} reads {name!r}, which op {src.op.type!r} "
                f"makes on virtual stage {src.stage}")

    def _rerun_copy(self, op, stage, name, src):
        """``name`` is recompute's re-run of a forward var: copy that var (moved here) instead."""
        orig = SUBPROG.sub("", name)
        made = self.producer.get(orig)
        if made is None or made.phase != FORWARD or not _transferable(self.block, orig, made.op):
            return False
        if made.stage != stage and self.moved.get((orig, stage)) is not made:
            self._move(orig, made, stage, FORWARD if made.stage < stage else BACKWARD, op)
        self.per_stage[stage].append(("spec", Spec("assign", {"X": [orig]}, {"Out": [name]},
                                                   {OP_ROLE_ATTR: OpRole.Backward})))
        self.moved[(name, stage)] = src
        return True

    def _move(self, name, src, stage, phase, reader):
        self.moved[(name, stage)] = src
        src_rank, dst_rank = self.owner[src.stage][0], self.owner[stage][0]
        if src_rank == dst_rank:
            return
        ring = self._ring(src.stage, stage, dst_rank, phase)
        var = self.block._find_var_recursive(name)
        common = {"ring_id": ring, OP_ROLE_ATTR: _ROLE[phase], "use_calc_stream": True, "dynamic_shape": True}
        self.per_stage[src.stage].append(("spec", Spec("send_v2", {"X": [name]}, {}, dict(common, peer=dst_rank))))
        self.per_stage[stage].append(("spec", Spec(
            "recv_v2", {}, {"Out": [name]},
            dict(common, peer=src_rank, out_shape=list(var.shape or []), dtype=to_vartype(var.dtype or "float32")))))

    def _ring(self, src_stage, stage, dst_rank, phase):
        """The sending stage's ring, unless it already carries messages to another chunk of ``dst_rank``.

        A ring is a FIFO per pair of ranks; the receiving rank runs its chunks'
        jobs in an order of its own, so the messages of one ring to one rank
        must all be for one chunk. A second receiving chunk gets an extra ring
        (numbered after the ``2 * stages`` regular ones, in program order).
        """
        ring = self.ring_offset + transfer_ring(src_stage, phase == BACKWARD)
        key = (ring, dst_rank, phase == OPTIMIZE)  # optimizer messages follow every other one
        if self.channels.setdefault(key, stage) == stage:
            return ring
        return self.extra.setdefault((src_stage, stage, phase == BACKWARD),
                                     self.ring_offset + 2 * len(self.owner) + 1 + len(self.extra))
