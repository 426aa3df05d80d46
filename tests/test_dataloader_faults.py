"""DataLoader faults: stale batches after reset, BaseException in the generator, leaked producers, the partial round.

What ``refimpl.io.dataloader`` / ``refimpl.io.blocking_queue`` promise when things go wrong:

* ``reset()`` while the producer is stuck inside the generator: the next epoch gets exactly its own
  batches (the old producer pushes, closes and kills under its own queue generation);
* ``KeyboardInterrupt`` / ``SystemExit`` raised by the generator arrive at the consumer as the same
  kind, at once (no hang);
* a loader dropped mid-epoch (or after an error) is collected and its producer thread ends;
* two places, ``drop_last=False``: the partial last round is split over the places, so a training
  step uses every row, equals ``feed=`` of those rows, and no place sees an empty batch.

Each helper returns the measured figure; ``python tests/test_dataloader_faults.py`` prints them.
"""
import gc
import threading
import time

import numpy as np
import pytest

import refimpl as paddle
import refimpl.io.dataloader as dataloader_mod
from refimpl.framework import unique_name
from refimpl.framework.program import Program
from refimpl.io import EOFException

HANG_S = 5  # a consumer that has not returned by then is hung


def build(iterable, capacity=16, drop_last=True, train=False, x_shape=(-1, 4)):
    """x -> fc -> squared error against y (SGD when ``train``). Returns (main, startup, loader, x, loss)."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", list(x_shape), "float32")
        y = paddle.static.data("y", [-1, 1], "float32")
        loader = paddle.io.DataLoader.from_generator(feed_list=[x, y], capacity=capacity, iterable=iterable,
                                                     drop_last=drop_last)
        loss = None
        if x_shape[-1] > 0:
            loss = paddle.mean(paddle.square(paddle.static.nn.fc(x, 1) - y))
            if train:
                paddle.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loader, x, loss


def batch(value, rows=4, cols=4):
    return [np.full((rows, cols), value, "float32"), np.full((rows, 1), value, "float32")]


def fresh(startup):
    paddle.seed(0)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    return exe, scope


def take_one(iterable, loader, main, startup, x):
    """Take the first batch (iterable: from ``loader()``; else started and read by a run); (exe, scope) or None."""
    if iterable:
        next(iter(loader()))
        return None
    exe, scope = fresh(startup)
    loader.start()
    exe.run(main, fetch_list=[x], scope=scope)
    return exe, scope


def producer_threads():
    return {t for t in threading.enumerate() if t.name.startswith(("refimpl-dataloader", "refimpl-double-buffer"))
            and t.is_alive()}


def wait_until(cond, seconds):
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


# ---- stale batches ------------------------------------------------------------------------
def stale_epoch(iterable):
    """Reset while epoch 1's producer is blocked inside its generator, run epoch 2 (12 batches), release
    the old producer. Returns (epoch-2 batch values, seconds reset() took, old producer threads left)."""
    main, startup, loader, x, _ = build(iterable)
    release = threading.Event()

    def epoch1():
        yield batch(1.0)
        yield batch(1.0)
        release.wait(HANG_S)
        yield batch(1.0)  # after the reset: must never reach epoch 2
        yield batch(1.0)
        yield batch(1.0)

    def epoch2():
        for _ in range(12):
            time.sleep(0.002)
            yield batch(2.0)
    loader.set_batch_generator(epoch1)
    before = producer_threads()
    ran = take_one(iterable, loader, main, startup, x)
    time.sleep(0.05)  # the producer has pushed its second batch and waits in the generator
    old = producer_threads() - before
    t0 = time.monotonic()
    if not iterable:
        loader.reset()
    loader.set_batch_generator(epoch2)
    values = []
    if iterable:
        it = iter(loader())  # resets the epoch
        reset_s = time.monotonic() - t0
        release.set()
        values = [float(d["x"][0, 0]) for d in it]
    else:
        reset_s = time.monotonic() - t0
        exe, scope = ran
        loader.start()
        release.set()
        try:
            while True:
                values.append(float(exe.run(main, fetch_list=[x], scope=scope)[0][0, 0]))
        except EOFException:
            loader.reset()
    wait_until(lambda: not any(t.is_alive() for t in old), 2)
    return values, reset_s, sum(t.is_alive() for t in old)


@pytest.mark.parametrize("iterable", [False, True])
def test_reset_with_the_producer_inside_the_generator_gives_the_next_epoch_only_its_own_batches(
        iterable, monkeypatch):
    monkeypatch.setattr(dataloader_mod, "PRODUCER_JOIN_S", 0.1, raising=False)
    values, reset_s, left = stale_epoch(iterable)
    assert values == [2.0] * 12  # 12 batches, none of epoch 1, and epoch 1's end did not cut epoch 2 short
    assert reset_s < 2  # reset() does not wait for a generator that does not yield
    assert left == 0  # the old producer ended at its next batch


# ---- KeyboardInterrupt / SystemExit in the generator ----------------------------------------------
def consumer_outcome(kind, iterable):
    """What a consumer of a generator raising ``kind`` after one batch gets: the exception, or 'hang'."""
    main, startup, loader, x, _ = build(iterable)

    def gen():
        yield batch(1.0)
        raise kind(3) if kind is SystemExit else kind()
    loader.set_batch_generator(gen)
    box = {}

    def consume():
        try:
            if iterable:
                for _ in loader():
                    pass
            else:
                exe, scope = fresh(startup)
                loader.start()
                while True:
                    exe.run(main, fetch_list=[x], scope=scope)
        except BaseException as exc:  # noqa: B902 - the outcome under test
            box["error"] = exc
    t = threading.Thread(target=consume, daemon=True)
    t.start()
    t.join(HANG_S)
    if t.is_alive():
        loader._queue.close()  # let the stuck consumer go
        return "hang"
    if not iterable:
        loader.reset()
    return box.get("error")


@pytest.mark.parametrize("iterable", [False, True])
@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
def test_keyboard_interrupt_and_system_exit_in_the_generator_reach_the_consumer(kind, iterable):
    outcome = consumer_outcome(kind, iterable)
    assert outcome != "hang", f"the consumer was still blocked {HANG_S} s after the generator raised {kind}"
    assert type(outcome) is kind
    if kind is SystemExit:
        assert outcome.code == 3  # the generator's exit status survives


# ---- abandoned loaders ----------------------------------------------------------------------
def leaked_producers(n=60, after_error=False, within=2.0):
    """Make ``n`` loaders on endless generators, take one step (or one error) from each, drop them.
    Returns how many of their threads are still alive ``within`` seconds after gc.collect()."""
    baseline = producer_threads()
    for _ in range(n):
        _, _, loader, _, _ = build(iterable=True, capacity=2)
        if after_error:  # x should be [-1, 4]: the first batch fails the check
            loader.set_batch_generator(lambda: iter(lambda: batch(0.0, cols=5), None))
            try:
                next(iter(loader()))
            except ValueError:
                pass
        else:
            loader.set_batch_generator(lambda: iter(lambda: batch(0.0), None))
            next(iter(loader()))
        del loader
    gc.collect()
    wait_until(lambda: not producer_threads() - baseline, within)
    return len(producer_threads() - baseline)


@pytest.mark.parametrize("after_error", [False, True])
def test_dropped_loaders_do_not_keep_their_producer_threads(after_error):
    assert leaked_producers(60, after_error) == 0


def test_dropped_non_iterable_loader_after_an_error_ends_its_producer():
    baseline = producer_threads()
    for _ in range(5):
        main, startup, loader, x, _ = build(iterable=False, capacity=2)
        loader.set_batch_generator(lambda: iter(lambda: batch(0.0, cols=5), None))
        exe, scope = fresh(startup)
        loader.start()
        with pytest.raises(ValueError, match="Variable x"):
            exe.run(main, fetch_list=[x], scope=scope)
        del loader
    gc.collect()
    assert wait_until(lambda: not producer_threads() - baseline, 2.0)


# ---- two places, drop_last=False ------------------------------------------------------------------
def params_of(main, scope):
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def test_two_places_partial_round_trains_on_every_row_as_feed_does():
    rng = np.random.default_rng(0)
    data = [[rng.standard_normal((4, 4)).astype("float32"), rng.standard_normal((4, 1)).astype("float32")]
            for _ in range(3)]  # round 0: batches 0 and 1; round 1: batch 2 alone
    places = [paddle.CPUPlace()] * 2
    main, startup, loader, _, loss = build(iterable=False, drop_last=False, train=True)
    loader.set_batch_generator(lambda: iter(data))
    exe, scope = fresh(startup)
    compiled = paddle.static.CompiledProgram(main, places=places)
    loader.start()
    losses = []
    try:
        while True:
            losses.append(exe.run(compiled, fetch_list=[loss], scope=scope)[0])
    except EOFException:
        loader.reset()
    assert len(losses) == 2 and np.isfinite(losses).all()  # no place trained on an empty batch
    ref_main, ref_startup, _, _, ref_loss = build(iterable=True, train=True)  # no read op: fed
    exe2, scope2 = fresh(ref_startup)
    ref_compiled = paddle.static.CompiledProgram(ref_main, places=places)
    ref = [exe2.run(ref_compiled, feed=[dict(x=data[d][0], y=data[d][1]) for d in range(2)],
                    fetch_list=[ref_loss], scope=scope2)[0],
           exe2.run(ref_compiled, feed={"x": data[2][0], "y": data[2][1]},  # split by CompiledProgram
                    fetch_list=[ref_loss], scope=scope2)[0]]
    np.testing.assert_allclose(losses, ref, rtol=1e-6)
    for k, v in params_of(ref_main, scope2).items():
        np.testing.assert_allclose(params_of(main, scope)[k], v, rtol=1e-6)


def partial_round_shapes(rows_and_cols, n_places):
    """The x shape each place gets in the last round of an iterable loader (x declared [-1, -1])."""
    _, _, loader, _, _ = build(iterable=True, drop_last=False, x_shape=(-1, -1))
    data = [[np.ones((r, c), "float32"), np.ones((r, 1), "float32")] for r, c in rows_and_cols]
    loader.set_batch_generator(lambda: iter(data), places=[paddle.CPUPlace()] * n_places)
    return [[d["x"].shape for d in step] for step in loader()]


def test_iterable_partial_round_shares_have_the_datas_trailing_dims():
    assert partial_round_shapes([(3, 7), (3, 7), (3, 7)], 2) == [[(3, 7), (3, 7)], [(2, 7), (1, 7)]]
    assert partial_round_shapes([(1, 7)], 2) == [[(1, 7), (0, 7)]]  # fewer rows than places
    # batches of the partial round that differ in a trailing dim stay whole, each on its place
    assert partial_round_shapes([(2, 5), (2, 6)], 3) == [[(2, 5), (2, 6), (0, 6)]]


@pytest.mark.parametrize("iterable", [False, True])
def test_a_generator_yielding_an_empty_list_is_an_error_not_an_empty_batch(iterable):
    main, startup, loader, x, _ = build(iterable)
    loader.set_batch_generator(lambda: iter([[]]))
    with pytest.raises(ValueError, match=r"gave 0 arrays.*\['x', 'y'\]"):
        take_one(iterable, loader, main, startup, x)
    if not iterable:
        loader.reset()


if __name__ == "__main__":
    import logging
    import warnings
    warnings.simplefilter("ignore")
    logging.getLogger("refimpl").setLevel(logging.ERROR)
    for name in ("PRODUCER_JOIN_S", "JOIN_TIMEOUT"):  # JOIN_TIMEOUT: the loader before generations
        if hasattr(dataloader_mod, name):
            setattr(dataloader_mod, name, 0.1)
    for iterable in (False, True):
        values, _, _ = stale_epoch(iterable)
        print(f"stale (iterable={iterable}): epoch 2 got {len(values)} batches of 12, "
              f"{values.count(1.0)} with epoch-1 values")
    for kind in (SystemExit, KeyboardInterrupt):
        out = consumer_outcome(kind, iterable=True)
        print(f"{kind.__name__} in the generator: consumer "
              f"{'hung (> %d s)' % HANG_S if out == 'hang' else 'got ' + type(out).__name__}")
    for after_error in (False, True):
        print(f"abandoned loaders ({'after an error' if after_error else 'after one batch'}): "
              f"{leaked_producers(60, after_error)} of 60 producer threads alive 2 s after gc")
