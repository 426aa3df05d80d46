"""Executor: feeds, fetches, scopes, eager deletion (all three GC settings), memory and trace."""
import os
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import InvalidArgument, NotFound, PreconditionNotMet
from refimpl.executor import Trace, eager_deletion_vars
from refimpl.framework import Program, unique_name


@pytest.fixture(autouse=True)
def _gc_default():
    yield
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})


def build(layers=3, hidden=16, opt="sgd"):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 8], "float32")
        label = paddle.static.data("label", [None, 1], "int64")
        h = x
        for _ in range(layers):
            h = paddle.static.nn.fc(h, hidden, activation="tanh")
        logits = paddle.static.nn.fc(h, 4)
        loss = paddle.nn.functional.cross_entropy(logits, label)
        {"sgd": paddle.optimizer.SGD(0.1), "adam": paddle.optimizer.Adam(0.01)}[opt].minimize(loss)
    return main, startup, loss


def feed(seed=0, n=6):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 8)).astype("float32"),
            "label": rng.integers(0, 4, (n, 1)).astype("int64")}


def train(gc_gb, steps=3, trace_last=False):
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    paddle.seed(1)
    main, startup, loss = build()
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup, scope=scope)
    trace, losses = Trace(), []
    for s in range(steps):
        t = trace if trace_last and s == steps - 1 else None
        losses.append(exe.run(main, feed=feed(s), fetch_list=[loss], scope=scope, trace=t)[0])
    params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    return losses, params, exe, trace, main, loss


def test_gc_settings_give_identical_numbers():
    base_l, base_p, *_ = train(-1.0)
    for gb in (0.0, 1e-9, 1.0):
        l, p, *_ = train(gb)
        np.testing.assert_array_equal(np.array(l), np.array(base_l))
        for k in base_p:
            np.testing.assert_array_equal(p[k], base_p[k])


def test_no_gc_frees_nothing_and_keeps_temporaries():
    _, _, exe, trace, main, _ = train(-1.0, trace_last=True)
    assert trace.of_kind("free") == []
    local = exe._last.local_scope
    assert local.find_var("fc_0.tmp_0").get_tensor()._is_initialized()


def test_gc_zero_frees_the_plan_after_each_op():
    _, _, exe, trace, main, loss = train(0.0, trace_last=True)
    plan = eager_deletion_vars(main, [loss.name])[0]
    assert trace.frees_by_op() == {i: names for i, names in enumerate(plan) if names}
    local = exe._last.local_scope
    assert not local.find_var("fc_0.tmp_0").get_tensor()._is_initialized()


def test_gc_threshold_batches_frees():
    _, _, _, trace, main, loss = train(1.0, trace_last=True)  # 1 GB: nothing reaches it
    frees = trace.of_kind("free")
    last = len(main.global_block().ops) - 1
    assert frees and all(e.op == last for e in frees)  # all flushed at the end of the run
    planned = sorted(n for names in eager_deletion_vars(main, [loss.name])[0] for n in names)
    assert sorted(e.var for e in frees) == planned
    _, _, _, tiny, _, _ = train(1e-9, trace_last=True)  # ~1 byte: every batch flushes at once
    _, _, _, zero, _, _ = train(0.0, trace_last=True)
    assert tiny.frees_by_op() == zero.frees_by_op()


@pytest.mark.parametrize("gc_gb", [0.0, 1.0], ids=["at-once", "batched"])
def test_every_free_of_an_untraced_run_goes_through_the_collector(monkeypatch, gc_gb):
    """The run loop calls only what ``GarbageCollector.releaser`` handed it: spy on it, and the
    names it releases are exactly the eager-deletion plan, and afterwards nothing planned is held."""
    from refimpl.executor.garbage_collector import GarbageCollector
    released, make = [], GarbageCollector.releaser

    def spy(self, dead):
        release = make(self, dead)
        if release is None:
            return None

        def counted():
            released.extend(n for n, _ in dead)
            release()
        return counted
    monkeypatch.setattr(GarbageCollector, "releaser", spy)
    _, _, exe, _, main, loss = train(gc_gb)
    planned = sorted(n for names in eager_deletion_vars(main, [loss.name])[0] for n in names)
    assert sorted(released) == sorted(planned * 3)  # three steps
    assert exe.memory_stats()["live_bytes"] == sum(  # what is left: persistables and the loss
        exe._last.block.tensor(n)._array.nbytes for n in exe._last.block.tensors
        if exe._last.block.tensor(n)._array is not None)


def test_gc_threshold_bytes_reads_the_flag():
    from refimpl.executor.garbage_collector import gc_threshold_bytes
    for gb, want in ((-1.0, -1), (0.0, 0), (0.5, 1 << 29), (2.0, 2 << 30)):
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gb})
        assert gc_threshold_bytes() == want


def test_peak_memory_with_gc_is_lower_and_matches_the_trace():
    _, _, exe_on, trace_on, *_ = train(0.0, trace_last=True)
    _, _, exe_off, trace_off, *_ = train(-1.0, trace_last=True)
    on, off = exe_on.memory_stats(), exe_off.memory_stats()
    assert on["peak_bytes"] < off["peak_bytes"]
    assert on["live_bytes"] < off["live_bytes"]
    allocs = sum(e.nbytes for e in trace_on.of_kind("alloc"))
    frees = sum(e.nbytes for e in trace_on.of_kind("free"))
    start = on["live_bytes"] - allocs + frees
    assert trace_on.peak_bytes(start) == on["peak_bytes"]


def test_persistables_live_in_the_scope_and_temporaries_do_not():
    _, _, exe, _, main, _ = train(0.0)
    scope = exe._last.local_scope.parent()
    assert scope.find_local_var("fc_0.w_0") is not None
    assert scope.find_local_var("fc_0.tmp_0") is None


def test_fetch_returns_copies_and_return_numpy_false_gives_tensors():
    paddle.seed(0)
    main, startup, loss = build(opt="adam")
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    w, = exe.run(main, feed=feed(), fetch_list=["fc_0.w_0"], scope=scope)
    w[...] = 0
    assert np.abs(np.array(scope.find_var("fc_0.w_0").get_tensor())).sum() > 0
    t, = exe.run(main, feed=feed(), fetch_list=[loss], scope=scope, return_numpy=False)
    assert isinstance(t, paddle.core.DenseTensor) and t.shape() == []


def test_flag_is_read_from_the_environment():
    code = "import refimpl; print(refimpl.get_flags('FLAGS_eager_delete_tensor_gb'))"
    env = dict(os.environ, FLAGS_eager_delete_tensor_gb="-1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "-1.0" in out.stdout


def test_changing_the_program_invalidates_the_prepared_cache():
    main, startup, loss = build(layers=1)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    exe.run(main, feed=feed(), fetch_list=[loss], scope=scope)
    first = exe._last
    with paddle.static.program_guard(main, startup):
        extra = paddle.scale(loss, 2.0)
    out, = exe.run(main, feed=feed(), fetch_list=[extra], scope=scope)
    assert exe._last is not first and out.shape == ()


def _run_bad(feed_dict=None, fetch=None, program=None, startup_first=True):
    main, startup, loss = build(layers=1)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    if startup_first:
        exe.run(startup, scope=scope)
    exe.run(program or main, feed=feed_dict if feed_dict is not None else feed(),
            fetch_list=fetch if fetch is not None else [loss], scope=scope)


@pytest.mark.parametrize("kwargs, error, culprit", [
    (dict(feed_dict={"x": feed()["x"]}), InvalidArgument, "'label'"),
    (dict(feed_dict=dict(feed(), extra=np.zeros(3))), NotFound, "'extra'"),
    (dict(feed_dict=dict(feed(), x=feed()["x"].astype("float64"))), InvalidArgument, "'x'.*float64"),
    (dict(feed_dict=dict(feed(), x=np.zeros((6, 8, 1), "float32"))), InvalidArgument, "'x'.*shape"),
    (dict(feed_dict=dict(feed(), x=np.zeros((6, 5), "float32"))), InvalidArgument, "'x'.*shape"),
    (dict(fetch=["no_such_var"]), NotFound, "no_such_var"),
    (dict(fetch=[3]), InvalidArgument, "fetch_list"),
    (dict(feed_dict=[1, 2]), InvalidArgument, "feed must be a dict"),
    (dict(startup_first=False), PreconditionNotMet, "fc_0.w_0.*startup"),
    (dict(program="not a program"), InvalidArgument, "Program"),
])
def test_bad_run_inputs_raise_typed_errors_naming_the_culprit(kwargs, error, culprit):
    with pytest.raises(error, match=culprit):
        _run_bad(**kwargs)


def test_op_reading_a_var_nobody_writes_is_reported():
    main = Program()
    b = main.global_block()
    ghost = b.create_var(name="ghost", shape=[2], dtype="float32")
    out = b.create_var(name="out", shape=[2], dtype="float32")
    b.append_op(type="relu", inputs={"X": ghost}, outputs={"Out": out})
    with pytest.raises(PreconditionNotMet, match=r"'relu' \(block 0, op 0\) reads 'ghost'"):
        paddle.static.Executor().run(main, fetch_list=[out], scope=paddle.static.Scope())


def test_kernel_failure_names_the_op():
    main = Program()
    b = main.global_block()
    x = b.create_var(name="x", shape=[-1, 3], dtype="float32", is_data=True)
    y = b.create_var(name="y", shape=[-1, -1], dtype="float32", is_data=True)
    out = b.create_var(name="out", dtype="float32")
    b.append_op(type="elementwise_add", inputs={"X": x, "Y": y}, outputs={"Out": out})
    with pytest.raises(InvalidArgument, match="elementwise_add"):
        paddle.static.Executor().run(main, feed={"x": np.zeros((2, 3), "float32"),
                                                 "y": np.zeros((2, 4), "float32")},
                                     fetch_list=[out], scope=paddle.static.Scope())


def test_shape_mismatch_is_caught_while_building():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 3], "float32")
        y = paddle.static.data("y", [None, 4], "float32")
        with pytest.raises(InvalidArgument, match="elementwise_add"):
            x + y


def test_parameter_set_with_the_wrong_shape_is_named():
    main, startup, loss = build(layers=1)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    scope.find_var("fc_0.w_0").get_tensor().set(np.zeros((3, 3), "float32"))
    with pytest.raises(InvalidArgument, match=r"parameter 'fc_0.w_0' .* \[3, 3\] .* \[8, 16\]"):
        exe.run(main, feed=feed(), fetch_list=[loss], scope=scope)


def test_lr_scheduler_value_is_written_before_each_run():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 8], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 1))
        sched = paddle.optimizer.lr.StepDecay(0.1, step_size=1, gamma=0.5)
        paddle.optimizer.SGD(learning_rate=sched).minimize(loss)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    seen = []
    for _ in range(3):
        exe.run(main, feed={"x": np.ones((2, 8), "float32")}, fetch_list=[loss], scope=scope)
        seen.append(float(np.array(scope.find_var("learning_rate_0").get_tensor())))
        sched.step()
    np.testing.assert_allclose(seen, [0.1, 0.05, 0.025], rtol=1e-6)


def test_random_initialisers_are_deterministic_under_seed():
    def init():
        paddle.seed(7)
        main, startup, _ = build(layers=1)
        scope = paddle.static.Scope()
        paddle.static.Executor().run(startup, scope=scope)
        return np.array(scope.find_var("fc_0.w_0").get_tensor())
    a, b = init(), init()
    np.testing.assert_array_equal(a, b)
    limit = np.sqrt(6.0 / (8 + 16))
    assert a.std() > 0 and np.abs(a).max() <= limit


def test_no_need_buffer_inputs_freed_early_still_give_their_shape():
    # concat_grad reads only the shapes of concat's inputs, so GC frees them after the forward
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        a = paddle.static.nn.fc(x, 3)
        b = paddle.static.nn.fc(x, 2)
        loss = paddle.mean(paddle.square(paddle.concat([a, b], axis=1)))
        paddle.optimizer.SGD(0.1).minimize(loss)
    plan = eager_deletion_vars(main, [loss.name])[0]
    concat_at = [op.type for op in main.global_block().ops].index("concat")
    assert "fc_0.tmp_1" in plan[concat_at]  # freed right after the forward concat
    results = []
    for gb in (0.0, -1.0):
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gb})
        paddle.seed(0)
        scope = paddle.static.Scope()
        exe = paddle.static.Executor()
        exe.run(startup, scope=scope)
        exe.run(main, feed={"x": np.ones((2, 4), "float32")}, fetch_list=[loss], scope=scope)
        results.append(np.array(scope.find_var("fc_0.w_0").get_tensor()))
    np.testing.assert_array_equal(results[0], results[1])


def _with_an_update_fed_its_gradient():
    """The MLP plus a last sgd update of fc_2.b_0 whose gradient ``bad_grad`` is fed at run time."""
    main, startup, loss = build(layers=2)
    with paddle.static.program_guard(main, startup):
        g = paddle.static.data("bad_grad", [-1], "float32")
        b = main.global_block()
        b.append_op(type="sgd", inputs={"Param": b.var("fc_2.b_0"), "Grad": g,
                                        "LearningRate": b.var("learning_rate_0")},
                    outputs={"ParamOut": b.var("fc_2.b_0")}, attrs={"op_role": 2})
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    return main, loss, scope, exe


def test_a_failing_optimizer_op_leaves_every_parameter_as_it_was():
    # the last update reads a gradient fed at run time with the wrong shape: the run must fail
    # before the first (in-place) update, so no parameter is half-updated
    main, loss, scope, exe = _with_an_update_fed_its_gradient()
    before = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    with pytest.raises(InvalidArgument, match=r"sgd.*shapes differ.*no optimizer update of this run"):
        exe.run(main, feed=dict(feed(), bad_grad=np.ones(7, "float32")), fetch_list=[loss], scope=scope)
    for name, value in before.items():
        np.testing.assert_array_equal(np.array(scope.find_var(name).get_tensor()), value, err_msg=name)
    out = exe.run(main, feed=dict(feed(), bad_grad=np.ones(4, "float32")), fetch_list=[loss], scope=scope)
    assert np.isfinite(out[0])


def test_the_update_whose_inputs_fail_is_the_one_named():
    """Every update's inputs are checked in one pass before the first writes; the error names the
    failing update (the last op here), not the first update of the run."""
    main, loss, scope, exe = _with_an_update_fed_its_gradient()
    last = len(main.global_block().ops) - 1
    with pytest.raises(InvalidArgument, match=rf"block 0 op {last} \(sgd\): Param, Grad"):
        exe.run(main, feed=dict(feed(), bad_grad=np.ones(7, "float32")), fetch_list=[loss], scope=scope)
    scope.find_var("learning_rate_0").get_tensor().set(np.array([0.1, 0.2], "float32"))
    first = next(i for i, op in enumerate(main.global_block().ops) if op.type == "sgd")
    with pytest.raises(InvalidArgument, match=rf"block 0 op {first} \(sgd\).*more than one value"):
        exe.run(main, feed=dict(feed(), bad_grad=np.ones(4, "float32")), fetch_list=[loss], scope=scope)
