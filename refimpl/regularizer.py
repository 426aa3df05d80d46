"""``paddle.regularizer``: L1Decay and L2Decay.

Mirrors ``python/paddle/regularizer.py`` in the legacy static graph: a
regularizer is called with ``(param, grad, block)`` during
``Optimizer.apply_gradients`` and appends the ops of its decay term to
``block``, returning the term; the optimizer then adds it to the gradient
(``sum`` of ``[grad, term]`` into ``grad``, see
``refimpl/optimizer/optimizer.py``). The term is an unnamed block variable
(``_generated_var_N``):

- ``L2Decay(coeff)``: ``scale(param, scale=coeff)`` (the gradient of
  ``0.5 * coeff * sum(param ** 2)``);
- ``L1Decay(coeff)``: ``sign(param)`` then ``scale(..., scale=coeff)``.

A regularizer set on a parameter (``ParamAttr(regularizer=...)``) takes
precedence over the optimizer's ``weight_decay``. Unlike Paddle a negative or
non-number ``coeff`` raises InvalidArgument.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from refimpl.core.errors import InvalidArgument

if TYPE_CHECKING:
    from refimpl.framework.block import Block
    from refimpl.framework.variable import Variable

__all__ = ["L1Decay", "L2Decay", "WeightDecayRegularizer"]


class WeightDecayRegularizer:
    """Base of the weight-decay regularizers: ``__call__`` appends the decay term's ops."""

    def __init__(self, coeff: float = 0.0) -> None:
        if isinstance(coeff, bool) or not isinstance(coeff, (int, float)):
            raise InvalidArgument(f"{type(self).__name__}: coeff must be a float, got {coeff!r}")
        if coeff < 0:
            raise InvalidArgument(f"{type(self).__name__}: coeff must be >= 0, got {coeff}")
        self._coeff = coeff

    def __call__(self, param: Variable, grad: Variable, block: Block) -> Variable:
        raise NotImplementedError

    def _scale(self, x: Variable, block: Block) -> Variable:
        decay = block.create_var(dtype=x.dtype, shape=x.shape)
        block.append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [decay]},
                        attrs={"scale": float(self._coeff)})
        return decay


class L1Decay(WeightDecayRegularizer):
    """``coeff * sign(param)`` added to the gradient (``sign`` + ``scale``)."""

    def __call__(self, param: Variable, grad: Variable, block: Block) -> Variable:
        sign = block.create_var(dtype=param.dtype, shape=param.shape)
        block.append_op(type="sign", inputs={"X": [param]}, outputs={"Out": [sign]})
        return self._scale(sign, block)

    def __str__(self) -> str:
        return f"L1Decay, coeff={self._coeff:f}"


class L2Decay(WeightDecayRegularizer):
    """``coeff * param`` added to the gradient (``scale``)."""

    def __call__(self, param: Variable, grad: Variable, block: Block) -> Variable:
        return self._scale(param, block)

    def __str__(self) -> str:
        return f"L2Decay, coeff={self._coeff:f}"

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
