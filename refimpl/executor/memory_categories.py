"""Which kind of memory each variable of a program is: parameters, gradients, optimizer state,
activations, communication buffers, or other.

No single Paddle file mirrors this: Paddle's memory statistics (``paddle/fluid/memory/stats.h``,
``paddle.device.cuda.max_memory_allocated``) count allocator bytes without saying what they hold.
Here the kind comes from the program alone, once per prepared program, so that the executor's
accounting (``garbage_collector.Memory``) costs one list update per write:

* ``parameters``: ``Parameter`` vars;
* ``gradients``: names with ``@GRAD`` (also ``@RENAME@`` parts and ``@GRAD@MERGE`` /
  ``@GRAD@GradientMerge`` accumulators);
* ``optimizer_state``: persistable vars an optimizer-role op that updates a ``Param`` writes
  (moments, velocities, beta powers);
* ``communication``: vars only communication ops (``c_*``, ``send_v2`` / ``recv_v2``,
  ``partial_*``, ``alltoall``, ...) write, vars only they touch, and ``coalesce_tensor``'s fused
  buffers;
* ``activations``: every other non-persistable var a program op writes (forward outputs, the
  ``.subprog_k`` vars recompute re-runs, backward temporaries that are not gradients);
* ``other``: the rest -- feeds, the learning rate, counters (``gradient_merge_step``, loss-scaling
  state) and other persistables, and the outputs of ``feed`` / ``read`` / ``print`` ops.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Tuple

from refimpl.framework.op_role import OpRole

CATEGORIES: Tuple[str, ...] = ("parameters", "gradients", "optimizer_state", "activations",
                               "communication", "other")
PARAMETERS, GRADIENTS, OPTIMIZER_STATE, ACTIVATIONS, COMMUNICATION, OTHER = range(len(CATEGORIES))
TRACKED = OTHER  # categories 0 .. TRACKED-1 are counted as they change; ``other`` is the remainder

_COMM_TYPES = {"send_v2", "recv_v2", "partial_send", "partial_recv", "partial_allgather", "alltoall",
               "global_scatter", "global_gather", "barrier", "coalesce_tensor"}
# ops whose runners store their outputs themselves, counting only the total (see Memory)
_UNTRACKED_WRITERS = {"feed", "read", "print"}


def is_comm_op(op_type: str) -> bool:
    return op_type.startswith("c_") or op_type in _COMM_TYPES


def _ops(program: Any) -> Iterable:
    for block in program.blocks:
        yield from block.ops


def classify(program: Any) -> Dict[str, int]:
    """{var name: category index} for every var the program's ops read or write."""
    writers: Dict[str, set] = {}
    users: Dict[str, set] = {}
    opt_written, untracked, fused = set(), set(), set()
    for op in _ops(program):
        updates = bool(op.role() & OpRole.Optimize) and bool(op.inputs.get("Param"))
        for n in op.output_arg_names:
            writers.setdefault(n, set()).add(op.type)
            users.setdefault(n, set()).add(op.type)
            if updates:
                opt_written.add(n)
            if op.type in _UNTRACKED_WRITERS:
                untracked.add(n)
        for n in op.input_arg_names:
            users.setdefault(n, set()).add(op.type)
        if op.type == "coalesce_tensor":
            fused.update(op.outputs.get("FusedOutput") or ())
    # each name's var: block 0's if it has one, else the first block's that declares it (one dict, so
    # a program of many nested blocks costs one pass over its vars)
    declared: Dict[str, Any] = {}
    for block in program.blocks:
        for name, v in block.vars.items():
            declared.setdefault(name, v)
    out = {}
    for name, types in users.items():
        out[name] = _category(name, declared.get(name), writers.get(name, set()), types, opt_written,
                              untracked, fused)
    return out


def _category(name: str, var: Any, written_by: set, used_by: set, opt_written: set, untracked: set,
              fused: set) -> int:
    persistable = bool(getattr(var, "persistable", False))
    if getattr(var, "is_parameter", False):
        return PARAMETERS
    if "@GRAD" in name:
        return GRADIENTS
    if persistable and name in opt_written:
        return OPTIMIZER_STATE
    if name in untracked or getattr(var, "is_data", False):
        return OTHER
    if name in fused or (written_by and all(is_comm_op(t) for t in written_by)) or \
            all(is_comm_op(t) for t in used_by):
        return COMMUNICATION
    if not persistable and written_by:
        return ACTIVATIONS
    return OTHER


__all__ = ["CATEGORIES", "PARAMETERS", "GRADIENTS", "OPTIMIZER_STATE", "ACTIVATIONS", "COMMUNICATION",
           "OTHER", "TRACKED", "classify", "is_comm_op"]
