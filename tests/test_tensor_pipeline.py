"""Tensor x pipeline (x data) parallelism in static mode: stage programs holding the tensor-parallel ops.

The net is tests/test_tensor_parallel.py's "mp" net (VocabParallelEmbedding, Column/RowParallelLinear,
ParallelCrossEntropy), cut by device_guard into two pipeline stages; it trains on tp2 x pp2 (4) and
tp2 x pp2 x dp2 (8) in-process ranks with strategy.pipeline + strategy.tensor_parallel.

(a) Numbers: float64, after a few SGD / Adam steps each rank's shards equal the one-device parameters of a
    hand-written NumPy training on the whole batch (test_tensor_parallel's closed form), within 1e-6; also
    with recompute, with AMP (float32), and on four processes under mpiexec.
(b) Rings: the pipe / model / data groups equal Paddle's CommunicateTopology's (recorded from Paddle 3.3.1's
    ``CommunicateTopology(["data", "pipe", "sharding", "sep", "model"], dims).get_comm_list``), the stage
    programs hold the tensor-parallel ops on ring 0 bound to this rank's model group, and the startup
    broadcasts make the dp replicas and mp neighbours start as Paddle's meta-optimizers do.
(c) The strategy compiler: the chains Paddle 3.3.1 makes for pipeline + tensor_parallel (recorded by printing
    ``fleet._get_applied_meta_list()`` / ``fleet._final_strategy()`` after minimize, trainer 1 of 4).
(d) Bad input: degrees not multiplying to the world, layers built for another degree than the optimizer's:
    typed errors at minimize, before anything is built, the same on every rank.
"""
import sys

import numpy as np
import pytest

import refimpl
import refimpl as paddle
from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.pipeline.hybrid import HybridLayout
from refimpl.framework import Program, unique_name

import test_tensor_parallel_numbers as TPT
from mpi_helpers import run_script

LAYOUT = TPT.LAYOUT["mp"]
STAGE0 = {"embedding_0.w_0", "linear_0.w_0", "linear_0.b_0", "linear_1.w_0", "linear_1.b_0"}
TP_OPS = {"c_identity", "mp_allreduce_sum", "c_embedding", "c_softmax_with_cross_entropy"}

#: Paddle 3.3.1's CommunicateTopology(["data", "pipe", "sharding", "sep", "model"], [dp, 2, 1, 1, 2]) groups
PADDLE_GROUPS = {
    1: {"pipe": [[0, 2], [1, 3]], "model": [[0, 1], [2, 3]], "data": [[0], [1], [2], [3]]},
    2: {"pipe": [[0, 2], [1, 3], [4, 6], [5, 7]], "model": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "data": [[0, 4], [1, 5], [2, 6], [3, 7]]},
}


def _strategy(dp, m=2, schedule="1F1B", hybrid=None, tp=2, extra=()):
    s = DistributedStrategy()
    s.tensor_parallel = True
    s.tensor_parallel_configs = {"tensor_parallel_degree": tp}
    s.pipeline = True
    s.pipeline_configs = {"accumulate_steps": m, "micro_batch_size": 4 // m, "schedule_mode": schedule}
    s.hybrid_configs = hybrid if hybrid is not None else {"dp_degree": dp, "mp_degree": 2, "pp_degree": 2}
    if "lars" in extra:
        s.lars = True
    if "amp" in extra:
        s.amp = True
    if "recompute" in extra:
        s.recompute, s.recompute_configs = True, {"checkpoints": ["relu_0.tmp_0", "tmp_0"]}
    if "gm" in extra:
        s.gradient_merge, s.gradient_merge_configs = True, {"k_steps": 2}
    return s


def _net(dtype):
    from refimpl.distributed import fleet
    mpp = fleet.meta_parallel
    x = paddle.static.data(name="x", shape=[-1, 8], dtype=dtype)
    ids = paddle.static.data(name="ids", shape=[-1, 4], dtype="int64")
    label = paddle.static.data(name="label", shape=[-1, 1], dtype="int64")
    with paddle.static.device_guard("gpu:0"):
        emb = mpp.VocabParallelEmbedding(16, 8)(ids)
        h = mpp.ColumnParallelLinear(8, 16, has_bias=True, gather_output=False)(x)
        h = paddle.nn.functional.relu(h)
        h = mpp.RowParallelLinear(16, 8, has_bias=True, input_is_parallel=True)(h)
    with paddle.static.device_guard("gpu:1"):
        logits = mpp.ColumnParallelLinear(8, 6, has_bias=False, gather_output=False)(h)
        loss = paddle.mean(mpp.ParallelCrossEntropy()(logits, label)) + paddle.mean(emb)
    return loss


def _build(dp, opt=None, dtype="float64", init_strategy=None, opt_strategy=None):
    from refimpl.distributed import fleet
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True, strategy=init_strategy or _strategy(dp))
        loss = _net(dtype)
        fleet.distributed_optimizer(opt or paddle.optimizer.SGD(0.1),
                                    strategy=opt_strategy or _strategy(dp)).minimize(loss)
    return main, startup, loss


def _owned(main):
    return [n for n in LAYOUT if main._pipeline_opt.has_var(n)]


def _train_rank(opt, dp, batches, schedule="1F1B", m=2, extra=(), dtype="float64", hybrid=True):
    """This rank's (layout, startup values, trained shards, Adam beta-pow dtypes, losses, optimizer program).

    ``hybrid``: the degrees in hybrid_configs (fleet builds its hybrid group); else none at all (the
    pipeline counts the device_guard stages and takes tensor_parallel_degree, dp the rest)."""
    from refimpl.distributed import fleet
    optimizer = paddle.optimizer.SGD(0.1) if opt == "sgd" else paddle.optimizer.Adam(0.01)
    configs = {"dp_degree": dp, "mp_degree": 2, "pp_degree": 2} if hybrid else {}
    main, startup, loss = _build(dp, optimizer, dtype, init_strategy=_strategy(dp, hybrid=configs),
                                 opt_strategy=_strategy(dp, m, schedule, configs, extra=extra))
    r = context.current().rank
    paddle.seed(10 + r)   # each rank draws its own startup values; the broadcasts decide what stays
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    owned = _owned(main)
    start = {n: np.array(scope.find_var(n).get_tensor()) for n in owned}
    lay = main._pipeline_opt.layout
    init = TPT._full_init("mp")
    for n in owned:   # the test's own start values, as a checkpoint would
        role, axis = LAYOUT[n]
        scope.var(n).get_tensor().set(TPT._shard(init[role], axis, lay.mp_rank, 2).astype(dtype))
    b = len(batches[0][0]) // dp
    losses = []
    for x, ids, label in batches:
        part = slice(lay.dp_rank * b, (lay.dp_rank + 1) * b)
        feed = {"x": x[part].astype(dtype), "ids": ids[part], "label": label[part]}
        out = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        losses.append(None if out[0] is None else float(np.mean(out[0])))
    pows = sorted({str(v.dtype) for v in startup.global_block().vars.values() if "beta1_pow_acc" in v.name})
    info = (lay.stage, lay.mp_rank, lay.dp_rank, [sorted(p) for p in lay.pipes], lay.model_groups,
            lay.data_groups, fleet._get_applied_meta_list())
    opt_ops = [(op.type, op.attr("ring_id") if op.has_attr("ring_id") else None)
               for op in main._pipeline_opt.plan.program("optimizer").global_block().ops]
    half = any(op.type == "cast" and op.attr("out_dtype") == to_vartype("float16")
               for op in main._pipeline_opt.section_program().global_block().ops)
    return info, start, {n: np.array(scope.find_var(n).get_tensor()) for n in owned}, pows, losses, opt_ops, half


def _gathered(out):
    """Whole parameters from the dp-rank-0 ranks' shards: each name from the two mp ranks of its stage."""
    got = {}
    for n, (role, axis) in LAYOUT.items():
        parts = {o[0][1]: o[2][n] for o in out if n in o[2] and o[0][2] == 0}
        assert sorted(parts) == [0, 1], n
        got[n] = parts[0] if axis is None else np.concatenate([parts[0], parts[1]], axis=axis)
    return got


# ---- (a) numbers ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dp, opt, schedule, hybrid", [
    (1, "sgd", "1F1B", True), (1, "adam", "FThenB", True), (2, "sgd", "1F1B", True), (2, "adam", "1F1B", True),
    (2, "sgd", "1F1B", False)])
def test_tp_pp_dp_gives_one_device(float64_default, dp, opt, schedule, hybrid):
    batches = TPT._data(steps=2, batch=4 * dp)   # 4 rows per data-parallel replica, 2 micro-batches of 2
    out = run_in_process(4 * dp, _train_rank, opt, dp, batches, schedule, 2, (), "float64", hybrid, timeout=180)
    pows = {p for o in out for p in o[3]}
    assert len(pows) == (opt == "adam")
    ref = TPT._one_device("mp", opt, batches, *pows)
    got = _gathered(out)
    for n, (role, axis) in LAYOUT.items():
        np.testing.assert_allclose(got[n], ref[role], rtol=1e-6, atol=1e-9, err_msg=n)
    for info, _, trained, _, losses, _, _ in out:
        stage, mp_rank, dp_rank = info[:3]
        assert info[3:6] == (PADDLE_GROUPS[dp]["pipe"], PADDLE_GROUPS[dp]["model"], PADDLE_GROUPS[dp]["data"])
        assert set(trained) == (STAGE0 if stage == 0 else set(LAYOUT) - STAGE0)
        assert (losses[0] is not None) == (stage == 1)
        twin = next(o for o in out if o[0][:3] == (stage, mp_rank, 0))   # the dp replicas agree bitwise
        for n in trained:
            np.testing.assert_array_equal(trained[n], twin[2][n], err_msg=n)
    # the loss of the first step (parameters not yet updated) is the one-device loss on the whole batch
    P = TPT._full_init("mp")
    x, ids, label = batches[0]
    logits = (np.maximum(x @ P["W0"] + P["b0"], 0) @ P["W1"] + P["b1"]) @ P["W2"]
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    ce = lse - logits[np.arange(len(x)), label[:, 0]]
    want = ce.mean() + P["E"][ids].mean()
    firsts = [o[4][0] for o in out if o[4][0] is not None]
    np.testing.assert_allclose(np.mean(firsts), want, rtol=1e-9)


def test_tp_pp_dp_with_recompute_gives_one_device(float64_default):
    """Paddle 3.3.1 chains PipelineOptimizer -> RecomputeOptimizer for pipeline + tensor_parallel + recompute."""
    batches = TPT._data(steps=2, batch=8)
    out = run_in_process(8, _train_rank, "sgd", 2, batches, "1F1B", 2, ("recompute",), timeout=180)
    assert all(o[0][6] == ["PipelineOptimizer", "RecomputeOptimizer"] for o in out)
    ref, got = TPT._one_device("mp", "sgd", batches), _gathered(out)
    for n, (role, axis) in LAYOUT.items():
        np.testing.assert_allclose(got[n], ref[role], rtol=1e-6, atol=1e-9, err_msg=n)


def test_tp_pp_with_amp_trains_as_one_device():
    """Pipeline -> AMP (Paddle 3.3.1's chain), float32: each stage's found-inf flag is max-reduced over the
    pipe's stages and then over the stage's model group (ring 0), as the shards' gradients differ; with no
    overflow the loss scaling (a power of 2) changes nothing, so the one-device numbers hold to float32 --
    to float16 where the backend has float16 kernels and AMP casts the matmuls (the CUDA backend)."""
    batches = TPT._data(steps=2, batch=4)
    out = run_in_process(4, _train_rank, "sgd", 1, batches, "1F1B", 2, ("amp",), "float32", timeout=180)
    ref, got = TPT._one_device("mp", "sgd", batches), _gathered(out)
    half = any(o[6] for o in out)
    for n, (role, axis) in LAYOUT.items():
        np.testing.assert_allclose(got[n], ref[role], rtol=1e-4, atol=1e-3 if half else 1e-6, err_msg=n)
    for o in out:
        assert o[0][6] == ["PipelineOptimizer", "AMPOptimizer"]
        flags = [(t, ring) for t, ring in o[5] if t == "c_allreduce_max"]
        assert len(flags) == 2 and flags[1][1] == 0 and flags[0][1] != 0, o[5]


# ---- (b) rings, groups, stage programs, startup ----------------------------------------------------------
@pytest.mark.parametrize("dp", [1, 2])
def test_layout_is_paddles_topology(dp):
    for rank in range(4 * dp):
        lay = HybridLayout(rank, dp, 2, 2)
        want = PADDLE_GROUPS[dp]
        assert (lay.pipes, lay.model_groups, lay.data_groups) == (want["pipe"], want["model"], want["data"])
        assert rank in lay.pipes[lay.pipe_index] and lay.pipes[lay.pipe_index][lay.stage] == rank
        assert rank in lay.model_groups[lay.dp_rank * 2 + lay.stage]


def _rings_rank():
    from refimpl.distributed import fleet
    main, startup, loss = _build(2)
    ctx = context.current()
    run = main._pipeline_opt
    hcg = fleet.get_hybrid_communicate_group()
    section = run.section_program()
    tp_rings = {op.attr("ring_id") for op in section.global_block().ops if op.type in TP_OPS and op.has_attr("ring_id")}
    transfers = {op.attr("ring_id") for op in section.global_block().ops if op.type in ("send_v2", "recv_v2")}
    dp_rings = {op.attr("ring_id") for t in run.plan.job_types() for op in run.plan.program(t).global_block().ops
                if op.type == "c_allreduce_sum"}
    bcast = [(op.input("x")[0], op.attr("ring_id")) for op in startup.global_block().ops if op.type == "broadcast"]
    return (run.stage, sorted(hcg.get_pipe_parallel_group().ranks), sorted(hcg.get_model_parallel_group().ranks),
            sorted(hcg.get_data_parallel_group().ranks), {op.type for op in section.global_block().ops} & TP_OPS,
            tp_rings, list(ctx.groups[0]), sorted(list(ctx.groups[r]) for r in transfers),
            [list(ctx.groups[r]) for r in dp_rings], bcast, hcg.get_model_parallel_group().id,
            hcg.get_data_parallel_group().id)


def test_rings_and_stage_programs_follow_the_topology(float64_default):
    out = run_in_process(8, _rings_rank, timeout=120)
    want = PADDLE_GROUPS[2]
    for rank, (stage, pipe, model, data, tp_ops, tp_rings, ring0, transfer_groups, dp_groups, bcast, mp_id,
               dp_id) in enumerate(out):
        assert stage == (rank // 2) % 2
        assert pipe in want["pipe"] and model in want["model"] and data in want["data"] and rank in pipe
        assert tp_ops == ({"c_identity", "mp_allreduce_sum", "c_embedding"} if stage == 0
                          else {"c_identity", "c_softmax_with_cross_entropy"})
        assert tp_rings == {0} and ring0 == model          # ring 0 answers with this rank's model group
        assert transfer_groups and all(g == pipe for g in transfer_groups)   # sends / recvs within the pipe
        assert dp_groups and all(g == data for g in dp_groups)               # gradients averaged over replicas
        owned = sorted(STAGE0 if stage == 0 else set(LAYOUT) - STAGE0)
        # every owned parameter from model-group rank 0 (the mp layers leave the startup copies unmarked,
        # as Paddle's) and then from data-group rank 0 -- Paddle's _broadcast_params of both meta-optimizers
        assert bcast == [(n, 0) for n in owned] + [(n, dp_id) for n in owned]


def _start_values():
    main, startup, loss = _build(2)
    r = context.current().rank
    paddle.seed(10 + r)
    scope = paddle.static.Scope()
    paddle.static.Executor().run(startup, scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in _owned(main)}


def test_startup_broadcasts_make_replicas_start_alike(float64_default):
    start = run_in_process(8, _start_values, timeout=120)
    for rank in range(8):
        lay = HybridLayout(rank, 2, 2, 2)
        first = lay.model_groups[lay.dp_rank * 2 + lay.stage][0]
        root = lay.data_groups[lay.stage * 2 + lay.mp_rank][0]
        for n, v in start[rank].items():
            np.testing.assert_array_equal(v, start[first][n], err_msg=n)   # mp neighbours: rank 0's shard
            np.testing.assert_array_equal(v, start[root][n], err_msg=n)    # dp replicas: the root's


# ---- (c) the strategy compiler ------------------------------------------------------------------------
#: Paddle 3.3.1, trainer 1 of 4, pipeline + tensor_parallel (degree 2) + the named switches
PADDLE_CHAINS = [((), ["PipelineOptimizer"], True, False),
                 (("lars",), ["TensorParallelOptimizer", "LarsOptimizer"], False, True),
                 (("gm",), ["GradientMergeOptimizer"], False, False),
                 (("amp",), ["PipelineOptimizer", "AMPOptimizer"], True, False),
                 (("recompute",), ["PipelineOptimizer", "RecomputeOptimizer"], True, False),
                 (("amp", "recompute"), ["TensorParallelOptimizer", "AMPOptimizer", "RecomputeOptimizer"], False, True)]


@pytest.mark.parametrize("extra, chain, pipeline, tensor_parallel", PADDLE_CHAINS)
def test_chain_is_paddles(trainer_1_of_4, extra, chain, pipeline, tensor_parallel):
    """TensorParallelOptimizer is not in PipelineOptimizer's white list nor the reverse: Paddle keeps the
    pipeline (its chain comes first) and reports tensor_parallel off, unless another chain is longer."""
    import types
    from refimpl.distributed.fleet.meta_optimizers import DistributedOptimizer
    s = _strategy(1, extra=extra, hybrid={})
    opt = DistributedOptimizer(paddle.optimizer.Momentum(0.01, 0.9), s,
                               fleet=types.SimpleNamespace(role_maker=trainer_1_of_4))
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 32], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
    _, got, valid = opt._compile(loss)
    assert [type(o).__name__ for o in got] == chain
    assert (valid.pipeline, valid.tensor_parallel) == (pipeline, tensor_parallel)


@pytest.fixture
def trainer_1_of_4():
    class RoleMaker:
        _is_collective = True

        def _worker_index(self):
            return 1

        def _worker_num(self):
            return 4

        def _get_trainer_endpoints(self):
            return [f"127.0.0.1:{36001 + i}" for i in range(4)]
    return RoleMaker()


# ---- (d) bad input --------------------------------------------------------------------------------------
@pytest.mark.parametrize("hybrid, tp, words", [
    ({"dp_degree": 2, "mp_degree": 2, "pp_degree": 2}, 2,
     r"dp_degree \(2\) x pp_degree \(2\) x mp_degree \(2\) must equal the number of workers \(4\)"),
    ({"mp_degree": 2, "pp_degree": 3}, 2, r"4 workers cannot hold whole pipelines of 3 stages x mp_degree 2"),
    ({"mp_degree": 4, "pp_degree": 2}, 2, r"hybrid_configs\['mp_degree'\] \(4\) and "
                                          r"tensor_parallel_configs\['tensor_parallel_degree'\] \(2\) must be equal"),
])
def test_degrees_not_making_the_world_fail_at_minimize_on_every_rank(float64_default, hybrid, tp, words):
    _refused_on_every_rank(4, _strategy(1, hybrid=hybrid, tp=tp), words)


@pytest.mark.parametrize("world, tp, words", [
    (8, 4, r"degree is 4 .*but op 0 \(c_embedding\) was built for 2 model-parallel ranks"),
    (4, None, r"degree is 1 .*but op 0 \(c_embedding\) was built for 2 model-parallel ranks"),
])
def test_layers_built_for_another_degree_fail_at_minimize_on_every_rank(float64_default, world, tp, words):
    """The layers were built for fleet.init's tensor_parallel_degree 2; the optimizer's strategy says another."""
    s = _strategy(1, hybrid={}, tp=tp or 2)
    s.tensor_parallel = tp is not None
    _refused_on_every_rank(world, s, words)


def _refused_on_every_rank(world, strategy, words):
    import re
    from refimpl.distributed import fleet

    def rank_fn():
        main, startup = Program(), Program()
        with paddle.static.program_guard(main, startup), unique_name.guard():
            fleet.init(is_collective=True, strategy=_strategy(1, hybrid={}))
            loss = _net("float64")
            before = [op.type for op in main.global_block().ops]
            try:
                fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy=strategy).minimize(loss)
            except InvalidArgument as e:
                return str(e), [op.type for op in main.global_block().ops] == before
        return None
    got = run_in_process(world, rank_fn, timeout=60)
    assert got[0] is not None and all(g == got[0] for g in got), got
    assert re.search(words, got[0][0]) and got[0][1], got[0]


# ---- under mpiexec: tp2 x pp2 over four processes ---------------------------------------------------------
def test_tp_pp_under_mpiexec_gives_one_device(tmp_path):
    run_script(__file__, ["mpi", tmp_path], timeout=240)
    import pickle
    out = [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(4)]
    ref, got = TPT._one_device("mp", "adam", _mpi_batches(), "float64"), _gathered(out)
    for n, (role, axis) in LAYOUT.items():
        np.testing.assert_allclose(got[n], ref[role], rtol=1e-6, atol=1e-9, err_msg=n)


def _mpi_batches():
    return TPT._data(steps=2, batch=4)


if __name__ == "__main__" and sys.argv[1:2] == ["mpi"]:   # one rank of test_tp_pp_under_mpiexec_gives_one_device
    import os
    refimpl.set_default_dtype("float64")                 # (see float64_default)
    info, _, trained, pows, _, _, _ = _train_rank("adam", 1, _mpi_batches())
    assert pows == ["float64"], pows   # the parameters' dtype (Paddle 3.3.1)
    import pickle
    with open(os.path.join(sys.argv[2], f"rank{context.current().rank}.pkl"), "wb") as f:
        pickle.dump((info, None, trained), f)
