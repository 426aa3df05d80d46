"""The ``refimpl`` subcommands ``run``, ``trace``, ``version`` and ``--help`` everywhere."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.cli import main
from oracle import load, oracle_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBCOMMANDS = ["demo", "run", "trace", "schedule", "version"]


def _build():
    main_p, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main_p, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
    return main_p, startup, loss


@pytest.fixture
def files(tmp_path):
    """A program/v1 main and startup, a feed and params .npz, and the reference fetch."""
    main_p, startup, loss = _build()
    (tmp_path / "main.json").write_text(json.dumps(main_p.to_dict()))
    (tmp_path / "startup.json").write_text(json.dumps(startup.to_dict()))
    x = np.arange(6, dtype="float32").reshape(2, 3)
    w = np.linspace(-1, 1, 6).astype("float32").reshape(3, 2)
    np.savez(tmp_path / "feed.npz", x=x)
    np.savez(tmp_path / "params.npz", **{"fc_0.w_0": w})
    return tmp_path, loss.name, float(np.mean(x @ w))


def _value_after(name, text):
    m = re.search(rf"^{re.escape(name)}: shape \[[0-9, ]*\] dtype \w+\n(.+)$", text, re.M)
    assert m, text
    return m.group(1)


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_every_subcommand_has_help(sub, capsys):
    with pytest.raises(SystemExit) as e:
        main([sub, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: refimpl {sub}")
    assert "``" not in out, out   # the docstrings' reStructuredText marks stay out of --help


def test_the_top_level_help_is_plain_text(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "The refimpl command line." in out and "``" not in out, out


def test_version(capsys):
    assert main(["version"]) == 0
    out = capsys.readouterr().out
    assert f"refimpl {paddle.__version__}" in out and "PaddlePaddle 3.3.1" in out
    assert f"numpy {np.__version__}" in out


def test_run_program_with_startup_params_and_feed(files, capsys):
    d, loss, expected = files
    rc = main(["run", str(d / "main.json"), "--startup", str(d / "startup.json"),
               "--params", str(d / "params.npz"), "--feed", str(d / "feed.npz"), "--fetch", loss])
    assert rc == 0
    assert float(_value_after(loss, capsys.readouterr().out)) == pytest.approx(expected, rel=1e-5)


def test_run_fetches_several_names(files, capsys):
    d, loss, _ = files
    assert main(["run", str(d / "main.json"), "--startup", str(d / "startup.json"), "--feed",
                 str(d / "feed.npz"), "--fetch", f"{loss},fc_0.b_0", "--fetch", "fc_0.tmp_0"]) == 0
    out = capsys.readouterr().out
    assert "fc_0.b_0: shape [2] dtype float32" in out and "fc_0.tmp_0: shape [2, 2]" in out
    assert out.index(f"{loss}:") < out.index("fc_0.b_0:") < out.index("fc_0.tmp_0:")


def test_run_oracle_record_gives_paddles_first_loss(capsys):
    path = oracle_file(os.path.join("programs", "00_mlp_sgd.json"))
    rec = load(path)
    assert main(["run", path]) == 0
    got = float(_value_after(rec["loss_name"], capsys.readouterr().out))
    assert got == pytest.approx(rec["fetched_loss"][0]["data"][0], rel=1e-5)


def test_run_steps_draws_a_progress_bar(files, capsys):
    d, loss, _ = files
    assert main(["run", str(d / "main.json"), "--startup", str(d / "startup.json"),
                 "--feed", str(d / "feed.npz"), "--fetch", loss, "--steps", "3"]) == 0
    assert re.search(r"step 3/3 \[=+\] - loss: ", capsys.readouterr().err)  # paddle.hapi ProgressBar's line


@pytest.mark.parametrize("case, kind, words", [
    ("missing_program", "NotFound", "does not exist"),
    ("not_json", "InvalidArgument", "is not JSON"),
    ("malformed", "InvalidArgument", "malformed program/v1"),
    ("missing_feed", "InvalidArgument", "feed 'x' is missing"),
    ("bad_npz", "InvalidArgument", "bad.npz' is truncated or corrupted"),
    ("unknown_fetch", "NotFound", "fetch 'nope'"),
    ("no_startup", "PreconditionNotMet", "did you run the startup program"),
    ("bad_steps", "InvalidArgument", "--steps must be >= 1"),
])
def test_run_bad_input_gives_typed_errors(files, capsys, case, kind, words):
    d, loss, _ = files
    (d / "text.json").write_text("not json")
    (d / "bad.json").write_text(json.dumps({"blocks": 3}))
    (d / "bad.npz").write_text("nope")
    prog, st = str(d / "main.json"), ["--startup", str(d / "startup.json")]
    feed = ["--feed", str(d / "feed.npz")]
    argv = {"missing_program": [str(d / "none.json")], "not_json": [str(d / "text.json")],
            "malformed": [str(d / "bad.json")], "missing_feed": [prog] + st + ["--fetch", loss],
            "bad_npz": [prog] + st + ["--feed", str(d / "bad.npz")],
            "unknown_fetch": [prog] + st + feed + ["--fetch", "nope"],
            "no_startup": [prog] + feed + ["--fetch", loss],
            "bad_steps": [prog] + st + feed + ["--steps", "0"]}[case]
    assert main(["run"] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"refimpl run: {kind}: ") and words in err


def test_trace_demo_writes_chrome_trace_and_png(tmp_path, capsys):
    js, png = tmp_path / "t.json", tmp_path / "m.png"
    assert main(["trace", "--steps", "2", "--json", str(js), "--png", str(png), "--table"]) == 0
    out = capsys.readouterr().out
    n_ops = int(re.search(r"traced (\d+) ops", out).group(1))
    events = json.loads(js.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == n_ops > 10
    assert any(e["name"] == "momentum" for e in events)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    peak = int(re.search(r"peak (\d+) bytes", out).group(1))
    assert max(e["args"]["bytes"] for e in events if e["ph"] == "C") <= peak


def test_trace_program_and_no_png(files, capsys):
    d, loss, expected = files
    js = d / "t.json"
    assert main(["trace", str(d / "main.json"), "--startup", str(d / "startup.json"), "--params",
                 str(d / "params.npz"), "--feed", str(d / "feed.npz"), "--fetch", loss,
                 "--json", str(js), "--png", ""]) == 0
    out = capsys.readouterr().out
    assert float(_value_after(loss, out)) == pytest.approx(expected, rel=1e-5)
    names = [e["name"] for e in json.loads(js.read_text())["traceEvents"] if e["ph"] == "X"]
    assert names == ["mul", "elementwise_add", "reduce_mean"]
    assert "wrote" in out and ".png" not in out


def test_console_entry_point_runs_version():
    out = subprocess.run([sys.executable, "-m", "refimpl.cli", "version"], capture_output=True,
                         text=True, check=True, cwd=ROOT, timeout=120).stdout
    assert out.startswith("refimpl ")


def test_run_replays_a_recorded_oracle_file(capsys):
    path = oracle_file(os.path.join("programs", "00_mlp_sgd.json"))
    rec = load(path)
    steps = len(rec["feeds"])
    assert main(["run", path, "--steps", str(steps)]) == 0
    printed = float(capsys.readouterr().out.strip().splitlines()[-1])
    np.testing.assert_allclose(printed, rec["fetched_loss"][-1]["data"][0], rtol=1e-5)


# ---- bad program files: exit code 2 and one stderr line, never a traceback (issue 15, part 4)

def _record(tmp_path, **changes):
    """A ``refimpl run`` record of the fc program (main, startup, feeds, loss_name) with ``changes``."""
    main_p, startup, loss = _build()
    rec = {"main": main_p.to_dict(), "startup": startup.to_dict(), "loss_name": loss.name,
           "feeds": [{"x": {"dtype": "float32", "shape": [2, 3], "data": [0.5] * 6}}]}
    rec.update(changes)
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(rec))
    return str(path)


def _cyclic(tmp_path):
    main_p, _, _ = _build()
    d = main_p.to_dict()
    cond = {"type": "conditional_block", "inputs": {"Cond": ["x"], "Input": []}, "outputs": {"Scope": ["s"]},
            "attrs": {"sub_block": {"block": 1}}}
    d["blocks"][0]["ops"].append(cond)
    d["blocks"].append({"idx": 1, "parent_idx": 0, "vars": [], "ops": [dict(cond, attrs={"sub_block": {"block": 0}})]})
    (tmp_path / "cyclic.json").write_text(json.dumps(d))
    return [str(tmp_path / "cyclic.json")]


def _warns_then_fails(tmp_path):
    """scale overflows float32 (NumPy warns), then matmul_v2 gets operands that do not fit."""
    def var(n, shape, **flags):
        return dict({"name": n, "shape": shape, "dtype": "float32"}, **flags)

    def arr(rows, cols, value):
        return {"dtype": "float32", "shape": [rows, cols], "data": [value] * (rows * cols)}
    ops = [{"type": "scale", "inputs": {"X": ["x"]}, "outputs": {"Out": ["y"]}, "attrs": {"scale": 3e38}},
           {"type": "matmul_v2", "inputs": {"X": ["y"], "Y": ["z"]}, "outputs": {"Out": ["out"]}, "attrs": {}}]
    data = {"is_data": True, "stop_gradient": True}
    main_d = {"blocks": [{"idx": 0, "parent_idx": -1, "ops": ops, "vars": [
        var("x", [-1, 3], **data), var("z", [-1, 5], **data), var("y", [-1, 3]), var("out", [-1, 5])]}]}
    rec = {"main": main_d, "loss_name": "out", "feeds": [{"x": arr(2, 3, 10.0), "z": arr(5, 5, 1.0)}]}
    (tmp_path / "warns.json").write_text(json.dumps(rec))
    return [str(tmp_path / "warns.json")]


@pytest.mark.parametrize("case, words", [
    ("deep-json", "nested too deeply"),
    ("warning-then-error", r"block 0 op 1 \(matmul_v2\): matmul_v2: X's last dim 3 differs from Y's second-to-last 5"),
    ("cyclic-sub-block", r"blocks\[1\]\.ops\[0\] \(conditional_block\).*cycle \(0 -> 1 -> 0\)"),
    ("truncated-params", r"params .*p\.npz' is truncated or corrupted"),
    ("huge-header-params", r"params .*p\.npz'.*'w'"),
])
def test_run_bad_file_in_a_subprocess_is_one_line_and_exit_2(tmp_path, case, words):
    if case == "deep-json":
        (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
        argv = [str(tmp_path / "deep.json")]
    elif case == "cyclic-sub-block":
        argv = _cyclic(tmp_path)
    elif case == "warning-then-error":
        argv = _warns_then_fails(tmp_path)
    elif case == "huge-header-params":  # a header claiming 400 GB: refused before allocating
        import zipfile
        with zipfile.ZipFile(tmp_path / "p.npz", "w") as z, z.open("w.npy", "w") as e:
            np.lib.format.write_array_header_1_0(e, {"descr": "<f4", "fortran_order": False,
                                                     "shape": (100000, 1000000)})
            e.write(b"\0" * 64)
        argv = [_record(tmp_path), "--params", str(tmp_path / "p.npz")]
    else:
        np.savez(tmp_path / "p.npz", w=np.zeros(1000))
        (tmp_path / "p.npz").write_bytes((tmp_path / "p.npz").read_bytes()[:300])
        argv = [_record(tmp_path), "--params", str(tmp_path / "p.npz")]
    r = subprocess.run([sys.executable, "-m", "refimpl.cli", "run"] + argv, capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("refimpl run: InvalidArgument: ") and re.search(words, lines[0]), lines[0]


@pytest.mark.parametrize("changes, words", [
    ({"feeds": [{"x": {"dtype": "float32", "shape": [2, 3], "data": [1.0]}}]}, r"feeds\[0\]\.x: 1 values do not fill"),
    ({"feeds": [{"x": {"dtype": ["float32"], "shape": [2, 3], "data": [0.5] * 6}}]}, r"feeds\[0\]\.x\.dtype"),
    ({"feeds": [{"x": {"dtype": "float32", "shape": [2, True], "data": [0.5] * 2}}]}, r"feeds\[0\]\.x\.shape"),
    ({"feeds": [{"x": {"dtype": "float32", "shape": [2, 3], "data": [1e308] * 6}}]}, r"feeds\[0\]\.x\.data.*fit"),
    ({"feeds": [{"x": {"dtype": "float32", "shape": [6], "data": [[0.5]] * 6}}]}, r"feeds\[0\]\.x\.data.*flat"),
    ({"feeds": {"x": 1}}, "feeds: expected a list"),
    ({"feeds": [[1, 2]]}, r"feeds\[0\]: expected an object"),
    ({"initial_persistables": [1]}, "initial_persistables: expected an object"),
    ({"initial_persistables": {"fc_0.w_0": {"dtype": "float32"}}}, r"initial_persistables\.fc_0\.w_0: expected an array"),
    ({"loss_name": ["mean_0.tmp_0"]}, "loss_name: expected a variable name"),
    ({"startup": [1]}, r"startup: malformed program/v1 program at <root>"),
    ({"main": {"blocks": [{"ops": [{"type": "relu", "inputs": {"X": ["x"]}, "attrs": {"op_role": True}}]}]}},
     r"main: malformed program/v1 program at blocks\[0\]\.ops\[0\] \(relu\)\.attrs\.op_role"),
])
def test_run_bad_record_entries_are_typed_and_name_the_entry(tmp_path, capsys, changes, words):
    assert main(["run", _record(tmp_path, **changes)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("refimpl run: InvalidArgument: "), captured.err
    assert re.search(words, lines[0]), lines[0]



# ---- refimpl demo --model ------------------------------------------------------------------------
def test_demo_help_names_the_models(capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--help"])
    assert e.value.code == 0
    assert "--model {mlp,gpt}" in capsys.readouterr().out


def test_demo_unknown_model_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--model", "rnn"])
    assert e.value.code == 2 and "invalid choice: 'rnn'" in capsys.readouterr().err


def test_demo_mlp_defaults_stay_the_same(capsys):
    assert main(["demo", "--steps", "3", "--quiet-program"]) == 0
    assert "3 steps, batch 32, MLP 16-64-64-4" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["--steps", "0"], "--steps must be >= 1, got 0"),
    (["--model", "gpt", "--batch", "-1"], "--batch must be >= 1, got -1"),
    (["--model", "gpt", "--hidden", "7"], "--hidden must be even with --model gpt (2 attention heads), got 7"),
])
def test_demo_bad_sizes_are_one_typed_line_and_exit_2(argv, words, capsys):
    assert main(["demo", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"refimpl demo: InvalidArgument: {words}\n" and captured.out == ""


def test_demo_gpt_small_run(capsys):
    assert main(["demo", "--model", "gpt", "--steps", "4", "--batch", "2", "--hidden", "8", "--quiet-program"]) == 0
    out = capsys.readouterr().out
    assert "4 steps, batch 2 x 32 characters" in out and "GPT 2 layers dim 8 heads 2" in out
    assert "=== the main program" not in out and "\nsample:\nFirst Citizen:\n" in out


@pytest.mark.parametrize("argv, option", [
    (["schedule", "1F1B", "--stages", "2", "--micro-batches", "4", "--plot"], "--plot"),
    (["schedule", "1F1B", "--stages", "2", "--micro-batches", "4", "--trace"], "--trace"),
    (["trace", "--steps", "1", "--json"], "--json"),
    (["trace", "--steps", "1", "--png"], "--png")])
def test_an_output_into_a_missing_folder_is_one_line_before_anything_runs(argv, option, tmp_path, capsys):
    path = str(tmp_path / "no_such_folder" / "out.file")
    assert main(argv + [path]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"refimpl {argv[0]}: {option} {path}: the folder {tmp_path / 'no_such_folder'} does not exist (create it first)"]
    assert captured.out == ""   # nothing ran


def test_trace_table_columns_align_whatever_the_op_names(tmp_path, capsys):
    """The memory table's numbers end in the header's columns, also after ``softmax_with_cross_entropy_grad``."""
    assert main(["trace", "--steps", "1", "--table", "--json", str(tmp_path / "t.json"), "--png", ""]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("#  op"))
    ends = [header.index(word) + len(word) for word in ("alloc", "live", "after GC")]
    rows = [re.match(r"\s*\d+  (\S+) +(\d+) +(\d+) +(\d+)", line) for line in lines[lines.index(header) + 1:]]
    rows = [m for m in rows if m]
    assert len(rows) > 20 and any(len(m.group(1)) > 24 for m in rows)
    for m in rows:
        assert [m.end(2), m.end(3), m.end(4)] == ends, m.group(0)
