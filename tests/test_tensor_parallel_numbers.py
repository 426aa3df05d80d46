"""Tensor parallelism in static mode, its numbers: the nets of tests/test_tensor_parallel.py (whose
programs are Paddle 3.3.1's) on tp=2 and tp=2 x dp=2 in-process ranks in float64 give, after a few SGD /
Adam steps, the parameters a hand-written one-device NumPy training on the whole batch gives (the shards
gathered), within 1e-6; the startup broadcasts leave the shards as Paddle's do; each rank holds its
shards' bytes; and the same under mpiexec over four processes.
"""
import os
import sys

import numpy as np
import pytest

import refimpl
import refimpl as paddle
from refimpl.distributed.communication import context, run_in_process

from mpi_helpers import run_script
from test_tensor_parallel import _build  # the nets (tests/test_tensor_parallel.py checks their programs)


# ---- numbers: tp=2 and tp=2 x dp=2 against one device ----------------------------------------------
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
    are kept in ``pow_dtype`` (the dtype the program gives them: the parameters', as Paddle 3.3.1). Paddle
    3.3.1 printed, for a float64 Adam(0.01): beta1_pow = 0.9, 0.8099999785423279, 0.7289999613761907 ... --
    the startup fills 0.9 in the pow's dtype, each step multiplies by beta1 as the op's float32 attr."""
    P = {k: v.copy() for k, v in _full_init(kind).items()}
    m = {k: np.zeros_like(v) for k, v in P.items()}
    v2 = {k: np.zeros_like(v) for k, v in P.items()}
    t = np.dtype(pow_dtype).type
    pow1, pow2 = t(0.9), t(0.999)
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
    run_script(__file__, ["mpi", tmp_path], timeout=240)
    trained = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(4)]
    ref, got = _one_device("mp", "adam", _data(batch=8), "float64"), _gathered("mp", trained)
    assert set(np.load(tmp_path / "pows.npz")["dtypes"]) == {"float64"}   # the parameters' (Paddle 3.3.1)
    for n, (role, axis) in LAYOUT["mp"].items():
        np.testing.assert_array_equal(trained[2][n], trained[0][n], err_msg=n)
        np.testing.assert_allclose(got[n], ref[role], rtol=1e-6, atol=1e-9, err_msg=n)


if __name__ == "__main__" and sys.argv[1:2] == ["mpi"]:   # one rank of test_tp_dp_under_mpiexec_gives_one_device
    refimpl.set_default_dtype("float64")                 # (see float64_default)
    _, mine, pows = _train_rank("mp", "adam", 4, _data(batch=8))
    rank = context.current().rank
    np.savez(os.path.join(sys.argv[2], f"rank{rank}.npz"), **mine)
    if rank == 0:
        np.savez(os.path.join(sys.argv[2], "pows.npz"), dtypes=np.array([str(d) for d in pows]))
