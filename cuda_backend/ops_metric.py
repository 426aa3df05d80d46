"""CUDA kernels for ``refimpl/ops/metric_ops.py``: accuracy and auc.

Mirrors Paddle's GPU ``AccuracyKernel`` (``paddle/phi/kernels/gpu/accuracy_kernel.cu``, a
block reduction there): one grid-stride pass marks the rows whose label is among their top-k
indices, one thread then counts the marks and writes Correct, Total and their float32 quotient
(an integer count, so the order of the adds does not matter). The shape and dtype checks are the
NumPy kernel's, on the host.

auc mirrors Paddle's GPU ``AucKernel`` (``paddle/phi/kernels/gpu/auc_kernel.cu``, atomic adds into
the histograms there): one pass finds each row's bucket (and flags a probability outside
[0, 1]), one pass adds each row into its bucket's counts (atomic adds), then one thread per
bucket updates the step and summed histograms,
and one thread walks the summed histogram from the top bucket down for the ROC area, in
float64 in the NumPy kernel's order. Counts are integers, so the result does not depend on the
order of the adds.
"""
import numpy as np

from refimpl.ops import metric_ops as cpu
from refimpl.ops.registry import register_kernel

from refimpl.core.errors import PreconditionNotMet

from .device import copy, cuda, dev, empty, flat, launch, launch_config, scalar_of, to_device, to_host


@cuda.jit
def _row_hits(idx, label, hits, k):
    for r in range(cuda.grid(1), hits.size, cuda.gridsize(1)):
        hit = 0
        for j in range(k):
            if idx[r * k + j] == label[r]:
                hit = 1
        hits[r] = hit


@cuda.jit
def _tally(hits, acc, correct, total):
    if cuda.grid(1) == 0:
        c = 0
        for r in range(hits.size):
            c += hits[r]
        correct[0] = c
        total[0] = hits.size
        acc[0] = np.float32(c) / np.float32(hits.size) if hits.size > 0 else np.float32(0)


def accuracy(Out, Indices, Label):
    idx, label = dev(Indices), dev(Label)
    cpu.check_accuracy_shapes(tuple(idx.shape), tuple(label.shape))
    cpu.check_label_dtype(np.dtype(label.dtype))
    rows, k = tuple(idx.shape)
    hits = empty((rows,), np.int32)
    launch(_row_hits, rows, flat(idx), flat(label), hits, k)
    acc, correct, total = empty((), np.float32), empty((), np.int32), empty((), np.int32)
    launch_config(_tally, 1, 1, hits, flat(acc), flat(correct), flat(total))
    return acc, correct, total


@cuda.jit
def _auc_bins(pred, ncols, nthr, bins, bad):
    for r in range(cuda.grid(1), bins.size, cuda.gridsize(1)):
        p = pred[r * ncols + ncols - 1]
        if not (p >= 0 and p <= 1):
            bad[0] = 1
            bins[r] = 0
        else:
            bins[r] = int(p * nthr)


@cuda.jit
def _auc_count(bins, label, counts_pos, counts_neg):
    """Each row adds one to its bucket's positive or negative count (atomically: rows share buckets)."""
    for r in range(cuda.grid(1), bins.size, cuda.gridsize(1)):
        if label[r] > 0:
            cuda.atomic.add(counts_pos, bins[r], 1)
        elif label[r] == 0:
            cuda.atomic.add(counts_neg, bins[r], 1)


@cuda.jit
def _auc_hist(counts_pos, counts_neg, pos, neg, width, slide, fake):
    """Each bucket: update the step's and the summed histograms with its counts."""
    total = slide * width
    cur = (pos[(slide + 1) * width] % slide) * width if slide > 0 else 0
    for b in range(cuda.grid(1), width, cuda.gridsize(1)):
        cp = counts_pos[b]
        cn = counts_neg[b]
        if slide == 0:
            pos[b] += cp
            neg[b] += cn
        else:
            pos[total + b] -= pos[cur + b]
            neg[total + b] -= neg[cur + b]
            pos[cur + b] = cp
            neg[cur + b] = cn
            if not fake:
                pos[total + b] += cp
                neg[total + b] += cn


@cuda.jit
def _auc_area(pos, neg, width, slide, out):
    if cuda.grid(1) == 0:
        total = slide * width
        area = 0.0
        tot_pos = 0.0
        tot_neg = 0.0
        for j in range(width - 1, -1, -1):
            prev_pos, prev_neg = tot_pos, tot_neg
            tot_pos += pos[total + j]
            tot_neg += neg[total + j]
            area += abs(tot_neg - prev_neg) * (tot_pos + prev_pos) / 2.0
        if tot_pos > 0.0 and tot_neg > 0.0:
            area = area / tot_pos / tot_neg
        out[0] = area
        if slide > 0:
            pos[(slide + 1) * width] += 1
            neg[(slide + 1) * width] += 1


def auc(Predict, Label, StatPos, StatNeg, InsTagWeight, *, num_thresholds, slide_steps):
    pred, label = dev(Predict), dev(Label)
    cpu.check_auc_shapes(tuple(pred.shape), tuple(label.shape), num_thresholds, slide_steps, runtime=True)
    cpu.check_label_dtype(np.dtype(label.dtype))
    pos, neg = copy(dev(StatPos)), copy(dev(StatNeg))
    cpu.check_auc_stats(pos, num_thresholds, slide_steps, "StatPos")
    cpu.check_auc_stats(neg, num_thresholds, slide_steps, "StatNeg")
    fake = InsTagWeight is not None and InsTagWeight.size > 0 and scalar_of(dev(InsTagWeight)) == 0
    out = to_device(np.array(0.0))
    if slide_steps == 0 and fake:
        return out, pos, neg
    rows = int(pred.shape[0])
    ncols = int(np.prod(pred.shape[1:]))
    bins, bad = empty((rows,), np.int64), to_device(np.zeros(1, np.int32))
    launch(_auc_bins, rows, flat(pred), ncols, np.dtype(pred.dtype).type(num_thresholds), bins, bad)
    if to_host(bad)[0]:
        raise PreconditionNotMet("auc: the predict data must be within [0, 1]")
    width = num_thresholds + 1
    counts_pos, counts_neg = to_device(np.zeros(width, np.int64)), to_device(np.zeros(width, np.int64))
    launch(_auc_count, rows, bins, flat(label)[:rows], counts_pos, counts_neg)
    launch(_auc_hist, width, counts_pos, counts_neg, flat(pos), flat(neg), width, slide_steps, bool(fake))
    launch_config(_auc_area, 1, 1, flat(pos), flat(neg), width, slide_steps, flat(out))
    return out, pos, neg


register_kernel("accuracy", "cuda", accuracy)
register_kernel("auc", "cuda", auc)
