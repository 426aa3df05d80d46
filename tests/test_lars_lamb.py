"""paddle.optimizer.Lamb, paddle.incubate.optimizer.LarsMomentumOptimizer and their ops vs Paddle 3.3.1.

The recorded numbers come from Paddle 3.3.1's CPU wheel (legacy IR, ``FLAGS_enable_pir_api=0``):

* MODEL: ``x = data([None, 4]); loss = mean(fc(x, 3) ** 2)``, the optimizer's ``minimize``, startup
  run, then ``fc_0.w_0`` / ``fc_0.b_0`` set from ``default_rng(3)`` (standard normal, bias * 0.1) and
  three steps on ``default_rng(3)`` batches of shape (5, 4); the float32 bits of the final parameters.
* LAMB_OP: one ``lamb`` op on float32 vectors of n elements (Param ~ N(0, 1) and n fresh N(0, 1)
  gradients per step from ``default_rng(0)``, zero moments, lr 0.01, pows starting at beta1 / beta2),
  the first three values and the sha256 of Paddle's final Param bytes.
* LARS_OP: one ``lars_momentum`` op over two tensors (37 and 2000 elements, ``default_rng(5)``).
"""
import hashlib

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.ops.lars_lamb_ops import lamb, lars_momentum, squared_norm

paddle.enable_static()
F32 = np.float32


def bits(a):
    return np.asarray(a, F32).view(np.uint32).tolist()


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a, F32).tobytes()).hexdigest()[:16]


MODEL = {
    "lamb": dict(losses=[4.838143825531006, 7.303011417388916, 8.611907958984375],
                 w=[[1073858653, 3223362243, 1052611585], [3205359272, 3204307535, 3190612846],
                    [3220966852, 3195948978, 3209759472], [1079069758, 1043650554, 3198351145]],
                 b=[3157756621, 3183608530, 3182062652]),
    "lamb_default": dict(losses=[4.838143825531006, 7.0176310539245605, 7.680209636688232],
                         w=[[1073600788, 3222627392, 1044605024], [3204485169, 3207294401, 1020741964],
                            [3219317795, 3198335790, 3206557838], [1078233728, 3162978604, 3192032225]],
                         b=[3165931504, 3181635345, 3183734919]),
    "lars": dict(losses=[4.838143825531006, 7.346543788909912, 9.088122367858887],
                 w=[[1073896280, 3223523813, 1054110337], [3205551792, 3202972328, 3193608214],
                    [3221250353, 3194861896, 3210488006], [1079218113, 1046627902, 3199405274]],
                 b=[1025258348, 3192146248, 993589056]),
}


def make_optimizer(kind):
    if kind == "lamb":
        return paddle.optimizer.Lamb(learning_rate=0.01, lamb_weight_decay=0.02,
                                     exclude_from_weight_decay_fn=lambda p: p.name.endswith("b_0"))
    if kind == "lamb_default":
        return paddle.optimizer.Lamb(learning_rate=0.05)
    return paddle.incubate.optimizer.LarsMomentumOptimizer(
        learning_rate=0.1, momentum=0.9, lars_coeff=0.01, lars_weight_decay=0.001, exclude_from_weight_decay=["b_0"],
        epsilon=1e-8, rescale_grad=0.5)


def build(kind):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 4], "float32")
        h = paddle.static.nn.fc(x, 3)
        loss = paddle.mean(h * h)
        make_optimizer(kind).minimize(loss)
    return main, startup, loss


def op_of(program, type):
    return [op for op in program.global_block().ops if op.type == type]


def test_lamb_program_matches_paddle():
    main, startup, _ = build("lamb")
    assert [op.type for op in main.global_block().ops][-2:] == ["lamb", "lamb"]
    # Paddle 3.3.1's startup program: parameters, learning rate, then per parameter (sorted by name)
    assert [(op.type, op.output_arg_names[0]) for op in startup.global_block().ops] == [
        ("uniform_random", "fc_0.w_0"), ("fill_constant", "fc_0.b_0"), ("fill_constant", "learning_rate_0"),
        ("fill_constant", "fc_0.b_0_moment1_0"), ("fill_constant", "fc_0.b_0_moment2_0"),
        ("fill_constant", "fc_0.b_0_beta1_pow_acc_0"), ("fill_constant", "fc_0.b_0_beta2_pow_acc_0"),
        ("fill_constant", "fc_0.w_0_moment1_0"), ("fill_constant", "fc_0.w_0_moment2_0"),
        ("fill_constant", "fc_0.w_0_beta1_pow_acc_0"), ("fill_constant", "fc_0.w_0_beta2_pow_acc_0")]
    pow_fill = [op for op in startup.global_block().ops if op.output_arg_names[0] == "fc_0.w_0_beta1_pow_acc_0"][0]
    assert pow_fill.attr("shape") == [1] and pow_fill.attr("op_device") == "cpu"
    b, w = op_of(main, "lamb")
    assert w.input("Moment1") == ["fc_0.w_0_moment1_0"] and w.output("Beta2PowOut") == ["fc_0.w_0_beta2_pow_acc_0"]
    assert w.input("MasterParam") == [] and w.input("SkipUpdate") == []
    assert w.attr("op_role") == 2 and w.attr("op_role_var") == ["fc_0.w_0", "fc_0.w_0@GRAD"]
    assert (b.attr("op_namescope"), w.attr("op_namescope")) == ("/optimizer/", "/optimizer_1/")
    # float32 attrs as Paddle stores them; weight_decay 0 for the excluded bias
    assert {a: w.attr(a) for a in ("beta1", "beta2", "epsilon", "weight_decay", "always_adapt", "multi_precision")} == {
        "beta1": 0.8999999761581421, "beta2": 0.9990000128746033, "epsilon": 9.999999974752427e-07,
        "weight_decay": 0.019999999552965164, "always_adapt": False, "multi_precision": False}
    assert b.attr("weight_decay") == 0.0


def test_lars_program_matches_paddle():
    main, startup, _ = build("lars")
    assert [(op.type, op.output_arg_names[0]) for op in startup.global_block().ops] == [
        ("uniform_random", "fc_0.w_0"), ("fill_constant", "fc_0.b_0"), ("fill_constant", "learning_rate_0"),
        ("fill_constant", "fc_0.b_0_velocity_0"), ("fill_constant", "fc_0.w_0_velocity_0")]
    b, w = op_of(main, "lars_momentum")
    assert w.input("Param") == ["fc_0.w_0"] and w.input("Velocity") == ["fc_0.w_0_velocity_0"]
    assert w.output("VelocityOut") == ["fc_0.w_0_velocity_0"] and w.input("MasterParam") == []
    assert {a: w.attr(a) for a in ("mu", "lars_coeff", "lars_weight_decay", "epsilon", "rescale_grad")} == {
        "mu": 0.8999999761581421, "lars_coeff": 0.009999999776482582, "lars_weight_decay": [0.0010000000474974513],
        "epsilon": 9.99999993922529e-09, "rescale_grad": 0.5}
    assert b.attr("lars_weight_decay") == [0.0]  # "b_0" is in exclude_from_weight_decay


@pytest.mark.parametrize("kind", sorted(MODEL))
def test_training_matches_paddle_bitwise(kind):
    main, startup, loss = build(kind)
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        rng = np.random.default_rng(3)
        scope.var("fc_0.w_0").get_tensor().set(rng.standard_normal((4, 3)).astype(F32), paddle.CPUPlace())
        scope.var("fc_0.b_0").get_tensor().set(rng.standard_normal(3).astype(F32) * 0.1, paddle.CPUPlace())
        losses = [float(exe.run(main, feed={"x": rng.standard_normal((5, 4)).astype(F32)}, fetch_list=[loss])[0])
                  for _ in range(3)]
        w, b = (np.array(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0"))
    want = MODEL[kind]
    assert losses == want["losses"]
    assert bits(w) == want["w"] and bits(b) == want["b"]


# (n, weight_decay, always_adapt, steps): Paddle's first three values and sha256 of its final Param
LAMB_OP = [
    (37, 0.01, False, 3, [0.11737281829118729, -0.1326839029788971, 0.6244519352912903], "4aadc74cd713b550"),
    (100, 0.0, True, 3, [0.11110468953847885, -0.15171489119529724, 0.6683006286621094], "05a622f137df4796"),
    (1504, 0.02, False, 3, [0.1307094544172287, -0.11491355299949646, 0.611571192741394], "a4298fc8ac92224b"),
    (9000, 0.01, False, 3, [0.1450718641281128, -0.14918242394924164, 0.6460292935371399], "8f74601f8a061b05"),
    (20000, 0.01, True, 2, [0.10247565060853958, -0.14724712073802948, 0.6343307495117188], "f436632b0ffaa778"),
]


@pytest.mark.parametrize("n, wd, adapt, steps, head, digest", LAMB_OP)
def test_lamb_op_matches_paddle_bitwise(n, wd, adapt, steps, head, digest):
    """Sizes that take each path of the norm's order: tail only, packets, a tree of runs (9000, 20000)."""
    rng = np.random.default_rng(0)
    p = rng.standard_normal(n).astype(F32)
    m1, m2 = np.zeros(n, F32), np.zeros(n, F32)
    b1p, b2p = np.array([0.9], F32), np.array([0.999], F32)
    for _ in range(steps):
        out = lamb(p, rng.standard_normal(n).astype(F32), np.array([0.01], F32), m1, m2, b1p, b2p, None, None,
                   weight_decay=wd, beta1=0.9, beta2=0.999, epsilon=1e-6, always_adapt=adapt, multi_precision=False)
    assert out[0] is p and out[1] is m1  # in place
    assert p[:3].tolist() == head and sha(p) == digest
    pow1 = F32(0.9)
    for _ in range(steps):
        pow1 = pow1 * F32(0.9)
    assert b1p[0] == pow1


def test_lars_op_matches_paddle_bitwise():
    rng = np.random.default_rng(5)
    sizes = [37, 2000]
    P, V, L = [], [], []
    for i, n in enumerate(sizes):
        P.append(rng.standard_normal(n).astype(F32))
        V.append(np.zeros(n, F32))
        L.append(np.array([0.1 * (i + 1)], F32))
    for _ in range(2):
        G = [rng.standard_normal(n).astype(F32) for n in sizes]
        lars_momentum(P, G, V, L, None, mu=0.9, lars_coeff=0.001, lars_weight_decay=[0.0005, 0.0], epsilon=1e-9,
                      multi_precision=False, rescale_grad=2.0)
    assert [sha(a) for a in (P[0], V[0], P[1], V[1])] == [
        "e3cc0dfaed5daab4", "5a1ac75128107578", "c7161ad86d5d2a48", "318bb5015fcad660"]


def test_squared_norm_is_close_to_the_exact_sum():
    """An invariant of any order: within a few float32 roundings of the float64 sum."""
    for n in (0, 1, 7, 15, 16, 17, 100, 8191, 8193, 50000):
        x = np.random.default_rng(n).standard_normal(n).astype(F32)
        exact = float(np.sum(x.astype(np.float64) ** 2))
        assert abs(float(squared_norm(x)) - exact) <= 1e-6 * max(exact, 1.0)


def test_lamb_skip_update_and_no_adaptation():
    p, g = np.ones(4, F32), np.full(4, 0.5, F32)
    m1, m2, b1p, b2p = np.zeros(4, F32), np.zeros(4, F32), np.array([0.9], F32), np.array([0.999], F32)
    kw = dict(weight_decay=0.0, beta1=0.9, beta2=0.999, epsilon=1e-6, always_adapt=False, multi_precision=False)
    lamb(p, g, np.array([0.1], F32), m1, m2, b1p, b2p, None, np.array([True]), **kw)
    assert p.tolist() == [1.0] * 4 and b1p[0] == F32(0.9)
    lamb(p, g, np.array([0.1], F32), m1, m2, b1p, b2p, None, np.array([False]), **kw)
    # no weight decay, no always_adapt: ratio 1; the first step's unbiased m / sqrt(v) is g / |g| = 1
    assert np.allclose(p, 1 - 0.1, rtol=1e-5) and b1p[0] == F32(F32(0.9) * F32(0.9))


def test_bad_input_names_the_option():
    with pytest.raises(InvalidArgument, match="beta1"):
        paddle.optimizer.Lamb(beta1=1.5)
    with pytest.raises(InvalidArgument, match="lamb_weight_decay"):
        paddle.optimizer.Lamb(lamb_weight_decay="0.1")
    with pytest.raises(InvalidArgument, match="exclude_from_weight_decay_fn"):
        paddle.optimizer.Lamb(exclude_from_weight_decay_fn="b_0")
    with pytest.raises(InvalidArgument, match="momentum"):
        paddle.incubate.optimizer.LarsMomentumOptimizer(0.1, momentum=None)
    with pytest.raises(InvalidArgument, match="exclude_from_weight_decay"):
        paddle.incubate.optimizer.LarsMomentumOptimizer(0.1, 0.9, exclude_from_weight_decay="b_0")
    # Paddle 3.3.1 raises a bare TypeError ("object of type 'int' has no len()") at minimize
    with pytest.raises(InvalidArgument, match="exclude_from_weight_decay.*got 3"):
        paddle.incubate.optimizer.LarsMomentumOptimizer(0.1, 0.9, exclude_from_weight_decay=3)
    with pytest.raises(InvalidArgument, match="lars_weight_decay"):
        lars_momentum([np.ones(2, F32)], [np.ones(2, F32)], [np.zeros(2, F32)], [np.ones(1, F32)], None, mu=0.9,
                      lars_coeff=0.001, lars_weight_decay=[0.1, 0.2], epsilon=0.0, multi_precision=False,
                      rescale_grad=1.0)
    with pytest.raises(InvalidArgument, match="Grad shape"):
        lamb(np.ones(3, F32), np.ones(2, F32), np.ones(1, F32), np.zeros(3, F32), np.zeros(3, F32),
             np.ones(1, F32), np.ones(1, F32), None, None, weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6,
             always_adapt=False, multi_precision=False)


@pytest.mark.parametrize("level, found_inf", [("O1", "find_infinite_scale.tmp_0"),
                                              ("O2", "find_infinite_scale_fp32.tmp_0")])
def test_amp_decorated_lamb_skips_on_found_inf_as_paddle(level, found_inf):
    """Paddle 3.3.1: ``paddle.static.amp.decorate(Lamb(0.01), level=level, use_dynamic_loss_scaling=True)``
    over ``mean(fc(x, 3))`` (under ``fp16_guard``) gives these ops, each lamb reading the found_inf var as
    SkipUpdate; at O2 too the parameters are float32 when the program is built (no master weights)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 4], "float32")
        with paddle.static.amp.fp16_guard():
            loss = paddle.mean(paddle.static.nn.fc(x, 3))
        paddle.static.amp.decorate(paddle.optimizer.Lamb(0.01), level=level,
                                   use_dynamic_loss_scaling=True).minimize(loss)
    ops = main.global_block().ops
    assert [op.type for op in ops] == [
        "mul", "elementwise_add", "reduce_mean", "elementwise_mul", "fill_constant", "elementwise_mul_grad",
        "reduce_mean_grad", "elementwise_add_grad", "mul_grad", "check_finite_and_unscale", "update_loss_scaling",
        "lamb", "lamb"]
    lambs = [op for op in ops if op.type == "lamb"]
    assert [op.input("SkipUpdate") for op in lambs] == [[found_inf]] * 2
    assert [(op.input("MasterParam"), op.attr("multi_precision")) for op in lambs] == [([], False)] * 2
