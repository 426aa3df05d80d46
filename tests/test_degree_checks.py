"""Degrees given twice must agree (``tensor_parallel_optimizer._check_configs``, ``sharding/degree_checks.py``).

``tensor_parallel_configs['tensor_parallel_degree']`` 2 with ``hybrid_configs['mp_degree']`` 4 would train
with 2 while fleet's topology says 4: refused before anything is built, the same on every rank, naming both
options and values. ``check_hybrid_degrees`` is the same rule for ``sharding_configs`` mp / pp degrees.
"""
import pytest

import refimpl
import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.fleet.meta_optimizers.sharding.degree_checks import check_hybrid_degrees
from refimpl.framework import Program, unique_name


def _tp_rank_fn(tp, hybrid_mp):
    from refimpl.distributed import fleet
    refimpl_dtype = "float64"
    s = DistributedStrategy()
    s.tensor_parallel = True
    s.tensor_parallel_configs = {"tensor_parallel_degree": tp}
    s.hybrid_configs = {"mp_degree": hybrid_mp, "dp_degree": 4 // hybrid_mp}
    main, startup = Program(), Program()
    try:
        with paddle.static.program_guard(main, startup), unique_name.guard():
            fleet.init(is_collective=True, strategy=s)
            x = paddle.static.data("x", [-1, 8], refimpl_dtype)
            h = paddle.distributed.split(x, (8, 4), "linear", axis=1, num_partitions=tp, gather_out=True)
            fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), s).minimize(paddle.mean(h))
    except InvalidArgument as e:
        return f"{type(e).__name__}: {e}", len(startup.global_block().ops)
    return None, len(startup.global_block().ops)


def test_tensor_parallel_degree_other_than_hybrid_mp_degree_is_refused(float64_default):
    out = run_in_process(4, _tp_rank_fn, 2, 4, timeout=60)
    msgs = {m for m, _ in out}
    assert len(msgs) == 1 and None not in msgs, msgs
    msg = msgs.pop()
    assert isinstance(msg, str) and "tensor_parallel_configs['tensor_parallel_degree'] (2)" in msg, msg
    assert "hybrid_configs['mp_degree'] (4)" in msg, msg
    assert all(n == out[0][1] for _, n in out)   # refused on every rank alike, before the rings are written


def test_equal_degrees_still_build(float64_default):
    out = run_in_process(4, _tp_rank_fn, 2, 2, timeout=60)
    assert [m for m, _ in out] == [None] * 4


@pytest.mark.parametrize("sharding, hybrid, key", [
    ({"mp_degree": 2}, {"mp_degree": 4}, "mp_degree"),
    ({"pp_degree": 2}, {"pp_degree": 4}, "pp_degree"),
    ({"mp_degree": 1}, {"mp_degree": 2}, "mp_degree"),
])
def test_sharding_degrees_other_than_hybrid_are_refused(sharding, hybrid, key):
    with pytest.raises(InvalidArgument) as e:
        check_hybrid_degrees(sharding, hybrid)
    assert isinstance(e.value, AssertionError)
    msg = str(e.value)
    assert f"sharding_configs['{key}'] ({sharding[key]})" in msg and f"hybrid_configs['{key}'] ({hybrid[key]})" in msg


@pytest.mark.parametrize("sharding, hybrid", [
    ({"mp_degree": 2, "pp_degree": 2}, {"mp_degree": 2, "pp_degree": 2}),
    ({"mp_degree": 2}, {"mp_degree": 1}),        # hybrid_configs left at its default
    ({"mp_degree": 2, "pp_degree": 4}, {}),
])
def test_agreeing_or_default_hybrid_degrees_pass(sharding, hybrid):
    check_hybrid_degrees(sharding, hybrid)
