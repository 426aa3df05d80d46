"""The strategy compiler: which meta-optimizers Paddle 3.3.1 chains for each strategy, and how.

The chains below were recorded from Paddle 3.3.1 (legacy IR, ``FLAGS_enable_pir_api=0``) by
printing ``StrategyCompiler._get_applied_meta_list()`` right after ``generate_optimizer`` in
``fleet.distributed_optimizer(opt, strategy).minimize(loss)`` on the three-fc net of Paddle's
``fleet_meta_optimizer_base.py`` (``PaddleCloudRoleMaker(is_collective=True)``, trainer 1 of 2
endpoints, Momentum unless "adam" is named); the final strategies likewise from
``_get_valid_strategy``. Here the same choice is made by refimpl's compiler over refimpl's classes.
"""
import types

import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.fleet.base.meta_optimizer_factory import META_OPTIMIZER_NAMES, MetaOptimizerFactory
from refimpl.distributed.fleet.base.strategy_compiler import StrategyCompiler, longest_chain, maximum_path_len_algo
from refimpl.distributed.fleet.meta_optimizers import DistributedOptimizer
from refimpl.framework import Program, unique_name

SWITCHES = {
    "gm": lambda s: (setattr(s, "gradient_merge", True), setattr(s, "gradient_merge_configs", {"k_steps": 2})),
    "amp": lambda s: setattr(s, "amp", True),
    "recompute": lambda s: (setattr(s, "recompute", True),
                            setattr(s, "recompute_configs", {"checkpoints": ["fc_0.tmp_2", "fc_1.tmp_2"]})),
    "lars": lambda s: setattr(s, "lars", True), "lamb": lambda s: setattr(s, "lamb", True),
    "dgc": lambda s: setattr(s, "dgc", True), "localsgd": lambda s: setattr(s, "localsgd", True),
    "alocalsgd": lambda s: setattr(s, "adaptive_localsgd", True),
    "fp16ar": lambda s: setattr(s, "fp16_allreduce", True),
    "pp": lambda s: setattr(s, "pipeline", True),
    "nograph": lambda s: setattr(s, "without_graph_optimization", False),
    "adam": lambda s: None,
}

R, GM, AMP, RC = "RawProgramOptimizer", "GradientMergeOptimizer", "AMPOptimizer", "RecomputeOptimizer"
# Paddle 3.3.1's chains (see the module docstring)
PADDLE_CHAINS = [
    ("", [R]), ("nograph", []), ("gm", [R, GM]), ("amp", [R, AMP]), ("recompute", [R, RC]),
    ("lars", [R, "LarsOptimizer"]), ("lamb adam", [R, "LambOptimizer"]), ("lamb", [R]), ("lars adam", [R]),
    ("dgc", [R, "DGCOptimizer"]), ("dgc adam", [R]), ("localsgd", [R, "LocalSGDOptimizer"]),
    ("alocalsgd", ["AdaptiveLocalSGDOptimizer"]), ("fp16ar", ["FP16AllReduceOptimizer"]),
    ("amp recompute", [R, AMP, RC]), ("amp recompute lars", [R, AMP, RC, "LarsOptimizer"]),
    ("amp recompute lamb adam", [R, AMP, RC, "LambOptimizer"]), ("gm amp", [R, GM, AMP]),
    ("gm recompute", [R, GM, RC]), ("gm lars", [R, GM, "LarsOptimizer"]), ("dgc recompute", [R, RC, "DGCOptimizer"]),
    ("amp dgc", [R, AMP]), ("localsgd amp", [R, "LocalSGDOptimizer", AMP]),
    ("localsgd alocalsgd", [R, "LocalSGDOptimizer"]), ("fp16ar lars", ["FP16AllReduceOptimizer", "LarsOptimizer"]),
    ("fp16ar amp", [R, AMP]), ("gm localsgd", [R, GM]), ("pp", ["PipelineOptimizer"]), ("pp gm", [R, GM]),
    ("pp amp", ["PipelineOptimizer", AMP]), ("pp recompute", ["PipelineOptimizer", RC]),
    ("pp gm recompute", [R, GM, RC]),
]


class _RoleMaker:
    """Collective trainer 1 of 2 (as Paddle's tests set PADDLE_TRAINER_ID / PADDLE_TRAINER_ENDPOINTS)."""
    _is_collective = True

    def _worker_index(self):
        return 1

    def _worker_num(self):
        return 2

    def _get_trainer_endpoints(self):
        return ["127.0.0.1:36001", "127.0.0.1:36002"]


def _net():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 32], "float32")
        h = paddle.static.nn.fc(paddle.static.nn.fc(x, 64, activation="tanh"), 256, activation="tanh")
        loss = paddle.mean(paddle.static.nn.fc(h, 2, activation="softmax"))
    return loss


def _compile(combo):
    s = DistributedStrategy()
    for name in combo.split():
        SWITCHES[name](s)
    inner = paddle.optimizer.Adam(0.01) if "adam" in combo.split() else paddle.optimizer.Momentum(0.01, 0.9)
    opt = DistributedOptimizer(inner, s, fleet=types.SimpleNamespace(role_maker=_RoleMaker()))
    head, chain, valid = opt._compile(_net())
    return head, chain, valid


@pytest.mark.parametrize("combo, expected", PADDLE_CHAINS, ids=[c or "default" for c, _ in PADDLE_CHAINS])
def test_chain_is_paddles(combo, expected):
    head, chain, valid = _compile(combo)
    assert [type(o).__name__ for o in chain] == expected
    assert (head is None) == (not expected)
    for outer, inner in zip(chain, chain[1:]):  # linked through _update_inner_optimizer
        assert outer.inner_opt is inner


def test_valid_strategy_disables_what_is_not_applied():
    """Paddle 3.3.1 final strategies: "amp dgc" drops dgc (AMP black-lists it); "pp gm" drops the pipeline;
    "pp" drops the raw program (without_graph_optimization False); "lamb" with Momentum drops lamb."""
    _, _, v = _compile("amp dgc")
    assert (v.amp, v.dgc, v.without_graph_optimization) == (True, False, True)
    _, _, v = _compile("pp gm")
    assert (v.pipeline, v.gradient_merge, v.without_graph_optimization) == (False, True, True)
    _, _, v = _compile("pp")
    assert (v.pipeline, v.without_graph_optimization) == (True, False)
    _, _, v = _compile("lamb")
    assert v.lamb is False and v.lamb_configs["lamb_weight_decay"] == pytest.approx(0.01)  # {} sets no key
    _, _, v = _compile("recompute")
    assert v.recompute is True and v.recompute_configs["checkpoints"] == ["fc_0.tmp_2", "fc_1.tmp_2"]


def test_recompute_without_checkpoints_is_silently_off():
    s = DistributedStrategy()
    s.recompute = True
    opt = DistributedOptimizer(paddle.optimizer.Momentum(0.01, 0.9), s,
                               fleet=types.SimpleNamespace(role_maker=_RoleMaker()))
    _, chain, v = opt._compile(_net())
    assert [type(o).__name__ for o in chain] == [R] and v.recompute is False


def test_factory_order_is_paddles():
    """``meta_optimizer_factory.meta_optimizer_names`` printed by Paddle 3.3.1."""
    assert META_OPTIMIZER_NAMES == [
        "AMPOptimizer", "ASPOptimizer", "AdaptiveLocalSGDOptimizer", "DGCOptimizer", "FP16AllReduceOptimizer",
        "GradientMergeOptimizer", "LambOptimizer", "LarsOptimizer", "LocalSGDOptimizer",
        "ParameterServerOptimizer", "PipelineOptimizer", "QATOptimizer", "RawProgramOptimizer",
        "RecomputeOptimizer", "ShardingOptimizer", "TensorParallelOptimizer"]
    sgd = paddle.optimizer.SGD(0.1)
    made = MetaOptimizerFactory()._get_valid_meta_optimizers(sgd, ["ShardingOptimizer"])
    assert [type(o).__name__ for o in made] == [n for n in META_OPTIMIZER_NAMES if n != "ShardingOptimizer"]
    assert all(o.inner_opt is sgd for o in made)


class _Fake:
    def __init__(self, name, white=()):
        self.name, self.meta_optimizers_white_list, self.meta_optimizers_black_list = name, list(white), []
        self.inner_opt = None

    def _can_update(self, other):
        return other.name in self.meta_optimizers_white_list

    def _update_inner_optimizer(self, opt):
        self.inner_opt = opt


def test_maximum_path_len_algo():
    a, b, c, d = _Fake("a", ["b", "c"]), _Fake("b", ["c"]), _Fake("c"), _Fake("d", ["c"])
    assert maximum_path_len_algo([]) is None
    assert maximum_path_len_algo([c, d][:1]) == [c]
    assert maximum_path_len_algo([c, _Fake("e")])[0] is c      # no edge: the first one alone
    chain = maximum_path_len_algo([d, c, b, a])                 # a -> b -> c is the longest
    assert [o.name for o in chain] == ["a", "b", "c"] and a.inner_opt is b and b.inner_opt is c
    # a -> b and b -> c but not a -> c: only one hop (Paddle's rule)
    x, y, z = _Fake("x", ["y"]), _Fake("y", ["z"]), _Fake("z")
    assert len(maximum_path_len_algo([x, y, z])) == 2
    with pytest.raises(InvalidArgument, match="ring"):
        maximum_path_len_algo([_Fake("p", ["q"]), _Fake("q", ["p"])])


# adjacency matrices and what Paddle 3.3.1's strategy_compiler.floyd returns for them
# (FLAGS_enable_pir_api=0 /tmp/pd33/bin/python: print(floyd(edge)))
PADDLE_FLOYD = [
    # AMP, FP16AllReduce, GradientMerge, Lamb with their white lists: FP16AllReduce -> GM -> AMP -> Lamb,
    # although FP16AllReduce may not wrap AMP directly
    ([[0, 0, 0, 1], [0, 0, 1, 1], [1, 0, 0, 1], [0, 0, 0, 0]], [1, 2, 0, 3]),
    ([[0, 1, 0], [0, 0, 1], [0, 0, 0]], [0, 1]),
    ([[0, 0], [0, 0]], [0]),
]


@pytest.mark.parametrize("edge, expected", PADDLE_FLOYD)
def test_longest_chain_is_paddles_floyd(edge, expected):
    assert longest_chain(len(edge), lambda i, j: edge[i][j] == 1) == expected


def test_generate_optimizer_without_candidates_returns_the_optimizer():
    sc, sgd = StrategyCompiler(), object()
    assert sc.generate_optimizer(None, None, sgd, None, [], []) == (sgd, None)
    assert sc._get_applied_meta_list() == [] and sc._get_applied_graph_list() == []
