"""Static sharding x pipeline (``pp_degree > 1`` with ``strategy.pipeline``): one device's numbers.

refimpl's pipeline Plan with each stage's optimizer job sharded (``sharding/pipeline_sharding.py``);
split out of ``tests/test_sharding_hybrid.py`` (tp x sharding), whose nets, optimizers and batches it uses:

(d) sharding 2 x pp 2, x dp 2, and tp 2 x sharding 2 x pp 2 give one device's parameters and losses
    (1e-6), each sharding rank of a stage holds its part of the stage's optimizer state, the replicas
    start alike, and bad input is typed; sharding 2 x pp 2 as 4 processes under ``mpiexec`` too.
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

from mpi_helpers import run_under_mpiexec
from pipeline_helpers import stage_holds
from test_sharding_hybrid import (MP, WIDTH, _batches, _opt,
                                  mpi_rank_main)


# ---- (d) sharding x pipeline (x tp x dp): refimpl's pipeline Plan, each stage's optimizer job sharded -------------
PP_MICRO = 2   # accumulate_steps


def _pp_net(dtype, split):
    """Stage 0: two layers (``split``: the column- and row-parallel linears), stage 1: fc 16 tanh, fc 2 softmax."""
    x = paddle.static.data("x", [-1, WIDTH], dtype)
    y = paddle.static.data("y", [-1, 1], "int64")
    with paddle.static.device_guard("gpu:0"):
        if split:
            h = paddle.distributed.split(x, (WIDTH, 16), "linear", axis=1, num_partitions=MP, gather_out=False)
            h = paddle.nn.functional.relu(h)
            h = paddle.nn.functional.relu(paddle.distributed.split(h, (16, WIDTH), "linear", axis=0,
                                                                   num_partitions=MP))
        else:
            h = paddle.static.nn.fc(x, 16, activation="relu")
            h = paddle.static.nn.fc(h, WIDTH, activation="relu")
    with paddle.static.device_guard("gpu:1"):
        h = paddle.static.nn.fc(h, 16, activation="tanh")
        pred = paddle.static.nn.fc(h, 2, activation="softmax")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(pred, y, reduction="none", use_softmax=False))
    return loss


#: the pipelined split net's parameters -> (the one-device net's, the axis of the shards)
PP_LAYOUT = {"linear_0.w_0": ("fc_0.w_0", 1), "linear_0.b_0": ("fc_0.b_0", 0), "linear_1.w_0": ("fc_1.w_0", 0),
             "linear_1.b_0": ("fc_1.b_0", None), "fc_0.w_0": ("fc_2.w_0", None), "fc_0.b_0": ("fc_2.b_0", None),
             "fc_1.w_0": ("fc_3.w_0", None), "fc_1.b_0": ("fc_3.b_0", None)}
PP_FULL = {"fc_0.w_0": (WIDTH, 16), "fc_0.b_0": (16,), "fc_1.w_0": (16, WIDTH), "fc_1.b_0": (WIDTH,),
           "fc_2.w_0": (WIDTH, 16), "fc_2.b_0": (16,), "fc_3.w_0": (16, 2), "fc_3.b_0": (2,)}


def _pp_layout(mp):
    return PP_LAYOUT if mp > 1 else {n: (n, None) for n in PP_FULL}


def _stage_params(mp, stage):
    """The parameters of pipeline stage ``stage`` (0: the first two layers, 1: the last two)."""
    return sorted(list(_pp_layout(mp))[stage * 4:(stage + 1) * 4])


def _pp_init():
    rng = np.random.default_rng(9)
    return {n: rng.standard_normal(s) * 0.4 for n, s in PP_FULL.items()}


def _pp_one_device(kind, batches):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        loss = _pp_net("float64", split=False)
        _opt(kind).minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    for name, value in _pp_init().items():
        scope.find_var(name).get_tensor().set(value)
    losses = [float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0]) for x, y in batches]
    return losses, {n: np.array(scope.find_var(n).get_tensor()) for n in PP_FULL}


def _pp_rank_run(world, mp, kind, batches):
    """This rank's part of sharding 2 x pp 2 (x mp) (x dp): returns (losses or None, its stage's parameters,
    the optimizer-state bytes it holds, the applied meta-optimizers)."""
    from refimpl.distributed import fleet
    r = context.current().rank
    sh, pp = 2, 2
    dp = world // (sh * pp * mp)
    main, startup = Program(), Program()
    s = DistributedStrategy()
    s.sharding, s.pipeline = True, True
    s.sharding_configs = {"sharding_degree": sh, "pp_degree": pp, "mp_degree": mp, "dp_degree": dp}
    rows = len(batches[0][0]) // (sh * dp)
    s.pipeline_configs = {"accumulate_steps": PP_MICRO, "micro_batch_size": rows // PP_MICRO}
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        loss = _pp_net("float64", split=mp > 1)
        fleet.distributed_optimizer(_opt(kind), s).minimize(loss)
    exe, scope = paddle.static.Executor(), paddle.static.global_scope()
    exe.run(startup)
    layout, init = _pp_layout(mp), _pp_init()
    mine = [n for n in layout if stage_holds(main, n)]
    for n in mine:
        full_name, axis = layout[n]
        full = init[full_name]
        scope.find_var(n).get_tensor().set(full if axis is None else np.split(full, mp, axis)[r % mp])
    replica = (r // (sh * pp * mp)) * sh + (r // mp) % sh   # (dp rank, sharding rank): its rows
    part = slice(replica * rows, (replica + 1) * rows)
    losses = []
    for x, y in batches:
        out = exe.run(main, feed={"x": x[part], "y": y[part]}, fetch_list=[loss])
        losses.append(None if out[0] is None else float(np.mean(out[0])))
    state = sorted(n for n in scope.local_var_names() if any(n.startswith(p + "_") for p in mine)
                   and ("velocity" in n or "moment" in n) and scope.find_var(n).get_tensor()._is_initialized())
    return losses, {n: np.array(scope.find_var(n).get_tensor()) for n in mine}, state, \
        fleet._get_applied_meta_list()


@pytest.mark.parametrize("world, mp, kind", [(4, 1, "momentum"), (4, 1, "adam"), (8, 1, "momentum"),
                                             (8, 2, "momentum"), (8, 2, "adam")],
                         ids=["sh2xpp2-momentum", "sh2xpp2-adam", "sh2xpp2xdp2", "tp2xsh2xpp2",
                              "tp2xsh2xpp2-adam"])
def test_sharding_pipeline_gives_one_device(float64_default, world, mp, kind):
    batches = _batches(rows=8)
    ref_losses, ref = _pp_one_device(kind, batches)
    out = run_in_process(world, _pp_rank_run, world, mp, kind, batches, timeout=180)
    assert out[0][3] == ["ShardingOptimizer"]
    shards = {}
    for r, (_, params, _, _) in enumerate(out):
        for n, v in params.items():
            key = (n, r % mp)
            if key in shards:   # the sharding and dp replicas of a stage agree bitwise
                np.testing.assert_array_equal(v, shards[key], err_msg=f"{n} on rank {r}")
            shards[key] = v
    layout = _pp_layout(mp)
    assert sorted({n for n, _ in shards}) == sorted(layout)
    for n, (full_name, axis) in layout.items():
        got = shards[(n, 0)] if axis is None else np.concatenate([shards[(n, m)] for m in range(mp)], axis)
        np.testing.assert_allclose(got, ref[full_name], rtol=1e-6, atol=1e-9, err_msg=n)
    last = [o[0] for o in out if o[0][0] is not None]
    assert len(last) == world // 2   # the last stage's ranks
    np.testing.assert_allclose(np.mean(last, axis=0), ref_losses, rtol=1e-6)
    # the two sharding ranks of a stage own disjoint parts of its parameters and their optimizer state,
    # together all of it (Paddle's sharding prunes the others' from each rank's section program)
    suffixes = ("_velocity_0",) if kind == "momentum" else ("_moment1_0", "_moment2_0")
    for stage in range(2):
        ranks = [(stage * 2 + k) * mp for k in range(2)]   # dp rank 0, mp rank 0, sharding ranks 0, 1
        (a, b), (pa, pb) = ([out[r][2] for r in ranks]), ([set(out[r][1]) for r in ranks])
        assert a and b and not set(a) & set(b) and not pa & pb, (a, b)
        assert sorted(a + b) == sorted(p + sfx for p in pa | pb for sfx in suffixes)
        assert sorted(pa | pb) == _stage_params(mp, stage)


def _pp_build(world, mp, configs=None, pipeline=True):
    from refimpl.distributed import fleet
    main, startup = Program(), Program()
    s = DistributedStrategy()
    s.sharding, s.pipeline = True, pipeline
    s.sharding_configs = dict({"sharding_degree": 2, "pp_degree": 2, "mp_degree": mp,
                               "dp_degree": world // (4 * mp)}, **(configs or {}))
    s.pipeline_configs = {"accumulate_steps": PP_MICRO}
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        loss = _pp_net("float64", split=mp > 1)
        fleet.distributed_optimizer(_opt("momentum"), s).minimize(loss)
    return main, startup


def test_sharding_pipeline_startup_makes_the_replicas_alike(float64_default):
    """tp 2 x sharding 2 x pp 2: each rank holds the parameters it owns of its stage (Paddle's sharding prunes
    the rest), the two sharding ranks of a stage together all of them; the parameters that are not split's
    shards are broadcast over the mp ring: different draws end equal on the two mp ranks, the shards differ."""
    def rank_fn():
        main, startup = _pp_build(8, 2)
        paddle.seed(10 + context.current().rank)
        paddle.static.Executor().run(startup)
        scope = paddle.static.global_scope()
        return {n: np.array(scope.find_var(n).get_tensor()) for n in PP_LAYOUT if stage_holds(main, n)}
    got = run_in_process(8, rank_fn, timeout=120)
    for r in range(8):   # rank = (stage * 2 + sharding rank) * 2 + mp rank
        stage = r // 4
        assert sorted(set(got[r]) | set(got[r ^ 2])) == _stage_params(2, stage), r
        assert not set(got[r]) & set(got[r ^ 2]), r
        assert sorted(got[r]) == sorted(got[r ^ 1]), r   # both mp ranks own the same names
        for n, v in got[r].items():
            split_shard = PP_LAYOUT[n][1] is not None and not n.endswith(".b_0")
            assert np.array_equal(v, got[r ^ 1][n]) != split_shard, (n, r)


@pytest.mark.parametrize("world, configs, fields, words", [
    (4, {"dp_degree": 2}, {}, r"multiply to 8.*world size.* 4"),
    (4, {}, {"pipeline": False}, r"pp_degree'\] = 2 needs strategy.pipeline"),
])
def test_sharding_pipeline_bad_input_is_typed_on_every_rank(float64_default, world, configs, fields, words):
    import re

    def rank_fn():
        try:
            _pp_build(world, 1, configs, **fields)
        except InvalidArgument as e:
            return str(e)
        return None
    msgs = run_in_process(world, rank_fn, timeout=60)
    assert msgs[0] is not None and len(set(msgs)) == 1, msgs
    assert re.search(words, msgs[0]), msgs[0]


# ---- under mpiexec: one process per rank ------------------------------------------------------------------------
def test_under_mpiexec_gives_one_device(tmp_path):
    """sharding 2 x pp 2 as 4 processes under ``mpiexec``."""
    results = run_under_mpiexec(__file__, "pp", tmp_path)
    _, ref = _pp_one_device("momentum", _batches(rows=8))
    for r, params in enumerate(results):
        assert params
        for n, v in params.items():
            np.testing.assert_allclose(v, ref[n], rtol=1e-6, atol=1e-9, err_msg=f"{n} on rank {r}")


if __name__ == "__main__":   # one rank of test_under_mpiexec_gives_one_device
    mpi_rank_main(lambda what: _pp_rank_run(4, 1, "momentum", _batches(rows=8))[1])
