"""Checkpoints (issue 8, part 3): save/load, atomic writes, typed errors, exact resume.

Stopping at step s, saving, rebuilding everything from scratch (new program,
new scope, startup run with another seed) and loading must give bit-identical
parameters *and* optimizer state to never stopping: Adam moments and beta
pows, the LR scheduler's state and gradient-merge counters — on one device,
data-parallel on two places, and as a two-stage pipeline on in-process ranks.
"""
import os
import zipfile

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, NotFound
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.pipeline import runner
from refimpl.executor.plan_executor import PlanExecutor
from refimpl.framework import Program, unique_name
from refimpl.framework.op_role import is_forward
from refimpl.static import io

STEPS, STOP, DIN = 6, 3, 4


def build(k=1, schedule=True, dropout=False):
    """fc-tanh-fc regression; Adam driven by a StepDecay scheduler; optional gradient merge and dropout."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, DIN], "float32")
        y = paddle.static.data("y", [None, 1], "float32")
        h = paddle.static.nn.fc(x, 8, activation="tanh")
        if dropout:
            h = paddle.nn.functional.dropout(h, p=0.5)
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1) - y))
        lr = paddle.optimizer.lr.StepDecay(0.05, step_size=2, gamma=0.5) if schedule else 0.05
        opt = paddle.optimizer.Adam(lr)
        if k > 1:
            opt = paddle.incubate.optimizer.GradientMergeOptimizer(opt, k_steps=k)
        opt.minimize(loss)
    return main, startup, loss


def feeds(n=STEPS, rows=4):
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((rows, DIN)).astype("float32"),
             "y": rng.standard_normal((rows, 1)).astype("float32")} for _ in range(n)]


def persistables(programs, scope):
    return {n: np.array(scope.find_var(n).get_tensor()).copy()
            for n in io._saved_vars(programs, "all")}


def assert_same(got, want):
    assert got.keys() == want.keys()
    for n in want:
        np.testing.assert_array_equal(got[n], want[n], err_msg=n)


def fresh(seed, k=1, compiled=False, dropout=False):
    main, startup, loss = build(k, dropout=dropout)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    paddle.seed(seed)
    exe.run(startup, scope=scope)
    prog = main
    if compiled:
        prog = paddle.static.CompiledProgram(main, places=[paddle.static.CPUPlace()] * 2)
    return main, prog, loss, scope, exe


def train(prog, main, loss, scope, exe, data):
    for f in data:
        exe.run(prog, feed=f, fetch_list=[loss], scope=scope)
        main.lr_scheduler.step()


@pytest.mark.parametrize("k, compiled, how", [(1, False, "save"), (2, False, "persistables"),
                                              (1, True, "save"), (2, True, "persistables")],
                         ids=["single", "single-gm2", "dp2", "dp2-gm2"])
def test_resume_equals_never_stopping(tmp_path, k, compiled, how):
    data = feeds()
    main, prog, loss, scope, exe = fresh(0, k, compiled)
    train(prog, main, loss, scope, exe, data)
    want = persistables([main], scope)
    want_lr = main.lr_scheduler.state_dict()

    main, prog, loss, scope, exe = fresh(0, k, compiled)
    train(prog, main, loss, scope, exe, data[:STOP])
    if how == "save":
        paddle.static.save(main, str(tmp_path / "ckpt"), scope=scope)
    else:
        paddle.static.save_persistables(exe, str(tmp_path), main, scope=scope)

    main, prog, loss, scope, exe = fresh(123, k, compiled)  # different init: the load must win
    if how == "save":
        paddle.static.load(main, str(tmp_path / "ckpt.pdparams"), exe, scope=scope)
    else:
        paddle.static.load_persistables(exe, str(tmp_path), main, scope=scope)
    assert main.lr_scheduler.state_dict() == {"last_epoch": STOP, "last_lr": 0.025}
    train(prog, main, loss, scope, exe, data[STOP:])
    assert_same(persistables([main], scope), want)
    assert main.lr_scheduler.state_dict() == want_lr
    if k > 1:
        assert "gradient_merge_step" in want  # the counter is part of the checkpoint (saved mid-cycle)


@pytest.mark.parametrize("how, compiled", [("save", False), ("persistables", False), ("save", True)],
                         ids=["save", "persistables", "dp2-save"])
def test_resume_with_dropout_equals_never_stopping_bit_for_bit(tmp_path, how, compiled):
    """The random state dropout draws from is part of the checkpoint, also for the places of a
    CompiledProgram, whose threads draw from states handed down by the caller's (issue 15, part 8)."""
    data = feeds()

    def run(prog, main, loss, scope, exe, part):
        losses = []
        for f in part:
            losses.append(exe.run(prog, feed=f, fetch_list=[loss], scope=scope)[0].copy())
            main.lr_scheduler.step()
        return losses

    main, prog, loss, scope, exe = fresh(0, compiled=compiled, dropout=True)
    want_losses = run(prog, main, loss, scope, exe, data)
    want = persistables([main], scope)

    main, prog, loss, scope, exe = fresh(0, compiled=compiled, dropout=True)
    losses = run(prog, main, loss, scope, exe, data[:STOP])
    if how == "save":
        paddle.static.save(main, str(tmp_path / "ckpt"), scope=scope)
    else:
        paddle.static.save_persistables(exe, str(tmp_path), main, scope=scope)
    main, prog, loss, scope, exe = fresh(123, compiled=compiled, dropout=True)  # fresh scope, re-seeded
    if how == "save":
        paddle.static.load(main, str(tmp_path / "ckpt"), exe, scope=scope)
    else:
        paddle.static.load_persistables(exe, str(tmp_path), main, scope=scope)
    losses += run(prog, main, loss, scope, exe, data[STOP:])
    assert_same(persistables([main], scope), want)
    for got, wanted in zip(losses, want_losses):
        np.testing.assert_array_equal(got, wanted)


# ---- pipeline: each rank saves and loads its own persistables ------------------------------
def pipeline(update_every):
    main, startup, loss = build(schedule=False)
    n = sum(1 for op in main.global_block().ops if is_forward(op.role()))
    return runner.build_pipeline(main, startup, loss, "1F1B", 2, 2, cuts=[n // 2], update_every=update_every)


def pipeline_rank(pl, data, initial, ckpt=None, mode=None):
    """Run ``data`` on this rank; ``mode`` 'save' saves at the end, 'load' loads first."""
    rank = context.current().rank
    for ring in pl.rings:
        if ring not in context.current().groups:
            context.current().add_group(ring, range(pl.pp_degree))
    plan, scope = pl.plans[rank], paddle.static.Scope()
    for name, value in initial.items():
        scope.var(name).get_tensor().set(value)
    files = dict(dirname=str(ckpt), filename=f"rank{rank}.npz", main_program=plan, scope=scope)
    if mode == "load":
        paddle.static.load_persistables(None, **files)
    pe = PlanExecutor(rank=rank)
    for f in data:
        pe.run(plan, feed=f, scope=scope)
    if mode == "save":
        paddle.static.save_persistables(None, **files)
    return persistables([plan.program(t) for t in plan.job_types()], scope)


@pytest.mark.parametrize("update_every", [1, 2])
def test_pipeline_resume_equals_never_stopping(tmp_path, update_every):
    data = feeds(4)
    pl = pipeline(update_every)
    init = runner.initial_values(pl, seed=0)
    other = runner.initial_values(pl, seed=5)
    want = run_in_process(2, lambda: pipeline_rank(pl, data, init), timeout=30)
    run_in_process(2, lambda: pipeline_rank(pl, data[:1], init, tmp_path, "save"), timeout=30)
    got = run_in_process(2, lambda: pipeline_rank(pl, data[1:], other, tmp_path, "load"), timeout=30)
    for r in range(2):
        assert_same(got[r], want[r])
    if update_every > 1:
        assert all("gradient_merge_step" in w for w in want)


# ---- atomicity and typed errors -----------------------------------------------------------
def saved(tmp_path):
    main, prog, loss, scope, exe = fresh(0)
    train(prog, main, loss, scope, exe, feeds(1))
    path = str(tmp_path / "m")
    paddle.static.save(main, path, scope=scope)
    return main, scope, path


def test_crash_mid_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    main, scope, path = saved(tmp_path)
    before = open(path + ".pdparams", "rb").read()
    real = np.lib.format.write_array
    calls = []

    def crash(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("power cut")
        return real(*a, **kw)
    monkeypatch.setattr(np.lib.format, "write_array", crash)
    for name in ("fc_0.w_0", "fc_0.b_0"):
        scope.var(name).get_tensor().set(np.zeros_like(np.array(scope.find_var(name).get_tensor())))
    with pytest.raises(KeyboardInterrupt):
        paddle.static.save(main, path, scope=scope)
    assert open(path + ".pdparams", "rb").read() == before
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]  # no litter either


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_file_is_a_typed_error_naming_it_and_changes_nothing(tmp_path, damage):
    main, scope, path = saved(tmp_path)
    f = path + ".pdparams"
    raw = bytearray(open(f, "rb").read())
    raw = {"truncate": raw[:len(raw) // 2], "flip": raw[:80] + bytes(b ^ 0xFF for b in raw[80:90]) + raw[90:],
           "garbage": b"not a zip at all", "empty": b""}[damage]
    open(f, "wb").write(bytes(raw))
    before = persistables([main], scope)
    with pytest.raises(InvalidArgument, match="m.pdparams"):
        paddle.static.load(main, path, scope=scope)
    assert_same(persistables([main], scope), before)


def test_missing_variable_or_file_is_named(tmp_path):
    main, scope, path = saved(tmp_path)
    io.write_npz(path + ".pdparams", {"fc_0.w_0": np.zeros((DIN, 8), "float32")})
    with pytest.raises(NotFound, match=r"fc_0.b_0.*m.pdparams"):
        paddle.static.load(main, path, scope=scope)
    os.remove(path + ".pdopt")
    with pytest.raises(NotFound, match=r"m.pdopt"):
        paddle.static.load(main, path, var_list=[], scope=scope)
    with pytest.raises(NotFound, match="nowhere"):
        paddle.static.load_persistables(None, str(tmp_path / "nowhere"), main, scope=scope)


def test_wrong_shape_or_dtype_is_named(tmp_path):
    main, scope, path = saved(tmp_path)
    arrays = io.read_npz(path + ".pdparams")
    arrays["fc_0.w_0"] = np.zeros((3, 3), "float32")
    io.write_npz(path + ".pdparams", arrays)
    with pytest.raises(InvalidArgument, match=r"fc_0.w_0.*shape \[3, 3\]"):
        paddle.static.load(main, path, scope=scope)
    arrays["fc_0.w_0"] = np.zeros((DIN, 8), "float64")
    io.write_npz(path + ".pdparams", arrays)
    with pytest.raises(InvalidArgument, match=r"fc_0.w_0.*dtype float64"):
        paddle.static.load(main, path, scope=scope)


def test_pickled_content_is_refused(tmp_path):
    path = str(tmp_path / "evil.npz")
    with zipfile.ZipFile(path, "w") as z, z.open("w.npy", "w") as e:
        np.lib.format.write_array(e, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InvalidArgument, match="evil.npz"):
        io.read_npz(path)
    with pytest.raises(InvalidArgument, match="object arrays"):
        io.write_npz(str(tmp_path / "x.npz"), {"w": np.array([None], dtype=object)})


def test_inference_model_round_trip(tmp_path):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, DIN], "float32")
        out = paddle.static.nn.fc(paddle.static.nn.fc(x, 8, activation="relu"), 2)
        loss = paddle.mean(out)
        paddle.optimizer.SGD(0.1).minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    xv = np.random.default_rng(0).standard_normal((3, DIN)).astype("float32")
    want = exe.run(main.clone(for_test=True), feed={"x": xv}, fetch_list=[out], scope=scope)[0]
    paddle.static.save_inference_model(str(tmp_path / "inf"), [x], [out], exe, program=main, scope=scope)
    scope2 = paddle.static.Scope()
    prog, feed_names, fetches = paddle.static.load_inference_model(str(tmp_path / "inf"), exe, scope=scope2)
    assert feed_names == ["x"] and [v.name for v in fetches] == [out.name]
    assert not any(op.type in ("sgd", "mean") or op.type.endswith("_grad") for op in prog.global_block().ops)
    got = exe.run(prog, feed={"x": xv}, fetch_list=fetches, scope=scope2)[0]
    np.testing.assert_array_equal(got, want)
    with pytest.raises(NotFound, match="ghost"):
        paddle.static.save_inference_model(str(tmp_path / "bad"), ["ghost"], [out], exe, program=main)


@pytest.mark.parametrize("kind", ["warmup", "plateau"])
def test_nested_and_none_scheduler_state_round_trips(tmp_path, kind):
    """LinearWarmup nests its inner scheduler's state; ReduceOnPlateau's best is None before its first step."""
    import refimpl as paddle
    lr = paddle.optimizer.lr
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 3])
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
        sched = (lr.LinearWarmup(lr.CosineAnnealingDecay(0.1, T_max=4), 2, 0.0, 0.1) if kind == "warmup"
                 else lr.ReduceOnPlateau(0.1))
        paddle.optimizer.SGD(learning_rate=sched).minimize(loss)
    exe = paddle.static.Executor()
    exe.run(startup)
    if kind == "warmup":
        for _ in range(3):
            sched.step()
    saved = sched.state_dict()
    paddle.static.save(main, str(tmp_path / "m"))
    sched.step() if kind == "warmup" else sched.step(1.0)
    assert sched.state_dict() != saved
    paddle.static.load(main, str(tmp_path / "m"), exe)
    assert sched.state_dict() == saved
