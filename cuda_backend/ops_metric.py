"""CUDA kernels for ``refimpl/ops/metric_ops.py``: accuracy.

Mirrors Paddle's GPU ``AccuracyKernel`` (``paddle/phi/kernels/gpu/accuracy_kernel.cu``, a
block reduction there): one grid-stride pass marks the rows whose label is among their top-k
indices, one thread then counts the marks and writes Correct, Total and their float32 quotient
(an integer count, so the order of the adds does not matter). The shape and dtype checks are the
NumPy kernel's, on the host.
"""
import numpy as np

from refimpl.ops import metric_ops as cpu
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, empty, flat, launch, launch_config


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


register_kernel("accuracy", "cuda", accuracy)
