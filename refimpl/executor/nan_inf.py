"""``FLAGS_check_nan_inf``: the first op whose output holds NaN or Inf fails the run.

Mirrors Paddle's ``CheckOpHasNanOrInf``
(``paddle/fluid/framework/details/nan_inf_utils_detail.cc``), which
``OperatorWithKernel::RunImpl`` (``paddle/fluid/framework/operator.cc``)
calls after each kernel when ``FLAGS_check_nan_inf`` is set: every
floating-point output of the op is scanned, and the first NaN or Inf raises
an error naming the op and the tensor. NaN and Inf in a feed are allowed
(as in Paddle): the first op that reads one produces one, and is named.

The flag is read when a block is prepared (``PreparedBlock``): with it off
the run loop holds no check at all; with it on, each checked op's runner is
wrapped by :func:`checked`. The check reads the output as the backend holds
it and copies a device array to the host (``backend.to_host``),
so both kernel sets are checked by the same code. Differences from Paddle:
only dense outputs are scanned (not SelectedRows or tensor arrays), the
error counts NaN and Inf but not zeros, and Paddle's
``FLAGS_check_nan_inf_level`` (print statistics instead of raising) is
not implemented. ``feed`` / ``fetch`` only move data and are not checked,
nor are control-flow ops (the ops of their sub-blocks are).
"""
from __future__ import annotations

from typing import Any, Callable, TYPE_CHECKING

import numpy as np

from refimpl.core.errors import PreconditionNotMet
from refimpl.framework.operator import Operator

from .backend import to_host

if TYPE_CHECKING:
    from .prepared import PreparedBlock

_MOVES_DATA = frozenset(("feed", "fetch", "fetch_v2"))


def is_checked(op: Operator) -> bool:
    """Whether ``op``'s outputs are scanned: not data movement, not a control-flow op (no sub-block)."""
    return op.type not in _MOVES_DATA and not op.has_attr("sub_block")


def checked(run: Callable[[], None], block: "PreparedBlock", op_index: int, op: Operator) -> Callable[[], None]:
    """``run`` followed by the scan of ``op``'s outputs (resolved once, here)."""
    outs = tuple((slot, name, block.tensor(name)) for slot, names in op.outputs.items() for name in names)
    where = f"block {block.block.idx} op {op_index} ({op.type})"

    def run_and_check() -> None:
        run()
        for slot, name, t in outs:
            if t._array is not None:
                check_finite(where, slot, name, t._array)
    return run_and_check


def check_finite(where: str, slot: str, name: str, value: Any) -> None:
    """Raise ``PreconditionNotMet`` if the floating-point ``value`` of output ``slot``=``name`` has NaN/Inf."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or np.dtype(dtype).kind not in "fc":
        return
    host = value if isinstance(value, np.ndarray) else to_host(value)
    finite = np.isfinite(host)
    if finite.all():
        return
    nan = int(np.count_nonzero(np.isnan(host)))
    inf = host.size - int(np.count_nonzero(finite)) - nan
    found = " and ".join(f"{what} ({n} of {host.size} values)" for what, n in (("NaN", nan), ("Inf", inf)) if n)
    raise PreconditionNotMet(f"{where}: output {slot}={name!r} ({np.dtype(dtype).name}) contains {found} "
                             f"(FLAGS_check_nan_inf is set)")
