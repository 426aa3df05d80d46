"""Paddle's CPU random numbers, bit for bit: the engine, the distributions, the ops, the state.

The expected numbers are not produced by refimpl: they are the C++ standard's own check value,
values printed by a libstdc++ program (g++ 12, ``std::mt19937_64`` / ``std::seed_seq``), and values
and MD5 digests printed by Paddle 3.3.1 on the CPU (``FLAGS_enable_pir_api=0``), pasted in below.
"""
import hashlib
import threading
import time

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import random
from refimpl.core.errors import InvalidArgument, NotFound
from refimpl.core.mt19937_64 import MT19937_64, seed_seq_generate

paddle.enable_static()


def md5(a):
    return hashlib.md5(np.ascontiguousarray(a).tobytes()).hexdigest()


# ---- the engine -------------------------------------------------------------------------------
def test_default_engine_gives_the_standards_10000th_value():
    e = MT19937_64()
    e.discard(9999)
    assert int(e.random_raw(1)[0]) == 9981545732273789042  # [rand.predef] of the C++ standard


def test_integer_and_seed_seq_seeding_match_libstdcxx():
    e = MT19937_64(2023)  # libstdc++: std::mt19937_64 e; e.seed(2023)
    assert e.random_raw(3).tolist() == [10389116654464810288, 13299959871461319494, 12826103735495441524]
    e.discard(700)
    assert int(e.random_raw(1)[0]) == 1278368183146672976
    g = MT19937_64()
    g.seed_seq([2023])  # libstdc++: std::seed_seq q({uint64_t(2023)}); std::mt19937_64 g(q)
    assert g.random_raw(3).tolist() == [15971857826336292767, 9595022430819023016, 4788947844080922545]


def test_seed_seq_keeps_32_bits_of_each_value():
    assert np.array_equal(seed_seq_generate([2023]), seed_seq_generate([2023 + 2 ** 32]))
    assert not np.array_equal(seed_seq_generate([2023]), seed_seq_generate([2024]))


@pytest.mark.parametrize("sizes", [[1, 311, 312, 313, 1000, 5, 624, 625], [312] * 4, [2000, 1]])
def test_bulk_draws_are_the_one_by_one_draws(sizes):
    a, b = MT19937_64(5), MT19937_64(5)
    bulk = np.concatenate([a.random_raw(k) for k in sizes])
    one = np.concatenate([b.random_raw(1) for _ in range(sum(sizes))])
    assert np.array_equal(bulk, one)
    wa, pa = a.get_state()
    wb, pb = b.get_state()
    assert pa == pb and np.array_equal(wa, wb)


# ---- the distributions, against Paddle 3.3.1 --------------------------------------------------
def _run_startup(build, seed):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        out = build()
    paddle.seed(seed)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup, scope=scope)
    return main, exe, scope, out


def _value(scope, name):
    return np.array(scope.find_var(name).get_tensor())


def test_seeded_fc_xavier_weights_are_paddles():
    def build():
        x = paddle.static.data("x", [-1, 784], "float32")
        return paddle.static.nn.fc(x, 256)
    _, _, scope, _ = _run_startup(build, 2023)
    w = _value(scope, "fc_0.w_0")
    # Paddle 3.3.1: paddle.seed(2023); static.nn.fc(x[-1, 784], 256) -> fc_0.w_0
    assert w.reshape(-1)[:3].tolist() == [0.05557449162006378, 0.003060579299926758, -0.03651795536279678]
    assert w.reshape(-1)[-1] == np.float32(-0.05193421244621277)
    assert md5(w) == "05663bfa099e472465a45e5a1b69e5e6"


def test_initialisers_in_sequence_are_paddles():
    init = paddle.nn.initializer

    def build():
        x = paddle.static.data("x", [-1, 4], "float32")
        paddle.static.nn.fc(x, 3)
        for shape, dtype, i in [([6], "float32", init.Normal(0.0, 1.0)), ([5], "float64", init.Normal(0.5, 2.0)),
                                ([3], "float64", init.Uniform(-2.0, 3.0))]:
            paddle.static.create_parameter(shape, dtype, default_initializer=i)
    _, _, scope, _ = _run_startup(build, 2023)
    # Paddle 3.3.1 printed these (the same program, paddle.seed(2023))
    assert _value(scope, "fc_0.w_0").reshape(-1)[:4].tolist() == \
        [0.6773968935012817, 0.037305355072021484, -0.44511696696281433, 0.7503831386566162]
    assert _value(scope, "create_parameter_0.w_0")[:3].tolist() == \
        [1.6635966300964355, -0.5576478242874146, -0.5991107225418091]
    assert _value(scope, "create_parameter_1.w_0").tolist() == \
        [-0.09390151219862086, -2.5051678246310805, 1.8446796247139947, -1.65494698027112, 2.103409028963636]
    assert _value(scope, "create_parameter_2.w_0").tolist() == \
        [0.3705942547250345, -0.5405258133362159, 1.9767457234332104]


def _big_build():
    init = paddle.nn.initializer
    specs = [([100001], "float32", init.Normal(0.1, 0.3)), ([300, 333], "float32", init.Uniform(-0.37, 1.19)),
             ([20001], "float64", init.Normal(-0.7, 1.3)), ([20000], "float64", init.Uniform(-0.37, 1.19)),
             ([999], "float32", init.Normal(0.0, 1.0))]
    x = paddle.static.data("x", [-1, 1000], "float32")
    for shape, dtype, i in specs:
        paddle.static.create_parameter(shape, dtype, default_initializer=i)
    sb = paddle.static.default_startup_program().global_block()
    for name, op, attrs in [("w_seeded", "uniform_random", {"min": -1.0, "max": 1.0, "seed": 123}),
                            ("w2_seeded", "gaussian_random", {"mean": 0.0, "std": 1.0, "seed": -5})]:
        v = sb.create_var(name=name, shape=[1001], dtype="float32", persistable=True)
        sb.append_op(type=op, outputs={"Out": [v]}, attrs={"shape": [1001], "dtype": 5, **attrs})
    return (paddle.nn.functional.dropout(x, 0.37),
            paddle.nn.functional.dropout(x, 0.5, mode="downscale_in_infer"))


# Paddle 3.3.1, paddle.seed(7): MD5 of each array's bytes (the same program as _big_build)
PADDLE_BIG = {"create_parameter_0.w_0": "2fa225d7cb8c456b4856250109be2482",  # normal f32, odd count
              "create_parameter_1.w_0": "a1bce4e3547aafda46c8605e1d2941c3",  # uniform f32
              "create_parameter_2.w_0": "0f7c616c119f4a1959862231120cce6f",  # normal f64
              "create_parameter_3.w_0": "17dd459f40cc83ebcdea79aa26f63efb",  # uniform f64
              "create_parameter_4.w_0": "3dd381903d3b3e52de84b06a08a7d0a4",  # after all the above
              "w_seeded": "18ae82c623b6ccfa2d2ec360695004e1",  # op seed 123
              "w2_seeded": "b23f6f665c5a47e27492d28608144c66"}  # op seed -5
PADDLE_DROPOUT = ["2589ef9ed170cea3ca9b23aae33a5afd", "16dcefb003356a8dc2abda3b8c17534a"]


def test_large_draws_of_every_kind_are_paddles_bit_for_bit():
    main, exe, scope, (d, d2) = _run_startup(_big_build, 7)
    got = {n: md5(_value(scope, n)) for n in PADDLE_BIG}
    assert got == PADDLE_BIG
    outs = exe.run(main, feed={"x": np.ones((20, 1000), "float32")}, fetch_list=[d, d2], scope=scope)
    assert [md5(o) for o in outs] == PADDLE_DROPOUT


def test_dropout_masks_after_a_seed_are_paddles():
    def build():
        x = paddle.static.data("x", [2, 4], "float32")
        return [paddle.nn.functional.dropout(x, p, mode=m) for p, m in
                [(0.5, "upscale_in_train"), (1.0, "upscale_in_train"), (0.5, "downscale_in_infer")]]
    main, exe, scope, outs = _run_startup(build, 5)
    a, b, c = exe.run(main, feed={"x": -np.ones((2, 4), "float32")}, fetch_list=outs, scope=scope)
    # Paddle 3.3.1 printed these; dropped elements are +0 (the kernel writes 0, not x * 0)
    np.testing.assert_array_equal(a, [[-2, -2, 0, -2], [0, -2, -2, -2]])
    np.testing.assert_array_equal(c, [[-1, -1, 0, -1], [0, 0, 0, -1]])
    assert not np.signbit(a[a == 0]).any() and not np.signbit(b).any()
    np.testing.assert_array_equal(b, np.zeros((2, 4)))


def test_paddle_seed_uses_the_low_32_bits_and_full_range():
    # Paddle 3.3.1: paddle.seed(s) then Uniform(-1, 1) of 4 elements
    want = {0: [-0.3753308057785034, -0.7466444969177246, 0.6323342323303223, 0.05147671699523926],
            2023 + 2 ** 32: [0.7316722869873047, 0.04029440879821777, -0.4807812571525574, 0.8105064630508423],
            2 ** 64 - 1: [-0.9674655199050903, 0.6200103759765625, 0.02497577667236328, -0.41219180822372437]}
    for s, values in want.items():
        random.seed(s)
        assert random.uniform(random.engine_for(0), 4, -1.0, 1.0).tolist() == values


@pytest.mark.parametrize("bad", [-1, 2 ** 64])
def test_a_seed_out_of_range_is_a_typed_error(bad):
    with pytest.raises(InvalidArgument, match=rf"paddle\.seed.*{bad}"):
        paddle.seed(bad)


def test_normal_consumes_rejected_pairs_and_drops_the_odd_saved_value():
    random.seed(11)
    e = random.engine_for(0)
    words = MT19937_64()
    words.seed_seq([11])
    z = random.normal(e, 3, 0.0, 1.0)
    # an independent scalar polar method over the same words
    u = (words.random_raw(64).astype(np.float32) * np.float32(2.0 ** -64))
    vals, i = [], 0
    while len(vals) < 4:
        x = np.float32(np.float64(np.float32(2) * u[i]) - 1.0)
        y = np.float32(np.float64(np.float32(2) * u[i + 1]) - 1.0)
        i += 2
        r2 = x * x + y * y
        if r2 <= 1 and r2 != 0:
            m = np.sqrt(np.float32(-2) * np.float32(np.log(np.float64(r2))) / r2)
            vals += [y * m, x * m]
    np.testing.assert_allclose(z, vals[:3], rtol=1e-6)
    # the 4th (saved) value is dropped: the next draw starts right after the pairs used
    after = MT19937_64()
    after.seed_seq([11])
    after.discard(i)
    assert e.random_raw(1)[0] == after.random_raw(1)[0]


def test_a_non_zero_op_seed_repeats_and_leaves_the_global_engine_alone():
    random.seed(3)
    before = random.get_state()
    a = random.uniform(random.engine_for(9), 5, -1.0, 1.0)
    b = random.uniform(random.engine_for(9), 5, -1.0, 1.0)
    assert np.array_equal(a, b)
    after = random.get_state()
    assert np.array_equal(before["mt19937_64"], after["mt19937_64"]) and before["position"] == after["position"]


def test_large_initialisation_stays_fast():
    random.seed(1)
    t = time.perf_counter()
    random.uniform(random.engine_for(0), 10 ** 6, -0.1, 0.1)
    random.normal(random.engine_for(0), 10 ** 6, 0.0, 0.02)
    assert time.perf_counter() - t < 3.0  # about 0.45 s on one loaded core


# ---- the state: per thread, devices, checkpoints ----------------------------------------------
def test_state_round_trip_repeats_the_draws():
    random.seed(21)
    random.uniform(random.engine_for(0), 100, 0.0, 1.0)
    st = random.get_state()
    a = random.normal(random.engine_for(0), 777, 0.0, 1.0)
    random.set_state(random.check_state(st, "here"))
    b = random.normal(random.engine_for(0), 777, 0.0, 1.0)
    assert np.array_equal(a, b)
    assert random.get_seed() == 21


def test_each_thread_has_its_own_generator():
    random.seed(4)
    first = random.uniform(random.engine_for(0), 3, 0.0, 1.0)

    def other():
        random.seed(99)
        random.uniform(random.engine_for(0), 1000, 0.0, 1.0)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    then = random.uniform(random.engine_for(0), 3, 0.0, 1.0)
    ref = MT19937_64()
    ref.seed_seq([4])
    assert np.array_equal(np.concatenate([first, then]), random.uniform(ref, 6, 0.0, 1.0))
    assert random.get_seed() == 4


def test_device_states_are_alike_and_advance_the_thread_by_one_word():
    random.seed(8)
    ref = MT19937_64()
    ref.seed_seq([8])
    states = random.device_states(3)
    word = int(ref.random_raw(1)[0])
    draws = []
    for st in states:
        random.set_state(st)
        draws.append(random.uniform(random.engine_for(0), 4, 0.0, 1.0))
    assert all(np.array_equal(d, draws[0]) for d in draws)
    seeded = MT19937_64()
    seeded.seed_seq([word])
    assert np.array_equal(draws[0], random.uniform(seeded, 4, 0.0, 1.0))


@pytest.mark.parametrize("damage, error, match", [
    ({"entropy": np.array([1], np.uint32)}, InvalidArgument, r"'@R@entropy'.*older refimpl"),
    ({"mt19937_64": None}, NotFound, r"'@R@mt19937_64' is missing from the file"),
    ({"mt19937_64": np.arange(5, dtype=np.uint64)}, InvalidArgument, r"need 312 words.*got 5 words"),
    ({"position": np.array(313)}, InvalidArgument, r"position 313"),
    ({"position": np.array(1.5)}, InvalidArgument, r"'@R@position'.*non-negative integers"),
    ({"seed": np.array([1, 2], np.uint64)}, InvalidArgument, r"'@R@seed'.*zero or one"),
])
def test_bad_states_are_named_typed_errors(damage, error, match):
    random.seed(1)
    st = dict(random.get_state())
    for k, v in damage.items():
        if v is None:
            del st[k]
        else:
            st[k] = v
    with pytest.raises(error, match=match):
        random.check_state(st, "the file", "@R@")


def test_generator_for_gives_paddles_uniform_floats():
    random.seed(2)
    a = random.generator_for(0).random((2, 3))
    random.seed(2)
    b = random.canonical(random.engine_for(0), 6).reshape(2, 3)
    assert a.dtype == np.float32 and np.array_equal(a, b)


def test_truncated_normal_is_paddles():
    random.seed(2023)
    e = random.engine_for(0)
    got = [random.truncated_normal(e, 20001, 0.0, 1.0, -2.0, 2.0),
           random.truncated_normal(e, 5000, 0.3, 0.02, -1.5, 2.5),
           random.truncated_normal(e, 5000, -0.2, 1.7, -3.0, 1.0, np.float64),
           random.uniform(e, 3, -1.0, 1.0)]
    # Paddle 3.3.1: paddle.seed(2023), then create_parameter with TruncatedNormal(0, 1) [20001] f32,
    # TruncatedNormal(0.3, 0.02, a=-1.5, b=2.5) [5000] f32, TruncatedNormal(-0.2, 1.7, a=-3, b=1)
    # [5000] f64, Uniform(-1, 1) [3] f32 in one startup program
    assert got[0][:3].tolist() == [1.0329675674438477, 0.048222362995147705, -0.6111588478088379]
    assert got[2][:3].tolist() == [-2.5448729681566244, -1.4273182414146262, -0.31713155656437525]
    assert [md5(g) for g in got] == ["787e20b0354b120937dd48d4027e2b15", "20685126d1cf3f04d69fdfc403c8b3d2",
                                     "0db35fb70d1ab5ad05c9c85a9ceed6ee", "30b02eb940372125356eca4cb36f6740"]


def test_fast_logf_is_the_c_librarys():
    import ctypes
    import ctypes.util
    from refimpl.core import libm
    try:
        logf = ctypes.CDLL(ctypes.util.find_library("m")).logf
    except (OSError, AttributeError, TypeError):
        pytest.skip("no C library to compare with")
    logf.restype, logf.argtypes = ctypes.c_float, [ctypes.c_float]
    x = np.random.default_rng(0).random(50000).astype(np.float32)
    x = np.concatenate([x[x > 0], np.float32(1) - np.arange(1, 3000, dtype=np.float32) * np.float32(2.0 ** -24),
                        np.float32([2.0 ** -48, 1e-30, 1.0])])
    want = np.array([logf(v) for v in x.tolist()], np.float32)
    assert np.array_equal(libm.log(x, np.float32), want)
    # NumPy's own float32 log is not it (which is why libm exists)
    assert not np.array_equal(np.log(x), want)


def test_rng_state_api_restores_the_draws():
    g = random.seed(10)
    assert isinstance(g, random.Generator) and g.initial_seed() == 10
    states = random.get_rng_state()
    assert len(states) == 1 and states[0].current_seed() == 10
    a = random.uniform(random.engine_for(0), 3, -1.0, 1.0)
    # Paddle 3.3.1: paddle.seed(10), then Uniform(-1, 1) of 3 elements, again after set_rng_state
    np.testing.assert_allclose(a, [-0.45462954, 0.09776509, 0.73109293], rtol=0, atol=5e-9)
    random.set_rng_state(states)
    assert np.array_equal(random.uniform(random.engine_for(0), 3, -1.0, 1.0), a)
    assert random.get_cuda_rng_state() == []
    random.set_cuda_rng_state([])
    with pytest.raises(InvalidArgument, match=r"set_rng_state.*one GeneratorState"):
        random.set_rng_state([])
    word = MT19937_64()
    word.seed_seq([10])
    word.discard(3)
    assert g.random() == int(word.random_raw(1)[0])  # Generator.random: the engine's next word


def test_refimpl_shuffles_leave_paddles_stream_alone_and_repeat_after_a_seed():
    from refimpl.core import random as rr
    rr.seed(3)
    first = rr.default_cpu_generator().random()
    rr.seed(3)
    perm = rr.next_generator().permutation(10)
    assert rr.default_cpu_generator().random() == first      # the shuffle drew nothing from the engine
    rr.seed(3)
    assert (rr.next_generator().permutation(10) == perm).all()
    assert not (rr.next_generator().permutation(10) == perm).all()   # the next shuffle is another stream
