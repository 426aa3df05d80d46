"""The cyclic collector is paused while a program is built in bulk, and comes back as it was."""
import gc
import threading

import pytest

import refimpl as paddle
from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.framework import Program, unique_name


def test_paused_while_the_step_runs_and_back_on_after_even_when_it_raises():
    seen = []

    @paused_cyclic_gc
    def step(fail):
        seen.append(gc.isenabled())
        if fail:
            raise KeyError("boom")
        return "done"
    assert gc.isenabled()
    assert step(False) == "done" and gc.isenabled()
    with pytest.raises(KeyError):
        step(True)
    assert seen == [False, False] and gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off():
    gc.disable()
    try:
        paused_cyclic_gc(lambda: None)()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_nested_steps_on_threads_turn_it_back_on_only_when_the_last_one_ends():
    inside, release, states = threading.Event(), threading.Event(), []

    @paused_cyclic_gc
    def long_step():
        inside.set()
        release.wait(10)

    @paused_cyclic_gc
    def short_step():
        states.append(gc.isenabled())
    t = threading.Thread(target=long_step)
    t.start()
    inside.wait(10)
    short_step()                   # ends while the other thread's step still runs
    states.append(gc.isenabled())  # so the collector stays paused
    release.set()
    t.join(10)
    assert states == [False, False] and gc.isenabled()


def test_clone_and_minimize_pause_it(monkeypatch):
    from refimpl.framework.program import Program as P
    from refimpl.static import backward
    seen = {}

    def spy(name, fn):
        def recording(*args, **kwargs):
            seen.setdefault(name, gc.isenabled())  # collector state the first time it is called
            return fn(*args, **kwargs)
        return recording
    monkeypatch.setattr(backward, "make_grad_op_descs", spy("backward", backward.make_grad_op_descs))
    monkeypatch.setattr(P, "to_dict", spy("clone", P.to_dict))
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 2], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
        paddle.optimizer.SGD(0.1).minimize(loss)
    main.clone()
    assert seen == {"backward": False, "clone": False} and gc.isenabled()
