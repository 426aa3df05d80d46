"""Cuda kernels of dgc, dgc_momentum and dgc_clip_by_norm (``dgc_ops.py``) against their NumPy kernels,
bit for bit (the same top-k entries are sent: see ``dgc_ops.dgc_top_k``)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params

V = Inputs(41)
f32, f64, pos = V.f32, V.f64, V.pos


def one(v, dt=np.float32):
    return np.array([v], dt)


def dgc(*shape, step=5.0, ranks=2.0):
    """U, V, Grad, Param, current_step, nranks (mid-training accumulators)."""
    return [f32(*shape) * 0.1, f32(*shape) * 0.1, f32(*shape), f32(*shape), one(step), one(ranks)]


TIES = [np.zeros(8, np.float32), np.zeros(8, np.float32), np.array([1, -1, 1, 2, -2, 1, 0.5, 2], np.float32),
        np.ones(8, np.float32), one(3.0), one(2.0)]
DGC_ATTRS = {"sparsity": [0.5, 0.75], "rampup_begin_step": 2.0, "rampup_step": 4.0}


def momentum_in(*shape, step=5.0):
    """Param, Grad, Velocity, LearningRate, MasterParam, current_step, nranks."""
    return [f32(*shape), f32(*shape), f32(*shape) * 0.1, one(0.1), None, one(step), one(2.0)]


def gathered(numel, k, parts):
    """``parts`` EncodeGrads of k entries each (indices may repeat across parts)."""
    out = []
    for _ in range(parts):
        idx = np.sort(V.r.choice(numel, k, replace=False)).astype(np.int32)
        out += [idx.view(np.float32), f32(k)]
    return np.concatenate(out)


CASES = [
    ("dgc", dgc(4, 5), DGC_ATTRS),
    ("dgc", dgc(4, 5), dict(DGC_ATTRS, use_nesterov=False, m=0.8)),
    ("dgc", dgc(30), dict(DGC_ATTRS, regular_type=2, regular_coeff=1e-3)),
    ("dgc", dgc(30), dict(DGC_ATTRS, regular_type=1, regular_coeff=1e-2)),
    ("dgc", dgc(3, 4, step=1.0), DGC_ATTRS),  # before the ramp-up: only Grad_out
    ("dgc", dgc(200, step=9.0), {"sparsity": [0.999], "rampup_begin_step": 0.0, "rampup_step": 1.0}),  # k = 0
    ("dgc", TIES, DGC_ATTRS),  # |v| ties: the lower indices go
    ("dgc", dgc(6, ranks=4.0), DGC_ATTRS),
    ("dgc_momentum", momentum_in(3, 4, step=1.0), {"rampup_begin_step": 2.0}),
    ("dgc_momentum", momentum_in(3, 4, step=1.0), {"rampup_begin_step": 2.0, "use_nesterov": True, "mu": 0.8}),
    ("dgc_momentum", momentum_in(3, 4), {"rampup_begin_step": 2.0}),
    ("dgc_momentum", momentum_in(5), {"rampup_begin_step": -1.0}),
    ("dgc_clip_by_norm", [f32(3, 4) * 3, one(5.0)], {"max_norm": 0.7, "rampup_begin_step": 2.0}),
    ("dgc_clip_by_norm", [f32(3, 4) * 3, one(1.0)], {"max_norm": 0.7, "rampup_begin_step": 2.0}),
    ("dgc_clip_by_norm", [f64(6) * 0.01, one(3.0)], {"max_norm": 1.0, "rampup_begin_step": 0.0}),
    ("dgc_sparse_reduce", [gathered(12, 4, 2), one(4.0), np.zeros((3, 4), np.float32)], {}),
    ("dgc_sparse_reduce", [gathered(20, 5, 3), one(5.0), f32(20)], {}),
    ("dgc_sparse_reduce", [np.zeros(2, np.float32), one(0.0), f32(2, 3)], {}),  # before the ramp-up
]


@pytest.mark.parametrize("op_type,inputs,attrs", params(CASES))
def test_dgc_kernel_matches_numpy(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)
