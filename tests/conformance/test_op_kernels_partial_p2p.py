"""Cuda kernels of partial_send / partial_recv / partial_allgather (``partial_p2p_ops.py``) against
their NumPy kernels, on in-process ranks.

The ops communicate, so there are no one-process cases: on two ranks, rank 0 calls the NumPy
``partial_send`` and then the cuda one on the same tensor, and rank 1 runs ``check_case`` on
``partial_recv`` (its NumPy kernel receives the slice the NumPy send sent, its cuda kernel the one
the cuda send sent), which compares the two outputs bit for bit: a cuda send of other bits, or a
cuda recv writing another slice, fails. ``partial_allgather`` runs ``check_case`` on 2 and 4 ranks,
each rank holding its own tensor. The errors a kernel raises before it communicates must be the
same on both backends (type and message).
"""
import numpy as np
import pytest

import cuda_backend
from kernel_check import check_case
from refimpl.core import comm_context
from refimpl.core.bfloat16 import BFLOAT16
from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import run_in_process
from refimpl.ops.registry import get_op_def

R = np.random.default_rng(57)


def _value(shape, dtype):
    a = R.standard_normal(shape) * 8
    return a.astype(np.float32).astype(BFLOAT16) if dtype == BFLOAT16 else a.astype(dtype)


# (X's shape, dtype, num, id): the slice partial_send sends and partial_recv receives
P2P = [
    ((4, 6), np.float32, 2, 1),
    ((3, 4), np.float64, 3, 0),
    ((12,), np.int64, 4, 3),
    ((2, 3, 2), np.int32, 1, 0),
    ((2, 4), np.float16, 2, 0),
    ((2, 4), BFLOAT16, 4, 2),
    ((), np.float32, 1, 0),       # a 0-d tensor is one element
    ((1, 130), np.float32, 2, 1),  # more elements than the simulator's threads: grid-stride
]


def _kernel(op_type, backend):
    cuda_backend.require()
    return get_op_def(op_type).kernel(backend)[0]


def _name(shape, dtype, *rest):
    return "-".join([np.dtype(dtype).name, "x".join(map(str, shape)) or "0d"] + [str(v) for v in rest])


@pytest.mark.parametrize("shape,dtype,num,id", P2P, ids=[_name(*c) for c in P2P])
def test_send_then_recv_match_numpy(shape, dtype, num, id):
    x = _value(shape, dtype)
    attrs = {"ring_id": 0, "num": num, "id": id}
    out_shape = list(shape) or [1]

    def body():
        if comm_context.current().rank == 0:
            assert _kernel("partial_send", "numpy")(x.copy(), peer=1, **attrs) == ()
            assert _kernel("partial_send", "cuda")(cuda_backend.to_device(x), peer=1, **attrs) == ()
        else:
            check_case("partial_recv", [], dict(attrs, peer=0, dtype=to_vartype(np.dtype(dtype)),
                                                out_shape=out_shape))
    run_in_process(2, body, timeout=120)


# (each rank's X shape, dtype) for partial_allgather
GATHER = [((4, 6), np.float32), ((2, 3, 4), np.float64), ((8,), np.int64), ((4, 2), np.int32),
          ((4, 3), np.float16), ((0, 3), np.float32), ((4, 70), np.float32)]


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("shape,dtype", GATHER, ids=[_name(*c) for c in GATHER])
def test_partial_allgather_matches_numpy(n, shape, dtype):
    xs = [_value(shape, dtype) for _ in range(n)]  # each rank its own tensor

    def body():
        r = comm_context.current().rank
        check_case("partial_allgather", [xs[r]], {"nranks": n, "rank": r})
    run_in_process(n, body, timeout=120)


# errors raised before any communication, on this process's one-rank ring 0
ERRORS = [
    ("partial_send", [np.ones((5, 5), np.float32)], {"num": 2, "peer": 0}),  # numel 25, num 2
    ("partial_send", [np.ones((4,), np.float32)], {"num": 2, "id": 2}),
    ("partial_recv", [], {"out_shape": [], "num": 1}),
    ("partial_recv", [], {"out_shape": [3, 3], "num": 2}),
    ("partial_allgather", [np.ones((4,), np.float32)], {"nranks": 2, "rank": 0}),  # the ring has 1 rank
    ("partial_allgather", [np.ones((4,), np.float32)], {"nranks": 1, "rank": 0}),
]


@pytest.mark.parametrize("op_type,inputs,attrs", ERRORS, ids=[f"{c[0]}-{i}" for i, c in enumerate(ERRORS)])
def test_errors_are_the_same_on_both_backends(op_type, inputs, attrs):
    cuda_backend.require()
    od = get_op_def(op_type)
    msgs = []
    for backend in ("numpy", "cuda"):
        fn, names, _ = od.kernel(backend)
        args = [cuda_backend.to_device(a) if backend == "cuda" else a for a in inputs]
        kw = {a: attrs.get(a, od.default(a)) for a in names}
        with pytest.raises(InvalidArgument) as info:
            fn(*args, **kw)
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1] and msgs[0].startswith(f"(InvalidArgument) {op_type}: ")
