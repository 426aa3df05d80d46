"""Tensor-parallel ops need a meta-optimizer that brings up their model-parallel ring (distributed_optimizer.py)."""

import pytest

import refimpl as paddle
from refimpl.core.errors import PreconditionNotMet
from refimpl.distributed.fleet import DistributedStrategy, PaddleCloudRoleMaker
from refimpl.framework import Program, unique_name

from fleet_env import as_trainer


@pytest.fixture
def trainer_1_of_2(monkeypatch):
    as_trainer(monkeypatch, 1, "127.0.0.1:36001,127.0.0.1:36002", trainers_num=2)


def _minimize(strategy):
    from refimpl.distributed import fleet
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(PaddleCloudRoleMaker(is_collective=True), strategy=strategy)
        x = paddle.static.data(name="x", shape=[4, 8], dtype="float32")
        h = paddle.distributed.split(x, (8, 16), "linear", axis=1, num_partitions=2)
        opt = fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy=strategy)
        opt.minimize(paddle.mean(h))
    return opt, main


def _tp(**switches):
    s = DistributedStrategy()
    s.tensor_parallel = True
    s.tensor_parallel_configs = {"tensor_parallel_degree": 2}
    for k, v in switches.items():
        setattr(s, k, v)
    return s


def test_tensor_parallel_applies(trainer_1_of_2):
    opt, main = _minimize(_tp())
    assert opt._get_applied_meta_list() == ["TensorParallelOptimizer"]


def test_tensor_parallel_dropped_by_the_compiler_is_refused(trainer_1_of_2):
    # gradient merge's chain leaves TensorParallelOptimizer out (as Paddle 3.3.1's compiler does)
    with pytest.raises(PreconditionNotMet, match=r"tensor-parallel ops \['c_concat', 'c_identity'\].*GradientMerge"):
        _minimize(_tp(gradient_merge=True, gradient_merge_configs={"k_steps": 2}))


def test_tensor_parallel_ops_under_plain_data_parallelism_are_refused(trainer_1_of_2):
    with pytest.raises(PreconditionNotMet, match="bring up no model-parallel ring"):
        _minimize(DistributedStrategy())
