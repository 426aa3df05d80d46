"""Saving and loading under sharding x pipeline (``sharding/persistables.py``).

sharding 2 x pp 2 (4 in-process ranks, Adam, float64): after one step every rank calls
``fleet.save_persistables`` into one directory; a fresh build (other random draws) on every rank then
``fleet.load_persistables`` from it. Expected, checked against the first run itself (not against the
code's own saved files): every persistable of each rank's stage program comes back bit for bit —
stage 1's merge buffers and counters included, which only stage 1's ranks have and so must be saved by
one of them — and a second step from the loaded state gives the same values, bitwise, as the second
step of the run that saved.
"""
import numpy as np

import refimpl
import refimpl as paddle
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

WIDTH = 8


def _net():
    x = paddle.static.data("x", [-1, WIDTH], "float64")
    y = paddle.static.data("y", [-1, 1], "int64")
    with paddle.static.device_guard("gpu:0"):
        h = paddle.static.nn.fc(x, 16, activation="relu")
    with paddle.static.device_guard("gpu:1"):
        pred = paddle.static.nn.fc(h, 2, activation="softmax")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(pred, y, reduction="none", use_softmax=False))
    return loss


def _build():
    from refimpl.distributed import fleet
    s = DistributedStrategy()
    s.sharding, s.pipeline = True, True
    s.sharding_configs = {"sharding_degree": 2, "pp_degree": 2}
    s.pipeline_configs = {"accumulate_steps": 2, "micro_batch_size": 2}   # 4 rows per sharding rank
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        loss = _net()
        fleet.distributed_optimizer(paddle.optimizer.Adam(0.01), s).minimize(loss)
    return main, startup, loss


def _batches():
    rng = np.random.default_rng(4)
    return [(rng.standard_normal((8, WIDTH)), rng.integers(0, 2, (8, 1)).astype("int64")) for _ in range(2)]


def _persistables(main, scope):
    """Every persistable of this rank's stage program, as held in ``scope``."""
    from refimpl.static.io_vars import is_persistable
    section = main._pipeline_opt["section_program"]
    names = sorted(n for n, v in section.global_block().vars.items() if is_persistable(v))
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


def _step(exe, main, loss, scope, batch):
    r = context.current().rank
    part = slice((r % 2) * 4, (r % 2 + 1) * 4)   # the sharding rank's rows (rank = stage * 2 + sharding rank)
    x, y = batch
    exe.run(main, feed={"x": x[part], "y": y[part]}, fetch_list=[loss], scope=scope)


def _rank_fn(dirname):
    from refimpl.distributed import fleet
    first, second = _batches()
    main, startup, loss = _build()
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        _step(exe, main, loss, scope, first)
        fleet.save_persistables(exe, dirname, main)
        saved = _persistables(main, scope)
        _step(exe, main, loss, scope, second)
        after = _persistables(main, scope)
    main2, startup2, loss2 = _build()
    scope2 = paddle.static.Scope()
    with paddle.static.scope_guard(scope2):
        paddle.seed(77 + context.current().rank)
        exe.run(startup2)
        fleet.load_persistables(exe, dirname, main2)
        loaded = _persistables(main2, scope2)
        _step(exe, main2, loss2, scope2, second)
        resumed = _persistables(main2, scope2)
    return saved, loaded, after, resumed


def test_every_stage_round_trips_and_training_resumes_bitwise(float64_default, tmp_path):
    out = run_in_process(4, _rank_fn, str(tmp_path), timeout=180)
    for r, (saved, loaded, after, resumed) in enumerate(out):
        assert any(n.endswith("@GRAD@MERGED") for n in saved), sorted(saved)   # the merge buffers it owns
        assert sorted(loaded) == sorted(saved), r
        for n in saved:
            np.testing.assert_array_equal(loaded[n], saved[n], err_msg=f"{n} on rank {r} after loading")
            np.testing.assert_array_equal(resumed[n], after[n], err_msg=f"{n} on rank {r} after resuming")
    # stage 1's parameters (on ranks 2, 3) are other than stage 0's: each stage was saved and loaded
    assert not set(out[0][0]) & {n for n in out[2][0] if n.startswith("fc_")}
