"""Checkpoint files under faults (issue 15, parts 1, 3 and 8).

* Saves are atomic and all-or-nothing for a reader: a crash between two
  renames, or a real SIGKILL at a random moment of a save loop, leaves a
  checkpoint that loads as one complete save or raises a typed error, never
  a mix of two saves and never a bare exception; temporaries of killed
  writers are removed by the next save; files get the umask's mode.
* Loaders are all-or-nothing and typed: a plain ``.npy``, a header claiming
  400 GB, a truncated archive, scheduler or random state entries of the
  wrong type or size raise a typed error naming the file and the entry, and
  the scope is exactly as before the call.
* Resume with dropout is bit-identical to never stopping.
"""
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import zipfile

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound
from refimpl.distributed import ps
from refimpl.framework import Program, unique_name
from refimpl.static import io
from test_checkpoint import DIN, build  # fc-tanh-fc, Adam under StepDecay, optional dropout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fresh(seed, dropout=False):
    main, startup, loss = build(dropout=dropout)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    paddle.seed(seed)
    exe.run(startup, scope=scope)
    return main, loss, scope, exe


def values(main, scope):
    return {n: np.array(scope.find_var(n).get_tensor()).copy() for n in io._saved_vars([main], "all")}


def assert_same(got, want):
    assert got.keys() == want.keys()
    for n in want:
        np.testing.assert_array_equal(got[n], want[n], err_msg=n)


def fill(main, scope, k, target=None):
    """Every persistable of ``main`` in ``target`` (default ``scope``) set to the constant ``k``."""
    for n, v in values(main, scope).items():
        (target or scope).var(n).get_tensor().set(np.full_like(v, k))


def temps(d):
    return [f for f in os.listdir(d) if f.endswith(".tmp")]


# ---- part 1: all-or-nothing saves ----------------------------------------------------------------
def crash_after(monkeypatch, renames):
    real, done = os.replace, []

    def replace(src, dst):
        if len(done) == renames:
            raise OSError(f"simulated crash after {renames} rename(s)")
        done.append(dst)
        return real(src, dst)
    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("renames", [1, 2, 3])
def test_crash_between_renames_gives_one_whole_save_or_a_typed_error(tmp_path, monkeypatch, renames):
    """Renames: .pdparams, .pdopt, .pdmodel, then the manifest; a crash after each but the last."""
    main, loss, scope, exe = fresh(0)
    path = str(tmp_path / "m")
    fill(main, scope, 1)
    paddle.static.save(main, path, scope=scope)
    fill(main, scope, 2)
    crash_after(monkeypatch, renames)
    with pytest.raises(OSError, match="simulated crash"):
        paddle.static.save(main, path, scope=scope)
    monkeypatch.undo()
    assert temps(tmp_path) == []  # the temporaries not renamed are gone, not left at full size
    target = paddle.static.Scope()
    fill(main, scope, 7, target)
    before = values(main, target)
    if renames == 1:  # the new .pdparams, the old .pdopt
        with pytest.raises(InvalidArgument, match=r"m\.pdparams' and .*m\.pdopt' come from two saves"):
            paddle.static.load(main, path, scope=target)
        assert_same(values(main, target), before)
    else:  # both tensor files of the new save are in place: they are loaded
        paddle.static.load(main, path, scope=target)
        assert all((v == 2).all() for v in values(main, target).values())
    paddle.static.save(main, path, scope=scope)  # the next save commits a whole checkpoint again
    paddle.static.load(main, path, scope=target)
    assert all((v == 2).all() for v in values(main, target).values())


def test_crash_before_the_first_manifest_is_refused(tmp_path, monkeypatch):
    """A checkpoint of the older layout (no manifest) half-overwritten by a new save is not loaded."""
    main, loss, scope, exe = fresh(0)
    path = str(tmp_path / "m")
    fill(main, scope, 1)
    for suffix, which in ((".pdparams", "params"), (".pdopt", "opt")):
        io.write_npz(path + suffix, {n: np.array(scope.find_var(n).get_tensor())
                                     for n in io._saved_vars([main], which)})
    target = paddle.static.Scope()
    paddle.static.load(main, path, scope=target)  # the older layout loads
    assert all((v == 1).all() for v in values(main, target).values())
    fill(main, scope, 2)
    crash_after(monkeypatch, 1)
    with pytest.raises(OSError):
        paddle.static.save(main, path, scope=scope)
    monkeypatch.undo()
    with pytest.raises(InvalidArgument, match=r"m\.pdparams'.*does not commit.*m\.pdopt'.*no save id"):
        paddle.static.load(main, path, scope=paddle.static.Scope())


def test_inference_model_crash_between_renames_is_refused(tmp_path, monkeypatch):
    main, loss, scope, exe = fresh(0)
    x = main.global_block().var("x")
    prefix = str(tmp_path / "inf")
    paddle.static.save_inference_model(prefix, [x], [loss], exe, program=main, scope=scope)
    fill(main, scope, 3)
    crash_after(monkeypatch, 1)
    with pytest.raises(OSError):
        paddle.static.save_inference_model(prefix, [x], [loss], exe, program=main, scope=scope)
    monkeypatch.undo()
    with pytest.raises(InvalidArgument, match=r"inf\.pd(model|iparams)'.*two saves"):
        paddle.static.load_inference_model(prefix, exe, scope=paddle.static.Scope())


def test_files_get_the_umask_mode(tmp_path):
    main, loss, scope, exe = fresh(0)
    old = os.umask(0o027)
    try:
        paddle.static.save(main, str(tmp_path / "m"), scope=scope)
        paddle.static.save_persistables(exe, str(tmp_path), main, scope=scope)
        ps.save_npz(str(tmp_path / "ps"), {"w": np.ones(3)})
    finally:
        os.umask(old)
    for f in ("m.pdparams", "m.pdopt", "m.pdmodel", "m.manifest.json", "__persistables__.npz",
              os.path.join("ps", "persistables.npz")):
        assert oct(os.stat(tmp_path / f).st_mode & 0o777) == oct(0o640), f


# ---- part 1: real SIGKILLs mid-save ------------------------------------------------------------
def child_program():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 512], "float32")
        loss = paddle.mean(paddle.static.nn.fc(paddle.static.nn.fc(x, 512), 1))
        paddle.optimizer.Adam(0.1).minimize(loss)
    return main, startup


CHILD = textwrap.dedent("""
    import os, sys, numpy as np
    sys.path[:0] = [{root!r}, os.path.join({root!r}, "tests")]
    import refimpl as paddle
    from refimpl.distributed import ps
    from test_checkpoint_faults import child_program
    kind, path = sys.argv[1], sys.argv[2]
    if kind == "ps":
        for k in range(1, 10 ** 6):
            ps.save_npz(path, {{"a": np.full(1 << 20, k, "float32"), "b": np.full(1 << 20, k, "float32")}})
            print(k, flush=True)
    main, startup = child_program()
    scope = paddle.static.Scope()
    paddle.static.Executor().run(startup, scope=scope)
    names = [v.name for v in main.list_vars() if v.persistable and not v.is_data]
    for k in range(1, 10 ** 6):
        for n in names:
            t = scope.find_var(n).get_tensor()
            t.set(np.full_like(np.array(t), k))
        paddle.static.save(main, path, scope=scope)
        print(k, flush=True)
""")


def kill_mid_save(tmp_path, kind, trials, seed=0):
    """Run the save loop ``trials`` times, SIGKILL it at a random moment; what each load gave."""
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=ROOT))
    path = str(tmp_path / ("ps" if kind == "ps" else "m"))
    rng, outcomes = np.random.default_rng(seed), []
    for _ in range(trials):
        child = subprocess.Popen([sys.executable, str(script), kind, path], stdout=subprocess.PIPE, text=True)
        try:
            ready, _, _ = select.select([child.stdout], [], [], 30)  # never hang the test run
            assert ready and child.stdout.readline().strip(), "the child did not complete its first save"
            time.sleep(float(rng.uniform(0.0, 0.15)))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
            child.stdout.close()
        outcomes.append(load_outcome(kind, path))
    return outcomes, path


def load_outcome(kind, path):
    """'complete' (every value from one save) or 'refused' (a typed error); fails on a mix or a bare error."""
    try:
        if kind == "ps":
            got = ps.load_npz(path)
        else:
            main, _ = child_program()
            scope = paddle.static.Scope()
            paddle.static.load(main, path, scope=scope)
            got = {n: np.array(scope.find_var(n).get_tensor()) for n in io._saved_vars([main], "all")}
    except EnforceNotMet:
        return "refused"
    ks = {float(k) for v in got.values() for k in np.unique(v)}
    assert len(ks) == 1, f"a mixed checkpoint: values of saves {sorted(ks)}"
    return "complete"


@pytest.mark.parametrize("kind", ["static", "ps"])
def test_sigkill_mid_save_leaves_one_complete_save(tmp_path, kind):
    outcomes, path = kill_mid_save(tmp_path, kind, trials=4)
    if kind == "ps":  # one file, one rename: the previous model is always there
        assert outcomes == ["complete"] * 4
    else:  # a kill between two renames is refused; everything else loads
        assert set(outcomes) <= {"complete", "refused"} and "complete" in outcomes
    # the next save removes the temporaries the killed writers left
    if kind == "ps":
        ps.save_npz(path, {"a": np.zeros(1)})
    else:
        main, startup = child_program()
        scope = paddle.static.Scope()
        paddle.static.Executor().run(startup, scope=scope)
        paddle.static.save(main, path, scope=scope)
    assert temps(os.path.dirname(path)) == []


def test_temporaries_of_dead_writers_only_are_removed(tmp_path):
    from refimpl.core import atomic_file
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = atomic_file._host()
    stale = tmp_path / f".m.pdparams.{dead.pid}@{host}.00ff.tmp"
    live = tmp_path / f".m.pdparams.{os.getppid()}@{host}.00fe.tmp"
    other = tmp_path / f".m.pdopt.{dead.pid}@{host}.00fd.tmp"
    for f in (stale, live, other):
        f.write_bytes(b"x" * 1000)
    io.write_npz(str(tmp_path / "m.pdparams"), {"w": np.ones(2)})
    assert sorted(temps(tmp_path)) == sorted([live.name, other.name])


# ---- part 3: loaders are all-or-nothing and typed --------------------------------------------
def write_plain_npy(path, name):
    with open(path, "wb") as f:
        np.save(f, np.ones((DIN, 8), "float32"))


def write_huge_header(path, name):
    """An archive whose entry ``name`` declares 10**11 float32 (400 GB) and holds 64 bytes."""
    with zipfile.ZipFile(path, "w") as z, z.open(name + ".npy", "w") as e:
        np.lib.format.write_array_header_1_0(e, {"descr": "<f4", "fortran_order": False, "shape": (10 ** 11,)})
        e.write(b"\0" * 64)


def write_short_entry(path, name):
    """An entry whose header declares 1000 floats but that holds 10."""
    with zipfile.ZipFile(path, "w") as z, z.open(name + ".npy", "w") as e:
        np.lib.format.write_array_header_1_0(e, {"descr": "<f4", "fortran_order": False, "shape": (1000,)})
        e.write(np.zeros(10, "float32").tobytes())


def write_truncated(path, name):
    io.write_npz(path, {name: np.ones((DIN, 8), "float32"), "other": np.ones(1000)})
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[:len(raw) * 3 // 5])


DAMAGE = {"npy": (write_plain_npy, r"single \.npy"), "huge": (write_huge_header, r"entry 'fc_0\.w_0'"),
          "short": (write_short_entry, r"entry 'fc_0\.w_0'"), "truncated": (write_truncated, "truncated")}


def saved(tmp_path, how):
    main, loss, scope, exe = fresh(0)
    if how == "save":
        paddle.static.save(main, str(tmp_path / "m"), scope=scope)
        return main, scope, str(tmp_path / "m.pdparams"), lambda: paddle.static.load(main, str(tmp_path / "m"),
                                                                                       scope=scope)
    paddle.static.save_persistables(exe, str(tmp_path), main, scope=scope)
    return main, scope, str(tmp_path / "__persistables__.npz"), \
        lambda: paddle.static.load_persistables(exe, str(tmp_path), main, scope=scope)


@pytest.mark.parametrize("how", ["save", "persistables"])
@pytest.mark.parametrize("damage", ["npy", "huge"])
def test_static_loaders_refuse_npy_and_huge_headers_changing_nothing(tmp_path, how, damage):
    main, scope, path, load = saved(tmp_path, how)
    write, entry = DAMAGE[damage]
    write(path, "fc_0.w_0")
    before, lr = values(main, scope), main.lr_scheduler.state_dict()
    with pytest.raises(InvalidArgument, match=os.path.basename(path).replace(".", r"\.") + ".*" + entry):
        load()
    assert_same(values(main, scope), before)
    assert main.lr_scheduler.state_dict() == lr


@pytest.mark.parametrize("damage", ["npy", "huge", "short", "truncated"])
def test_ps_load_npz_is_typed(tmp_path, damage):
    path = str(tmp_path / "persistables.npz")
    write, entry = DAMAGE[damage]
    write(path, "fc_0.w_0")
    with pytest.raises(InvalidArgument, match=r"persistables\.npz.*" + entry):
        ps.load_npz(str(tmp_path))
    with pytest.raises(NotFound, match="nowhere"):
        ps.load_npz(str(tmp_path / "nowhere"))


def test_ps_load_npz_checks_the_tables_before_reading(tmp_path):
    ps.save_npz(str(tmp_path), {"w": np.ones((3, 2), "float32")})
    assert ps.load_npz(str(tmp_path), expected={"w": ((3, 2), "float32")})["w"].shape == (3, 2)
    with pytest.raises(InvalidArgument, match=r"persistables\.npz.*'w' has shape \[3, 2\].*\[2, 3\]"):
        ps.load_npz(str(tmp_path), expected={"w": ((2, 3), "float32")})
    with pytest.raises(NotFound, match=r"persistables\.npz.*'v'"):
        ps.load_npz(str(tmp_path), expected={"w": ((3, 2), "float32"), "v": ((1,), "float32")})


@pytest.mark.parametrize("damage", ["npy", "huge"])
def test_params_file_reader_of_the_cli_checks_the_program(tmp_path, damage):
    main, loss, scope, exe = fresh(0)
    path = str(tmp_path / "params.npz")
    io.write_npz(path, {"fc_0.w_0": np.zeros((DIN, 8), "float32"), "extra": np.ones(2)})
    assert set(io.read_npz(path, main, what="params")) == {"fc_0.w_0", "extra"}
    io.write_npz(path, {"fc_0.w_0": np.zeros((3, 3), "float32")})
    with pytest.raises(InvalidArgument, match=r"fc_0\.w_0.*params\.npz.*shape \[3, 3\]"):
        io.read_npz(path, main, what="params")
    DAMAGE[damage][0](path, "fc_0.w_0")
    with pytest.raises(InvalidArgument, match=r"params .*params\.npz"):
        io.read_npz(path, main, what="params")


BAD_STATE = {"lr-string": ("@LR_SCHEDULER@.last_lr", np.array("0.1"), InvalidArgument),
             "lr-size": ("@LR_SCHEDULER@.last_epoch", np.array([1, 2]), InvalidArgument),
             "lr-missing": ("@LR_SCHEDULER@.last_epoch", None, NotFound),
             "random-float": ("@RANDOM_STATE@.position", np.array(1.5), InvalidArgument),
             "random-negative": ("@RANDOM_STATE@.mt19937_64", np.array([-1]), InvalidArgument),
             "random-missing": ("@RANDOM_STATE@.mt19937_64", None, NotFound)}


@pytest.mark.parametrize("how", ["save", "persistables"])
@pytest.mark.parametrize("case", sorted(BAD_STATE))
def test_bad_scheduler_or_random_state_is_named_and_changes_nothing(tmp_path, how, case):
    main, scope, path, load = saved(tmp_path, how)
    if how == "save":
        path = path.replace(".pdparams", ".pdopt")
    name, value, error = BAD_STATE[case]
    arrays = io.read_npz(path)
    if value is None:
        del arrays[name]
    else:
        arrays[name] = value
    io.write_npz(path, arrays)
    train_a_step = {"x": np.ones((2, DIN), "float32"), "y": np.ones((2, 1), "float32")}
    paddle.static.Executor().run(main, feed=train_a_step, scope=scope)
    main.lr_scheduler.step()
    before, lr = values(main, scope), main.lr_scheduler.state_dict()
    from refimpl.core import random
    rng = random.get_state()
    with pytest.raises(error, match=name.replace(".", r"\.") + ".*" + os.path.basename(path).replace(".", r"\.")):
        load()
    assert_same(values(main, scope), before)
    assert main.lr_scheduler.state_dict() == lr
    assert_same(random.get_state(), rng)


@pytest.mark.parametrize("compressed", [False, True])
def test_random_damage_to_an_archive_is_a_typed_error_or_a_clean_read(tmp_path, compressed):
    path = str(tmp_path / "persistables.npz")
    arrays = {"a": np.arange(50.0), "b": np.ones((3, 4), "float32")}
    if compressed:  # np.savez_compressed's archives carry no entry count: the expected tables guard them
        np.savez_compressed(path, **arrays)
    else:
        ps.save_npz(str(tmp_path), arrays)
    expected = {n: (a.shape, a.dtype) for n, a in arrays.items()}
    good, rng, outcomes = open(path, "rb").read(), np.random.default_rng(0), set()
    for _ in range(300):
        raw = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            raw[int(rng.integers(len(raw)))] = int(rng.integers(256))
        if rng.random() < 0.2:
            raw = raw[:int(rng.integers(len(raw)))]
        open(path, "wb").write(bytes(raw))
        try:
            got = ps.load_npz(str(tmp_path), expected)
        except EnforceNotMet:
            outcomes.add("typed")
            continue
        assert got.keys() == {"a", "b"} and got["a"].shape == (50,) and got["b"].shape == (3, 4)
        outcomes.add("read")
    assert "typed" in outcomes
