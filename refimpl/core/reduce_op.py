"""The reduction a collective applies: ``ReduceOp`` and its names.

Mirrors ``paddle/phi/core/distributed/types.h`` (the ``ReduceOp`` enum that
collective kernels and communicators share) and its Python face
``paddle.distributed.ReduceOp`` (same values). It lives in ``core`` so that
op kernels (``refimpl.ops.collective_ops``) and communicators
(``refimpl.distributed.communication``) agree on it without the ops
importing the communicators; ``refimpl.distributed`` re-exports it.
Differences: Paddle calls the product ``PROD`` in Python and ``PRODUCT`` in
C++; here it is ``PROD`` only.
"""
from typing import Dict


class ReduceOp:
    """``paddle.distributed.ReduceOp``: the reduction of a collective (same values)."""

    SUM = 0
    MAX = 1
    MIN = 2
    PROD = 3
    AVG = 4


REDUCE_NAMES: Dict[int, str] = {ReduceOp.SUM: "sum", ReduceOp.MAX: "max", ReduceOp.MIN: "min",
                                ReduceOp.PROD: "prod", ReduceOp.AVG: "avg"}
