"""Communicator interface on in-process ranks, the paddle.distributed API, and collective ops.

Every multi-rank call goes through ``run_in_process`` with a short timeout,
so no test can hang.
"""
import time

import numpy as np
import pytest

import refimpl as paddle
import refimpl.distributed as dist
from refimpl.core.errors import AlreadyExists, ExecutionTimeout, InvalidArgument, NotFound
from refimpl.distributed.communication import RankFailed, ReduceOp, context, run_in_process, set_comm_trace
from refimpl.executor import Trace
from refimpl.framework import Program, unique_name
from refimpl.ops import get_op_def

T = 10.0  # seconds: the timeout of every run here
DTYPES = ["float32", "float64", "int32", "int64", "float16"]
NUMPY_OP = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply, "avg": np.add}


def comm():
    return context.current().comm(0)


def data(rank, dtype, shape=(3, 4)):
    rng = np.random.default_rng(100 + rank)
    return (rng.standard_normal(shape) * 4).astype(dtype)


def expected_reduce(n, dtype, op, shape=(3, 4)):
    acc = data(0, dtype, shape).copy()
    for r in range(1, n):
        NUMPY_OP[op](acc, data(r, dtype, shape), out=acc)
    if op == "avg":
        acc = acc / np.asarray(n, acc.dtype) if acc.dtype.kind == "f" else (acc / n).astype(acc.dtype)
    return acc.astype(dtype)


# ---- the communicator interface ---------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce_every_op_is_rank_ordered_and_identical(n, dtype):
    def fn():
        return {op: comm().all_reduce(data(dist.get_rank(), dtype), op) for op in NUMPY_OP}
    results = run_in_process(n, fn, timeout=T)
    for op in NUMPY_OP:
        want = expected_reduce(n, dtype, op)
        for r in range(n):
            assert results[r][op].dtype == np.dtype(dtype)
            np.testing.assert_array_equal(results[r][op], want)  # bit-identical on every rank


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_broadcast_reduce_gather_scatter(n, dtype):
    def fn():
        c, r = comm(), dist.get_rank()
        x = data(r, dtype, (2 * n, 3))
        return {"bcast": c.broadcast(x, root=n - 1), "reduce": c.reduce(x, root=0),
                "gather": c.all_gather(x), "scalar": c.all_gather(np.array(r)),
                "scatter": c.reduce_scatter(x), "x": x}
    res = run_in_process(n, fn, timeout=T)
    total = expected_reduce(n, dtype, "sum", (2 * n, 3))
    for r in range(n):
        np.testing.assert_array_equal(res[r]["bcast"], data(n - 1, dtype, (2 * n, 3)))
        np.testing.assert_array_equal(res[r]["reduce"], total if r == 0 else res[r]["x"])
        np.testing.assert_array_equal(res[r]["gather"], np.concatenate([data(k, dtype, (2 * n, 3)) for k in range(n)]))
        np.testing.assert_array_equal(res[r]["scalar"], np.arange(n))
        np.testing.assert_array_equal(res[r]["scatter"], total[2 * r:2 * r + 2])


def test_float_sums_are_deterministic_across_runs_and_ranks():
    def fn():
        r = dist.get_rank()
        x = (np.random.default_rng(r).standard_normal(1000) * 10.0 ** r).astype("float32")
        return comm().all_reduce(x)
    a, b = run_in_process(4, fn, timeout=T), run_in_process(4, fn, timeout=T)
    for r in range(4):
        assert a[r].tobytes() == a[0].tobytes() == b[r].tobytes()


def test_results_are_private_to_each_rank_and_out_is_filled():
    def fn():
        x = np.ones(4, "float32")
        y = comm().all_reduce(x, out=x)
        assert y is x
        x += dist.get_rank()  # must not leak into another rank's result
        comm().barrier()
        return x
    res = run_in_process(3, fn, timeout=T)
    for r in range(3):
        np.testing.assert_array_equal(res[r], np.full(4, 3.0 + r))


def test_send_recv_pairs_in_order_and_checks_expected_shape():
    def fn():
        c, r = comm(), dist.get_rank()
        nxt, prv = (r + 1) % 4, (r - 1) % 4
        for k in range(3):
            c.send(np.full(2, 10 * r + k, "int64"), nxt)
        got = [c.recv(prv, shape=[2], dtype="int64") for _ in range(3)]
        return [int(g[0]) for g in got]
    res = run_in_process(4, fn, timeout=T)
    for r in range(4):
        assert res[r] == [10 * ((r - 1) % 4) + k for k in range(3)]

    def mismatch():
        c = comm()
        if dist.get_rank() == 0:
            c.send(np.zeros((2, 3), "float32"), 1)
        else:
            c.recv(0, shape=[3, 2], dtype="float32")
    with pytest.raises(RankFailed) as info:
        run_in_process(2, mismatch, timeout=T)
    assert info.value.rank == 1 and isinstance(info.value.error, InvalidArgument)
    assert "rank 1: recv from peer 0 on ring 0" in str(info.value) and "[3, 2]" in str(info.value)


# ---- mismatches, failures, timeouts --------------------------------------------------
@pytest.mark.parametrize("case", ["shape", "dtype", "call"])
def test_mismatch_across_ranks_is_a_typed_error_naming_the_rank(case):
    def fn():
        r = dist.get_rank()
        x = np.zeros(3 if case != "shape" or r != 2 else 4, "float64" if case == "dtype" and r == 2 else "float32")
        try:
            if case == "call" and r == 2:
                comm().broadcast(x, 0)
            else:
                comm().all_reduce(x)
        except InvalidArgument as exc:
            return str(exc)
        return "no error"
    msgs = run_in_process(4, fn, timeout=T)
    for m in msgs:
        assert "rank 2" in m, m
    assert {"shape": "[4] float32", "dtype": "float64", "call": "broadcast(root=0)"}[case] in msgs[0]


def test_failing_rank_stops_the_others_quickly_with_its_name_and_error():
    def fn():
        c, r = comm(), dist.get_rank()
        if r == 3:
            time.sleep(0.1)
            raise ZeroDivisionError("bad batch")
        if r == 0:
            c.recv(1)  # never sent
        c.all_reduce(np.ones(2))
    t0 = time.monotonic()
    with pytest.raises(RankFailed, match=r"rank 3 failed: ZeroDivisionError: bad batch") as info:
        run_in_process(4, fn, timeout=20.0)
    assert time.monotonic() - t0 < 5.0
    assert info.value.rank == 3 and isinstance(info.value.error, ZeroDivisionError)
    others = info.value.errors
    assert set(others) == {0, 1, 2, 3}
    for r in (0, 1, 2):
        assert isinstance(others[r], RankFailed) and "because rank 3 failed" in str(others[r])


def test_receive_timeout_is_configurable_and_names_the_missing_peer():
    def fn():
        if dist.get_rank() == 0:
            comm().recv(1)
        else:
            time.sleep(5.0)  # never communicates; the launcher must not wait for it for ever
    t0 = time.monotonic()
    with pytest.raises(RankFailed) as info:
        run_in_process(2, fn, timeout=0.5)
    assert time.monotonic() - t0 < 2.5
    err = info.value.error
    assert isinstance(err, ExecutionTimeout) and "recv from peer 1" in str(err) and "0.5 s" in str(err)
    assert "rank(s) [1] did not stop" in str(info.value)


def test_collective_timeout_names_ranks_that_never_arrived():
    def fn():
        if dist.get_rank() != 1:
            comm().all_reduce(np.ones(1))
    with pytest.raises(RankFailed) as info:
        run_in_process(3, fn, timeout=0.5)
    assert isinstance(info.value.error, ExecutionTimeout)
    assert "rank(s) [1] never arrived" in str(info.value.error)


# ---- the paddle.distributed API -------------------------------------------------------
def test_paddle_api_groups_and_eager_collectives():
    def fn():
        world = dist.init_parallel_env()
        r = dist.get_rank()
        g = dist.new_group([1, 3])
        g2 = dist.new_group([0, 1])
        x = np.full(2, float(r), "float32")
        if g.is_member():
            dist.all_reduce(x, op=dist.ReduceOp.MAX, group=g)
            dist.broadcast(x, src=3, group=g)
        t = paddle.core.DenseTensor(np.array([r], "int64"))
        dist.all_reduce(t)
        parts = []
        dist.all_gather(parts, np.array([r, r]))
        dist.barrier()
        return world.nranks, g.id, g2.id, g.rank, dist.get_rank(g), x.tolist(), int(np.array(t)[0]), len(parts)
    res = run_in_process(4, fn, timeout=T)
    for r, (nranks, gid, gid2, grank, grank2, x, t, nparts) in enumerate(res):
        assert (nranks, gid, gid2, t, nparts) == (4, 10, 11, 6, 4)
        assert grank == grank2 == {1: 0, 3: 1}.get(r, -1)
        assert x == ([3.0, 3.0] if r in (1, 3) else [float(r)] * 2)


def test_group_errors():
    def fn():
        with pytest.raises(NotFound, match="ring_id 99"):
            context.current().comm(99)
        g = dist.new_group([0])
        if dist.get_rank() == 1:
            with pytest.raises(NotFound, match="not a member of ring_id 10"):
                context.current().comm(g.id)
        with pytest.raises(AlreadyExists):
            context.current().add_group(10, [0, 1])
        with pytest.raises(InvalidArgument, match="not another rank"):
            comm().send(np.ones(1), dist.get_rank())
        return True
    assert run_in_process(2, fn, timeout=T) == [True, True]


def test_single_rank_default_context():
    assert dist.get_rank() == 0 and dist.get_world_size() == 1
    x = np.arange(3.0)
    dist.all_reduce(x)
    np.testing.assert_array_equal(x, np.arange(3.0))


# ---- collective ops in programs ------------------------------------------------------------
def _program(body):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 4], "float32")
        outs = body(main.global_block(), x)
    return main, outs


def _run(main, outs, feed, trace=None):
    exe = paddle.static.Executor(paddle.CPUPlace())
    return exe.run(main, feed=feed, fetch_list=outs, scope=paddle.static.Scope(), trace=trace)


def _var(block, name, shape, dtype="float32"):
    return block.create_var(name=name, shape=shape, dtype=dtype)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_collective_ops_run_in_programs_on_every_rank(n):
    def body(b, x):
        outs = []
        for op in ["sum", "max", "min", "prod", "avg"]:
            y = _var(b, f"y_{op}", [-1, 4])
            b.append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [y]}, attrs={"scale": 1.0})
            b.append_op(type=f"c_allreduce_{op}", inputs={"X": [y]}, outputs={"Out": [y]}, attrs={"ring_id": 0})
            outs.append(y)
        specs = [("c_broadcast", {"root": n - 1}, [2, 4]), ("c_allgather", {"nranks": n}, [2 * n, 4]),
                 ("c_reducescatter", {"nranks": n}, [2 // n if n <= 2 else 1, 4]), ("c_reduce_sum", {"root_id": 0}, [2, 4]),
                 ("c_sync_calc_stream", {}, [2, 4]), ("barrier", {}, [2, 4])]
        for t, attrs, shape in specs:
            if t == "c_reducescatter" and n == 4:
                continue
            o = _var(b, f"o_{t}", [-1, 4])
            b.append_op(type=t, inputs={"X": [x]}, outputs={"Out": [o]}, attrs=attrs)
            outs.append(o)
        o = _var(b, "o_all_reduce", [-1, 4])
        b.append_op(type="all_reduce", inputs={"x": [x]}, outputs={"out": [o]}, attrs={"reduce_type": ReduceOp.SUM})
        return outs + [o]

    def fn():
        main, outs = _program(body)
        r = dist.get_rank()
        return _run(main, outs, {"x": data(r, "float32", (2, 4))})
    res = run_in_process(n, fn, timeout=T)
    xs = [data(r, "float32", (2, 4)) for r in range(n)]
    for r in range(n):
        got = iter(res[r])
        for op in ["sum", "max", "min", "prod", "avg"]:
            np.testing.assert_array_equal(next(got), expected_reduce(n, "float32", op, (2, 4)))
        np.testing.assert_array_equal(next(got), xs[n - 1])
        np.testing.assert_array_equal(next(got), np.concatenate(xs))
        if n != 4:
            np.testing.assert_array_equal(next(got), np.split(expected_reduce(n, "float32", "sum", (2, 4)), n)[r])
        np.testing.assert_array_equal(next(got), expected_reduce(n, "float32", "sum", (2, 4)) if r == 0 else xs[r])
        np.testing.assert_array_equal(next(got), xs[r])
        np.testing.assert_array_equal(next(got), xs[r])
        np.testing.assert_array_equal(next(got), expected_reduce(n, "float32", "sum", (2, 4)))


def test_send_recv_ops_pair_and_are_traced():
    def body(b, x):
        y = _var(b, "y", [2, 4])
        b.append_op(type="send_v2", inputs={"X": [x]}, attrs={"peer": 1, "ring_id": 0})
        b.append_op(type="recv_v2", outputs={"Out": [y]},
                    attrs={"peer": 1, "ring_id": 0, "out_shape": [2, 4], "dtype": 5})
        return [y]

    def fn():
        main, outs = _program(body)
        r = dist.get_rank()
        if r == 1:  # rank 1's program mirrors rank 0's with peer 0
            for op in main.global_block().ops:
                op._attrs["peer"] = 0
        trace = Trace()
        y = _run(main, outs, {"x": data(r, "float32", (2, 4))}, trace)[0]
        return y, [(e.kind, e.var, e.nbytes, e.rank, e.extra["peer"]) for e in trace if e.kind in ("send", "recv")]
    res = run_in_process(2, fn, timeout=T)
    for r in range(2):
        np.testing.assert_array_equal(res[r][0], data(1 - r, "float32", (2, 4)))
        assert res[r][1] == [("send", "x", 32, r, 1 - r), ("recv", "y", 32, r, 1 - r)]


def test_comm_trace_records_eager_sends():
    def fn():
        t = Trace()
        set_comm_trace(t)
        if dist.get_rank() == 0:
            dist.send(np.zeros(3, "float64"), dst=1)
        else:
            dist.recv(np.empty(3, "float64"), src=0)
        set_comm_trace(None)
        return [(e.kind, e.nbytes, e.extra["peer"]) for e in t]
    assert run_in_process(2, fn, timeout=T) == [[("send", 24, 1)], [("recv", 24, 0)]]


def test_coalesce_tensor_and_in_place_fused_allreduce():
    def body(b, x):
        g1, g2 = _var(b, "g1", [-1, 4]), _var(b, "g2", [3])
        fused = _var(b, "fused", [-1])
        b.append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [g1]}, attrs={"scale": 2.0})
        b.append_op(type="fill_constant", outputs={"Out": [g2]}, attrs={"shape": [3], "value": 1.0, "dtype": 5})
        b.append_op(type="coalesce_tensor", inputs={"Input": [g1, g2]}, outputs={"Output": [g1, g2], "FusedOutput": [fused]},
                    attrs={"dtype": 5, "copy_data": True, "use_align": True, "align_size": 64})
        b.append_op(type="c_allreduce_sum", inputs={"X": [fused]}, outputs={"Out": [fused]})
        return [g1, g2, fused]

    def fn():
        main, outs = _program(body)
        return _run(main, outs, {"x": data(dist.get_rank(), "float32", (2, 4))})
    res = run_in_process(2, fn, timeout=T)
    g1, g2, fused = res[1]
    np.testing.assert_array_equal(g1, 2 * (data(0, "float32", (2, 4)) + data(1, "float32", (2, 4))))
    np.testing.assert_array_equal(g2, np.full(3, 2.0, "float32"))
    assert fused.shape == (32,) and np.all(fused[8:16] == 0)  # 64-byte chunks, zero padding


def test_coalesce_tensor_matches_paddle_layout():
    from refimpl.ops.collective_ops import coalesce_tensor
    a, b = np.arange(3, dtype="float32"), np.arange(4, dtype="float32").reshape(2, 2) + 10
    attrs = dict(get_op_def("coalesce_tensor").attrs, dtype=5, copy_data=True)
    del attrs["persist_output"]
    (oa, ob), fused = coalesce_tensor([a, b], **attrs)
    assert fused.shape == (2048,) and fused[1024:1028].tolist() == [10, 11, 12, 13]  # 4 KiB CPU alignment
    (oa, ob), fused = coalesce_tensor([a, b], **dict(attrs, use_align=False))
    assert fused.tolist() == [0, 1, 2, 10, 11, 12, 13] and ob.shape == (2, 2)
    (oa, ob), fused = coalesce_tensor([a, b], **dict(attrs, copy_data=False, set_constant=True, constant=7.0))
    assert set(oa.tolist() + ob.ravel().tolist()) == {7.0}


def test_op_protos_match_paddle():
    # slots and attr defaults recorded from paddlepaddle 3.3.1 (core.get_op_attrs_default_value)
    want = {
        "send_v2": (["X"], [], {"ring_id": 0, "peer": 0, "use_calc_stream": False, "dynamic_shape": False}),
        "recv_v2": ([], ["Out"], {"ring_id": 0, "peer": 0, "dtype": 5, "out_shape": [], "use_calc_stream": False,
                                  "dynamic_shape": False}),
        "barrier": (["X"], ["Out"], {"ring_id": 0}),
        "c_sync_calc_stream": (["X"], ["Out"], {}),
        "c_sync_comm_stream": (["X"], ["Out"], {"ring_id": 0}),
        "coalesce_tensor": (["Input"], ["Output", "FusedOutput"],
                            {"copy_data": False, "set_constant": False, "persist_output": False, "constant": 0.0,
                             "use_align": True, "align_size": -1, "user_defined_size_of_dtype": -1,
                             "concated_shapes": [], "concated_ranks": []}),
        "all_reduce": (["x"], ["out"], {"ring_id": 0, "reduce_type": 0}),
        "all_gather": (["x"], ["out"], {"ring_id": 0, "nranks": 0}),
        "reduce_scatter": (["x"], ["out"], {"ring_id": 0, "nranks": 1}),
        "broadcast": (["x"], ["out"], {"ring_id": 0, "root": 0}),
        "reduce": (["x"], ["out"], {"ring_id": 0, "root_id": 0, "reduce_type": 0}),
        "c_allreduce_sum": (["X"], ["Out"], {"ring_id": 0, "use_calc_stream": False, "use_model_parallel": False}),
        "c_broadcast": (["X"], ["Out"], {"ring_id": 0, "root": 0, "use_calc_stream": False}),
        "c_reduce_sum": (["X"], ["Out"], {"ring_id": 0, "root_id": 0, "use_calc_stream": False}),
        "c_reducescatter": (["X"], ["Out"], {"ring_id": 0, "nranks": 1, "use_calc_stream": False}),
    }
    for t, (ins, outs, attrs) in want.items():
        d = get_op_def(t)
        assert (d.input_slot_names(), d.output_slot_names()) == (ins, outs), t
        for k, v in attrs.items():
            assert d.attrs[k] == v, (t, k)
        assert set(d.attrs) >= set(attrs), t


def test_op_without_a_group_names_rank_and_ring():
    def body(b, x):
        y = _var(b, "y", [-1, 4])
        b.append_op(type="c_allreduce_sum", inputs={"X": [x]}, outputs={"Out": [y]}, attrs={"ring_id": 5})
        return [y]
    main, outs = _program(body)
    with pytest.raises(NotFound, match=r"c_allreduce_sum.*rank 0: no communicator for ring_id 5"):
        _run(main, outs, {"x": np.ones((1, 4), "float32")})
