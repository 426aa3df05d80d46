"""Weight decay under ZeRO sharding: each rank keeps the decay ops of the params it owns.

Mirrors ``paddle/distributed/fleet/meta_optimizers/sharding/weight_decay_helper.py``
(``WeightDecayHelper``). A regularizer passed to the optimizer (``L2Decay`` / ``L1Decay`` with an
optimizer that does not fuse it, e.g. Adam) appends, per parameter, ops in the name scope
``/regularization`` (``scale`` + ``sum`` for L2, ``sign`` + ``scale`` + ``sum`` for L1) whose
``op_role_var`` starts with the parameter; ``prune_weight_decay`` removes those of parameters
this rank's shard does not hold. Momentum with ``L2Decay`` fuses the decay into the ``momentum``
op (``regularization_method``) and leaves no such ops.

How it differs: Paddle's ``ValueError`` for a decay op without ``op_role_var`` is a typed
``InvalidArgument`` (also a ``ValueError``) naming the op.
"""
from __future__ import annotations

from typing import Any

from refimpl.core.errors import InvalidArgument
from refimpl.framework.op_role import OP_NAMESCOPE_ATTR, OP_ROLE_VAR_ATTR

__all__ = ["WeightDecayHelper"]

REGULARIZATION_NAMESCOPE = "/regularization"


class WeightDecayHelper:
    """Paddle's ``WeightDecayHelper`` (see the module docstring)."""

    def __init__(self) -> None:
        pass

    def _is_weight_decay_op(self, op: Any) -> bool:
        return op.has_attr(OP_NAMESCOPE_ATTR) and str(op.attr(OP_NAMESCOPE_ATTR)).startswith(
            REGULARIZATION_NAMESCOPE)

    def prune_weight_decay(self, block: Any, shard: Any) -> None:
        """Remove the ``/regularization`` ops whose parameter (``op_role_var[0]``) is not this rank's."""
        for idx in range(len(block.ops) - 1, -1, -1):
            op = block.ops[idx]
            if not self._is_weight_decay_op(op):
                continue
            role_var = list(op.all_attrs().get(OP_ROLE_VAR_ATTR) or [])
            if not role_var:
                raise InvalidArgument(f"The weight decay op should hold the op_role_var attribute, but "
                                      f"the {op.type} op at index {idx} does not")
            if not shard.has_param(role_var[0]):
                block._remove_op(idx, sync=False)
