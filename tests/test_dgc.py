"""DGC: DGCMomentumOptimizer / fleet's DGCOptimizer programs vs Paddle 3.3.1, and the ops vs a NumPy DGC.

PROGRAM records Paddle 3.3.1's programs (CPU wheel, legacy IR) for the net of Paddle's
``test_fleet_dgc_meta_optimizer.py`` (fc 64 tanh, fc 256 tanh, fc 2 softmax, cross entropy, mean) with
``fleet.init(PaddleCloudRoleMaker(is_collective=True))`` over two trainers, ``strategy.dgc = True``,
``dgc_configs = {"rampup_begin_step": 128, "rampup_step": 100, "sparsity": [0.996, 0.999]}`` and
``Momentum(0.01, 0.9)`` (with ``grad_clip=ClipGradByNorm(1.0)`` for PROGRAM_CLIP). The CPU wheel has no
DGC, so the recording script stood in for what it lacks: ``core.is_compiled_with_cuda`` returning True,
``core.dgc``'s var names (``__g_dgc_counter__`` ...: ``paddle/fluid/framework/details/dgc_const_values.h``),
no compile-time InferShape for the three dgc ops, and no ``c_gen_nccl_id`` / ``c_comm_init`` startup ops
from the RawProgramOptimizer that fleet puts around DGCOptimizer. Its ``coalesce_tensor``, ``scale``,
``all_reduce`` and ``depend`` ops are that RawProgramOptimizer's (absent when DGCMomentumOptimizer is used
alone). The numbers are checked against an independent NumPy model of Paddle's DGC kernels.
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy, Fleet, PaddleCloudRoleMaker
from refimpl.distributed.fleet.meta_optimizers.dgc_optimizer import DGCMomentumOptimizer, DGCOptimizer
from refimpl.ops.dgc_ops import dgc, dgc_k, dgc_top_k

paddle.enable_static()
F32 = np.float32
RAW_PROGRAM_OPS = {"coalesce_tensor", "scale", "all_reduce", "depend"}
SPARSE_ALLREDUCE = ["c_allgather", "dgc_sparse_reduce"]  # refimpl's, before each dgc_momentum (see dgc_optimizer)


def refimpl_ops(paddle_ops):
    out = []
    for t in paddle_ops:
        out += SPARSE_ALLREDUCE + [t] if t == "dgc_momentum" else [t]
    return out

PROGRAM = [
    "increment", "mul", "elementwise_add", "tanh", "mul", "elementwise_add", "tanh", "mul", "elementwise_add",
    "softmax", "softmax_with_cross_entropy", "reduce_mean", "reduce_mean", "coalesce_tensor", "fill_constant",
    "scale", "reduce_mean_grad", "reduce_mean_grad", "softmax_with_cross_entropy_grad", "softmax_grad",
    "elementwise_add_grad", "mul_grad", "tanh_grad", "elementwise_add_grad", "mul_grad", "tanh_grad",
    "elementwise_add_grad", "mul_grad", "dgc", "all_reduce", "depend", "depend", "depend", "depend", "depend",
    "depend", "momentum", "momentum", "momentum", "dgc_momentum", "momentum", "momentum"]
PROGRAM_CLIP = PROGRAM[:28] + ["dgc_clip_by_norm"] + PROGRAM[28:36] + ["clip_by_norm"] * 5 + PROGRAM[36:]
STARTUP = [
    ("uniform_random", "fc_0.w_0", None, None), ("fill_constant", "fc_0.b_0", 0.0, False),
    ("uniform_random", "fc_1.w_0", None, None), ("fill_constant", "fc_1.b_0", 0.0, False),
    ("uniform_random", "fc_2.w_0", None, None), ("fill_constant", "fc_2.b_0", 0.0, False),
    ("fill_constant", "__g_dgc_counter__", -1.0, True), ("fill_constant", "__g_nranks__", 2.0, True),
    ("fill_constant", "__g_rampup_begin_step__", 128.0, True), ("fill_constant", "fc_0.w_0__dgc_u__0", 0.0, False),
    ("fill_constant", "fc_0.b_0__dgc_u__0", 0.0, False), ("fill_constant", "fc_1.w_0__dgc_u__0", 0.0, False),
    ("fill_constant", "fc_1.w_0__dgc_v__0", 0.0, False), ("fill_constant", "fc_1.w_0__dgc_k__", 0.0, True),
    ("fill_constant", "fc_1.w_0__dgc_encoded__", 0.0, False), ("fill_constant", "fc_1.w_0__dgc_gather__", 0.0, False),
    ("fill_constant", "fc_1.b_0__dgc_u__0", 0.0, False), ("fill_constant", "fc_2.w_0__dgc_u__0", 0.0, False),
    ("fill_constant", "fc_2.b_0__dgc_u__0", 0.0, False),
    ("fill_constant", "learning_rate_0", 0.009999999776482582, False)]
DGC_OP = {
    "inputs": {"Grad": ["fc_1.w_0@GRAD"], "Param": ["fc_1.w_0"], "U": ["fc_1.w_0__dgc_u__0"],
               "V": ["fc_1.w_0__dgc_v__0"], "current_step": ["__g_dgc_counter__"], "nranks": ["__g_nranks__"]},
    "outputs": {"EncodeGrad": ["fc_1.w_0__dgc_encoded__"], "GatherBuff": ["fc_1.w_0__dgc_gather__"],
                "Grad_out": ["fc_1.w_0@GRAD"], "U_out": ["fc_1.w_0__dgc_u__0"], "V_out": ["fc_1.w_0__dgc_v__0"],
                "k": ["fc_1.w_0__dgc_k__"]},
    "attrs": {"use_nesterov": False, "regular_coeff": 0.0, "rampup_step": 100.0, "rampup_begin_step": 128.0,
              "op_role": 1, "sparsity": [0.9959999918937683, 0.9990000128746033], "op_device": "",
              "regular_type": 0, "op_role_var": ["fc_1.w_0", "fc_1.w_0@GRAD"], "op_namescope": "/",
              "m": 0.8999999761581421}}
DGC_MOMENTUM_OP = {
    "inputs": {"Grad": ["fc_1.w_0@GRAD"], "LearningRate": ["learning_rate_0"], "MasterParam": [],
               "Param": ["fc_1.w_0"], "Velocity": ["fc_1.w_0__dgc_u__0"], "current_step": ["__g_dgc_counter__"],
               "nranks": ["__g_nranks__"]},
    "outputs": {"Grad_out": ["fc_1.w_0@GRAD"], "ParamOut": ["fc_1.w_0"], "VelocityOut": ["fc_1.w_0__dgc_u__0"]},
    "attrs": {"rescale_grad": 1.0, "regularization_method": "", "rampup_begin_step": 128.0, "op_role": 2,
              "op_role_var": ["fc_1.w_0", "fc_1.w_0@GRAD"], "op_namescope": "/optimizer_3/",
              "regularization_coeff": 0.0, "op_device": "", "use_nesterov": False, "multi_precision": False,
              "mu": 0.8999999761581421}}


def net():
    x = paddle.static.data("x", [None, 32], "float32")
    y = paddle.static.data("y", [None, 1], "int64")
    h = paddle.static.nn.fc(x, 64, activation="tanh")
    h2 = paddle.static.nn.fc(h, 256, activation="tanh")
    pred = paddle.static.nn.fc(h2, 2, activation="softmax")
    return paddle.mean(paddle.nn.functional.cross_entropy(input=pred, label=y, use_softmax=False))


def desc(op):
    return {"inputs": {k: op.input(k) for k in op.input_names}, "outputs": {k: op.output(k) for k in op.output_names},
            "attrs": {a: op.attr(a) for a in op.attr_names if a != "op_callstack"}}


def build_alone(**kw):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        loss = net()
        DGCMomentumOptimizer(0.01, 0.9, rampup_begin_step=128, rampup_step=100, sparsity=[0.996, 0.999],
                             num_trainers=2, **kw).minimize(loss)
    return main, startup


@pytest.mark.parametrize("clip", [False, True])
def test_dgc_momentum_optimizer_program_matches_paddle(clip):
    main, startup = build_alone(grad_clip=paddle.nn.ClipGradByNorm(1.0)) if clip else build_alone()
    ops = main.global_block().ops
    want = refimpl_ops([t for t in (PROGRAM_CLIP if clip else PROGRAM) if t not in RAW_PROGRAM_OPS])
    assert [op.type for op in ops] == want
    assert [(op.type, op.output("Out")[0], op.attr("value") if op.has_attr("value") else None,
             op.attr("force_cpu") if op.has_attr("force_cpu") else None)
            for op in startup.global_block().ops] == STARTUP
    assert desc([op for op in ops if op.type == "dgc"][0]) == DGC_OP
    assert desc([op for op in ops if op.type == "dgc_momentum"][0]) == DGC_MOMENTUM_OP
    # the compressed parameter's pair leaves its backward op; the others keep theirs
    mul_grads = [op for op in ops if op.type == "mul_grad"]
    assert [op.attr("op_role_var") if op.has_attr("op_role_var") else None for op in mul_grads] == [
        ["fc_2.w_0", "fc_2.w_0@GRAD"], None, ["fc_0.w_0", "fc_0.w_0@GRAD"]]
    assert ops[0].attr("step") == 1.0 and ops[0].input("X") == ["__g_dgc_counter__"]
    if clip:
        c = [op for op in ops if op.type == "dgc_clip_by_norm"][0]
        assert (c.input("X"), c.output("Out"), c.attr("max_norm"), c.attr("rampup_begin_step"), c.attr("op_role")) == (
            ["fc_1.w_0@GRAD"], ["fc_1.w_0@GRAD"], 0.7071067690849304, 128.0, 1)


@pytest.fixture
def two_trainers(monkeypatch):
    monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:36001,127.0.0.2:36001")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "0")
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    monkeypatch.setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:36001")


@pytest.mark.parametrize("decay", [None, "l2"])
def test_fleet_picks_dgc_optimizer_and_matches_paddle(two_trainers, decay):
    """With ``weight_decay=L2Decay(1e-4)`` Paddle records the same program: Momentum fuses the decay into its
    own attrs and hands DGC no regularization (regular_coeff 0), and DGC's momentum ops drop it."""
    f = Fleet()
    f.init(PaddleCloudRoleMaker(is_collective=True))
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        loss = net()
        strategy = DistributedStrategy()
        strategy.dgc = True
        strategy.dgc_configs = {"rampup_begin_step": 128, "rampup_step": 100, "sparsity": [0.996, 0.999]}
        wd = paddle.regularizer.L2Decay(1e-4) if decay else None
        f.distributed_optimizer(paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, weight_decay=wd),
                                strategy=strategy).minimize(loss)
    assert [op.type for op in main.global_block().ops] == refimpl_ops(PROGRAM)
    assert desc([op for op in main.global_block().ops if op.type == "dgc"][0]) == DGC_OP


def test_dgc_optimizer_strategy_switches():
    s = DistributedStrategy()
    opt = DGCOptimizer(paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9))
    opt._enable_strategy(s, None)
    assert s.dgc and s.dgc_configs["rampup_begin_step"] == 0 and s.dgc_configs["rampup_step"] == 1
    opt._disable_strategy(s)
    assert not s.dgc


# ---- numbers: two in-process ranks against a NumPy model of Paddle's kernels --------------------------------
B, N = 4, 128  # fc_0.w_0 is 128 x 128 = 16384 elements: the smallest DGC compresses
BEGIN, RAMP, SPARSITY, LR, MU, STEPS = 2, 2, [0.75, 0.999], 0.1, 0.9, 5


def numpy_dgc(w, batches):
    """dgc, c_allgather + dgc_sparse_reduce, dgc_momentum on two ranks, step by step (float32 throughout).

    ``batches[step][rank]`` is that rank's (x, c); returns per step (w, [u of each rank], [sent of each rank]).
    """
    u, v = [np.zeros_like(w), np.zeros_like(w)], [np.zeros_like(w), np.zeros_like(w)]
    w = [w.copy(), w.copy()]
    out = []
    for step, pair in enumerate(batches):
        grads, sent = [], []
        for r, (x, c) in enumerate(pair):
            g2 = (x.T @ (c * F32(1.0 / (B * N)))) * F32(2)  # d mean(x @ w * c) / dw, times nranks
            if step >= BEGIN:
                u[r] = u[r] * F32(MU) + g2
                v[r] = v[r] + u[r]
                k = int(F32(w[r].size) * (F32(1) - F32(SPARSITY[min((step - BEGIN) * len(SPARSITY) // RAMP, 1)])))
                flat = np.abs(v[r].reshape(-1))
                idx = np.sort(np.argsort(-flat, kind="stable")[:k])
                sent.append((idx, v[r].reshape(-1)[idx].copy()))
                u[r].reshape(-1)[idx] = 0
                v[r].reshape(-1)[idx] = 0
                g2 = np.zeros_like(g2)
            grads.append(g2)
        if step >= BEGIN:  # every rank adds both ranks' top-k, rank 0's first
            for r in range(2):
                g = grads[r].reshape(-1)
                for idx, vals in sent:
                    g[idx] += vals
        for r in range(2):
            g3 = grads[r] * F32(0.5)
            if step < BEGIN:  # plain momentum on the local gradient (no dense allreduce in this program)
                u[r] = u[r] * F32(MU) + g3
                w[r] = w[r] - u[r] * F32(LR)
            else:
                w[r] = w[r] - g3 * F32(LR)
        out.append(([a.copy() for a in w], [a.copy() for a in u], sent))
    return out


def test_two_ranks_exchange_the_top_k_and_match_a_numpy_model():
    check_two_ranks(paddle.CPUPlace())


def check_two_ranks(place):
    """Train two in-process ranks on ``place``; compare every step with ``numpy_dgc``."""
    rng = np.random.default_rng(11)
    w0 = rng.standard_normal((N, N)).astype(F32)
    batches = [[(rng.standard_normal((B, N)).astype(F32), rng.standard_normal((B, N)).astype(F32))
                for _ in range(2)] for _ in range(STEPS)]

    def rank_fn():
        r = context.current().rank
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [B, N], "float32")
            c = paddle.static.data("c", [B, N], "float32")
            loss = paddle.mean(paddle.static.nn.fc(x, N, bias_attr=False) * c)
            DGCMomentumOptimizer(LR, MU, rampup_begin_step=BEGIN, rampup_step=RAMP, sparsity=SPARSITY,
                                 num_trainers=2).minimize(loss)
        scope = paddle.static.Scope()
        seen = []
        with paddle.static.scope_guard(scope):
            exe = paddle.static.Executor(place)
            exe.run(startup)
            scope.var("fc_0.w_0").get_tensor().set(w0, paddle.CPUPlace())
            for pair in batches:
                exe.run(main, feed={"x": pair[r][0], "c": pair[r][1]})
                seen.append({n: np.array(scope.find_var(n).get_tensor()) for n in (
                    "fc_0.w_0", "fc_0.w_0__dgc_u__0", "fc_0.w_0__dgc_k__", "fc_0.w_0__dgc_encoded__",
                    "fc_0.w_0__dgc_gather__", "__g_dgc_counter__")})
        return [op.type for op in main.global_block().ops], seen

    results = run_in_process(2, rank_fn, timeout=120)
    assert results[0][0][-4:] == ["dgc", "c_allgather", "dgc_sparse_reduce", "dgc_momentum"]
    for step, (w, u, sent) in enumerate(numpy_dgc(w0, batches)):
        for r, (_, seen) in enumerate(results):
            got = seen[step]
            assert got["__g_dgc_counter__"][0] == step
            np.testing.assert_allclose(got["fc_0.w_0"], w[r], rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(got["fc_0.w_0__dgc_u__0"], u[r], rtol=1e-5, atol=1e-7)
            if step >= BEGIN:
                k = sent[r][0].size
                assert k == (4096 if step == BEGIN else 16) and got["fc_0.w_0__dgc_k__"][0] == k
                enc = got["fc_0.w_0__dgc_encoded__"]
                assert enc.shape == (2 * k,) and enc[:k].view(np.int32).tolist() == sent[r][0].tolist()
                np.testing.assert_allclose(enc[k:], sent[r][1], rtol=1e-5)
                gathered = np.concatenate([res[1][step]["fc_0.w_0__dgc_encoded__"] for res in results])
                np.testing.assert_array_equal(got["fc_0.w_0__dgc_gather__"], gathered)
        if step >= BEGIN:  # from the ramp-up on both ranks apply the same exchanged gradient
            moved = [res[1][step - 1]["fc_0.w_0"] - res[1][step]["fc_0.w_0"] for res in results]
            np.testing.assert_allclose(moved[0], moved[1], atol=1e-6)
            assert np.count_nonzero(moved[0]) > 0


def test_k_follows_the_sparsity_schedule():
    """Paddle's float32 arithmetic: ratio = 1 - sparsity[int((step - begin) * len / rampup_step)]."""
    assert [dgc_k(16384, s, [0.75, 0.9375, 0.999], 10, 30) for s in (10, 19, 20, 29, 30, 1000)] == [
        4096, 4096, 1024, 1024, 16, 16]
    assert dgc_k(100, 0, [0.999], 0, 1) == 0


def test_top_k_ties_go_to_the_lower_index():
    v = np.array([1, -3, 3, 2, -3, 0.5], F32)
    assert dgc_top_k(v, 3).tolist() == [1, 2, 4]
    assert dgc_top_k(v, 2).tolist() == [1, 2]


def test_bad_input_names_the_option():
    with pytest.raises(InvalidArgument, match="grad_clip"):
        DGCMomentumOptimizer(0.1, 0.9, rampup_begin_step=0, grad_clip=paddle.nn.ClipGradByValue(1.0))
    with pytest.raises(InvalidArgument, match="num_trainers"):
        DGCMomentumOptimizer(0.1, 0.9, rampup_begin_step=0, grad_clip=paddle.nn.ClipGradByNorm(1.0))
    with pytest.raises(InvalidArgument, match="rampup_begin_step"):
        DGCMomentumOptimizer(0.1, 0.9, rampup_begin_step=-1)
    with pytest.raises(InvalidArgument, match="sparsity"):
        DGCMomentumOptimizer(0.1, 0.9, rampup_begin_step=0, sparsity=[])
    with pytest.raises(InvalidArgument, match="momentum must be a float, got 'x'"):
        DGCMomentumOptimizer(0.1, "x", rampup_begin_step=0)
    u, g = np.zeros(4, F32), np.ones(4, F32)
    kw = dict(m=0.9, use_nesterov=False, sparsity=[0.5], rampup_begin_step=0.0, rampup_step=1.0, regular_coeff=0.0)
    with pytest.raises(PreconditionNotMet, match="nranks=1"):
        dgc(u, u.copy(), g, None, np.array([0], F32), np.array([1], F32), regular_type=0, **kw)
    with pytest.raises(InvalidArgument, match="regular_type"):
        dgc(u, u.copy(), g, g, np.array([0], F32), np.array([2], F32), regular_type=3, **kw)


def test_fleet_dgc_keeps_two_ranks_in_step():
    """strategy.dgc through fleet's meta-optimizers (the raw program's dense all_reduce before the ramp-up,
    the sparse exchange after it): both ranks hold the same parameters after every step, and they move."""
    from refimpl.distributed.fleet.meta_optimizers import DistributedOptimizer
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((2 * B, N)).astype(F32) for _ in range(4)]

    def rank_fn():
        r = context.current().rank
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
            x = paddle.static.data("x", [None, N], "float32")
            loss = paddle.mean(paddle.square(paddle.static.nn.fc(x, N, bias_attr=False)))
        s = DistributedStrategy()
        s.dgc = True
        s.dgc_configs = {"rampup_begin_step": 2, "rampup_step": 1, "sparsity": [0.99]}
        opt = DistributedOptimizer(paddle.optimizer.Momentum(0.05, 0.9), s)
        with paddle.static.program_guard(main, startup):
            opt.minimize(loss)
        paddle.seed(5)
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup, scope=scope)
        ws = []
        for b in batches:
            exe.run(main, feed={"x": b[r * B:(r + 1) * B]}, scope=scope)
            ws.append(np.array(scope.find_var("fc_0.w_0").get_tensor()))
        return [op.type for op in main.global_block().ops], ws

    (ops, w0), (_, w1) = run_in_process(2, rank_fn, timeout=120)
    assert ops[-6:] == ["dgc", "all_reduce", "depend", "c_allgather", "dgc_sparse_reduce", "dgc_momentum"]
    for step in range(4):
        np.testing.assert_array_equal(w0[step], w1[step])
        if step:
            assert np.count_nonzero(w0[step] - w0[step - 1]) > 0
