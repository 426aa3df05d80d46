"""Cuda kernels of lamb and lars_momentum (``lars_lamb_ops.py``) against their NumPy kernels, bit for bit
(the squared norms included: both add in Eigen's order, see ``lars_lamb_ops.squared_norm``)."""
import numpy as np
import pytest

from kernel_check import Inputs, check_case, params

V = Inputs(31)
f32, f64, pos = V.f32, V.f64, V.pos


def lr(v=0.01, dt=np.float32):
    return np.array([v], dt)


def lamb(*shape, dt=np.float32, master=False, skip=None):
    """A lamb input list in slot order, mid-training (moments and pows of a few steps)."""
    p = f32(*shape).astype(dt)
    g = f32(*shape).astype(dt)
    m1, m2 = (f32(*shape) * 0.1).astype(dt), (pos(*shape) * 0.01).astype(dt)
    b1p, b2p = np.array([0.9 ** 3], dt), np.array([0.999 ** 3], dt)
    if master:
        return [p.astype(np.float16), g, lr(), m1, m2, b1p, b2p, p.copy(), skip]
    return [p, g, lr(dt=dt), m1, m2, b1p, b2p, None, skip]


def lars(shapes, dt=np.float32, master=False):
    ps = [f32(*s).astype(dt) for s in shapes]
    lists = [ps, [f32(*s).astype(dt) for s in shapes], [(f32(*s) * 0.1).astype(dt) for s in shapes],
             [lr(0.1 * (i + 1), dt) for i in range(len(shapes))]]
    if master:
        return [[p.astype(np.float16) for p in ps]] + lists[1:] + [[p.copy() for p in ps]]
    return lists + [None]


CASES = [
    ("lamb", lamb(5), {}),
    ("lamb", lamb(3, 4), {"weight_decay": 0.0}),
    ("lamb", lamb(3, 4), {"weight_decay": 0.0, "always_adapt": True}),
    ("lamb", lamb(37), {"weight_decay": 0.02, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-4}),
    ("lamb", lamb(6, dt=np.float64), {}),
    ("lamb", lamb(8200), {}),  # two runs: the norms' tree
    ("lamb", lamb(4, skip=np.array([True])), {}),
    ("lamb", lamb(4, skip=np.array([False])), {}),
    ("lamb", lamb(2, 3, master=True), {"multi_precision": True}),
    ("lamb", lamb(0, 3), {}),
    ("lars_momentum", lars([(3, 4)]), {"lars_weight_decay": [0.001]}),
    ("lars_momentum", lars([(5,), (40,)]), {"lars_weight_decay": [0.0005, 0.0], "rescale_grad": 2.0,
                                             "epsilon": 1e-9, "lars_coeff": 0.01, "mu": 0.8}),
    ("lars_momentum", lars([(7,)], dt=np.float64), {"lars_weight_decay": [0.01]}),
    ("lars_momentum", lars([(2, 3)], master=True), {"lars_weight_decay": [0.001], "multi_precision": True}),
    ("lars_momentum", lars([(0, 2)]), {"lars_weight_decay": [0.001]}),
]


@pytest.mark.parametrize("op_type,inputs,attrs", params(CASES))
def test_lars_lamb_kernel_matches_numpy(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)


@pytest.mark.parametrize("kind", ["lamb", "lamb_default", "lars"])
def test_training_on_the_cuda_backend_gives_paddles_bits(kind):
    """The programs of tests/test_lars_lamb.py run on CUDAPlace: Paddle 3.3.1's CPU losses and parameters."""
    import refimpl as paddle
    import test_lars_lamb as cpu

    main, startup, loss = cpu.build(kind)
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe = paddle.static.Executor(paddle.CUDAPlace(0))
        exe.run(startup)
        rng = np.random.default_rng(3)
        scope.var("fc_0.w_0").get_tensor().set(rng.standard_normal((4, 3)).astype(np.float32), paddle.CPUPlace())
        scope.var("fc_0.b_0").get_tensor().set(rng.standard_normal(3).astype(np.float32) * 0.1, paddle.CPUPlace())
        losses = [float(np.asarray(exe.run(main, feed={"x": rng.standard_normal((5, 4)).astype(np.float32)},
                                           fetch_list=[loss])[0])) for _ in range(3)]
        w, b = (np.array(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0"))
    want = cpu.MODEL[kind]
    assert losses == want["losses"] and cpu.bits(w) == want["w"] and cpu.bits(b) == want["b"]
