"""AMP's loss-scaling ops in a pipeline: one copy per stage, the found-inf flag shared.

Mirrors what Paddle 3.3.1's legacy ``python/paddle/incubate/optimizer/pipeline.py``
does with the optimizer-role ops ``static/amp`` appends
(``check_finite_and_unscale``, ``concat``, ``reduce_any``,
``update_loss_scaling``, ``memcpy``): they go on every stage ("gpu:all"),
each stage's copy keeps only the gradients of its own parameters, and the
``reduce_any`` flag (or, when AMP wrote one ``check_finite_and_unscale``
for all gradients, as it does under sharding, that op's flag) is
all-reduced (max, over an int32 cast) across the stages, so that every
stage skips or takes the same update and keeps the same loss scaling.
Differences: the flag's ring is one of the pipeline's own rings
(``AMP_RING`` past its ring offset), and the ops become
``Spec`` items of the stage programs instead of being pruned in place.
"""
from __future__ import annotations

from typing import Any, Callable, List, Set

from refimpl.core.dtypes import to_vartype
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole

from .transfer import Spec

AMP = "amp"  # stage marker for the AMP ops every stage runs, each on its own gradients
AMP_OPS = ("check_finite_and_unscale", "concat", "reduce_any", "update_loss_scaling", "memcpy")
AMP_RING = 900  # the found-inf all-reduce's ring, past the pipeline's ring offset


def is_amp_op(op: Any) -> bool:
    """An optimizer-role op of AMP's loss scaling, run by every stage."""
    return op.type in AMP_OPS and bool(op.role() & OpRole.Optimize)


def stage_copy(op: Any, owns: Callable[[str], bool], made: Set[str], ring: int, num_stages: int,
               block: Any) -> List[Spec]:
    """This stage's copy of AMP op ``op`` (none when it has no gradient here), plus the flag's all-reduce.

    ``owns(name)``: the gradient ``name`` is this stage's; ``made`` collects
    the vars this stage's copies write (``concat`` keeps the flags made here).
    """
    ins = {k: list(v) for k, v in op.inputs.items()}
    outs = {k: list(v) for k, v in op.outputs.items()}
    attrs = op.all_attrs()
    if op.type in ("check_finite_and_unscale", "update_loss_scaling"):
        xs = [n for n in ins["X"] if owns(n)]
        if not xs and op.type == "check_finite_and_unscale":
            return []
        ins["X"], outs["Out"] = xs, list(xs)
    elif op.type == "concat":
        ins["X"] = [n for n in ins["X"] if n in made]
    specs = [Spec(op.type, ins, outs, attrs)]
    if op.type == "reduce_any" and num_stages > 1:
        specs += _flag_all_reduce(block, outs["Out"][0], ring)
    elif op.type == "check_finite_and_unscale" and num_stages > 1 and not _has_reduce_any(block):
        # one check for all gradients (AMP not "distributed", as under sharding): its flag is the flag
        specs += _flag_all_reduce(block, outs["FoundInfinite"][0], ring)
    for sp in specs:
        made.update(n for ns in sp.outputs.values() for n in ns)
    return specs


def _has_reduce_any(block: Any) -> bool:
    """Whether AMP combined per-gradient flags (``concat`` + ``reduce_any``), as it does when distributed."""
    return any(o.type == "reduce_any" and is_amp_op(o) for o in block.ops)


def _flag_all_reduce(block: Any, flag: str, ring: int) -> List[Spec]:
    """bool flag -> int32 -> all-reduce max over the stages -> bool flag."""
    tmp = flag + "@CAST_INT32"
    if tmp not in block.vars:
        block.create_var(name=tmp, shape=[1], dtype="int32")
    role = {OP_ROLE_ATTR: int(OpRole.Optimize)}
    b, i32 = to_vartype("bool"), to_vartype("int32")
    return [Spec("cast", {"X": [flag]}, {"Out": [tmp]}, dict(role, in_dtype=b, out_dtype=i32)),
            Spec("c_allreduce_max", {"X": [tmp]}, {"Out": [tmp]},
                 dict(role, ring_id=ring, use_calc_stream=True)),
            Spec("cast", {"X": [tmp]}, {"Out": [flag]}, dict(role, in_dtype=i32, out_dtype=b))]
