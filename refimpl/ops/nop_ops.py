"""``nop``: an op that does nothing but name its inputs as outputs.

Mirrors Paddle 3.3.1's ``paddle/fluid/operators/nop_op.cc`` (slots ``X*`` -> ``Out*``, no attrs of its
own). The legacy pipeline (``refimpl/incubate/optimizer/pipeline/send_recv.py``) puts one after the first
backward recv in place of a forward send's ``c_sync_comm_stream``: the var it names stays alive until
then. Differences: none meant.
"""
from typing import List, Sequence

from .registry import register_op


def _nop_infer(ins, attrs):
    return {"Out": list(ins.get("X") or [])}


@register_op("nop", ["X*"], ["Out*"], {}, infer_shape=_nop_infer, writes_inputs=True)
def nop(X: Sequence) -> List:
    return list(X)
