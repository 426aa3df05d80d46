"""Static sharding inside tensor parallelism (``sharding_configs['mp_degree'] > 1``): one device's numbers.

The programs themselves (Paddle 3.3.1's, op for op, for the plain net of Paddle's
``test_sharding_with_mp`` and for a net of ``paddle.distributed.split`` layers, with AMP, clipping,
recompute, Adam and hybrid dp) are compared in ``tests/test_sharding.py`` (cases ``mp*`` of
``oracle_sharding/sharding_cases.py``). Here:

(a) numbers: a net of ``paddle.distributed.split`` layers (column-parallel, row-parallel,
    column-parallel gathered, then a replicated fc) trained under tp 2 x sharding 2 (4 in-process
    ranks) and tp 2 x sharding 2 x dp 2 (8 ranks), float64, Momentum / Adam, gives the parameters
    of a one-device run of the same net built of plain fc layers on the whole batch (the shards put
    back together), within 1e-6; recompute too; AMP applies and trains alike on every replica;
(b) startup: the replicated parameters are broadcast over the mp ring, the dp replicas over the
    dp ring; the split shards stay each mp rank's own;
(c) bad input: degrees not multiplying to the world size, a program built for another
    model-parallel degree, sizes the degree does not divide: typed errors naming option and value,
    the same on every rank;
(e) tp 2 x sharding 2 as 4 processes under ``mpiexec`` (``mpi_helpers.run_under_mpiexec``, also used by
    ``tests/test_sharding_hybrid_pipeline.py``).

Sharding x pipeline (d) is in ``tests/test_sharding_hybrid_pipeline.py``.
"""
import numpy as np
import pytest

import refimpl
import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

from mpi_helpers import run_under_mpiexec

MP = 2
WIDTH = 8
#: the split net's parameters -> (the one-device net's parameter, the axis the shards split; None: whole)
LAYOUT = {"linear_0.w_0": ("fc_0.w_0", 1), "linear_0.b_0": ("fc_0.b_0", 0),
          "linear_1.w_0": ("fc_1.w_0", 0), "linear_1.b_0": ("fc_1.b_0", None),
          "linear_2.w_0": ("fc_2.w_0", 1), "linear_2.b_0": ("fc_2.b_0", 0),
          "fc_0.w_0": ("fc_3.w_0", None), "fc_0.b_0": ("fc_3.b_0", None)}
FULL = {"fc_0.w_0": (WIDTH, 16), "fc_0.b_0": (16,), "fc_1.w_0": (16, WIDTH), "fc_1.b_0": (WIDTH,),
        "fc_2.w_0": (WIDTH, 6), "fc_2.b_0": (6,), "fc_3.w_0": (6, 2), "fc_3.b_0": (2,)}
RECOMPUTE = {"recompute": True, "recompute_configs": {"checkpoints": ["relu_0.tmp_0", "relu_1.tmp_0"]}}


def _split_net(dtype, degree=MP):
    """x -> column-parallel (8, 16) -> relu -> row-parallel (16, 8) -> relu -> column-parallel (8, 6),
    gathered -> fc 2 softmax -> cross entropy -> mean."""
    x = paddle.static.data("x", [-1, WIDTH], dtype)
    y = paddle.static.data("y", [-1, 1], "int64")
    h = paddle.distributed.split(x, (WIDTH, 16), "linear", axis=1, num_partitions=degree, gather_out=False)
    h = paddle.nn.functional.relu(h)
    h = paddle.nn.functional.relu(paddle.distributed.split(h, (16, WIDTH), "linear", axis=0,
                                                           num_partitions=degree))
    h = paddle.distributed.split(h, (WIDTH, 6), "linear", axis=1, num_partitions=degree, gather_out=True)
    pred = paddle.static.nn.fc(h, 2, activation="softmax")
    return paddle.mean(paddle.nn.functional.cross_entropy(pred, y, reduction="none", use_softmax=False))


def _plain_net(dtype):
    x = paddle.static.data("x", [-1, WIDTH], dtype)
    y = paddle.static.data("y", [-1, 1], "int64")
    h = paddle.static.nn.fc(x, 16, activation="relu")
    h = paddle.static.nn.fc(h, WIDTH, activation="relu")
    h = paddle.static.nn.fc(h, 6)
    pred = paddle.static.nn.fc(h, 2, activation="softmax")
    return paddle.mean(paddle.nn.functional.cross_entropy(pred, y, reduction="none", use_softmax=False))


def _opt(kind):
    return paddle.optimizer.Momentum(0.1, 0.9) if kind == "momentum" else paddle.optimizer.Adam(0.01)


def _full_init():
    rng = np.random.default_rng(5)
    return {n: rng.standard_normal(s) * 0.4 for n, s in FULL.items()}


def _batches(steps=3, rows=8):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((rows, WIDTH)), rng.integers(0, 2, (rows, 1)).astype("int64"))
            for _ in range(steps)]


def _one_device(kind, batches, fields=None):
    fields = fields or {}
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        loss = _plain_net("float64")
        opt = _opt(kind)
        if fields.get("recompute"):
            opt = paddle.incubate.optimizer.RecomputeOptimizer(opt)
            opt._set_checkpoints(["fc_0.tmp_2", "fc_1.tmp_2"])
        opt.minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    for name, value in _full_init().items():
        scope.find_var(name).get_tensor().set(value)
    for x, y in batches:
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in FULL}


def _strategy(world, configs=None, fields=None):
    s = DistributedStrategy()
    s.sharding = True
    sharding = min(2, world // MP)
    s.sharding_configs = dict({"segment_broadcast_MB": 0.0001, "sharding_degree": sharding, "mp_degree": MP,
                               "dp_degree": world // (sharding * MP)}, **(configs or {}))
    for k, v in (fields or {}).items():
        setattr(s, k, v)
    return s


def _build(world, kind, dtype="float64", configs=None, fields=None, degree=MP):
    from refimpl.distributed import fleet
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        loss = _split_net(dtype, degree)
        fleet.distributed_optimizer(_opt(kind), _strategy(world, configs, fields)).minimize(loss)
    return main, startup, loss


def _shard_of(name, mp_rank):
    full_name, axis = LAYOUT[name]
    full = _full_init()[full_name]
    return full if axis is None else np.split(full, MP, axis=axis)[mp_rank]


def _rank_run(world, kind, batches, fields=None):
    """This rank's part: the rows of its data-parallel index (sharding and dp both split the batch; the
    mp ranks of one group see the same rows); returns {owned parameter: trained value}."""
    r = context.current().rank
    main, startup, loss = _build(world, kind, fields=fields)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    owned = [v.name for v in main.global_block().vars.values() if v.is_parameter]   # the rest were pruned
    for name in owned:   # the test's own start values, the shards of one device's
        scope.find_var(name).get_tensor().set(_shard_of(name, r % MP))
    replicas = world // MP
    rows = len(batches[0][0]) // replicas
    part = slice((r // MP) * rows, (r // MP + 1) * rows)
    for x, y in batches:
        exe.run(main, feed={"x": x[part], "y": y[part]}, fetch_list=[loss], scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in owned}


def _gather(results):
    """{one-device name: whole value} from the owners' shards; every copy of a shard must agree
    bitwise (the dp replicas), and every shard must have an owner."""
    shards = {}
    for r, params in enumerate(results):
        for name, value in params.items():
            key = (name, r % MP)
            if key in shards:
                np.testing.assert_array_equal(value, shards[key], err_msg=f"{name}: rank {r} and its replica")
            shards[key] = value
    assert sorted({n for n, _ in shards}) == sorted(LAYOUT)
    whole = {}
    for name, (full_name, axis) in LAYOUT.items():
        parts = [shards[(name, m)] for m in range(MP)]
        if axis is None:   # replicated over the mp ring: the mp ranks agree (bitwise)
            np.testing.assert_array_equal(parts[0], parts[1], err_msg=f"{name} on the two mp ranks")
            whole[full_name] = parts[0]
        else:
            whole[full_name] = np.concatenate(parts, axis=axis)
    return whole


def _check(results, ref):
    got = _gather(results)
    for name in FULL:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-6, atol=1e-9, err_msg=name)


# ---- (a) numbers ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["momentum", "adam"])
@pytest.mark.parametrize("world", [2, 4, 8], ids=["tp2", "tp2xsh2", "tp2xsh2xdp2"])
def test_tp_sharding_gives_one_device(float64_default, kind, world):
    """(world 2: sharding_degree 1, the mp ring alone: Paddle's ``_adapt_amp_clip_without_sharding`` path)"""
    batches = _batches()
    ref = _one_device(kind, batches)
    results = run_in_process(world, _rank_run, world, kind, batches, timeout=180)
    assert all(results), "a rank owns no parameter"
    _check(results, ref)


def test_tp_sharding_with_recompute_gives_one_device(float64_default):
    batches = _batches()
    ref = _one_device("momentum", batches, RECOMPUTE)
    results = run_in_process(4, _rank_run, 4, "momentum", batches, RECOMPUTE, timeout=180)
    _check(results, ref)


def test_tp_sharding_dp_with_amp_trains_alike_on_every_replica():
    """AMP under sharding x tp x dp: AMP applies (its loss-scaling ops are written, the found-inf flag is
    combined over the mp ring and then the sharding ring), and the dp replicas stay bitwise equal."""
    from refimpl.distributed import fleet

    def rank_fn():
        r = context.current().rank
        main, startup, loss = _build(8, "momentum", dtype="float32", fields={"amp": True})
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        paddle.seed(10 + r)
        exe.run(startup, scope=scope)
        owned = [v.name for v in main.global_block().vars.values() if v.is_parameter]
        losses = []
        for x, y in _batches(steps=4):
            part = slice((r // MP) * 2, (r // MP + 1) * 2)
            feed = {"x": x[part].astype("float32"), "y": y[part]}
            losses.append(float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]))
        flag_rings = [op.attr("ring_id") for op in main.global_block().ops
                      if op.type == "all_reduce" and any("find_infinite" in a for a in op.input_arg_names)]
        return (fleet._get_applied_meta_list(), [op.type for op in main.global_block().ops], flag_rings, losses,
                {n: np.array(scope.find_var(n).get_tensor()) for n in owned})
    out = run_in_process(8, rank_fn, timeout=180)
    applied, types, flag_rings, _, _ = out[0]
    assert applied == ["ShardingOptimizer", "AMPOptimizer"]
    assert "check_finite_and_unscale" in types and "update_loss_scaling" in types
    assert flag_rings == [0, 1]
    assert all(np.isfinite(v) for o in out for v in o[3])
    for r in range(4, 8):   # the dp replica of rank r - 4
        assert sorted(out[r][4]) == sorted(out[r - 4][4])
        for n in out[r][4]:
            np.testing.assert_array_equal(out[r][4][n], out[r - 4][4][n], err_msg=f"{n} on rank {r}")


# ---- (b) the startup broadcasts -----------------------------------------------------------------------------
def test_startup_broadcasts_replicated_over_mp_and_all_over_dp(float64_default):
    def rank_fn():
        main, startup, _ = _build(8, "momentum")
        paddle.seed(10 + context.current().rank)   # each rank draws its own; the broadcasts decide
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        exe.run(startup, scope=scope)
        return {v.name: np.array(scope.find_var(v.name).get_tensor())
                for v in main.global_block().vars.values() if v.is_parameter}
    got = run_in_process(8, rank_fn, timeout=120)
    for r in range(8):
        dp_root, mp_peer = r % 4, r ^ 1
        for name, value in got[r].items():
            np.testing.assert_array_equal(value, got[dp_root][name], err_msg=f"{name}: rank {r} vs dp rank 0")
            replicated = LAYOUT[name][1] is None
            shard_of_zeros = name.endswith(".b_0")   # biases start at zero on every rank
            assert np.array_equal(value, got[mp_peer][name]) == (replicated or shard_of_zeros), (name, r)


# ---- (c) bad input ------------------------------------------------------------------------------------------
def _refused(world, configs=None, degree=MP):
    """Every rank's typed error message (None where minimize went through)."""
    def rank_fn():
        try:
            _build(world, "momentum", configs=configs, degree=degree)
        except InvalidArgument as e:
            return str(e)
        return None
    return run_in_process(world, rank_fn, timeout=60)


@pytest.mark.parametrize("world, configs, words", [
    (4, {"mp_degree": 2, "sharding_degree": 4, "dp_degree": 1}, r"multiply to 8.*world size.* 4"),
    (8, {"mp_degree": 2, "sharding_degree": 2, "dp_degree": 1}, r"multiply to 4.*world size.* 8"),
    (8, {"mp_degree": 4, "sharding_degree": 2, "dp_degree": 1},
     r"sharding_configs\['mp_degree'\] = 4.*c_concat.*nranks = 2"),
])
def test_bad_degrees_are_typed_errors_on_every_rank(float64_default, world, configs, words):
    import re
    msgs = _refused(world, configs)
    assert msgs[0] is not None and len(set(msgs)) == 1, msgs
    assert re.search(words, msgs[0]), msgs[0]


def test_model_parallel_ops_without_mp_degree_are_refused(float64_default):
    msgs = _refused(4, {"mp_degree": 1, "sharding_degree": 4, "dp_degree": 1})
    assert msgs[0] is not None and len(set(msgs)) == 1, msgs
    assert "sharding_configs['mp_degree'] = 1" in msgs[0] and "ring 0" in msgs[0], msgs[0]


def test_sizes_the_degree_does_not_divide_are_refused_while_building(float64_default):
    """split's num_partitions is the model-parallel degree: (8, 16) over 3 ranks is refused, naming it."""
    def rank_fn():
        from refimpl.distributed import fleet
        with paddle.static.program_guard(Program(), Program()), unique_name.guard():
            fleet.init(is_collective=True)
            x = paddle.static.data("x", [-1, WIDTH], "float64")
            try:
                paddle.distributed.split(x, (WIDTH, 16), "linear", axis=1, num_partitions=3)
            except InvalidArgument as e:
                return str(e)
        return None
    msgs = run_in_process(2, rank_fn, timeout=30)
    assert msgs[0] is not None and len(set(msgs)) == 1
    assert "size[1]=16" in msgs[0] and "num_partitions=3" in msgs[0], msgs[0]


# ---- (e) under mpiexec: one process per rank --------------------------------------------------------------------
def mpi_rank_main(run):
    """One rank under mpiexec: ``run(what)`` gives its arrays, saved into ``sys.argv[2]``."""
    import os
    import sys
    import refimpl.distributed as dist
    refimpl.set_default_dtype("float64")   # (see float64_default)
    dist.init_parallel_env()
    assert context.current().backend == "mpi"
    np.savez(os.path.join(sys.argv[2], f"rank{context.current().rank}.npz"), **run(sys.argv[1]))


def test_under_mpiexec_gives_one_device(tmp_path):
    """tp 2 x sharding 2 as 4 processes under ``mpiexec``."""
    _check(run_under_mpiexec(__file__, "tp", tmp_path), _one_device("momentum", _batches()))


if __name__ == "__main__":   # one rank of test_under_mpiexec_gives_one_device
    mpi_rank_main(lambda what: _rank_run(4, "momentum", _batches()))
