"""Cuda kernels of the tensor-parallel ops (``model_parallel_ops.py``) against their NumPy kernels.

``CASES`` run alone (this process's rank context: ring 0 of one rank), which is enough for the ops
that do not communicate (c_split, c_embedding(_grad), c_softmax_with_cross_entropy_grad) and gives
the one-rank forms of the others. ``test_two_ranks`` runs the communicating kernels (c_concat,
mp_allreduce_sum, c_softmax_with_cross_entropy) on two in-process ranks, each rank calling the
NumPy kernel and then the cuda kernel on its own shard, and compares them as ``check_case`` does.
"""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params
from refimpl.distributed.communication import run_in_process

V = Inputs(43)
f32, f64 = V.f32, V.f64


def ids(*shape, hi=10, dt=np.int64):
    return V.r.integers(0, hi, shape).astype(dt)


def labels(rows, classes, ignore=None, dt=np.int64):
    lab = V.r.integers(0, classes, (rows, 1)).astype(dt)
    if ignore is not None:
        lab[::3] = ignore
    return lab


SHARD = {"start_index": 5, "vocab_size": 10}
ONE_RANK = {"rank": 0, "nranks": 1}

CASES = [
    ("c_identity", [f32(3, 4)], {}),
    ("c_identity", [f64(2, 3, 2)], {"ring_id": 0}),
    ("c_split", [f32(3, 4)], {"rank": 0, "nranks": 2}),
    ("c_split", [f32(2, 3, 6)], {"rank": 2, "nranks": 3}),
    ("c_split", [f64(8)], {"rank": 3, "nranks": 4}),
    ("mp_allreduce_sum", [f32(3, 5)], {}),
    ("c_embedding", [f32(5, 3), ids(4, 6)], SHARD),  # ids below the shard give zero rows
    ("c_embedding", [f64(4, 2), ids(7, dt=np.int32)], {"start_index": 0, "vocab_size": -1}),
    ("c_embedding", [f32(3, 4), ids(2, 2, 2, hi=6)], {"start_index": 3, "vocab_size": 6}),
    ("c_embedding_grad", [f32(5, 3), ids(4, 6), f32(4, 6, 3)], SHARD),  # repeated ids add in order
    ("c_embedding_grad", [f64(4, 2), ids(9, hi=4, dt=np.int32), f64(9, 2)], {}),
    ("c_softmax_with_cross_entropy", [f32(4, 7), labels(4, 7)], ONE_RANK),
    ("c_softmax_with_cross_entropy", [f32(2, 3, 5) * 4, labels(6, 5).reshape(2, 3, 1)], ONE_RANK),
    ("c_softmax_with_cross_entropy", [f32(3, 200), labels(3, 200)], ONE_RANK),  # pairwise row sums
    ("c_softmax_with_cross_entropy", [f64(6, 9), labels(6, 9, ignore=-100)], ONE_RANK),
    ("c_softmax_with_cross_entropy", [f32(5, 4), labels(5, 4, ignore=2, dt=np.int32)],
     dict(ONE_RANK, ignore_index=2)),
    ("c_softmax_with_cross_entropy_grad", [f32(4, 7), labels(4, 14), f32(4, 1)], {"rank": 1, "nranks": 2}),
    ("c_softmax_with_cross_entropy_grad", [f64(6, 3), labels(6, 3, ignore=-100), f64(6, 1)], ONE_RANK),
    ("c_softmax_with_cross_entropy_grad", [f32(2, 2, 5), labels(4, 20, ignore=7).reshape(2, 2, 1), f32(2, 2, 1)],
     {"rank": 3, "nranks": 4, "ignore_index": 7}),
]


@pytest.mark.parametrize("op_type,inputs,attrs", params(CASES))
def test_model_parallel_kernel_matches_numpy(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)


# ---- two ranks ------------------------------------------------------------------------------------
def _rank_cases(rank):
    r = np.random.default_rng(100 + rank)  # each rank its own shard
    x, logits = r.standard_normal((3, 4)).astype(np.float32), r.standard_normal((5, 6)).astype(np.float32)
    lab = np.random.default_rng(7).integers(0, 12, (5, 1))  # the same labels on both ranks
    lab[1] = -100
    two = {"rank": rank, "nranks": 2}
    return [("c_concat", [x], two), ("c_concat", [r.standard_normal((2, 1, 3))], two),
            ("mp_allreduce_sum", [x], {}),
            ("c_softmax_with_cross_entropy", [logits, lab], two),
            ("c_softmax_with_cross_entropy", [r.standard_normal((4, 150)), lab[:4]], two)]


def test_two_ranks():
    from refimpl.core import comm_context

    def body():
        rank = comm_context.current().rank
        for op_type, inputs, attrs in _rank_cases(rank):
            check_case(op_type, inputs, attrs)
        return rank
    assert run_in_process(2, body) == [0, 1]
