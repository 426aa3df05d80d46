"""Fleet's meta-optimizers: the programs Paddle 3.3.1 writes for two trainers, the numbers of
single-device training on in-process ranks, and the typed errors of bad configs.

Op lists marked "Paddle 3.3.1" were recorded with /tmp/pd33 (``FLAGS_enable_pir_api=0``) building
the three-fc net of Paddle's ``fleet_meta_optimizer_base.py`` (trainer 1 of 2 endpoints,
Momentum(0.01, 0.9)) with ``core.is_compiled_with_cuda`` patched to True — the CPU wheel refuses
``CollectiveHelper._init_communicator`` otherwise ("comm_id must be generated in paddlepaddle-xpu") —
and ``c_gen_nccl_id`` / ``c_comm_init`` appended under another op type and renamed, since the
CPU wheel does not register them; nothing was run there.
"""
import os

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

from fleet_env import as_trainer


# ---- the programs of two trainers (Paddle 3.3.1, see the module docstring) ---------------------------
FWD = ["mul", "elementwise_add", "tanh", "mul", "elementwise_add", "tanh", "mul", "elementwise_add", "softmax",
       "softmax_with_cross_entropy", "reduce_mean"]
INIT = ["uniform_random", "fill_constant"] * 3 + ["fill_constant"] * 7
COMM = ["c_gen_nccl_id", "c_comm_init", "fill_constant", "all_reduce", "c_sync_calc_stream"] + ["broadcast"] * 6 \
    + ["c_sync_comm_stream"]
BWD_HEAD = ["fill_constant", "scale", "reduce_mean_grad", "softmax_with_cross_entropy_grad", "softmax_grad"]
LAYER_GRAD = ["elementwise_add_grad", "mul_grad"]
PADDLE_PROGRAMS = {
    "default": (FWD + ["coalesce_tensor"] + BWD_HEAD + LAYER_GRAD + ["tanh_grad"] + LAYER_GRAD + ["tanh_grad"]
                + LAYER_GRAD + ["all_reduce"] + ["depend"] * 6 + ["momentum"] * 6, INIT + COMM),
    "nofuse": (FWD + BWD_HEAD + ["elementwise_add_grad", "all_reduce", "mul_grad", "all_reduce"]
               + ["tanh_grad", "elementwise_add_grad", "all_reduce", "mul_grad", "all_reduce"] * 2
               + ["momentum"] * 6, INIT + COMM),
    "fuse2": (FWD + ["coalesce_tensor"] * 3 + BWD_HEAD
              + (LAYER_GRAD + ["all_reduce", "depend", "depend", "tanh_grad"]) * 2 + LAYER_GRAD
              + ["all_reduce", "depend", "depend"] + ["momentum"] * 6, INIT + COMM),
    "gm": (FWD + BWD_HEAD + LAYER_GRAD + ["tanh_grad"] + LAYER_GRAD + ["tanh_grad"] + LAYER_GRAD
           + ["increment", "elementwise_mod", "equal"] + ["elementwise_add"] * 6 + ["conditional_block"],
           INIT + ["fill_constant"] * 9 + COMM),
    "recompute": (FWD + ["coalesce_tensor"] + BWD_HEAD + LAYER_GRAD + ["mul", "elementwise_add", "tanh_grad"]
                  + LAYER_GRAD + ["mul", "elementwise_add", "tanh_grad"] + LAYER_GRAD + ["all_reduce"]
                  + ["depend"] * 6 + ["momentum"] * 6, INIT + COMM),
}


def _strategy(variant):
    s = DistributedStrategy()
    if variant == "nofuse":
        s.fuse_all_reduce_ops = False
    if variant == "fuse2":
        s.fuse_grad_size_in_num = 2
    if variant == "gm":
        s.gradient_merge, s.gradient_merge_configs = True, {"k_steps": 2, "avg": True}
    if variant == "recompute":
        s.recompute, s.recompute_configs = True, {"checkpoints": ["fc_0.tmp_2", "fc_1.tmp_2"]}
    if variant == "amp":
        s.amp = True
    return s


def _paddle_net(dtype="float32"):
    """The net of Paddle's fleet_meta_optimizer_base.py."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 32], dtype)
        y = paddle.static.data("y", [-1, 1], "int64")
        h = paddle.static.nn.fc(x, 64, activation="tanh")
        h = paddle.static.nn.fc(h, 256, activation="tanh")
        pred = paddle.static.nn.fc([h], 2, activation="softmax")
        cost = paddle.nn.functional.cross_entropy(pred, y, reduction="none", use_softmax=False)
        loss = paddle.mean(cost)
    return main, startup, loss


@pytest.fixture
def trainer_1_of_2(monkeypatch):
    as_trainer(monkeypatch, 1, "127.0.0.1:36001,127.0.0.1:36002")


def _fleet_minimize(strategy, dtype="float32"):
    from refimpl.distributed.fleet import Fleet, PaddleCloudRoleMaker
    main, startup, loss = _paddle_net(dtype)
    f = Fleet()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        f.init(PaddleCloudRoleMaker(is_collective=True))
        f.distributed_optimizer(paddle.optimizer.Momentum(0.01, 0.9), strategy).minimize(loss)
    return f, main, startup


@pytest.mark.parametrize("variant", sorted(PADDLE_PROGRAMS))
def test_raw_program_ops_are_paddles(trainer_1_of_2, variant):
    f, main, startup = _fleet_minimize(_strategy(variant))
    assert [op.type for op in main.global_block().ops] == PADDLE_PROGRAMS[variant][0]
    assert [op.type for op in startup.global_block().ops] == PADDLE_PROGRAMS[variant][1]
    assert f._get_applied_meta_list()[0] == "RawProgramOptimizer"


def test_raw_program_details_are_paddles(trainer_1_of_2):
    """Slots, names and attrs recorded from Paddle 3.3.1 (the c_gen_nccl_id / c_comm_init attrs from
    CollectiveHelper._init_communicator's source: those two ops were stand-ins there)."""
    _, main, startup = _fleet_minimize(_strategy("default"))
    ops = startup.global_block().ops
    gen, init, fill, ar, sync = ops[13:18]
    assert gen.output("Out") == ["comm_id_0"] and gen.input_names == []
    assert (gen.attr("rank"), gen.attr("endpoint"), gen.attr("other_endpoints"), gen.attr("ring_id")) == \
        (1, "127.0.0.1:36002", ["127.0.0.1:36001"], 0)
    assert init.input("X") == ["comm_id_0"] and init.output_names == []
    assert (init.attr("nranks"), init.attr("rank"), init.attr("ring_id"), init.attr("endpoints")) == \
        (2, 1, 0, "127.0.0.1:36001,127.0.0.1:36002")
    assert fill.output("Out") == ar.input("x") == ar.output("out") == sync.input("X") == ["sync_var_0"]
    assert [op.input("x") for op in ops[18:24]] == [[n] for n in ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0",
                                                                   "fc_2.b_0", "fc_2.w_0"]]
    assert ops[24].input("X") == ["fc_2.w_0"]
    block = main.global_block()
    coalesce = block.ops[11]
    assert coalesce.input("Input") == ["fc_2.b_0", "fc_2.w_0", "fc_1.b_0", "fc_1.w_0", "fc_0.b_0", "fc_0.w_0"]
    assert coalesce.output("Output") == [n + "@GRAD" for n in coalesce.input("Input")]
    assert coalesce.output("FusedOutput") == ["FusedOutput_fc_2.b_0@GRAD_0"]
    assert coalesce.attr("copy_data") is False and coalesce.attr("use_align") is True
    assert block.ops[13].type == "scale" and block.ops[13].attr("scale") == 0.5
    assert block.ops[13].input("X") == ["mean_0.tmp_0@GRAD"]
    deps = [op for op in block.ops if op.type == "depend"]
    assert [op.input("X") for op in deps] == [[n] for n in coalesce.output("Output")]
    assert all(op.input("Dep") == ["FusedOutput_fc_2.b_0@GRAD_0"] for op in deps)


def test_raw_program_in_the_gradient_merge_block(trainer_1_of_2):
    """Paddle 3.3.1: the allreduces go inside the conditional block, before its optimizer ops."""
    _, main, _ = _fleet_minimize(_strategy("gm"))
    sub = main.block(1)
    types_ = [op.type for op in sub.ops]
    assert types_[:9] == ["scale"] * 6 + ["c_sync_calc_stream", "all_reduce", "all_reduce"]
    assert types_[7:13] == ["all_reduce"] * 6 and types_[13] == "c_sync_comm_stream"
    assert types_[14:20] == ["momentum"] * 6
    assert sub.ops[13].input("X") == [op.input("x")[0] for op in sub.ops[7:13]]
    assert all(n.endswith("@GRAD@GradientMerge") for n in sub.ops[13].input("X"))


# ---- numbers on two ranks --------------------------------------------------------------------------
def _data(steps=3, rows=8):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((rows, 32)), rng.integers(0, 2, (rows, 1)).astype("int64")) for _ in range(steps)]


def _dtype(variant):
    return "float32" if variant == "amp" else "float64"  # AMP takes float32 programs


def _single(variant, batches):
    main, startup, loss = _paddle_net(_dtype(variant))
    with paddle.static.program_guard(main, startup), unique_name.guard():
        opt = paddle.optimizer.Momentum(0.01, 0.9)
        if variant == "gm":
            opt = paddle.incubate.optimizer.GradientMergeOptimizer(opt, k_steps=2)
        if variant == "amp":  # fleet's amp_configs defaults are decorate's
            opt = paddle.static.amp.decorate(opt)
        opt.minimize(loss)
    paddle.seed(3)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    for x, y in batches:
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def _ranks(variant, batches):
    from refimpl.distributed import fleet

    def rank_fn():
        r = context.current().rank
        main, startup, loss = _paddle_net(_dtype(variant))
        with paddle.static.program_guard(main, startup), unique_name.guard():
            fleet.init(is_collective=True)
            fleet.distributed_optimizer(paddle.optimizer.Momentum(0.01, 0.9), _strategy(variant)).minimize(loss)
        paddle.seed(3 + r)  # different draws on each rank: the startup broadcast makes them rank 0's
        exe = paddle.static.Executor()
        exe.run(startup)
        half = len(batches[0][0]) // 2
        for x, y in batches:
            exe.run(main, feed={"x": x[r * half:(r + 1) * half], "y": y[r * half:(r + 1) * half]}, fetch_list=[loss])
        scope = paddle.static.global_scope()
        return fleet._get_applied_meta_list(), {p.name: np.array(scope.find_var(p.name).get_tensor())
                                                 for p in main.all_parameters()}
    return run_in_process(2, rank_fn, timeout=60)


@pytest.mark.parametrize("variant", ["default", "nofuse", "fuse2", "gm", "recompute", "amp"])
def test_two_ranks_give_one_device_on_the_whole_batch(variant):
    """float64 runs within 1e-6 (the allreduce adds the two halves' gradients in another order); AMP,
    float32, against one device decorated alike."""
    batches = [(x.astype(_dtype(variant)), y) for x, y in _data()]
    ref = _single(variant, batches)
    for applied, params in _ranks(variant, batches):
        assert applied[0] == "RawProgramOptimizer" and (applied[-1] == "AMPOptimizer") == (variant == "amp")
        for n, v in params.items():
            np.testing.assert_allclose(v, ref[n], rtol=1e-6 if variant != "amp" else 1e-5,
                                       atol=1e-9 if variant != "amp" else 1e-7, err_msg=n)


# ---- bad configs: typed errors before anything is built ----------------------------------------------
@pytest.mark.parametrize("configure, error, words", [
    (lambda s: (setattr(s, "recompute", True), setattr(s, "recompute_configs", {"checkpoints": ["nope.tmp_0"]})),
     InvalidArgument, "recompute_configs\\['checkpoints'\\].*nope.tmp_0"),
    (lambda s: (setattr(s, "recompute", True),
                setattr(s, "recompute_configs", {"checkpoints": ["fc_0.tmp_2"], "enable_offload": True})),
     InvalidArgument, "checkpoint_shape \\[\\]"),
    (lambda s: (setattr(s, "amp", True), setattr(s, "amp_configs", {"custom_white_list": ["softmaxx"]})),
     InvalidArgument, "custom_white_list.*softmaxx"),
    (lambda s: (setattr(s, "amp", True), setattr(s, "amp_configs", {"init_loss_scaling": 0.0})),
     InvalidArgument, "init_loss_scaling.*0.0"),
])
def test_bad_configs_raise_before_building(trainer_1_of_2, configure, error, words):
    s = DistributedStrategy()
    configure(s)
    main, startup, loss = _paddle_net()
    before = [op.type for op in main.global_block().ops]
    with pytest.raises(error, match=words):
        from refimpl.distributed.fleet import Fleet, PaddleCloudRoleMaker
        f = Fleet()
        with paddle.static.program_guard(main, startup), unique_name.guard():
            f.init(PaddleCloudRoleMaker(is_collective=True))
            f.distributed_optimizer(paddle.optimizer.Momentum(0.01, 0.9), s).minimize(loss)
    assert [op.type for op in main.global_block().ops] == before


def test_optimizer_none_is_a_typed_error(trainer_1_of_2):
    """Paddle 3.3.1 raises a bare AttributeError ('NoneType' object has no attribute '_learning_rate')."""
    from refimpl.distributed.fleet import Fleet
    f = Fleet()
    f.init(is_collective=True)
    with pytest.raises(InvalidArgument, match="optimizer must be a paddle optimizer.*got None"):
        f.distributed_optimizer(None, DistributedStrategy())


def test_bad_config_fails_on_every_rank_without_hanging():
    from refimpl.distributed import fleet

    def rank_fn():  # a rank that raised would surface as RankFailed; one that hung, as a timeout
        main, startup, loss = _paddle_net()
        s = DistributedStrategy()
        s.recompute, s.recompute_configs = True, {"checkpoints": ["missing"]}
        with paddle.static.program_guard(main, startup), unique_name.guard():
            fleet.init(is_collective=True)
            try:
                fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), s).minimize(loss)
            except InvalidArgument as e:
                return str(e)
        return None
    msgs = run_in_process(2, rank_fn, timeout=30)
    assert msgs[0] == msgs[1] and "missing" in msgs[0]


def test_silently_disabled_as_paddle(trainer_1_of_2):
    """Paddle 3.3.1: lars with Adam, lamb with Momentum and recompute without checkpoints do not apply."""
    s = DistributedStrategy()
    s.lamb, s.recompute = True, True
    f, main, _ = _fleet_minimize(s)
    assert f._get_applied_meta_list() == ["RawProgramOptimizer"]
    final = f._final_strategy()
    assert (final.lamb, final.recompute, final.without_graph_optimization) == (False, False, True)
    assert "lamb" not in [op.type for op in main.global_block().ops]


# ---- the startup ops bootstrap refimpl's communicators ---------------------------------------------
def _bring_up(ring_id, endpoints, rank_attr=None):
    from refimpl.distributed.fleet.meta_optimizers.collective_helper import init_communicator

    def rank_fn():
        r = context.current().rank
        startup = Program()
        with unique_name.guard():
            init_communicator(startup, endpoints[r], endpoints, r if rank_attr is None else rank_attr, ring_id, 0)
        paddle.static.Executor().run(startup, scope=paddle.static.Scope())
        comm = context.current().comm(ring_id)
        return comm.nranks, comm.rank
    return run_in_process(2, rank_fn, timeout=30)


def test_c_comm_init_checks_and_creates_rings():
    from refimpl.distributed.communication import RankFailed
    eps = ["127.0.0.1:6170", "127.0.0.1:6171"]
    assert _bring_up(0, eps) == [(2, 0), (2, 1)]
    assert _bring_up(7, eps) == [(2, 0), (2, 1)]   # a new ring over the whole world is made
    with pytest.raises(RankFailed, match="rank=0"):
        _bring_up(0, eps, rank_attr=0)              # rank 1 claims to be rank 0 of ring 0
    with pytest.raises(RankFailed, match="no communicator for ring_id 9"):
        _bring_up(9, eps + ["127.0.0.1:6172"])      # three ranks: not a ring refimpl can make here


# ---- LARS / LAMB through fleet (what Paddle's test_fleet_lars/lamb_meta_optimizer.py check) ------------
def _fleet_with(inner, configure):
    from refimpl.distributed.fleet import Fleet, PaddleCloudRoleMaker
    s = DistributedStrategy()
    configure(s)
    main, startup, loss = _paddle_net()
    f = Fleet()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        f.init(PaddleCloudRoleMaker(is_collective=True))
        f.distributed_optimizer(inner, s).minimize(loss)
    return f, main


def test_lars_and_lamb_replace_the_update(trainer_1_of_2):
    def lars(s):
        s.lars = True
        s.lars_configs = {"lars_coeff": 0.001, "lars_weight_decay": 0.0005, "epsilon": 0,
                          "exclude_from_weight_decay": ["batch_norm", ".b"]}

    def lamb(s):
        s.lamb, s.lamb_configs = True, {"lamb_weight_decay": 0.01, "exclude_from_weight_decay": [".b_0"]}

    f, main = _fleet_with(paddle.optimizer.Momentum(0.01, 0.9), lars)
    ops = main.global_block().ops
    assert [op.type for op in ops].count("lars_momentum") == 6
    assert all(op.attr("lars_weight_decay")[0] == 0 for op in ops
               if op.type == "lars_momentum" and ".b" in op.attr("op_role_var")[0])
    assert f._get_applied_meta_list() == ["RawProgramOptimizer", "LarsOptimizer"]
    f, main = _fleet_with(paddle.optimizer.Adam(0.01), lars)  # lars needs a Momentum: not applied
    assert "lars_momentum" not in [op.type for op in main.global_block().ops]
    f, main = _fleet_with(paddle.optimizer.Adam(0.01), lamb)
    lambs = [op for op in main.global_block().ops if op.type == "lamb"]
    assert len(lambs) == 6 and f._get_applied_meta_list() == ["RawProgramOptimizer", "LambOptimizer"]
    assert all(op.attr("weight_decay") == 0 for op in lambs if op.attr("op_role_var")[0].endswith(".b_0"))
    assert any(op.attr("weight_decay") > 0 for op in lambs)


@pytest.mark.parametrize("how", ["decorated", "strategy"])
def test_amp_init_and_loss_scaling_find_the_amp_optimizer(monkeypatch, how):
    """As Paddle's ``Fleet._get_amp_optimizer``: the applied AMPOptimizer, else a user optimizer that
    ``static.amp.decorate`` made (``test_fleet_amp_init.py`` calls both through the fleet optimizer)."""
    for key in list(os.environ):
        if key.startswith(("PADDLE_", "TRAINING_ROLE")):
            monkeypatch.delenv(key)
    from refimpl.distributed.fleet import Fleet, PaddleCloudRoleMaker
    main, startup, loss = _paddle_net()
    f = Fleet()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        f.init(PaddleCloudRoleMaker(is_collective=True))
        opt = paddle.optimizer.Momentum(0.01, 0.9, multi_precision=True)
        if how == "decorated":
            dist = f.distributed_optimizer(paddle.static.amp.decorate(opt, init_loss_scaling=128.0))
        else:
            s = DistributedStrategy()
            s.amp, s.amp_configs = True, {"init_loss_scaling": 128.0}
            dist = f.distributed_optimizer(opt, s)
        dist.minimize(loss)
    assert ("AMPOptimizer" in f._get_applied_meta_list()) == (how == "strategy")
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup, scope=scope)
    with paddle.static.scope_guard(scope):
        dist.amp_init(paddle.CPUPlace())
    scaling = dist.get_loss_scaling()
    assert float(np.array(scope.find_var(scaling.name).get_tensor())[0]) == 128.0


def test_amp_init_without_amp_is_a_typed_error(trainer_1_of_2):
    from refimpl.distributed.fleet import Fleet, PaddleCloudRoleMaker
    main, startup, loss = _paddle_net()
    f = Fleet()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        f.init(PaddleCloudRoleMaker(is_collective=True))
        dist = f.distributed_optimizer(paddle.optimizer.Momentum(0.01, 0.9), DistributedStrategy())
        dist.minimize(loss)
    with pytest.raises(InvalidArgument, match="AMP is not applied"):
        dist.get_loss_scaling()
