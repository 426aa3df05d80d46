"""Linear algebra: bmm (``paddle/tensor/linalg.py``; ``paddle.matmul`` is in ``math.py``).

The legacy static-graph branch: ``bmm`` checks that x and y are 3-D with equal batches and
``x.shape[2] == y.shape[1]`` where known (InvalidArgument naming both shapes, where Paddle raises a
ValueError), then appends a ``bmm`` op whose output is ``bmm_N.tmp_0``.
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
    xs, ys = list(x.shape), list(y.shape)
    if len(xs) != 3 or len(ys) != 3:
        raise InvalidArgument(f"bmm: x and y must be 3-D, got x of shape {xs} and y of shape {ys}")
    if -1 not in (xs[2], ys[1]) and xs[2] != ys[1]:
        raise InvalidArgument(f"bmm: x's last dim must equal y's middle dim, got x of shape {xs} and y of shape {ys}")
    if -1 not in (xs[0], ys[0]) and xs[0] != ys[0]:
        raise InvalidArgument(f"bmm: x and y must have the same batch (dim 0), got x of shape {xs} and y of "
                              f"shape {ys}")
    helper = LayerHelper("bmm", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="bmm", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]})
    return out
