"""Linear algebra: bmm (``paddle/tensor/linalg.py``; ``paddle.matmul`` is in ``math.py``).

The legacy static-graph branch: ``bmm`` appends a ``bmm`` op whose output is ``bmm_N.tmp_0``; the
op's infer-shape checks that x and y are 3-D with equal batches and ``x.shape[2] == y.shape[1]``
where known (InvalidArgument naming both shapes, where Paddle raises a ValueError).
"""
from typing import Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

__all__ = ['bmm']


def bmm(x: Variable, y: Variable, name: Optional[str] = None) -> Variable:
    for arg, v in (("x", x), ("y", y)):
        if not isinstance(v, Variable):
            raise InvalidArgument(f"bmm: argument '{arg}' must be a static Variable, got {type(v).__name__}")
    # (the shapes are checked by the op's infer-shape: refimpl/ops/linalg_ops.py check_bmm_shapes)
    helper = LayerHelper("bmm", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="bmm", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]})
    return out
