"""Loss layers: CrossEntropyLoss, MSELoss, BCEWithLogitsLoss (``python/paddle/nn/layer/loss.py``).

Each keeps its options and calls the functional form in ``refimpl.nn.functional.loss`` when
called, so the program is the functional form's (the layers own no parameters). As in Paddle,
``paddle.nn.loss`` is this module. Differences: ``label_smoothing`` other than 0 is not
implemented (it raises, naming it).
"""
from __future__ import annotations

from typing import Any, Optional

from refimpl.core.errors import Unimplemented
from refimpl.framework.variable import Variable
from refimpl.nn import functional as F

from .layers import Layer

__all__ = ["CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss"]


class CrossEntropyLoss(Layer):
    """``F.cross_entropy`` with the options given at construction."""

    def __init__(self, weight: Optional[Variable] = None, ignore_index: int = -100, reduction: str = "mean",
                 soft_label: bool = False, axis: int = -1, use_softmax: bool = True,
                 label_smoothing: float = 0.0, name: Optional[str] = None) -> None:
        super().__init__()
        if label_smoothing:
            raise Unimplemented(f"paddle.nn.CrossEntropyLoss: label_smoothing={label_smoothing} is not "
                                f"implemented by refimpl (only 0.0)")
        self.weight, self.ignore_index, self.reduction = weight, ignore_index, reduction
        self.soft_label, self.axis, self.use_softmax, self.name = soft_label, axis, use_softmax, name

    def forward(self, input: Variable, label: Variable) -> Variable:
        return F.cross_entropy(input, label, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, soft_label=self.soft_label, axis=self.axis,
                               use_softmax=self.use_softmax, name=self.name)


class MSELoss(Layer):
    """``F.mse_loss``: the mean (or sum, or each) of the squared differences."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, input: Variable, label: Variable) -> Variable:
        return F.mse_loss(input, label, reduction=self.reduction)


class BCEWithLogitsLoss(Layer):
    """``F.binary_cross_entropy_with_logits`` with the weights given at construction."""

    def __init__(self, weight: Optional[Variable] = None, reduction: str = "mean",
                 pos_weight: Optional[Variable] = None, name: Optional[str] = None) -> None:
        super().__init__()
        self.weight, self.reduction, self.pos_weight, self.name = weight, reduction, pos_weight, name

    def forward(self, logit: Variable, label: Variable) -> Any:
        return F.binary_cross_entropy_with_logits(logit, label, weight=self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight, name=self.name)
