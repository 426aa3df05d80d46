"""Tensor parallelism in static mode: paddle.distributed.split, the fleet.meta_parallel layers and
TensorParallelOptimizer (refimpl/distributed/fleet/layers/mpu/, meta_optimizers/tensor_parallel_optimizer.py).

(a) The programs of trainer 1 of 4 (and of 2) equal Paddle 3.3.1's, op for op, variable for variable,
    ring for ring (recorded in tests/tensor_parallel_paddle_programs.py, read from Paddle 3.3.1).
(b) Numbers: the same nets on tp=2 and tp=2 x dp=2 in-process ranks in float64 give, after a few SGD /
    Adam steps, the parameters a hand-written one-device NumPy training on the whole batch gives
    (the shards gathered), within 1e-6; and the startup broadcasts leave the shards as Paddle's do.
(c) Bad input: sizes not divisible by the degree, degrees not dividing the world: typed errors naming the
    option and value, raised while building and the same on every rank.
"""
import os
import re
import sys

import numpy as np
import pytest

import refimpl
import refimpl as paddle
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

import tensor_parallel_paddle_programs as PD

COMM_OPS = ("c_gen_nccl_id", "c_comm_init")


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


# ---- (b) numbers: tp=2 and tp=2 x dp=2 against one device ----------------------------------------------
#: name -> (the net's role of it, the axis its shards split; None: replicated)
LAYOUT = {"split": {"_parallel_embedding_0.w_0": ("E", 0), "linear_0.w_0": ("W0", 1), "linear_0.b_0": ("b0", 0),
                    "linear_1.w_0": ("W1", 0), "linear_1.b_0": ("b1", None), "linear_2.w_0": ("W2", 1),
                    "linear_2.b_0": ("b2", 0)},
          "mp": {"embedding_0.w_0": ("E", 0), "linear_0.w_0": ("W0", 1), "linear_0.b_0": ("b0", 0),
                 "linear_1.w_0": ("W1", 0), "linear_1.b_0": ("b1", None), "linear_2.w_0": ("W2", 1)}}
FULL_SHAPES = {"E": (16, 8), "W0": (8, 16), "b0": (16,), "W1": (16, 8), "b1": (8,), "W2": (8, 6), "b2": (6,)}


def _data(steps=3, batch=4):
    rng = np.random.RandomState(7)
    return [(rng.randn(batch, 8), rng.randint(0, 16, (batch, 4)).astype("int64"),
             rng.randint(0, 6, (batch, 1)).astype("int64")) for _ in range(steps)]


def _full_init(kind):
    rng = np.random.RandomState(11)
    return {role: rng.uniform(-0.5, 0.5, FULL_SHAPES[role]) for role, _ in LAYOUT[kind].values()}


def _grads(kind, P, x, ids, label):
    """d loss / d P of the net on one device (closed form)."""
    g = {"E": np.zeros_like(P["E"])}
    np.add.at(g["E"], ids.ravel(), 1.0 / (ids.size * P["E"].shape[1]))   # mean(emb)
    a = x @ P["W0"] + P["b0"]
    h = np.maximum(a, 0)
    h2 = h @ P["W1"] + P["b1"]
    if kind == "mp":   # mean of the cross entropy of h2 @ W2
        logits = h2 @ P["W2"]
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(x)), label[:, 0]] -= 1
        dout = p / len(x)
    else:              # mean of h2 @ W2 + b2
        dout = np.full((len(x), P["W2"].shape[1]), 1.0 / (len(x) * P["W2"].shape[1]))
        g["b2"] = dout.sum(0)
    g["W2"] = h2.T @ dout
    dh2 = dout @ P["W2"].T
    g["W1"], g["b1"] = h.T @ dh2, dh2.sum(0)
    da = (dh2 @ P["W1"].T) * (a > 0)
    g["W0"], g["b0"] = x.T @ da, da.sum(0)
    return g


#: Adam's beta1, beta2, epsilon as its kernel sees them: float attrs of the op (float32), widened to double
B1, B2, EPS = (float(np.float32(v)) for v in (0.9, 0.999, 1e-8))


def _one_device(kind, opt, batches, pow_dtype="float64"):
    """The net trained on one device: SGD(0.1) or Adam(0.01), whose beta1^t / beta2^t accumulators
    are kept in ``pow_dtype`` (the dtype the program gives them)."""
    P = {k: v.copy() for k, v in _full_init(kind).items()}
    m = {k: np.zeros_like(v) for k, v in P.items()}
    v2 = {k: np.zeros_like(v) for k, v in P.items()}
    t = np.dtype(pow_dtype).type
    pow1, pow2 = t(B1), t(B2)
    for x, ids, label in batches:
        for k, g in _grads(kind, P, x, ids, label).items():
            if opt == "sgd":
                P[k] -= 0.1 * g
                continue
            m[k] = B1 * m[k] + (1 - B1) * g      # Paddle's adam: lr * sqrt(1 - b2^t) / (1 - b1^t), eps * sqrt(..)
            v2[k] = B2 * v2[k] + (1 - B2) * g * g
            c2 = np.sqrt(1 - float(pow2))
            P[k] -= 0.01 * c2 / (1 - float(pow1)) * m[k] / (np.sqrt(v2[k]) + EPS * c2)
        pow1, pow2 = t(pow1 * t(B1)), t(pow2 * t(B2))
    return P


def _shard(full, axis, mp_rank, mp):
    if axis is None:
        return full
    return np.split(full, mp, axis=axis)[mp_rank]


def _train_rank(kind, opt, world, batches, extra=()):
    """This rank's part (tp=2, dp=world/2): (startup values, trained values, beta-pow dtypes)."""
    mp, dp = 2, world // 2
    init = _full_init(kind)
    optimizer = paddle.optimizer.SGD(0.1) if opt == "sgd" else paddle.optimizer.Adam(0.01)
    main, startup, loss = _build(kind, opt=optimizer, dtype="float64", extra=extra)
    r = context.current().rank   # (under mpiexec: known once fleet.init has joined the world)
    paddle.seed(10 + r)    # each rank draws its own startup values; the broadcasts decide what stays
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    start = {n: np.array(scope.find_var(n).get_tensor()) for n in LAYOUT[kind]}
    for n, (role, axis) in LAYOUT[kind].items():   # the test's own start values, as a checkpoint would
        scope.var(n).get_tensor().set(_shard(init[role], axis, r % mp, mp))
    b = len(batches[0][0]) // dp
    for x, ids, label in batches:
        part = slice((r // mp) * b, (r // mp + 1) * b)
        feed = {"x": x[part], "ids": ids[part]}
        if kind == "mp":
            feed["label"] = label[part]
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    pows = [v.dtype for v in startup.global_block().vars.values() if "beta1_pow_acc" in v.name]
    return start, {n: np.array(scope.find_var(n).get_tensor()) for n in LAYOUT[kind]}, pows


def _ranks(kind, opt, world, batches, extra=()):
    return run_in_process(world, _train_rank, kind, opt, world, batches, extra, timeout=120)


def _gathered(kind, trained):
    """The whole parameters from the trained values of ranks 0 and 1 (one model-parallel group)."""
    return {n: trained[0][n] if axis is None else np.concatenate([trained[0][n], trained[1][n]], axis=axis)
            for n, (role, axis) in LAYOUT[kind].items()}


@pytest.fixture
def float64_default(monkeypatch):
    """The mp layers create parameters of paddle.get_default_dtype(), as Paddle's (refimpl lacks
    set_default_dtype: stand in for paddle.set_default_dtype('float64'))."""
    monkeypatch.setattr(refimpl, "get_default_dtype", lambda: "float64", raising=False)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind, opt", [("split", "sgd"), ("mp", "sgd"), ("mp", "adam"), ("split", "adam")])
def test_tp_and_tp_dp_give_one_device(float64_default, kind, opt, world):
    batches = _data(batch=4 * (world // 2))   # 4 rows per data-parallel replica (the nets' batch)
    out = _ranks(kind, opt, world, batches)
    pows = set(out[0][2])
    assert len(pows) == (opt == "adam")
    ref = _one_device(kind, opt, batches, *pows)
    got = _gathered(kind, [o[1] for o in out])
    for n, (role, axis) in LAYOUT[kind].items():
        for r in range(2, world):   # the data-parallel replicas agree
            np.testing.assert_array_equal(out[r][1][n], out[r % 2][1][n], err_msg=n)
        np.testing.assert_allclose(got[n], ref[role], rtol=1e-6, atol=1e-9, err_msg=n)


def test_tp_dp_with_recompute_gives_one_device(float64_default):
    batches = _data(batch=8)
    out = _ranks("mp", "sgd", 4, batches, extra=("recompute",))
    ref, got = _one_device("mp", "sgd", batches), _gathered("mp", [o[1] for o in out])
    for n, (role, axis) in LAYOUT["mp"].items():
        np.testing.assert_allclose(got[n], ref[role], rtol=1e-6, atol=1e-9, err_msg=n)


def test_tp_dp_with_amp_trains_alike_on_every_replica():
    """AMP under TensorParallelOptimizer: both apply, the loss-scaling ops are written (the float16 casts go
    only where the backend has float16 kernels, as in Paddle), and the dp replicas stay bitwise equal."""
    from refimpl.distributed import fleet

    def rank_fn():
        r = context.current().rank
        main, startup, loss = _build("mp", extra=("amp",))
        paddle.seed(10 + r)
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        exe.run(startup, scope=scope)
        b, losses = 4, []
        for x, ids, label in _data(steps=4, batch=8):
            part = slice((r // 2) * b, (r // 2 + 1) * b)
            feed = {"x": x[part].astype("float32"), "ids": ids[part], "label": label[part]}
            losses.append(float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]))
        return (fleet._get_applied_meta_list(), [op.type for op in main.global_block().ops], losses,
                {n: np.array(scope.find_var(n).get_tensor()) for n in LAYOUT["mp"]})
    out = run_in_process(4, rank_fn, timeout=120)
    applied, types, _, _ = out[0]
    assert applied == ["TensorParallelOptimizer", "AMPOptimizer"]
    assert "check_finite_and_unscale" in types and "update_loss_scaling" in types and "c_embedding" in types
    assert all(np.isfinite(loss) for o in out for loss in o[2])
    for r in (2, 3):
        for n in LAYOUT["mp"]:
            np.testing.assert_array_equal(out[r][3][n], out[r - 2][3][n], err_msg=n)


def test_startup_broadcasts_as_paddle(float64_default):
    """tp=2 x dp=2: split's shards (marked in the startup program) stay each mp rank's own draw; the mp layers'
    shards are broadcast over the mp ring (rank 0's everywhere); every value is broadcast over the dp ring."""
    for kind in ("split", "mp"):
        start = [s for s, _, _ in _ranks(kind, "sgd", 4, _data(steps=1, batch=8))]
        for n, (role, axis) in LAYOUT[kind].items():
            np.testing.assert_array_equal(start[2][n], start[0][n], err_msg=n)   # dp replicas of rank 0
            np.testing.assert_array_equal(start[3][n], start[1][n], err_msg=n)
            same_in_mp = axis is None or kind == "mp" or role.startswith("b")   # (biases start at 0)
            assert np.array_equal(start[1][n], start[0][n]) == same_in_mp, n


# ---- (c) bad input: typed errors naming the option, the same on every rank -------------------------------
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


def test_hybrid_mp_degree_is_accepted_and_seeds_each_mp_rank():
    """hybrid_configs mp_degree > 1 builds the hybrid group (no longer refused) and, as Paddle's init, seeds the
    model-parallel RNG tracker: tensor_init_seed + 1 + mp_rank (no pipeline), the global seed on every rank."""
    from refimpl.core import random as core_random
    from refimpl.distributed import fleet

    def rank_fn():
        s = _strategy(2)
        s.hybrid_configs = {"dp_degree": 2, "mp_degree": 2}
        s.tensor_parallel_configs = {"tensor_parallel_degree": 2, "tensor_init_seed": 100}
        fleet.init(is_collective=True, strategy=s)
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


def test_parameter_bytes_per_rank_are_the_shards(float64_default, capsys):
    """Under tp=2 x dp=2 each rank holds its shards: 1/2 of every split parameter, all of the replicated bias
    (closed form from the nets' sizes), as the executor's memory accounting counts them."""
    from refimpl.distributed import fleet
    whole = sum(int(np.prod(FULL_SHAPES[role])) for role, _ in LAYOUT["mp"].values())
    mine = sum(int(np.prod(FULL_SHAPES[role])) // (1 if axis is None else 2) for role, axis in LAYOUT["mp"].values())

    def rank_fn():
        main, startup, loss = _build("mp", dtype="float64")
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        exe.run(startup, scope=scope)
        x, ids, label = _data(steps=1, batch=4)[0]
        exe.run(main, feed={"x": x, "ids": ids, "label": label}, fetch_list=[loss], scope=scope)
        return exe.memory_stats()["live_by_category"]["parameters"]
    got = run_in_process(4, rank_fn, timeout=60)
    print(f"parameter bytes per rank (tp=2 x dp=2): {got}; one device: {whole * 8}")
    assert got == [mine * 8] * 4 and mine < whole * 0.55


# ---- under mpiexec: tp=2 x dp=2 over four processes ------------------------------------------------------
def test_tp_dp_under_mpiexec_gives_one_device(tmp_path):
    pytest.importorskip("mpi4py")
    import shutil
    import subprocess
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if exe is None:
        pytest.skip("no mpiexec")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "PMI", "OMPI", "PMIX"))}
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([exe, "-n", "4", sys.executable, os.path.abspath(__file__), "mpi", str(tmp_path)],
                       capture_output=True, text=True, timeout=240, env=env, cwd=root)
    assert p.returncode == 0, p.stdout + p.stderr
    trained = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(4)]
    ref, got = _one_device("mp", "adam", _data(batch=8), "float32"), _gathered("mp", trained)
    assert set(np.load(tmp_path / "pows.npz")["dtypes"]) == {"float32"}
    for n, (role, axis) in LAYOUT["mp"].items():
        np.testing.assert_array_equal(trained[2][n], trained[0][n], err_msg=n)
        np.testing.assert_allclose(got[n], ref[role], rtol=1e-6, atol=1e-9, err_msg=n)


if __name__ == "__main__" and sys.argv[1:2] == ["mpi"]:   # one rank of test_tp_dp_under_mpiexec_gives_one_device
    refimpl.get_default_dtype = lambda: "float64"         # (see float64_default)
    _, mine, pows = _train_rank("mp", "adam", 4, _data(batch=8))
    rank = context.current().rank
    np.savez(os.path.join(sys.argv[2], f"rank{rank}.npz"), **mine)
    if rank == 0:
        np.savez(os.path.join(sys.argv[2], "pows.npz"), dtypes=np.array([str(d) for d in pows]))
