"""Tensor parallelism in static mode, its programs and its errors: paddle.distributed.split, the
fleet.meta_parallel layers and TensorParallelOptimizer (refimpl/distributed/fleet/layers/mpu/,
meta_optimizers/tensor_parallel_optimizer.py). The numbers are tests/test_tensor_parallel_numbers.py's.

(a) The programs of trainer 1 of 4 (and of 2) equal Paddle 3.3.1's, op for op, variable for variable,
    ring for ring (recorded in tests/tensor_parallel_paddle_programs.py, read from Paddle 3.3.1).
(b) Bad input: sizes not divisible by the degree, degrees not dividing the world, num_partitions not the
    ring's size: typed errors naming the option and value, raised while building and the same on every
    rank; inputs whose shapes differ across ranks: typed errors naming the tensor-parallel op.
(c) The groups and seeds fleet.init leaves: the static group table (public accessor), the user's seed
    (a static init does not reseed), model_parallel_random_seed's per-rank tracker seeds.
"""
import os
import re

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

import tensor_parallel_paddle_programs as PD

COMM_OPS = ("c_gen_nccl_id", "c_comm_init")
#: the numbers' helpers, now in test_tensor_parallel_numbers; tests/test_tensor_pipeline.py still reads them here
# ---- the nets (the ones recorded from Paddle) ---------------------------------------------------------
def _strategy(degree=2, extra=()):
    """tensor_parallel at ``degree``, with "recompute" (the checkpoints recorded from Paddle) / "amp"."""
    s = DistributedStrategy()
    s.tensor_parallel = True
    s.tensor_parallel_configs = {"tensor_parallel_degree": degree}
    if "recompute" in extra:
        s.recompute = True
        s.recompute_configs = {"checkpoints": ["relu_0.tmp_0", "tmp_0"]}
    if "amp" in extra:
        s.amp = True
    return s


def _forward(kind, dtype):
    from refimpl.distributed import fleet
    x = paddle.static.data(name="x", shape=[4, 8], dtype=dtype)
    ids = paddle.static.data(name="ids", shape=[4, 4], dtype="int64")
    if kind == "split":
        emb = paddle.distributed.split(ids, (16, 8), "embedding", num_partitions=2)
        h = paddle.distributed.split(x, (8, 16), "linear", axis=1, num_partitions=2, gather_out=False)
        h = paddle.nn.functional.relu(h)
        h = paddle.distributed.split(h, (16, 8), "linear", axis=0, num_partitions=2)
        h = paddle.distributed.split(h, (8, 6), "linear", axis=1, num_partitions=2)
        return paddle.mean(h) + paddle.mean(emb)
    mpp = fleet.meta_parallel
    emb = mpp.VocabParallelEmbedding(16, 8)(ids)
    h = mpp.ColumnParallelLinear(8, 16, has_bias=True, gather_output=False)(x)
    h = paddle.nn.functional.relu(h)
    h = mpp.RowParallelLinear(16, 8, has_bias=True, input_is_parallel=True)(h)
    logits = mpp.ColumnParallelLinear(8, 6, has_bias=False, gather_output=False)(h)
    label = paddle.static.data(name="label", shape=[4, 1], dtype="int64")
    return paddle.mean(mpp.ParallelCrossEntropy()(logits, label)) + paddle.mean(emb)


def _build(kind, opt=None, role_maker=None, dtype="float32", degree=2, opt_degree=None, extra=()):
    """main, startup, loss of ``kind`` minimized by fleet with TensorParallelOptimizer."""
    from refimpl.distributed import fleet
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        if role_maker is None:
            fleet.init(is_collective=True, strategy=_strategy(degree))
        else:
            fleet.init(role_maker, strategy=_strategy(degree))
        loss = _forward(kind, dtype)
        opt = opt or paddle.optimizer.SGD(0.1)
        fleet.distributed_optimizer(opt, strategy=_strategy(opt_degree or degree, extra)).minimize(loss)
    return main, startup, loss


@pytest.fixture
def trainer_1_of(monkeypatch):
    def setup(n):
        for key in list(os.environ):
            if key.startswith(("PADDLE_", "TRAINING_ROLE")):
                monkeypatch.delenv(key)
        monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
        monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", ",".join(f"127.0.0.1:{36001 + i}" for i in range(n)))
        monkeypatch.setenv("PADDLE_TRAINERS_NUM", str(n))
    return setup


def _lone_trainer(kind, **kw):
    from refimpl.distributed.fleet import PaddleCloudRoleMaker
    return _build(kind, role_maker=PaddleCloudRoleMaker(is_collective=True), **kw)


# ---- (a) programs equal Paddle's -----------------------------------------------------------------------
def _line(op):
    ins = ",".join(a for s in sorted(op.input_names) for a in op.input(s))
    outs = ",".join(a for s in sorted(op.output_names) for a in op.output(s))
    ring = op.attr("ring_id") if op.has_attr("ring_id") else None
    return f"{op.type} {ins} -> {outs}" + ("" if ring is None else f" @{ring}")


def _split_startup(startup):
    """(the startup ops less the comm bring-ups, [(ops before, ring, rank, nranks, endpoint index)])."""
    ops, comm, plain = startup.global_block().ops, [], []
    i = 0
    while i < len(ops):
        if ops[i].type == "c_gen_nccl_id":
            gen, init = ops[i], ops[i + 1]
            eps = init.attr("endpoints").split(",")
            assert [o.type for o in ops[i + 1:i + 5]] == ["c_comm_init", "fill_constant", "all_reduce",
                                                          "c_sync_calc_stream"]
            assert ops[i + 3].attr("ring_id") == 1  # the barrier on the global ring
            comm.append((len(plain), gen.attr("ring_id"), gen.attr("rank"), init.attr("nranks"),
                         eps.index(gen.attr("endpoint"))))
            i += 5
            continue
        plain.append(_line(ops[i]))
        i += 1
    return plain, comm


@pytest.mark.parametrize("kind", ["split", "mp"])
@pytest.mark.parametrize("world", [4, 2])
def test_programs_are_paddles(trainer_1_of, kind, world):
    trainer_1_of(world)
    main, startup, _ = _lone_trainer(kind)
    key = f"{kind.upper()}_{world}"
    if world == 4:
        assert [_line(op) for op in main.global_block().ops] == getattr(PD, f"MAIN_{key}")
    else:
        assert [op.type for op in main.global_block().ops] == getattr(PD, f"MAIN_TYPES_{key}")
    plain, comm = _split_startup(startup)
    assert plain == getattr(PD, f"STARTUP_{key}")
    assert comm == [tuple(c) for c in getattr(PD, f"COMM_{key}")]
    params = {p.name: (list(p.shape), bool(getattr(p, "is_distributed", False)))
              for p in main.global_block().all_parameters()}
    assert params == getattr(PD, f"PARAMS_{key}")


@pytest.mark.parametrize("kind", ["split", "mp"])
def test_attrs_are_paddles(trainer_1_of, kind):
    trainer_1_of(4)
    main, _, _ = _lone_trainer(kind)
    keys = ("rank", "nranks", "start_index", "vocab_size", "scale", "use_model_parallel", "ignore_index", "root",
            "use_calc_stream")
    ops = main.global_block().ops
    got = [(i, op.type, {k: op.attr(k) for k in sorted(keys) if k in want})
           for i, op_type, want in getattr(PD, f"ATTRS_{kind.upper()}_4") for op in [ops[i]]]
    assert got == [tuple(a) for a in getattr(PD, f"ATTRS_{kind.upper()}_4")]


def test_recompute_program_is_paddles(trainer_1_of):
    trainer_1_of(4)
    main, _, _ = _lone_trainer("mp", extra=("recompute",))
    assert [_line(op) for op in main.global_block().ops] == PD.MAIN_MP_RC_4
    from refimpl.distributed import fleet
    assert fleet._get_applied_meta_list() == ["TensorParallelOptimizer", "RecomputeOptimizer"]


def test_split_marks_the_startup_copies_too(trainer_1_of):
    """split's _set_var_distributed marks both programs' parameters; the mp layers only the main ones
    (so TensorParallelOptimizer broadcasts their shards over the model-parallel ring, as Paddle does)."""
    trainer_1_of(2)
    for kind, marked in (("split", True), ("mp", False)):
        main, startup, _ = _lone_trainer(kind)
        dist = [p.name for p in main.global_block().all_parameters() if getattr(p, "is_distributed", False)]
        assert dist and all(bool(getattr(startup.global_block().var(n), "is_distributed", False)) == marked
                            for n in dist)


# ---- (b) bad input: typed errors naming the option, the same on every rank -------------------------------
def _x(shape=(4, 8), dtype="float32"):
    return paddle.static.data(name="x", shape=list(shape), dtype=dtype)


BAD_SIZES = [
    (lambda mpp: mpp.ColumnParallelLinear(8, 7), r"ColumnParallelLinear: out_features=7 .*degree 2"),
    (lambda mpp: mpp.RowParallelLinear(7, 8), r"RowParallelLinear: in_features=7 .*degree 2"),
    (lambda mpp: mpp.VocabParallelEmbedding(15, 8), r"VocabParallelEmbedding: num_embeddings=15 .*degree 2"),
    (lambda mpp: paddle.distributed.split(_x((4, 4), "int64"), (15, 8), "embedding", num_partitions=2),
     r"vocabulary size size\[0\]=15 .*num_partitions=2"),
    (lambda mpp: paddle.distributed.split(_x(), (8, 7), "linear", axis=1, num_partitions=2),
     r"columns .* size\[1\]=7 .*num_partitions=2"),
    (lambda mpp: paddle.distributed.split(_x(), (7, 8), "linear", axis=0, num_partitions=2),
     r"rows .* size\[0\]=7 .*num_partitions=2"),
    (lambda mpp: paddle.distributed.split(_x(), (8, 8), "linear", axis=2, num_partitions=2), r"axis=2"),
    (lambda mpp: paddle.distributed.split(_x(), (8, 8), "conv", num_partitions=2), r"operation .*'conv'"),
    (lambda mpp: paddle.distributed.split(_x(), (8, 8, 1), "linear", num_partitions=2), r"two elements"),
]


@pytest.mark.parametrize("make, words", BAD_SIZES)
def test_sizes_not_divisible_are_typed_errors_on_every_rank(make, words):
    from refimpl.distributed import fleet

    def rank_fn():
        main, startup = Program(), Program()
        with paddle.static.program_guard(main, startup), unique_name.guard():
            fleet.init(is_collective=True, strategy=_strategy(2))
            try:
                make(fleet.meta_parallel)
            except InvalidArgument as e:   # (nothing appended to the program)
                return str(e), len(main.global_block().ops)
        return None
    got = run_in_process(2, rank_fn, timeout=30)
    assert got[0] is not None and got[0] == got[1] and got[0][1] == 0, got
    assert re.search(words, got[0][0]), got[0][0]


def test_degree_not_dividing_the_world_fails_at_init_on_every_rank():
    from refimpl.distributed import fleet

    def rank_fn():
        try:
            fleet.init(is_collective=True, strategy=_strategy(3))
        except InvalidArgument as e:
            return str(e)
        return None
    msgs = run_in_process(4, rank_fn, timeout=30)
    assert msgs[0] is not None and len(set(msgs)) == 1 and "4 workers" in msgs[0] and "3" in msgs[0], msgs


def test_hybrid_degrees_not_multiplying_to_the_world_fail_at_init_on_every_rank():
    from refimpl.distributed import fleet

    def rank_fn():
        s = _strategy(2)
        s.hybrid_configs = {"dp_degree": 3, "mp_degree": 2}
        try:
            fleet.init(is_collective=True, strategy=s)
        except PreconditionNotMet as e:
            return str(e)
        return None
    msgs = run_in_process(4, rank_fn, timeout=30)
    assert msgs[0] is not None and len(set(msgs)) == 1, msgs
    assert "nranks: 4" in msgs[0] and "mp_num: 2" in msgs[0] and "dp_num: 3" in msgs[0]


def test_degree_not_dividing_the_world_fails_before_minimize_builds(trainer_1_of):
    """The optimizer's strategy (degree 3) overrides init's (2): TensorParallelOptimizer refuses it before
    the backward is built."""
    from refimpl.distributed import fleet
    from refimpl.distributed.fleet import PaddleCloudRoleMaker
    trainer_1_of(4)
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(PaddleCloudRoleMaker(is_collective=True), strategy=_strategy(2))
        loss = _forward("mp", "float32")
        before = [op.type for op in main.global_block().ops]
        with pytest.raises(InvalidArgument, match=r"tensor_parallel_degree'\] = 3 does not divide the 4 workers"):
            fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy=_strategy(3)).minimize(loss)
    assert [op.type for op in main.global_block().ops] == before


def test_mp_layers_without_a_model_parallel_group(trainer_1_of):
    from refimpl.distributed import fleet
    from refimpl.distributed.fleet import PaddleCloudRoleMaker
    trainer_1_of(2)
    with paddle.static.program_guard(Program(), Program()):
        fleet.init(PaddleCloudRoleMaker(is_collective=True))
        groups = fleet.fleet.get_static_comm_groups()   # (refimpl's accessor, on the instance)
        assert groups.has_group("global") and not groups.has_group("model")
        with pytest.raises(PreconditionNotMet, match=r"tensor_parallel = True .*got tensor_parallel=False"):
            fleet.meta_parallel.ColumnParallelLinear(8, 16)


def test_dygraph_only_mp_configs_are_refused(trainer_1_of):
    from refimpl.core.errors import Unimplemented
    from refimpl.distributed import fleet
    from refimpl.distributed.fleet import PaddleCloudRoleMaker
    trainer_1_of(2)
    s = _strategy(2)
    s.hybrid_configs["mp_configs"].mp_async_allreduce = True
    with paddle.static.program_guard(Program(), Program()):
        fleet.init(PaddleCloudRoleMaker(is_collective=True), strategy=s)
        with pytest.raises(Unimplemented, match=r"RowParallelLinear: hybrid_configs\['mp_configs'\]"
                                                r".mp_async_allreduce = True"):
            fleet.meta_parallel.RowParallelLinear(8, 16)


def test_split_num_partitions_not_the_ring_size_fails_while_building():
    """split's ops run on ring 0, here the 'model' group of 2: num_partitions=3 is refused while building,
    on every rank, before anything is appended (it used to fail only when the program ran)."""
    from refimpl.distributed import fleet

    def rank_fn():
        main, startup = Program(), Program()
        with paddle.static.program_guard(main, startup), unique_name.guard():
            fleet.init(is_collective=True, strategy=_strategy(2))
            x = paddle.static.data(name="x", shape=[4, 8], dtype="float32")
            before = len(main.global_block().ops)
            try:
                paddle.distributed.split(x, (8, 6), "linear", axis=1, num_partitions=3)
            except InvalidArgument as e:
                return str(e), len(main.global_block().ops) - before
        return None
    got = run_in_process(2, rank_fn, timeout=30)
    assert got[0] is not None and got[0] == got[1] and got[0][1] == 0, got
    assert re.search(r"num_partitions=3 .*ring_id 0.* has 2 ranks", got[0][0]), got[0][0]


def _uneven(case):
    """Rank 0 feeds 3 rows, rank 1 two: the ring's ranks disagree on the shape."""
    from refimpl.ops import model_parallel_ops as mp
    r = context.current().rank
    rows = 3 if r == 0 else 2
    x, kw = np.ones((rows, 4)), {"rank": r, "nranks": 2, "ring_id": 0}
    calls = {"c_concat": lambda: mp.c_concat(x, **kw), "mp_allreduce_sum": lambda: mp.mp_allreduce_sum(x, ring_id=0),
             "c_softmax_with_cross_entropy": lambda: mp.c_softmax_with_cross_entropy(
                 x, np.zeros((rows, 1), np.int64), ignore_index=-100, **kw)}
    try:
        calls[case]()
    except InvalidArgument as e:
        return str(e)


@pytest.mark.parametrize("case", ["c_concat", "mp_allreduce_sum", "c_softmax_with_cross_entropy"])
def test_shapes_differing_across_ranks_name_the_tp_op(case):
    msgs = run_in_process(2, _uneven, case, timeout=30)
    for msg in msgs:
        assert msg is not None and msg.startswith(f"(InvalidArgument) {case}: "), msgs
        assert "[3, 4]" in msg or "[3]" in msg, msg


# ---- (c) groups and seeds after fleet.init -------------------------------------------------------------
def test_static_comm_groups_are_public_also_under_a_hybrid_group():
    """fleet.get_static_comm_groups(): the 'global' and 'model' groups init made, also when hybrid_configs
    built a HybridCommunicateGroup (the tensor-parallel layers read their group from it)."""
    from refimpl.distributed import fleet

    def rank_fn(hybrid):
        s = _strategy(2)
        if hybrid:
            s.hybrid_configs = {"dp_degree": 2, "mp_degree": 2}
        fleet.init(is_collective=True, strategy=s)
        groups = fleet.fleet.get_static_comm_groups()  # (refimpl's accessor, on the instance)
        model = groups.get_model_parallel_group()
        with paddle.static.program_guard(Program(), Program()), unique_name.guard():
            layer = fleet.meta_parallel.ColumnParallelLinear(8, 16, gather_output=False)
        return (groups.get_group("global").id, model.id, model.rank, model.nranks, list(model.ranks),
                list(layer.weight.shape))
    for hybrid in (False, True):
        got = run_in_process(4, rank_fn, hybrid, timeout=30)
        assert got == [(0, 0, r % 2, 2, [0, 1] if r < 2 else [2, 3], [8, 8]) for r in range(4)], (hybrid, got)


def _startup_draw():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 4], "float32")
        paddle.static.nn.fc(x, 3)
    scope = paddle.static.Scope()
    paddle.static.Executor().run(startup, scope=scope)
    return np.array(scope.find_var("fc_0.w_0").get_tensor())


def test_static_init_with_hybrid_mp_leaves_the_users_seed():
    """paddle.seed(1), then a static fleet.init with hybrid mp_degree=2: as Paddle's static init, the seed is
    not replaced (Paddle's dygraph init reseeds), so startup draws what a lone process seeded with 1 draws."""
    from refimpl.distributed import fleet

    def rank_fn():
        paddle.seed(1)
        s = DistributedStrategy()
        s.hybrid_configs = {"dp_degree": 1, "mp_degree": 2, "pp_degree": 1}
        fleet.init(is_collective=True, strategy=s)
        hcg = fleet.get_hybrid_communicate_group()
        return hcg.get_model_parallel_world_size(), _startup_draw()
    got = run_in_process(2, rank_fn, timeout=30)
    paddle.seed(1)
    want = _startup_draw()
    for mp_size, values in got:
        assert mp_size == 2
        np.testing.assert_array_equal(values, want)


def test_model_parallel_random_seed_seeds_each_mp_rank():
    """Called by the script (fleet.init does not): the global seed on every rank, and the model-parallel RNG
    tracker seeded with seed + 1 + mp_rank (no pipeline)."""
    from refimpl.core import random as core_random
    from refimpl.distributed import fleet

    def rank_fn():
        s = _strategy(2)
        s.hybrid_configs = {"dp_degree": 2, "mp_degree": 2}
        fleet.init(is_collective=True, strategy=s)
        fleet.meta_parallel.model_parallel_random_seed(100)
        hcg = fleet.get_hybrid_communicate_group()
        tracker = fleet.meta_parallel.get_rng_state_tracker()
        glob = core_random.default_cpu_generator().random()
        with tracker.rng_state():
            local = core_random.default_cpu_generator().random()
        return hcg.get_model_parallel_rank(), hcg.get_data_parallel_rank(), glob, local
    got = run_in_process(4, rank_fn, timeout=30)
    assert [(m, d) for m, d, _, _ in got] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert len({g for _, _, g, _ in got}) == 1 and got[0][2] == core_random.Generator(100).random()
    for mp_rank, _, _, local in got:
        assert local == core_random.Generator(100 + 1 + mp_rank).random()
