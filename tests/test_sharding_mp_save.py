"""Saving and loading a sharded model with tensor parallelism (``sharding_configs['mp_degree'] > 1``).

``sharding/persistables.py``: each mp rank holds a different shard of every ``paddle.distributed.split``
parameter (and of its accumulators) under the same name, so the values that differ per mp rank go under
``dirname/mp_rank_{k:02d}/`` and the rest is written by mp rank 0 only (in Paddle 3.3.1 the mp ranks
overwrite each other's files). Cases: tp 2 x sharding 2 (4 in-process ranks, Adam / Momentum) and
tp 2 x sharding 2 x pp 2 (8 ranks, Adam), float64. After one step every rank calls
``fleet.save_persistables`` into one directory and records its persistables, takes a second step and
records them again; a fresh build (other random draws) then loads the directory back. Expected values are
the first run's own (never the files the code wrote): every persistable of each rank's program comes
back bit for bit and the second step from the loaded state equals the recorded second step bitwise.
The files themselves: each rank's split shards (and their accumulators / merge buffers) are in its
mp rank's directory holding its own values, the two mp ranks' files differ, every other value is in
``dirname``; a file two ranks write gets the same bytes from both (without a pipeline: no file is written
twice). Also: AMP with optimize_cast / optimize_offload (the shards' ``@offload_0`` moments), the
layout read off the program's mark by ``paddle.distributed.io.load_persistables``, a missing
``mp_rank_*`` directory (NotFound naming it, nothing loaded), and without mp a flat layout, as before.
"""
import io
import os
import threading

import numpy as np
import pytest

import refimpl
import refimpl as paddle
from refimpl.core.errors import NotFound
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

from test_sharding_hybrid import LAYOUT, _plain_net, _split_net
from test_sharding_hybrid_pipeline import PP_LAYOUT, _pp_net

MP = 2
ROWS = 8   # a batch; each of the two sharding replicas takes half (the mp ranks of a replica: the same rows)
#: the split parameters (each mp rank its own shard); the others are replicated over the mp ring
SPLIT = {n for n, (_, axis) in {**LAYOUT, **PP_LAYOUT}.items() if axis is not None}


@pytest.fixture
def writes(monkeypatch):
    """Every file any rank writes: [(rank, path, bytes)] (``atomic_file.write_files`` recorded, then done)."""
    from refimpl.core import atomic_file
    record, lock, original = [], threading.Lock(), atomic_file.write_files

    def recording(contents):
        for path, write in contents.items():
            buf = io.BytesIO()
            write(buf)
            with lock:
                record.append((context.current().rank, os.path.normpath(path), buf.getvalue()))
        return original(contents)
    monkeypatch.setattr(atomic_file, "write_files", recording)
    return record


def _opt(kind):
    return paddle.optimizer.Momentum(0.1, 0.9) if kind == "momentum" else paddle.optimizer.Adam(0.01)


def _build(kind, pp, mp=MP, amp=None):
    """tp ``mp`` x sharding 2 (x pp 2 when ``pp``): the split net (the pipelined one with ``pp``); ``amp``:
    float32 under AMP with these sharding_configs added."""
    from refimpl.distributed import fleet
    s = DistributedStrategy()
    s.sharding, s.pipeline, s.amp = True, pp, amp is not None
    s.sharding_configs = dict({"sharding_degree": 2, "mp_degree": mp, "pp_degree": 2 if pp else 1, "dp_degree": 1,
                               "segment_broadcast_MB": 0.0001}, **(amp or {}))
    if pp:   # 4 rows per sharding replica, in 2 micro-batches
        s.pipeline_configs = {"accumulate_steps": 2, "micro_batch_size": ROWS // 4}
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        if pp:
            loss = _pp_net("float64", split=True)
        else:
            dtype = "float64" if amp is None else "float32"
            loss = _split_net(dtype) if mp > 1 else _plain_net("float64")
        fleet.distributed_optimizer(_opt(kind), s).minimize(loss)
    return main, startup, loss


def _section(main):
    pipeline_opt = getattr(main, "_pipeline_opt", None)
    return pipeline_opt["section_program"] if pipeline_opt else main


def _persistables(main, scope):
    """Every persistable of this rank's (section) program, as held in ``scope``."""
    from refimpl.static.io_vars import is_persistable
    names = sorted(v.name for v in _section(main).list_vars() if is_persistable(v))
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


def _batches():
    rng = np.random.default_rng(4)
    return [(rng.standard_normal((ROWS, 8)), rng.integers(0, 2, (ROWS, 1)).astype("int64")) for _ in range(2)]


def _step(exe, main, loss, scope, batch, mp):
    r = context.current().rank
    replica = (r // mp) % 2   # the sharding rank: rank = (stage * 2 + sharding rank) * mp + mp rank
    part = slice(replica * ROWS // 2, (replica + 1) * ROWS // 2)
    x, y = batch
    x = x.astype(main.global_block().var("x").dtype)
    exe.run(main, feed={"x": x[part], "y": y[part]}, fetch_list=[loss], scope=scope)


def _rank_fn(dirname, kind, pp, mp=MP, loader="fleet", amp=None):
    """(saved, loaded, after, resumed): this rank's persistables after step 1, after loading them into
    a fresh build, after step 2 of the first run and after step 2 from the loaded state. ``loader``
    "io": the fresh program (which the sharding optimizer marked with the rank's mp layout,
    ``persistables.mark_mp_layout``) is loaded with ``paddle.distributed.io.load_persistables``."""
    from refimpl.distributed import fleet
    first, second = _batches()
    rank = context.current().rank
    main, startup, loss = _build(kind, pp, mp, amp)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.seed(10 + rank)   # each rank its own draws: the mp ranks' shards differ
        exe.run(startup)
        _step(exe, main, loss, scope, first, mp)
        fleet.save_persistables(exe, dirname, main)
        saved = _persistables(main, scope)
        _step(exe, main, loss, scope, second, mp)
        after = _persistables(main, scope)
    main2, startup2, loss2 = _build(kind, pp, mp, amp)
    scope2 = paddle.static.Scope()
    with paddle.static.scope_guard(scope2):
        paddle.seed(77 + rank)
        exe.run(startup2)
        if loader == "fleet":
            fleet.load_persistables(exe, dirname, main2)
        else:   # the sharding optimizer marked main2 with this rank's mp layout
            paddle.distributed.io.load_persistables(exe, dirname, main2)
        loaded = _persistables(main2, scope2)
        _step(exe, main2, loss2, scope2, second, mp)
        resumed = _persistables(main2, scope2)
    return saved, loaded, after, resumed


def _split_base(name):
    """The split parameter ``name`` is (or derives from: accumulator, merge buffer), else None."""
    return next((p for p in SPLIT if name == p or name.startswith((p + "_", p + "@"))), None)


def _check_round_trip(out):
    for r, (saved, loaded, after, resumed) in enumerate(out):
        assert sorted(loaded) == sorted(saved), r
        for n in saved:
            np.testing.assert_array_equal(loaded[n], saved[n], err_msg=f"{n} on rank {r} after loading")
            np.testing.assert_array_equal(resumed[n], after[n], err_msg=f"{n} on rank {r} after resuming")


def _read(path, name):
    with np.load(path) as archive:
        return archive[name]


def _check_files(out, dirname):
    """Each rank's split shards in its mp rank's directory with its values, the rest in ``dirname``."""
    for r, (saved, _, _, _) in enumerate(out):
        for n, value in saved.items():
            if _split_base(n) is not None:
                assert not os.path.exists(os.path.join(dirname, n)), n
                path = os.path.join(dirname, f"mp_rank_{r % MP:02d}", n)
            else:
                path = os.path.join(dirname, n)
            np.testing.assert_array_equal(_read(path, n), value, err_msg=f"{path} for rank {r}")
    split_weights = [(r, n) for r, o in enumerate(out) for n in o[0] if n in SPLIT and n.endswith(".w_0")]
    assert split_weights
    for r, n in split_weights:   # the mp peer (rank r ^ 1) holds another shard under the same name
        assert not np.array_equal(out[r][0][n], out[r ^ 1][0][n]), (n, r)
    assert sorted(d for d in os.listdir(dirname) if os.path.isdir(os.path.join(dirname, d))) == \
        ["mp_rank_00", "mp_rank_01"]


def _check_writes(writes, once):
    by_path = {}
    for rank, path, data in writes:
        by_path.setdefault(path, []).append((rank, data))
    for path, writers in by_path.items():
        if once:
            assert len(writers) == 1, (path, [w for w, _ in writers])
        assert len({d for _, d in writers}) == 1, (path, [w for w, _ in writers])


@pytest.mark.parametrize("kind", ["adam", "momentum"])
def test_tp_sharding_round_trips_into_per_mp_rank_files(float64_default, tmp_path, writes, kind):
    out = run_in_process(4, _rank_fn, str(tmp_path), kind, False, timeout=180)
    _check_round_trip(out)
    _check_files(out, str(tmp_path))
    _check_writes(writes, once=True)
    assert any(_split_base(n) and n != _split_base(n) for n in out[0][0])   # accumulators of shards too


def test_tp_sharding_pipeline_round_trips_into_per_mp_rank_files(float64_default, tmp_path, writes):
    out = run_in_process(8, _rank_fn, str(tmp_path), "adam", True, timeout=180)
    _check_round_trip(out)
    _check_files(out, str(tmp_path))
    # (each stage's first rank writes the stage's shared state: the learning rate, alike on every stage)
    _check_writes(writes, once=False)
    merged = [n for n in out[0][0] if n.endswith("@GRAD@MERGED") and _split_base(n)]
    assert merged and all(os.path.exists(os.path.join(str(tmp_path), "mp_rank_01", n)) for n in merged)


@pytest.mark.parametrize("configs", [{"optimize_cast": True}, {"optimize_offload": True}],
                         ids=["amp-optimize_cast", "amp-optimize_offload"])
def test_tp_sharding_with_amp_round_trips(tmp_path, writes, configs):
    """AMP (float32) with optimize_cast / optimize_offload: the shards' offloaded moments (``@offload_0``)
    go with their shards."""
    out = run_in_process(4, _rank_fn, str(tmp_path), "adam", False, MP, "fleet", configs, timeout=180)
    _check_round_trip(out)
    _check_files(out, str(tmp_path))
    _check_writes(writes, once=True)
    if configs.get("optimize_offload"):
        assert "linear_0.w_0_moment1_0@offload_0" in os.listdir(os.path.join(str(tmp_path), "mp_rank_01"))


def test_a_marked_program_loads_through_distributed_io(float64_default, tmp_path):
    """``paddle.distributed.io.load_persistables`` reads the layout off the program's mark."""
    out = run_in_process(4, _rank_fn, str(tmp_path), "adam", False, MP, "io", timeout=180)
    _check_round_trip(out)


def test_a_mark_outside_the_degree_is_refused():
    from refimpl.core.errors import InvalidArgument
    from refimpl.distributed.fleet.meta_optimizers.sharding import persistables
    with pytest.raises(InvalidArgument, match="mp rank 2 .* mp degree 2"):
        persistables.mark_mp_layout(Program(), 2, 2)


def test_without_mp_the_files_are_flat(float64_default, tmp_path, writes):
    """sharding 2 alone: one file per variable in ``dirname``, no ``mp_rank_*`` directory."""
    out = run_in_process(2, _rank_fn, str(tmp_path), "adam", False, 1, timeout=120)
    _check_round_trip(out)
    assert sorted(os.listdir(tmp_path)) == sorted(set(out[0][0]) | set(out[1][0]))
    assert all(os.path.isfile(os.path.join(tmp_path, n)) for n in os.listdir(tmp_path))


def test_a_missing_mp_rank_directory_is_named(float64_default, tmp_path):
    """Loading on an mp rank whose directory is not there: NotFound naming the file, nothing loaded."""
    import shutil

    def save(dirname):
        from refimpl.distributed import fleet
        main, startup, _ = _build("adam", False)
        exe, scope = paddle.static.Executor(), paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            paddle.seed(10 + context.current().rank)
            exe.run(startup)
            fleet.save_persistables(exe, dirname, main)

    def load(dirname):
        from refimpl.distributed import fleet
        main, startup, _ = _build("adam", False)
        exe, scope = paddle.static.Executor(), paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            paddle.seed(500 + context.current().rank)   # other draws than the saved ones
            exe.run(startup)
            before = _persistables(main, scope)
            try:
                fleet.load_persistables(exe, dirname, main)
            except NotFound as e:
                after = _persistables(main, scope)
                return str(e), all(np.array_equal(after[n], before[n]) for n in before)
        return None, None
    run_in_process(4, save, str(tmp_path), timeout=120)
    shutil.rmtree(tmp_path / "mp_rank_01")
    out = run_in_process(4, load, str(tmp_path), timeout=120)
    assert [o[0] is None for o in out] == [True, False, True, False], out
    for msg, untouched in (out[1], out[3]):
        assert "mp_rank_01" in msg and untouched, msg
