"""Metric ops: accuracy and auc.

Mirrors Paddle's ``accuracy`` (``paddle/phi/kernels/cpu/accuracy_kernel.cc``, shapes as
``AccuracyInferMeta`` in ``paddle/phi/infermeta/ternary.cc``). It reads the top-k ``Indices``
(``[N, k]``, from ``top_k_v2``) and ``Label`` (``[N, 1]``): a row is correct when its label is
among its k indices. ``Correct`` and ``Total`` are int32 0-D tensors, ``Accuracy`` is their
float32 quotient (0 for no rows), whatever the dtype of ``Out`` (Paddle's kernel writes float;
the var descs carry Out's dtype, as Paddle's infer-meta sets them). ``Out`` itself is not read.
Label must be 2-D at build time (as in Paddle 3.3.1); a second dim other than 1 and a row count
unlike Indices' are an InvalidArgument when the op runs. Paddle's CPU kernel
wants an int64 Label; any integer dtype is accepted here.

``auc`` mirrors Paddle's (``paddle/phi/kernels/cpu/auc_kernel.cc``, shapes as ``AucInferMeta`` in
``paddle/phi/infermeta/multiary.cc``): each row's positive-class probability (the last column of
Predict) falls into bucket ``int(p * num_thresholds)`` (the product in Predict's dtype) of the
positive (label > 0) or negative (label == 0) histogram. With ``slide_steps == 0`` the histograms
``StatPos`` / ``StatNeg`` (``[1, num_thresholds + 1]``) accumulate every batch; with
``slide_steps = s > 0`` they hold s per-step buckets, their running sum and a step counter
(``[(1 + s) * (num_thresholds + 1) + 1]``): the step's bucket replaces the oldest one in the sum.
AUC is the ROC area of the summed histograms by the trapezoid rule, walked from the top bucket
down in float64 and divided by the positive and negative totals (0 without either). As in
Paddle, ``curve`` is not read (always ROC), AUC's var desc says int64 while the kernel writes
float64, and an InsTagWeight whose first value is 0 marks the batch as fake: counted in the
step's bucket but not the sum (and nothing at all for the global ``slide_steps == 0``
histogram, whose AUC is then 0 here). Here the kernel returns updated copies of the histograms
rather than writing them in place (``StatPosOut`` is ``StatPos`` in every program Paddle builds).
"""
import numpy as np

from refimpl.core.errors import InvalidArgument, PreconditionNotMet

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


# ---- auc ---------------------------------------------------------------------------------
def check_auc_shapes(pred_shape, label_shape, num_thresholds: int, slide_steps: int, runtime: bool) -> None:
    ps, ls = list(pred_shape), list(label_shape)
    if len(ps) < 2:
        raise InvalidArgument(f"auc: Predict must have at least 2 dims ([N, 1] or [N, 2]), got shape {ps}")
    if 0 in ps or 0 in ls:
        raise InvalidArgument(f"auc: Predict {ps} and Label {ls} must not have a 0 dim")
    if num_thresholds + 1 < 1:
        raise InvalidArgument(f"auc: num_thresholds must be at least 0, got {num_thresholds}")
    if slide_steps < 0:
        raise InvalidArgument(f"auc: slide_steps must be a natural number, got {slide_steps}")
    if runtime and ps[1] > 2:
        raise InvalidArgument(f"auc: only binary classification is supported: Predict's dim 1 must be 1 or 2, "
                              f"got shape {ps}")
    if runtime and ps[0] != ls[0]:
        raise InvalidArgument(f"auc: Predict {ps} and Label {ls} must have the same number of rows")


def stat_size(num_thresholds: int, slide_steps: int) -> int:
    """How many int64 counts a histogram input of the op must hold."""
    return (1 + slide_steps) * (num_thresholds + 1) + (1 if slide_steps > 0 else 0)


def _auc_infer(ins, attrs):
    (ps, _), (ls, _) = first(ins, "Predict"), first(ins, "Label")
    n, s = attrs["num_thresholds"], attrs["slide_steps"]
    check_auc_shapes(ps, ls, n, s, runtime=False)
    stat = ((1 + s) * (n + 1) + 1,) if s else (1, n + 1)
    return {"AUC": ((), "int64"), "StatPosOut": (stat, "int64"), "StatNegOut": (stat, "int64")}


def check_auc_stats(stat, num_thresholds: int, slide_steps: int, what: str) -> None:
    need = stat_size(num_thresholds, slide_steps)
    if stat.size < need:
        raise InvalidArgument(f"auc: {what} holds {stat.size} counts, num_thresholds={num_thresholds} and "
                              f"slide_steps={slide_steps} need {need}")


def positive_prob(Predict) -> np.ndarray:
    """Each row's last column, as Paddle's kernel reads it; PreconditionNotMet outside [0, 1]."""
    p = Predict.reshape(Predict.shape[0], -1)[:, -1]
    if (p > 1).any() or (p < 0).any() or np.isnan(p).any():
        bad = p[(p > 1) | (p < 0) | np.isnan(p)][0]
        raise PreconditionNotMet(f"auc: the predict data must be within [0, 1], got {bad}")
    return p


def roc_area(pos, neg) -> np.float64:
    """calcAuc: trapezoids from the top bucket down, added in that order in float64."""
    tot_pos = np.cumsum(pos[::-1]).astype(np.float64)
    tot_neg = np.cumsum(neg[::-1]).astype(np.float64)
    prev_pos = np.concatenate([[0.0], tot_pos[:-1]])
    prev_neg = np.concatenate([[0.0], tot_neg[:-1]])
    area = np.cumsum(np.abs(tot_neg - prev_neg) * (tot_pos + prev_pos) / 2.0)[-1]
    if tot_pos[-1] > 0.0 and tot_neg[-1] > 0.0:
        area = area / tot_pos[-1] / tot_neg[-1]
    return np.float64(area)


@register_op("auc", ["Predict", "Label", "StatPos", "StatNeg", "InsTagWeight?"],
             ["AUC", "StatPosOut", "StatNegOut"],
             {"curve": "ROC", "num_thresholds": 8191, "slide_steps": 1}, infer_shape=_auc_infer)
def auc(Predict, Label, StatPos, StatNeg, InsTagWeight, *, num_thresholds, slide_steps):
    check_auc_shapes(Predict.shape, Label.shape, num_thresholds, slide_steps, runtime=True)
    check_label_dtype(Label.dtype)
    check_auc_stats(StatPos, num_thresholds, slide_steps, "StatPos")
    check_auc_stats(StatNeg, num_thresholds, slide_steps, "StatNeg")
    pos, neg = np.array(StatPos, np.int64), np.array(StatNeg, np.int64)
    fp, fn = pos.reshape(-1), neg.reshape(-1)
    fake = InsTagWeight is not None and InsTagWeight.size > 0 and InsTagWeight.reshape(-1)[0] == 0
    if slide_steps == 0 and fake:
        return np.array(0.0), pos, neg
    p = positive_prob(Predict)
    bins = (p * p.dtype.type(num_thresholds)).astype(np.uint32)
    label = Label.reshape(-1)[:p.shape[0]]
    width = num_thresholds + 1
    batch_pos = np.bincount(bins[label > 0], minlength=width)[:width]
    batch_neg = np.bincount(bins[label == 0], minlength=width)[:width]
    total = slide_steps * width  # where the summed histogram starts
    if slide_steps == 0:
        fp[:width] += batch_pos
        fn[:width] += batch_neg
    else:
        cur = int(fp[(slide_steps + 1) * width]) % slide_steps * width
        for f, batch in ((fp, batch_pos), (fn, batch_neg)):
            f[total:total + width] -= f[cur:cur + width]
            f[cur:cur + width] = batch
            if not fake:
                f[total:total + width] += batch
    area = roc_area(fp[total:total + width], fn[total:total + width])
    if slide_steps:
        fp[(slide_steps + 1) * width] += 1
        fn[(slide_steps + 1) * width] += 1
    return np.array(area), pos, neg
