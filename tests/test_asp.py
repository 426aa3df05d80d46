"""Automatic sparsity (``paddle.incubate.asp``) and fleet's ``ASPOptimizer``, static graph.

Facts marked "Paddle 3.3.1" were recorded with /tmp/pd33 (``FLAGS_enable_pir_api=0``, CPU):
the programs ``decorate(...).minimize`` and fleet's ``strategy.asp`` build, and the masks
``prune_model`` writes for a fixed program. The numbers of training are checked against a plain
program (no ASP) whose parameters are multiplied by the same masks in NumPy after every step.
The mask algorithms and the supported-parameter rules are in ``tests/test_asp_utils.py``.
"""

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name
from refimpl.incubate import asp
from refimpl.incubate.asp import ASPHelper, CheckMethod, MaskAlgo

from fleet_env import as_trainer
from test_sharding import _batches, _set_params   # (its WIDTH, 16, is this file's too)


def _hex(mask):
    return np.packbits(np.asarray(mask).reshape(-1) != 0).tobytes().hex()


A = np.array([[(i * 7 + j * 13) % 11 - 5 for j in range(10)] for i in range(6)], dtype="int64")   # many ties


# ---- (c) the programs decorate(...).minimize builds: Paddle 3.3.1's ----------------------------------
FWD = ["conv2d", "elementwise_add", "relu", "mul", "elementwise_add", "relu", "mul", "elementwise_add", "softmax",
       "softmax_with_cross_entropy", "reduce_mean"]
BWD = ["reduce_mean_grad", "softmax_with_cross_entropy_grad", "softmax_grad", "elementwise_add_grad", "mul_grad",
       "relu_grad", "elementwise_add_grad", "mul_grad", "relu_grad", "elementwise_add_grad", "conv2d_grad"]
WEIGHTS = ["conv2d_0.w_0", "fc_0.w_0", "fc_1.w_0"]


def _conv_net(channels=3, hw=8, train=True, amp=False):
    """conv2d(4 filters, 3x3) -> fc(8, relu) -> fc(3, softmax), cross entropy; SGD(0.1) under asp.decorate."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        img = paddle.static.data("img", [None, channels, hw, hw], "float32")
        y = paddle.static.data("y", [None, 1], "int64")
        h = paddle.static.nn.conv2d(img, num_filters=4, filter_size=3, padding=1, act="relu")
        h = paddle.static.nn.fc(h, 8, activation="relu")
        p = paddle.static.nn.fc(h, 3, activation="softmax")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(p, y, reduction="none", use_softmax=False))
        if train:
            opt = paddle.optimizer.SGD(0.1)
            if amp:
                opt = paddle.static.amp.decorate(opt)
            opt = asp.decorate(opt)
            assert type(opt).__name__ == "OptimizerWithSparsityGuarantee"
            ops, params_grads = opt.minimize(loss, startup)
            assert len(ops) == 6 and [p.name for p, _ in params_grads] == \
                ["conv2d_0.w_0", "conv2d_0.b_0", "fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]
    return main, startup


def test_decorate_minimize_program_is_paddles():
    main, startup = _conv_net()
    block = main.global_block()
    assert [op.type for op in block.ops] == FWD + ["fill_constant"] + BWD + ["sgd"] * 6 + ["elementwise_mul"] * 3
    for op, w in zip(block.ops[-3:], WEIGHTS):
        assert (op.input("X"), op.input("Y"), op.output("Out")) == ([w], [w + ".asp_mask"], [w])
        assert (op.attr("axis"), op.attr("op_role")) == (-1, 2)
    assert [op.type for op in startup.global_block().ops] == \
        ["gaussian_random"] + ["fill_constant", "uniform_random"] * 2 + ["fill_constant"] * 5
    for op, w in zip(startup.global_block().ops[-3:], WEIGHTS):
        assert op.output("Out") == [w + ".asp_mask"] and op.attr("value") == 1.0
        assert list(op.attr("shape")) == list(block.var(w).shape) and op.attr("dtype") == 5
    for w in WEIGHTS:
        mask = block.var(w + ".asp_mask")
        assert type(mask).__name__ == "Parameter" and mask.persistable and mask.stop_gradient
        assert not mask.trainable and mask.shape == block.var(w).shape and mask.dtype == block.var(w).dtype
        assert startup.global_block().var(w + ".asp_mask").persistable
    assert [p.name for p in block.all_parameters()][-3:] == [w + ".asp_mask" for w in WEIGHTS]
    assert [p.name for p in ASPHelper._get_not_ASP_relevant_vars(main)] == \
        ["conv2d_0.w_0", "conv2d_0.b_0", "fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]


@pytest.fixture
def cpu_amp_lists(monkeypatch):
    """The AMP lists of Paddle's CPU build (no op has a float16 kernel: no casts), whatever the backend."""
    from refimpl.static.amp import fp16_lists
    sys_lists = fp16_lists._get_sys_unsupported_list

    def cpu(dtype):
        _, _, all_ops = sys_lists(dtype)
        return "GPU", all_ops - fp16_lists._ALWAYS_SUPPORTED, all_ops
    monkeypatch.setattr(fp16_lists, "_get_sys_unsupported_list", cpu)


def test_decorate_amp_minimize_program_is_paddles(cpu_amp_lists):
    """Paddle 3.3.1 on the CPU, as recorded."""
    main, startup = _conv_net(channels=4, hw=3, amp=True)
    assert [op.type for op in main.global_block().ops] == \
        FWD + ["elementwise_mul", "fill_constant", "elementwise_mul_grad"] + BWD + \
        ["check_finite_and_unscale", "update_loss_scaling"] + ["sgd"] * 6 + ["elementwise_mul"] * 3
    assert [op.type for op in startup.global_block().ops] == \
        ["gaussian_random"] + ["fill_constant", "uniform_random"] * 2 + ["fill_constant"] * 8


# ---- (d) prune_model's masks for a fixed program: Paddle 3.3.1's -----------------------------------
def _formula(shape, salt):
    n = np.arange(int(np.prod(shape))).reshape(shape)
    return (((n * 37 + salt * 11) % 101) / 101.0 - 0.5).astype("float32")


PADDLE_PRUNE_MASKS = {
    "mask_1d": {"conv2d_0.w_0": "b696925a5a5a49696d692d25b4b4b496d2da",
                "fc_0.w_0": "6d2d92d2b4b44b4bd2da2d254b69b4962da5d25a969669695a5ba5a4696d9692a4b45b4b",
                "fc_1.w_0": "2765a9"},
    "mask_2d_greedy": {"conv2d_0.w_0": "96929a5b5a4a496d6d696d65a4a5b5b69292",
                       "fc_0.w_0": "65659a9a95956a6a565aa9a55969a69665a59a5a969669695a59a5a66965969aa5955a6a",
                       "fc_1.w_0": "2765a9"},
    "mask_2d_best": {"conv2d_0.w_0": "25e49696d292565beade1b28693d2dadb414",
                     "fc_0.w_0": "696c9693659a55aa36c359acc95936a65a6c93a535936acc36cac9359ac9663569659a96",
                     "fc_1.w_0": "4ad91b"},
}


@pytest.mark.parametrize("algo", sorted(PADDLE_PRUNE_MASKS))
def test_prune_model_masks_are_paddles(algo):
    main, startup = _conv_net(channels=4, hw=3)
    params = [p for p in main.global_block().all_parameters() if "asp_mask" not in p.name]
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.static.Executor().run(startup)
        for i, p in enumerate(params):
            scope.find_var(p.name).get_tensor().set(_formula(p.shape, i))
        masks = asp.prune_model(main, mask_algo=algo)
    assert {k: _hex(v) for k, v in masks.items()} == PADDLE_PRUNE_MASKS[algo]
    for i, p in enumerate(params):
        value = np.array(scope.find_var(p.name).get_tensor())
        if p.name in masks:
            assert masks[p.name].dtype == np.float32 and masks[p.name].shape == tuple(p.shape)
            np.testing.assert_array_equal(value, _formula(p.shape, i) * masks[p.name])
            np.testing.assert_array_equal(np.array(scope.find_var(p.name + ".asp_mask").get_tensor()), masks[p.name])
        else:  # biases are left alone
            np.testing.assert_array_equal(value, _formula(p.shape, i))


def test_a_narrow_weight_is_left_dense():
    """Paddle's rule: a conv filter with fewer than m input channels (or a 2-D weight with fewer than m
    rows) is not pruned, and its mask stays all ones."""
    main, startup = _conv_net(channels=3, hw=4)
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.static.Executor().run(startup)
        before = np.array(scope.find_var("conv2d_0.w_0").get_tensor())
        masks = asp.prune_model(main, mask_algo="mask_2d_greedy")
    assert (masks["conv2d_0.w_0"] == 1).all()
    np.testing.assert_array_equal(np.array(scope.find_var("conv2d_0.w_0").get_tensor()), before)
    assert asp.check_sparsity(masks["fc_0.w_0"].T, func_name=CheckMethod.CHECK_2D)


# ---- (e) training keeps the pattern, and equals a plain program masked in NumPy ----------------------
WIDTH = 16


def _mlp(dtype="float64"):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, WIDTH], dtype)
        y = paddle.static.data("y", [-1, 1], "int64")
        h = paddle.static.nn.fc(x, WIDTH, activation="tanh")
        h = paddle.static.nn.fc(h, 8, activation="tanh")
        h = paddle.static.nn.fc(h, 8, activation="tanh")
        pred = paddle.static.nn.fc(h, 2, activation="softmax")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(pred, y, reduction="none", use_softmax=False))
    return main, startup, loss


def _plain_params(main):
    return [p for p in main.all_parameters() if "asp_mask" not in p.name]


def _one_device(batches, use_asp, masks=None, algo="mask_1d", amp=False):
    """One device: with ASP (decorate, startup, prune_model) or, given ``masks``, a plain program whose
    parameters are multiplied by them in NumPy before training and after each step."""
    main, startup, loss = _mlp("float32" if amp else "float64")
    with paddle.static.program_guard(main, startup), unique_name.guard():
        opt = paddle.optimizer.Momentum(0.1, 0.9)
        if amp:
            opt = paddle.static.amp.decorate(opt)
        (asp.decorate(opt) if use_asp else opt).minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        _set_params(scope, _plain_params(main))
        masks = asp.prune_model(main, mask_algo=algo) if use_asp else masks

        def apply_masks():
            for name, mask in ({} if use_asp else masks).items():
                t = scope.find_var(name).get_tensor()
                t.set(np.array(t) * mask)
        apply_masks()
        for x, y in batches:
            exe.run(main, feed={"x": x.astype("float32") if amp else x, "y": y}, fetch_list=[loss])
            apply_masks()
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in _plain_params(main)}, masks


@pytest.mark.parametrize("algo", ["mask_1d", "mask_2d_greedy", "mask_2d_best"])
def test_training_keeps_the_pattern_and_equals_masking_by_hand(algo):
    batches = _batches()
    params, masks = _one_device(batches, True, algo=algo)
    assert sorted(masks) == ["fc_0.w_0", "fc_1.w_0", "fc_2.w_0", "fc_3.w_0"]
    check = CheckMethod.get_checking_method(asp.asp._MASK_ALGOS[algo])
    for name, mask in masks.items():
        assert asp.check_sparsity(params[name].T, func_name=check)
        assert not params[name][mask == 0].any() and params[name][mask == 1].all()
    ref, _ = _one_device(batches, False, masks={k: v.astype("float64") for k, v in masks.items()})
    for name in ref:
        np.testing.assert_allclose(params[name], ref[name], rtol=1e-12, atol=1e-15, err_msg=name)
    density = asp.calculate_density(params["fc_0.w_0"])  # greedy may keep fewer than n in a row
    assert density == 0.5 if algo != "mask_2d_greedy" else 0.25 < density <= 0.5


# ---- (f) fleet: strategy.asp ------------------------------------------------------------------------
PADDLE_FLEET_FWD = ["mul", "elementwise_add", "tanh", "mul", "elementwise_add", "softmax",
                    "softmax_with_cross_entropy", "reduce_mean"]
PADDLE_FLEET_BWD = ["reduce_mean_grad", "softmax_with_cross_entropy_grad", "softmax_grad", "elementwise_add_grad",
                    "mul_grad", "tanh_grad", "elementwise_add_grad", "mul_grad"]


@pytest.fixture
def one_trainer(monkeypatch):
    as_trainer(monkeypatch, 0, "127.0.0.1:36213")


@pytest.mark.parametrize("amp", [False, True])
def test_fleet_asp_program_is_paddles(one_trainer, cpu_amp_lists, amp):
    """The net of Paddle's test_fleet_with_asp_static.py, one trainer, SGD(0.01): Paddle 3.3.1's programs."""
    from refimpl.distributed.fleet import Fleet, PaddleCloudRoleMaker
    main, startup = Program(), Program()
    f = Fleet()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 32], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        h = paddle.static.nn.fc(x, 64, activation="tanh")
        p = paddle.static.nn.fc(h, 2, activation="softmax")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(p, y, reduction="none", use_softmax=False))
        s = DistributedStrategy()
        s.asp, s.amp = True, amp
        f.init(PaddleCloudRoleMaker(is_collective=True))
        f.distributed_optimizer(paddle.optimizer.SGD(0.01), strategy=s).minimize(loss)
    amp_fwd, amp_opt = (["elementwise_mul"], ["check_finite_and_unscale", "update_loss_scaling"]) if amp else ([], [])
    assert [op.type for op in main.global_block().ops] == \
        PADDLE_FLEET_FWD + amp_fwd + ["fill_constant"] + (["elementwise_mul_grad"] if amp else []) + \
        PADDLE_FLEET_BWD + amp_opt + ["sgd"] * 4 + ["elementwise_mul"] * 2
    assert [op.type for op in startup.global_block().ops] == \
        ["uniform_random", "fill_constant"] * 2 + ["fill_constant"] * (6 if amp else 3)
    assert f._get_applied_meta_list() == (["ASPOptimizer", "AMPOptimizer"] if amp else ["ASPOptimizer"])
    persistables = {"fc_0.b_0", "fc_0.w_0", "fc_0.w_0.asp_mask", "fc_1.b_0", "fc_1.w_0", "fc_1.w_0.asp_mask"}
    persistables |= {"learning_rate_0", "loss_scaling_0", "num_bad_steps_0", "num_good_steps_0"} if amp else \
        {"learning_rate_0"}
    assert sorted(v.name for v in main.list_vars() if v.persistable) == sorted(persistables)


def _sharded_rank(batches, amp, algo):
    """This rank's part of a 2-rank sharded ASP run: its half of each batch; its parameters and masks."""
    from refimpl.distributed import fleet
    r = context.current().rank
    main, startup, loss = _mlp("float32" if amp else "float64")
    s = DistributedStrategy()
    s.sharding, s.sharding_configs = True, {"sharding_degree": 2, "segment_broadcast_MB": 0.001}
    s.asp, s.amp = True, amp
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        fleet.distributed_optimizer(paddle.optimizer.Momentum(0.1, 0.9), s).minimize(loss)
    exe, scope = paddle.static.Executor(), paddle.static.global_scope()
    exe.run(startup)
    owned = [v for v in main.global_block().vars.values() if v.is_parameter and "asp_mask" not in v.name]
    _set_params(scope, owned)
    masks = asp.prune_model(main, mask_algo=algo)
    rows = len(batches[0][0]) // 2
    for x, y in batches:
        x = x.astype("float32") if amp else x
        exe.run(main, feed={"x": x[r * rows:(r + 1) * rows], "y": y[r * rows:(r + 1) * rows]}, fetch_list=[loss])
    muls = [op.input("X")[0] for op in main.global_block().ops if op.type == "elementwise_mul"
            and op.input("Y")[0].endswith(".asp_mask")]
    return ({p.name: np.array(scope.find_var(p.name).get_tensor()) for p in owned}, masks, muls,
            fleet._get_applied_meta_list())


@pytest.mark.parametrize("amp", [False, True], ids=["sharding", "sharding+amp"])
def test_sharded_ranks_keep_sparsity_and_give_one_device(amp):
    batches = _batches(rows=8)
    ref, ref_masks = _one_device(batches, True, algo="mask_2d_best", amp=amp)
    results = run_in_process(2, _sharded_rank, batches, amp, "mask_2d_best", timeout=120)
    # AMP: float32 on the host backend (no float16 kernels), float16 products on the CUDA one, where
    # half a batch and a whole one round differently
    tol = {"rtol": 1e-3, "atol": 1e-5} if amp else {"rtol": 1e-10, "atol": 1e-12}
    held = {}
    for rank, (params, masks, muls, applied) in enumerate(results):
        assert applied == ["ShardingOptimizer", "ASPOptimizer"] + (["AMPOptimizer"] if amp else [])
        assert sorted(muls) == sorted(masks)  # a masking op for each owned supported weight only
        for name, value in params.items():
            held.setdefault(name, []).append(rank)
            np.testing.assert_allclose(value, ref[name], err_msg=f"{name} on rank {rank}", **tol)
        for name, mask in masks.items():
            np.testing.assert_array_equal(mask, ref_masks[name])
            assert asp.check_sparsity(params[name].T, func_name=CheckMethod.CHECK_2D)
    assert sorted(held) == sorted(ref) and all(len(r) == 1 for r in held.values())
    assert sorted(k for _, masks, _, _ in results for k in masks) == sorted(ref_masks)


def test_data_parallel_asp_without_sharding_is_refused_on_every_rank():
    """Paddle 3.3.1 keeps ASPOptimizer and drops RawProgramOptimizer there (no gradient all-reduce)."""
    from refimpl.distributed import fleet

    def rank_fn():
        main, startup, loss = _mlp()
        s = DistributedStrategy()
        s.asp = True
        with paddle.static.program_guard(main, startup), unique_name.guard():
            fleet.init(is_collective=True)
            try:
                fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), s).minimize(loss)
            except PreconditionNotMet as e:
                return str(e), [op.type for op in main.global_block().ops][-1]
        return None
    for msg, last in run_in_process(2, rank_fn, timeout=30):
        assert "strategy.sharding" in msg and "2 workers" in msg and last == "reduce_mean"


# ---- (g) bad input: typed errors naming what is wrong --------------------------------------------------
def test_bad_n_m_and_mask_algo_are_typed_errors():
    main, startup = _conv_net(channels=4, hw=3)
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.static.Executor().run(startup)
        before = np.array(scope.find_var("fc_0.w_0").get_tensor())
        with pytest.raises(InvalidArgument, match=r"prune_model.*n=5, m=4"):
            asp.prune_model(main, n=5, m=4)
        with pytest.raises(InvalidArgument, match=r"mask_algo should be one of .*'mask_3d'"):
            asp.prune_model(main, mask_algo="mask_3d")
        with pytest.raises(InvalidArgument, match="n=2, m=0"):
            asp.prune_model(main, n=2, m=0)
        np.testing.assert_array_equal(np.array(scope.find_var("fc_0.w_0").get_tensor()), before)  # nothing pruned
    with pytest.raises(InvalidArgument, match=r"create_mask.*n=3, m=2"):
        asp.create_mask(A, n=3, m=2)
    with pytest.raises(InvalidArgument, match=r"get_mask_1d.*n=4, m=2"):
        asp.get_mask_1d(A, 4, 2)
    with pytest.raises(InvalidArgument, match="func_name must be a MaskAlgo"):
        asp.create_mask(A, func_name="get_mask_1d")
    with pytest.raises(InvalidArgument, match="func_name must be a CheckMethod"):
        asp.check_sparsity(A, func_name=MaskAlgo.MASK_1D)
    with pytest.raises(InvalidArgument, match="1 to 4 dimensions.*got 5"):
        asp.create_mask(np.ones((2, 2, 2, 2, 4)))
    with pytest.raises(InvalidArgument, match="must be a MaskAlgo"):
        CheckMethod.get_checking_method("mask_1d")
    with pytest.raises(InvalidArgument, match="paddle.nn.Layer or paddle.static.Program.*ndarray"):
        asp.prune_model(A)


def test_prune_model_needs_startup_and_masks():
    main, startup = _conv_net(channels=4, hw=3)
    with paddle.static.scope_guard(paddle.static.Scope()):
        with pytest.raises(PreconditionNotMet, match="parameter 'conv2d_0.w_0' is not in the global scope"):
            asp.prune_model(main)
    plain, plain_startup = _conv_net(channels=4, hw=3, train=False)
    with paddle.static.scope_guard(paddle.static.Scope()):
        paddle.static.Executor().run(plain_startup)
        with pytest.raises(PreconditionNotMet, match="the ASP mask 'conv2d_0.w_0.asp_mask'.*decorate"):
            asp.prune_model(plain)
        assert sorted(asp.prune_model(plain, with_mask=False)) == WEIGHTS  # inference pruning needs no masks


def test_dygraph_is_unimplemented_and_dygraph_only_methods_refuse():
    opt = asp.decorate(paddle.optimizer.SGD(0.1))
    assert opt._learning_rate == 0.1  # every other attribute is the wrapped optimizer's
    with pytest.raises(PreconditionNotMet, match="step is only supported in dynamic graph mode"):
        opt.step()
    with pytest.raises(PreconditionNotMet, match="state_dict"):
        opt.state_dict()
    paddle.disable_static()
    try:
        with pytest.raises(Unimplemented, match="paddle.incubate.asp.decorate in dynamic graph mode"):
            asp.decorate(paddle.optimizer.SGD(0.1))
        with pytest.raises(Unimplemented, match="OptimizerWithSparsityGuarantee.step in dynamic graph mode"):
            opt.step()
    finally:
        paddle.enable_static()


def test_prune_model_of_a_static_layer_prunes_its_program():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 8], "float32")
        layer = paddle.nn.Linear(8, 4)
        layer(x)
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.static.Executor().run(startup)
        w = np.array(scope.find_var(layer.weight.name).get_tensor())
        masks = asp.prune_model(layer, with_mask=False)
        assert list(masks) == [layer.weight.name] and layer.weight.name.startswith("linear_")
        want = asp.create_mask(w.T).T  # pruned along the input dimension (the rows of W)
        np.testing.assert_array_equal(np.array(scope.find_var(layer.weight.name).get_tensor()), w * want)
    with pytest.raises(InvalidArgument, match="no parameters"):
        asp.prune_model(paddle.nn.ReLU())
