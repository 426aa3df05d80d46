"""Program rings: a program's per-process ring ids bound, rank by rank, to world-wide groups
(refimpl/distributed/fleet/meta_optimizers/program_rings.py, RankContext.bind_ring / bind_world)."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.fleet.meta_optimizers.program_rings import bind_rings, partition
from refimpl.framework import Program, unique_name


def test_partition_tiles_the_ranks():
    assert partition(8, 2, 1) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert partition(8, 2, 4) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert partition(8, 4, 2) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    with pytest.raises(InvalidArgument, match="cannot tile 6 ranks"):
        partition(6, 4, 1)


def test_each_rank_talks_to_its_own_group_under_one_ring_id():
    def body():
        assert bind_rings([(0, partition(4, 2, 1)), (2, partition(4, 2, 2))])
        ctx = context.current()
        x = np.array([ctx.rank + 1.0])
        return ctx.comm(0).all_reduce(x.copy())[0], ctx.comm(2).all_reduce(x.copy())[0], ctx.world_comm.all_reduce(x)[0]
    # ring 0: {0,1} and {2,3}; ring 2: {0,2} and {1,3}; the world stays all four
    assert run_in_process(4, body) == [(3, 4, 10), (3, 6, 10), (7, 4, 10), (7, 6, 10)]


def test_a_lone_process_binds_nothing():
    assert bind_rings([(0, partition(4, 2, 1))]) is False
    assert context.current().comm(0).nranks == 1


def _tp_then_dp(build_tp):
    """In one rank context a tensor-parallel program (ring 0 bound to the model group), then a plain
    data-parallel one: fleet's worker helpers and the dp program's ring 0 are the whole world again."""
    from refimpl.distributed import fleet
    r = context.current().rank
    if build_tp:
        s = DistributedStrategy()
        s.tensor_parallel = True
        s.tensor_parallel_configs = {"tensor_parallel_degree": 2}
        m, st = Program(), Program()
        with paddle.static.program_guard(m, st), unique_name.guard():
            fleet.init(is_collective=True, strategy=s)
            x = paddle.static.data(name="x", shape=[4, 8], dtype="float32")
            loss = paddle.mean(fleet.meta_parallel.ColumnParallelLinear(8, 16, has_bias=True)(x))
            fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy=s).minimize(loss)
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        x = paddle.static.data(name="x", shape=[-1, 4], dtype="float64")
        loss = paddle.mean(paddle.static.nn.fc(x, 1, bias_attr=False))
        fleet.distributed_optimizer(paddle.optimizer.SGD(1.0), strategy=DistributedStrategy()).minimize(loss)
    total = float(np.asarray(fleet.util.all_reduce(1.0)))
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    scope.find_var("fc_0.w_0").get_tensor().set(np.zeros((4, 1)))
    exe.run(main, feed={"x": np.full((1, 4), float(r))}, fetch_list=[loss], scope=scope)
    return total, np.array(scope.find_var("fc_0.w_0").get_tensor()).ravel().tolist()


def test_world_helpers_and_a_later_world_program_are_not_caught_by_a_rebound_ring_0():
    alone = run_in_process(4, _tp_then_dp, False, timeout=60)
    after = run_in_process(4, _tp_then_dp, True, timeout=60)
    assert after == alone
    # fleet.util sums over the 4 workers; dp's update: w -= mean over ranks of x = (0+1+2+3)/4
    assert all(t == 4.0 and w == [-1.5] * 4 for t, w in after)
