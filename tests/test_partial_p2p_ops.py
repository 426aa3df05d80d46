"""partial_send / partial_recv / partial_allgather (refimpl/ops/partial_p2p_ops.py) in programs on 2, 4
and 8 in-process ranks, their registry entries against Paddle 3.3.1's protos, and their typed errors.

The exchange is the one ``paddle/incubate/optimizer/pipeline.py`` inserts between two stages when
tensor parallelism lives inside them (``_insert_sendrecv_ops_for_boundaries``): rank ``s * mp + k``
is model-parallel rank ``k`` of stage ``s``; sender k sends slice k of ``mp`` slices of the
activation over its stage-pair ring (peer 1), receiver k receives it into slice k of a full-size
var (peer 0) and ``partial_allgather`` on ring 0 (the model-parallel ring, as pipeline.py writes
it) fills in the rest, in place. Every receiver must then hold the tensor the senders fed, bit
for bit. Expected values are the fed tensors themselves, or NumPy slicing of them.

``test_the_same_on_the_cuda_simulator`` runs this file again in a process with
``NUMBA_ENABLE_CUDASIM=1 REFIMPL_BACKEND=cuda``, where the executor runs the cuda kernels.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument, NotFound
from refimpl.distributed.communication import RankFailed, context, run_in_process
from refimpl.distributed.fleet.meta_optimizers.program_rings import bind_rings, partition
from refimpl.executor import Trace
from refimpl.executor.backend import get_backend
from refimpl.framework import Program
from refimpl.ops.grad_maker import make_grad_op_descs
from refimpl.ops.registry import get_op_def
from refimpl.static import Executor, Scope, data, program_guard

from mpi_helpers import run_script

MP_RING, PP_RING = 0, 1  # pipeline.py: partial_allgather on ring 0; the stage pair on its own ring
T = 60
RNG = np.random.default_rng(31)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tensor(shape, dtype):
    a = RNG.standard_normal(shape) * 10
    return a.astype(dtype)


def _run(main, feed, fetch):
    trace = Trace()
    out = Executor().run(main, feed=feed, fetch_list=fetch, scope=Scope(), trace=trace)
    events = [(e.kind, e.var, e.nbytes, e.extra["peer"], e.extra["ring_id"]) for e in trace
              if e.kind in ("send", "recv")]
    return out, events


def _program(build):
    main = Program()
    with program_guard(main, Program()):
        build(main.global_block())
    return main


# ---- the registry against Paddle 3.3.1 ---------------------------------------------------------
# read from Paddle 3.3.1's OpProtoHolder (non-extra attrs, defaults from appending each op bare)
PADDLE_PROTOS = {
    "partial_send": (["X"], [], {"ring_id": 0, "peer": 0, "num": 1, "id": 0}),
    "partial_recv": ([], ["Out"], {"ring_id": 0, "peer": 0, "dtype": 5, "out_shape": [], "num": 1, "id": 0}),
    "partial_allgather": (["X"], ["Out"], {"nranks": None, "rank": None, "ring_id": 0}),  # no defaults
}


@pytest.mark.parametrize("op_type", sorted(PADDLE_PROTOS))
def test_slots_attrs_and_defaults_are_paddles(op_type):
    ins, outs, attrs = PADDLE_PROTOS[op_type]
    d = get_op_def(op_type)
    assert ([s.name for s in d.inputs], [s.name for s in d.outputs], d.attrs) == (ins, outs, attrs)
    assert "numpy" in d.kernels


@pytest.mark.parametrize("op_type", sorted(PADDLE_PROTOS))
def test_no_grad_op_as_in_paddle(op_type):
    """Paddle 3.3.1's core.get_grad_op_desc gives ([], {}) for each of them."""
    ins, outs, _ = PADDLE_PROTOS[op_type]
    attrs = {"nranks": 2, "rank": 0, "out_shape": [2]}
    assert make_grad_op_descs(op_type, {s: ["x"] for s in ins}, {s: ["x"] for s in outs}, attrs, set()) == ([], {})


def test_partial_allgather_is_in_place_as_paddle_declares():
    assert get_op_def("partial_allgather").inplace == {"Out": "X"}


# ---- the pipeline exchange ----------------------------------------------------------------------
def _exchange(world, mp, value):
    """Run the two-stage exchange of ``value`` on ``world`` = 2 * mp in-process ranks; per rank (fetched,
    events)."""
    return run_in_process(world, _exchange_rank, world, mp, value, timeout=T)


def _exchange_rank(world, mp, value):
    """This rank's part of the exchange (see the module docstring): (fetched or None, send/recv events)."""
    shape, dtype = list(value.shape), value.dtype
    assert bind_rings([(MP_RING, partition(world, mp, 1)), (PP_RING, partition(world, 2, mp))])
    stage, k = divmod(context.current().rank, mp)
    common = {"ring_id": PP_RING, "num": mp, "id": k}

    def build(b):
        if stage == 0:
            x = data("x", shape, str(dtype))
            b.append_op(type="partial_send", inputs={"X": [x]},
                        attrs=dict(common, peer=1, use_calc_stream=False))
            return
        x = b.create_var(name="x", dtype=str(dtype))
        b.append_op(type="partial_recv", outputs={"Out": [x]},
                    attrs=dict(common, peer=0, dtype=to_vartype(dtype), out_shape=shape, use_calc_stream=True))
        if mp > 1:
            b.append_op(type="partial_allgather", inputs={"X": [x]}, outputs={"Out": [x]},
                        attrs={"ring_id": MP_RING, "nranks": mp, "rank": k, "use_calc_stream": True})
    main = _program(build)
    if stage == 0:
        return None, _run(main, {"x": value}, [])[1]
    assert tuple(main.global_block().var("x").shape) == tuple(shape)  # infer-shape from out_shape
    (got,), events = _run(main, {}, ["x"])
    return got, events


@pytest.mark.parametrize("mp,shape,dtype", [
    (1, (3, 4), np.float32),   # 2 ranks: one slice, no allgather
    (2, (4, 6), np.float32),   # 4 ranks: 2 stages x mp 2, pipeline.py's layout
    (2, (2, 3, 2), np.int64),
    (4, (2, 8), np.float64),   # 8 ranks: 2 stages x mp 4
])
def test_two_stages_exchange_the_whole_tensor(mp, shape, dtype):
    value = _tensor(shape, dtype)
    run = _exchange(2 * mp, mp, value)
    part = value.nbytes // mp
    for rank, (got, events) in enumerate(run):
        if rank < mp:
            assert got is None and events == [("send", "x", part, 1, PP_RING)]
        else:
            assert got.dtype == value.dtype and got.tobytes() == value.tobytes(), f"rank {rank}"
            assert events == [("recv", "x", part, 0, PP_RING)]
    assert len(run) == 2 * mp


def _mpi_value():
    """The tensor of the mpiexec run: every process makes the same one from a fixed seed."""
    return (np.random.default_rng(5).standard_normal((4, 6)) * 10).astype(np.float32)


def test_two_stages_exchange_under_mpiexec(tmp_path):
    """The same exchange as four MPI processes (2 stages x mp 2), each saving what it got."""
    run_script(__file__, ["mpi", tmp_path], n=4, timeout=240)
    value = _mpi_value()
    for rank in range(4):
        got = np.load(tmp_path / f"rank{rank}.npz")
        assert [tuple(e) for e in got["events"].tolist()] == [
            ("send" if rank < 2 else "recv", "x", str(value.nbytes // 2), "1" if rank < 2 else "0", str(PP_RING))]
        if rank >= 2:
            assert got["x"].dtype == value.dtype and got["x"].tobytes() == value.tobytes(), f"rank {rank}"


def test_partial_recv_fills_only_its_slice():
    """One sender, three slices (num 3) into three vars: each holds its slice and zeros elsewhere."""
    value = _tensor((3, 4), np.float32)
    flat = value.reshape(-1)

    def body():
        rank = context.current().rank

        def build(b):
            if rank == 0:
                x = data("x", [3, 4], "float32")
                for i in range(3):
                    b.append_op(type="partial_send", inputs={"X": [x]}, attrs={"peer": 1, "num": 3, "id": i})
                return
            for i in range(3):
                b.append_op(type="partial_recv", outputs={"Out": [b.create_var(name=f"y{i}", dtype="float32")]},
                            attrs={"peer": 0, "num": 3, "id": i, "out_shape": [3, 4], "dtype": 5})
        main = _program(build)
        return _run(main, {"x": value} if rank == 0 else {}, [] if rank == 0 else ["y0", "y1", "y2"])
    (_, sent), (got, recvd) = run_in_process(2, body, timeout=T)
    for i, y in enumerate(got):
        want = np.zeros(12, np.float32)
        want[4 * i:4 * i + 4] = flat[4 * i:4 * i + 4]
        assert y.shape == (3, 4) and y.tobytes() == want.reshape(3, 4).tobytes()
    assert sent == [("send", "x", 16, 1, 0)] * 3
    assert recvd == [("recv", f"y{i}", 16, 0, 0) for i in range(3)]


@pytest.mark.parametrize("world,dtype", [(2, np.float32), (4, np.int32), (2, np.float16)])
def test_partial_allgather_joins_each_ranks_slice(world, dtype):
    """Rank r holds the tensor only in its slice (noise elsewhere); afterwards every rank holds it all."""
    value = _tensor((world, 3), dtype)

    def body():
        r = context.current().rank
        mine = _tensor((world, 3), dtype)
        mine[r] = value[r]  # slice r of world slices of the flattened (world, 3) tensor is row r
        main = _program(lambda b: b.append_op(
            type="partial_allgather", inputs={"X": [data("x", [world, 3], str(np.dtype(dtype)))]},
            outputs={"Out": ["x"]}, attrs={"nranks": world, "rank": r}))
        return _run(main, {"x": mine}, ["x"])[0][0]
    for got in run_in_process(world, body, timeout=T):
        assert got.dtype == value.dtype and got.tobytes() == value.tobytes()


def test_runs_on_the_backend_the_environment_names():
    """This file runs once per backend (see the simulator test below): make sure which one ran."""
    assert get_backend() == (os.environ.get("REFIMPL_BACKEND") or "numpy")


# ---- errors ------------------------------------------------------------------------------------
def _append(op_type, attrs, shape=(4, 6)):
    def build(b):
        if op_type == "partial_recv":
            b.append_op(type=op_type, outputs={"Out": [b.create_var(name="y", dtype="float32")]}, attrs=attrs)
        else:
            x = data("x", list(shape), "float32")
            b.append_op(type=op_type, inputs={"X": [x]}, outputs={"Out": [x]} if op_type != "partial_send" else {},
                        attrs=attrs)
    return _program(build)


# each message as Paddle 3.3.1's InferShape says it (same checks, refimpl's wording naming the op)
@pytest.mark.parametrize("op_type,attrs,match", [
    ("partial_send", {"num": 2, "id": 2}, r"partial_send: attr id \(2\) must be >= 0 and < num \(2\)"),
    ("partial_send", {"num": 0}, r"partial_send: attr num \(0\) must be >= 1"),
    ("partial_send", {"peer": -1}, r"partial_send: attr peer \(-1\) must be non-negative"),
    ("partial_send", {"ring_id": -1}, r"partial_send: attr ring_id \(-1\)"),
    ("partial_recv", {}, r"partial_recv: attr out_shape must be set"),
    ("partial_recv", {"out_shape": [-1, 6], "num": 2}, r"partial_recv: .*dim 0 is -1"),
    ("partial_recv", {"out_shape": [5, 5], "num": 2},
     r"partial_recv: the output numel \(25\) must be divisible by num \(2\)"),
    ("partial_recv", {"out_shape": [4, 6], "num": 2, "id": -1}, r"partial_recv: attr id \(-1\)"),
    ("partial_allgather", {}, r"partial_allgather: attr nranks is required"),
    ("partial_allgather", {"nranks": 2}, r"partial_allgather: attr rank is required"),
    ("partial_allgather", {"nranks": 1, "rank": 0}, r"partial_allgather: attr nranks \(1\) must be >= 2"),
    ("partial_allgather", {"nranks": 2, "rank": 2}, r"partial_allgather: attr rank \(2\) must be >= 0 and < nranks"),
])
def test_bad_attrs_fail_at_build_time_as_in_paddle(op_type, attrs, match):
    with pytest.raises(InvalidArgument, match=match):
        _append(op_type, attrs)


def _fails_on_ranks(n, body):
    with pytest.raises(RankFailed) as info:
        run_in_process(n, body, timeout=T)
    return info.value.error


def test_numel_not_divisible_by_num():
    """partial_send's infer-shape does not know X's numel (as in Paddle): its kernel checks it."""
    def body():
        main = _append("partial_send", {"peer": 1, "num": 2}, shape=(5, 5))
        if context.current().rank == 0:
            Executor().run(main, feed={"x": np.ones((5, 5), np.float32)}, scope=Scope())
    err = _fails_on_ranks(2, body)
    assert isinstance(err, InvalidArgument)
    assert "partial_send: the input numel (25) must be divisible by num (2)" in str(err)


@pytest.mark.parametrize("attrs,match", [
    ({"nranks": 4, "rank": 0}, "partial_allgather: attr nranks=4 but ring_id 0 has 2 ranks"),
    ({"nranks": 2, "rank": "other"}, "partial_allgather: attr rank="),
    ({"nranks": 2, "rank": 0, "shape": (3, 3)},
     r"partial_allgather: the input numel \(9\) must be divisible by nranks \(2\)"),
])
def test_partial_allgather_checks_the_ring(attrs, match):
    attrs = dict(attrs)
    shape = attrs.pop("shape", (4, 6))

    def body():
        r = context.current().rank
        a = dict(attrs, rank=1 - r if attrs["rank"] == "other" else attrs["rank"])
        main = _append("partial_allgather", a, shape=shape)
        Executor().run(main, feed={"x": np.ones(shape, np.float32)}, fetch_list=["x"], scope=Scope())
    err = _fails_on_ranks(2, body)
    assert isinstance(err, InvalidArgument)
    assert re.search(match, str(err)), str(err)


def test_peer_outside_the_ring():
    def body():
        main = _append("partial_send", {"peer": 2})
        Executor().run(main, feed={"x": np.ones((4, 6), np.float32)}, scope=Scope())
    err = _fails_on_ranks(2, body)
    assert isinstance(err, InvalidArgument) and "partial_send: attr peer (2) must be less than the 2 ranks" in str(err)


def test_sender_and_receiver_disagreeing_on_num():
    """A slice of 12 elements where the receiver expects 8: an error naming partial_recv (NCCL would hang)."""
    def body():
        if context.current().rank == 0:
            main = _append("partial_send", {"peer": 1, "num": 2})
            Executor().run(main, feed={"x": np.ones((4, 6), np.float32)}, scope=Scope())
        else:
            main = _append("partial_recv", {"peer": 0, "num": 3, "out_shape": [4, 6]})
            Executor().run(main, fetch_list=["y"], scope=Scope())
    err = _fails_on_ranks(2, body)
    assert isinstance(err, InvalidArgument) and "partial_recv: rank 1: recv from peer 0" in str(err)
    assert "expected shape [8] but the peer sent [12]" in str(err)


def test_a_ring_this_rank_lacks():
    def body():
        main = _append("partial_send", {"peer": 1, "ring_id": 7})
        Executor().run(main, feed={"x": np.ones((4, 6), np.float32)}, scope=Scope())
    err = _fails_on_ranks(2, body)
    assert isinstance(err, NotFound) and "partial_send: " in str(err)


# ---- the cuda kernels ---------------------------------------------------------------------------
def test_the_same_on_the_cuda_simulator():
    """Every other test of this file, in a process whose executor runs the cuda kernels (simulated)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", REFIMPL_BACKEND="cuda")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", __file__,
                        "-k", "not cuda_simulator"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout


if __name__ == "__main__" and sys.argv[1:2] == ["mpi"]:  # one rank of test_two_stages_exchange_under_mpiexec
    import refimpl.distributed as dist
    dist.init_parallel_env()
    got, events = _exchange_rank(4, 2, _mpi_value())
    saved = {"events": np.array(events, dtype=str)}
    if got is not None:
        saved["x"] = got
    np.savez(os.path.join(sys.argv[2], f"rank{context.current().rank}.npz"), **saved)
