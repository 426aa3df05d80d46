"""The compatibility suite: Paddle scripts, unmodified, print on refimpl what Paddle 3.3.1 printed.

Every ``tests/compat/scripts/<letter>_<topic>.py`` is a small Paddle static
script written with ``import paddle`` only. Its expected stdout,
``tests/compat/expected/<same name>.txt``, was recorded with real Paddle::

    cd tests/compat/scripts && FLAGS_enable_pir_api=0 /tmp/pd33/bin/python X.py > ../expected/X.txt

(Paddle 3.3.1, CPU wheel, legacy IR). Here each script runs in its own
interpreter through the import hook (``python -m refimpl.compat X.py``, cwd =
the scripts folder, as when it was recorded) with a timeout, and its stdout
must equal the recording exactly; stderr is not compared. A mismatch shows a
unified diff (expected = Paddle, actual = refimpl) and the end of stderr.
"""
import difflib
import os
import pathlib
import subprocess
import sys
from typing import Optional

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "compat" / "scripts"
EXPECTED = ROOT / "tests" / "compat" / "expected"
TIMEOUT_S = 180
# what each script prefix covers: namespaces, Variable/Program API, fleet, data sets, static save/load,
# modes, convolutions, norms, extra layers and metrics, the random generator
TOPICS = ("N", "V", "F", "D", "S", "M", "C", "G", "X", "R")
RECORD = "cd tests/compat/scripts && FLAGS_enable_pir_api=0 /tmp/pd33/bin/python {0}.py > ../expected/{0}.txt"


def scripts(folder: pathlib.Path = SCRIPTS) -> list:
    return sorted(folder.glob("*.py"))


def run_on_refimpl(script: pathlib.Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """``python -m refimpl.compat script`` in the script's folder; a hang is a TimeoutExpired."""
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "refimpl.compat", script.name], cwd=script.parent,
                          capture_output=True, text=True, env=env, timeout=timeout)


def mismatch(script: pathlib.Path, expected: pathlib.Path, timeout: float = TIMEOUT_S) -> Optional[str]:
    """None when the script prints on refimpl exactly ``expected``'s text; else a readable report."""
    if not expected.is_file():
        return f"{script.name}: no recorded output {expected}; record it with Paddle:\n  " + RECORD.format(script.stem)
    try:
        res = run_on_refimpl(script, timeout)
    except subprocess.TimeoutExpired:
        return f"{script.name}: still running after {timeout:g}s on refimpl"
    want = expected.read_text(encoding="utf-8")
    if res.returncode == 0 and res.stdout == want:
        return None
    diff = "".join(difflib.unified_diff(want.splitlines(keepends=True), res.stdout.splitlines(keepends=True),
                                        fromfile=f"Paddle 3.3.1: {expected.name}",
                                        tofile=f"refimpl: {script.name}"))
    status = f"exit status {res.returncode}" if res.returncode else "exit status 0"
    return (f"{script.name}: stdout differs from the Paddle recording ({status})\n{diff or '(stdout equal)'}\n"
            f"--- stderr (end) ---\n{res.stderr[-3000:]}")


@pytest.mark.parametrize("script", scripts(), ids=lambda p: p.stem)
def test_script_prints_what_paddle_printed(script):
    problem = mismatch(script, EXPECTED / f"{script.stem}.txt")
    assert problem is None, problem


def test_every_recording_has_its_script_and_names_follow_the_owner_prefixes():
    stems = {p.stem for p in scripts()}
    orphans = sorted(p.name for p in EXPECTED.glob("*.txt") if p.stem not in stems)
    assert not orphans, f"recorded outputs without a script: {orphans}"
    badly_named = sorted(s for s in stems if s.split("_")[0] not in TOPICS)
    assert not badly_named, f"scripts are named <{'|'.join(TOPICS)}>_<topic>.py: {badly_named}"
    assert len(stems) >= 5


# ---- the runner itself -------------------------------------------------------------------------
def test_runner_reports_a_diff_a_crash_a_missing_recording_and_a_hang(tmp_path):
    script = tmp_path / "N_fake.py"
    script.write_text("import paddle\nprint(paddle.__name__)\nprint('two')\n")
    expected = tmp_path / "N_fake.txt"
    expected.write_text("refimpl\ntwo\n")
    assert mismatch(script, expected) is None          # `paddle` is refimpl under the hook
    expected.write_text("paddle\ntwo\n")
    report = mismatch(script, expected)
    assert "-paddle\n" in report and "+refimpl\n" in report and "Paddle 3.3.1: N_fake.txt" in report
    script.write_text("import paddle\nprint(paddle.__name__)\nprint('two')\nimport paddle.no_such_module\n")
    expected.write_text("refimpl\ntwo\n")
    report = mismatch(script, expected)
    assert "exit status 1" in report and "paddle.no_such_module is not implemented by refimpl" in report
    assert "record it with Paddle" in mismatch(script, tmp_path / "missing.txt")
    script.write_text("import time\ntime.sleep(30)\n")
    assert "still running after 3s" in mismatch(script, expected, timeout=3)


def test_aliased_modules_keep_their_own_spec():
    """importlib sets ``__spec__`` of what an alias import returns; the hook puts refimpl's back."""
    code = ("import importlib, refimpl.compat as c, refimpl.static\n"
            "c.install()\n"
            "import paddle.static\n"
            "assert paddle.static is refimpl.static\n"
            "assert refimpl.static.__spec__.name == 'refimpl.static', refimpl.static.__spec__\n"
            "c.uninstall()\n"
            "assert importlib.reload(refimpl.static).__spec__.name == 'refimpl.static'\n"
            "print('ok')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0 and res.stdout == "ok\n", res.stderr[-2000:]
