"""DataLoader.from_generator, its blocking queue and the reader ops (issue 9).

Both of Paddle's modes (iterable feed dicts; non-iterable create_py_reader +
read ops with start / EOFException / reset), the queue split over places
and micro-batches, the error paths, and equality: training from the loader
equals training with the same batches passed by ``feed=`` on one place, on
two places (CompiledProgram) and on a two-stage pipeline. Every test runs
under a watchdog so a deadlock fails instead of hanging.
"""
import functools
import threading
import time

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import EnforceNotMet, Fatal, InvalidArgument, PreconditionNotMet
from refimpl.framework import unique_name
from refimpl.framework.op_role import is_forward
from refimpl.framework.program import Program
from refimpl.io import EOFException

WATCHDOG_S = 20


def watchdog(fn):
    """Run the test on a thread; fail (instead of hanging) if it takes longer than WATCHDOG_S."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        box = {}

        def body():
            try:
                box["ok"] = fn(*a, **kw)
            except BaseException as exc:  # noqa: B902
                box["err"] = exc
        t = threading.Thread(target=body, daemon=True)
        t.start()
        t.join(WATCHDOG_S)
        assert not t.is_alive(), f"{fn.__name__} did not finish in {WATCHDOG_S} s (deadlock?)"
        if "err" in box:
            raise box["err"]
    return wrapper


def loader_threads():
    return [t for t in threading.enumerate() if t.name.startswith(("refimpl-dataloader", "refimpl-double-buffer"))
            and t.is_alive()]


def build(iterable=False, double_buffer=True, drop_last=True, capacity=4, train=True):
    """x[-1,4], y[-1,1] -> fc -> squared error; SGD. Returns (main, startup, loader, loss, pred)."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 4], "float32")
        y = paddle.static.data("y", [-1, 1], "float32")
        loader = paddle.io.DataLoader.from_generator(feed_list=[x, y], capacity=capacity, iterable=iterable,
                                                     use_double_buffer=double_buffer, drop_last=drop_last)
        pred = paddle.static.nn.fc(x, 1)
        loss = paddle.mean(paddle.square(pred - y))
        if train:
            paddle.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loader, loss, pred


def batches(n, rows=4, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((rows, 4)).astype("float32"), rng.standard_normal((rows, 1)).astype("float32")]
            for _ in range(n)]


def fresh(startup, seed=0):
    paddle.seed(seed)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    return exe, scope


def drain(exe, program, fetch, scope):
    out = []
    try:
        while True:
            out.append(exe.run(program, fetch_list=fetch, scope=scope)[0])
    except EOFException:
        return out


# ---- iterable mode ---------------------------------------------------------------
@watchdog
def test_iterable_batch_generator_yields_feed_dicts_and_lists():
    main, startup, loader, loss, _ = build(iterable=True)
    data = batches(3)
    loader.set_batch_generator(lambda: iter(data))
    got = list(loader())
    assert len(got) == 3 and all(set(d) == {"x", "y"} for d in got)
    np.testing.assert_array_equal(got[1]["x"], data[1][0])
    assert len(list(loader())) == 3  # a second epoch restarts the producer
    loader._return_list = True
    lists = list(loader())
    np.testing.assert_array_equal(lists[2][1], data[2][1])
    assert not loader_threads()


@watchdog
def test_iterable_sample_generators_batch_and_reshape():
    main, startup, loader, loss, _ = build(iterable=True)
    samples = [(np.full(4, i, "float32"), float(i)) for i in range(5)]
    loader.set_sample_generator(lambda: iter(samples), batch_size=2, drop_last=False)
    got = list(loader())
    assert [d["x"].shape for d in got] == [(2, 4), (2, 4), (1, 4)]
    assert got[2]["y"].shape == (1, 1) and got[2]["y"][0, 0] == 4.0
    loader.set_sample_generator(lambda: iter(samples), batch_size=2)  # drop_last=True by default
    assert len(list(loader())) == 2
    loader.set_sample_list_generator(lambda: iter([samples[:3], samples[3:]]))
    assert [d["x"].shape[0] for d in loader()] == [3, 2]


@watchdog
def test_iterable_several_places_give_one_batch_each_and_drop_the_partial_round():
    main, startup, loader, loss, _ = build(iterable=True)
    data = batches(5)
    loader.set_batch_generator(lambda: iter(data), places=[paddle.CPUPlace()] * 2)
    got = list(loader())
    assert len(got) == 2 and all(len(step) == 2 for step in got)
    np.testing.assert_array_equal(got[1][1]["x"], data[3][0])  # round 1, place 1 = batch 3


# ---- non-iterable mode: the program and the epoch protocol ---------------------------
def test_non_iterable_adds_paddles_reader_ops():
    main, startup, loader, loss, _ = build()
    ops = main.global_block().ops
    assert [op.type for op in ops[:3]] == ["create_py_reader", "create_double_buffer_reader", "read"]
    cpr, _, read = ops[:3]
    assert cpr.input("blocking_queue") == [loader.queue.name]
    assert cpr.attr("shape_concat") == [-1, 4, -1, 1] and cpr.attr("ranks") == [2, 2]
    assert cpr.attr("lod_levels") == [0, 0] and cpr.attr("need_check_feed") == [1, 1]
    assert cpr.attr("dtypes") == [5, 5]  # VarType FP32
    assert read.output("Out") == ["x", "y"] and read.attr("drop_last") is True
    reader = main.global_block().vars[read.input("Reader")[0]]
    assert reader.type == "READER" and reader.persistable
    plain = build(double_buffer=False)[0].global_block().ops
    assert [op.type for op in plain[:2]] == ["create_py_reader", "read"]


@pytest.mark.parametrize("double_buffer", [True, False])
@watchdog
def test_epochs_end_with_eof_and_restart_after_reset(double_buffer):
    main, startup, loader, loss, pred = build(double_buffer=double_buffer, train=False)
    data = batches(3)
    loader.set_batch_generator(lambda: iter(data))
    exe, scope = fresh(startup)
    for _ in range(2):  # two epochs
        loader.start()
        preds = drain(exe, main, [pred], scope)
        assert len(preds) == 3
        with pytest.raises(EOFException, match="no next data"):  # reading after EOF without reset
            exe.run(main, fetch_list=[pred], scope=scope)
        loader.reset()
    assert paddle.core.EOFException is EOFException
    assert not loader_threads()


# ---- errors ---------------------------------------------------------------------------
@watchdog
def test_generator_error_surfaces_in_exe_run():
    main, startup, loader, loss, pred = build(train=False)

    def bad():
        yield batches(1)[0]
        raise RuntimeError("boom")
    loader.set_batch_generator(bad)
    exe, scope = fresh(startup)
    loader.start()
    exe.run(main, fetch_list=[pred], scope=scope)
    with pytest.raises(Fatal, match="RuntimeError: boom"):
        exe.run(main, fetch_list=[pred], scope=scope)
    loader.reset()


@watchdog
def test_wrong_shape_names_the_feed_var():
    main, startup, loader, loss, pred = build(train=False)
    loader.set_batch_generator(lambda: iter([[np.zeros((2, 5), "float32"), np.zeros((2, 1), "float32")]]))
    exe, scope = fresh(startup)
    loader.start()
    with pytest.raises(InvalidArgument, match=r"Variable x .*shape = \[-1, 4\].*\[2, 5\]"):
        exe.run(main, fetch_list=[pred], scope=scope)
    loader.reset()
    loader.set_sample_generator(lambda: iter([(np.zeros(3, "float32"), 1.0)] * 2), batch_size=2)
    loader.start()
    with pytest.raises(InvalidArgument, match=r"Variable x .*\[2, 3\]"):
        exe.run(main, fetch_list=[pred], scope=scope)
    loader.reset()


@watchdog
def test_run_before_start_raises_instead_of_blocking():
    main, startup, loader, loss, pred = build(train=False)
    loader.set_batch_generator(lambda: iter(batches(1)))
    exe, scope = fresh(startup)
    with pytest.raises(PreconditionNotMet, match="loader.start"):
        exe.run(main, fetch_list=[pred], scope=scope)


@watchdog
def test_slow_producer_never_deadlocks():
    main, startup, loader, loss, pred = build(capacity=1, train=False)
    data = batches(6)

    def slow():
        for b in data:
            time.sleep(0.02)
            yield b
    loader.set_batch_generator(slow)
    exe, scope = fresh(startup)
    loader.start()
    assert len(drain(exe, main, [pred], scope)) == 6
    loader.reset()


@watchdog
def test_closing_mid_epoch_stops_the_threads():
    main, startup, loader, loss, pred = build(capacity=2, train=False)

    def endless():
        while True:
            yield batches(1)[0]
    loader.set_batch_generator(endless)
    exe, scope = fresh(startup)
    loader.start()
    for _ in range(3):
        exe.run(main, fetch_list=[pred], scope=scope)
    assert loader_threads()  # the producer is blocked on the full queue
    loader.reset()
    deadline = time.monotonic() + 5
    while loader_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not loader_threads()


# ---- equality with feed= ------------------------------------------------------------------
def params_of(main, scope):
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


@watchdog
def test_single_place_training_equals_feed():
    data = batches(4)
    main, startup, loader, loss, _ = build()
    loader.set_batch_generator(lambda: iter(data))
    exe, scope = fresh(startup)
    loader.start()
    losses = drain(exe, main, [loss], scope)
    loader.reset()
    ref_main, ref_startup, _, ref_loss, _ = build(iterable=True)
    exe2, scope2 = fresh(ref_startup)
    ref = [exe2.run(ref_main, feed={"x": x, "y": y}, fetch_list=[ref_loss], scope=scope2)[0] for x, y in data]
    np.testing.assert_allclose(losses, ref, rtol=1e-6)
    for k, v in params_of(ref_main, scope2).items():
        np.testing.assert_allclose(params_of(main, scope)[k], v, rtol=1e-6)


@watchdog
def test_two_places_read_their_own_batches_and_train_as_feed():
    data = batches(5)  # two full rounds; the fifth batch is a partial round: dropped
    places = [paddle.CPUPlace()] * 2
    main, startup, loader, loss, _ = build()
    loader.set_batch_generator(lambda: iter(data))
    exe, scope = fresh(startup)
    compiled = paddle.static.CompiledProgram(main, places=places)
    loader.start()
    losses = drain(exe, compiled, [loss], scope)
    loader.reset()
    assert len(losses) == 2
    ref_main, ref_startup, _, ref_loss, _ = build(iterable=True)
    exe2, scope2 = fresh(ref_startup)
    ref_compiled = paddle.static.CompiledProgram(ref_main, places=places)
    ref = [exe2.run(ref_compiled, feed=[dict(x=data[2 * r + d][0], y=data[2 * r + d][1]) for d in range(2)],
                    fetch_list=[ref_loss], scope=scope2)[0] for r in range(2)]
    np.testing.assert_allclose(losses, ref, rtol=1e-6)
    for k, v in params_of(ref_main, scope2).items():
        np.testing.assert_allclose(params_of(main, scope)[k], v, rtol=1e-6)


@watchdog
def test_two_places_without_drop_last_split_the_partial_round_over_the_places():
    data = batches(3)
    main, startup, loader, loss, pred = build(drop_last=False, train=False)
    loader.set_batch_generator(lambda: iter(data))
    exe, scope = fresh(startup)
    compiled = paddle.static.CompiledProgram(main, places=[paddle.CPUPlace()] * 2)
    loader.start()
    preds = drain(exe, compiled, [pred], scope)
    loader.reset()
    assert [p.shape[0] for p in preds] == [8, 4]  # the partial round's 4 rows, 2 on each place


@watchdog
def test_pipeline_first_stage_reads_one_batch_per_micro_batch():
    from refimpl.distributed.pipeline import runner
    m, steps = 2, 2
    data = batches(m * steps, rows=2)

    def mlp(with_loader):
        main, startup = Program(), Program()
        with paddle.static.program_guard(main, startup), unique_name.guard():
            x = paddle.static.data("x", [-1, 4], "float32")
            y = paddle.static.data("y", [-1, 1], "float32")
            loader = paddle.io.DataLoader.from_generator(feed_list=[x, y], capacity=4, iterable=not with_loader)
            h = paddle.static.nn.fc(x, 8, activation="tanh")
            loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1) - y))
            paddle.optimizer.SGD(0.1).minimize(loss)
        return main, startup, loader, loss

    def cut(main):  # stage 1 starts at the second fc
        fwd = [op for op in main.global_block().ops if is_forward(op.role())]
        return [[i for i, op in enumerate(fwd) if op.type == "mul"][1]]

    main, startup, loader, loss = mlp(True)
    loader.set_batch_generator(lambda: iter(data))
    pl = runner.build_pipeline(main, startup, loss, "1F1B", 2, m, cuts=cut(main))
    loader.start()
    losses, params = runner.train_in_process(pl, [None] * steps, timeout=15)
    loader.reset()
    ref_main, ref_startup, _, ref_loss = mlp(False)
    ref_pl = runner.build_pipeline(ref_main, ref_startup, ref_loss, "1F1B", 2, m, cuts=cut(ref_main))
    feeds = [{"x": np.concatenate([data[s * m + j][0] for j in range(m)]),
              "y": np.concatenate([data[s * m + j][1] for j in range(m)])} for s in range(steps)]
    ref_losses, ref_params = runner.train_in_process(ref_pl, feeds, timeout=15)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    for k, v in ref_params.items():
        np.testing.assert_allclose(params[k], v, rtol=1e-6)


def test_errors_are_enforce_not_met():
    assert issubclass(EOFException, EnforceNotMet)
    with pytest.raises(InvalidArgument, match="capacity"):
        paddle.io.DataLoader.from_generator(feed_list=[object()], capacity=0)
