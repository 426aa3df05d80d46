"""Metric ops: accuracy.

Mirrors Paddle's ``accuracy`` (``paddle/phi/kernels/cpu/accuracy_kernel.cc``, shapes as
``AccuracyInferMeta`` in ``paddle/phi/infermeta/ternary.cc``). It reads the top-k ``Indices``
(``[N, k]``, from ``top_k_v2``) and ``Label`` (``[N, 1]``): a row is correct when its label is
among its k indices. ``Correct`` and ``Total`` are int32 0-D tensors, ``Accuracy`` is their
float32 quotient (0 for no rows), whatever the dtype of ``Out`` (Paddle's kernel writes float;
the var descs carry Out's dtype, as Paddle's infer-meta sets them). ``Out`` itself is not read.
Label must be 2-D at build time (as in Paddle 3.3.1); a second dim other than 1 and a row count
unlike Indices' are an InvalidArgument when the op runs. Paddle's CPU kernel
wants an int64 Label; any integer dtype is accepted here.
"""
import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import first
from .registry import register_op


def check_accuracy_shapes(ind_shape, label_shape) -> None:
    lab, ind = list(label_shape), list(ind_shape)
    if len(lab) != 2:
        raise InvalidArgument(f"accuracy: Label must be 2-D ([N, 1]), got shape {lab}")
    if lab[1] != 1:
        raise InvalidArgument(f"accuracy: Label's second dim must be 1, got shape {lab}")
    if len(ind) != 2:
        raise InvalidArgument(f"accuracy: Indices must be 2-D ([N, k]), got shape {ind}")
    if ind[0] != lab[0]:
        raise InvalidArgument(f"accuracy: Indices has {ind[0]} rows and Label {lab[0]} (shapes {ind}, {lab})")


def check_label_dtype(dtype: np.dtype) -> None:
    if dtype.kind not in "iu":
        raise InvalidArgument(f"accuracy: Label must hold integers, got dtype {dtype}")


def _accuracy_infer(ins, attrs):
    (lab, _), (_, dt) = first(ins, "Label"), first(ins, "Out")
    if len(lab) != 2:
        raise InvalidArgument(f"accuracy: Label must be 2-D ([N, 1]), got shape {list(lab)}")
    return {s: ((), dt) for s in ("Accuracy", "Correct", "Total")}


@register_op("accuracy", ["Out", "Indices", "Label"], ["Accuracy", "Correct", "Total"], {},
             infer_shape=_accuracy_infer)
def accuracy(Out, Indices, Label):
    check_accuracy_shapes(Indices.shape, Label.shape)
    check_label_dtype(Label.dtype)
    rows = Indices.shape[0]
    correct = int(np.count_nonzero((Indices == Label).any(axis=1))) if rows else 0
    acc = np.float32(correct) / np.float32(rows) if rows else np.float32(0)
    return np.array(acc, np.float32), np.array(correct, np.int32), np.array(rows, np.int32)
