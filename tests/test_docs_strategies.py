"""``docs/strategies.md`` tells the truth: every Python snippet followed by a ``text`` block prints it.

Each snippet runs in its own process in a scratch directory (a snippet starting ``# continued``
runs after the one before it and must end with its text; ``# fleet_show.py`` is saved under that
name for the snippets that import it; one that names ``REFIMPL_BACKEND=cuda`` runs on the CUDA
kernel set under numba's simulator). Fragments that are not whole programs (they start indented)
are skipped.
"""
import os
import re
import subprocess
import sys

import pytest

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "docs", "strategies.md")


def _pairs():
    blocks = re.findall(r"```(\w+)\n(.*?)```", open(PAGE).read(), re.S)
    pairs, prev = [], ""
    for i, (lang, body) in enumerate(blocks):
        if lang != "python":
            continue
        if body.startswith("# continued"):
            body = prev + body
        prev = body
        if i + 1 < len(blocks) and blocks[i + 1][0] == "text" and not body.startswith(" "):
            pairs.append((body, blocks[i + 1][1]))
    return pairs


PAIRS = _pairs()


def test_the_page_has_snippets():
    assert len(PAIRS) >= 8


@pytest.mark.parametrize("k", range(len(PAIRS)))
def test_snippet_prints_what_the_page_says(tmp_path, k):
    for n, (code, _) in enumerate(PAIRS):  # a later snippet may import fleet_show.py
        if code.startswith("# fleet_show.py"):
            (tmp_path / "fleet_show.py").write_text(code)
    code, want = PAIRS[k]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if "REFIMPL_BACKEND=cuda" in code:
        pytest.importorskip("numba")
        env.update(NUMBA_ENABLE_CUDASIM="1", REFIMPL_BACKEND="cuda")
    (tmp_path / "snippet.py").write_text(code)
    out = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=600).stdout
    if code.lstrip().startswith("# continued") or "# continued" in code:
        assert out.strip().endswith(want.strip()), out
    else:
        assert out.strip() == want.strip(), out


def _example_block():
    """(the commands of the page's ``bash`` block that runs examples/fleet_strategies.py with --tp, the
    ``text`` block after it)."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", open(PAGE).read(), re.S)
    for (lang, body), (nxt, text) in zip(blocks, blocks[1:]):
        if lang == "bash" and "--tp 2 --ranks 2" in body and nxt == "text":
            return body, text
    raise AssertionError("the page has no bash block running fleet_strategies.py --tp 2 --ranks 2")


def _no_times(text):
    """The rows without their step times (they vary from run to run; the page says so)."""
    return re.sub(r"step +[0-9.]+ ms \( *[0-9.]+x\)", "step <time>", text).strip()


def test_the_gpt_tp_and_sharding_rows_are_the_examples():
    """The page's GPT-mini rows under --tp 2, --sharding 4 and --tp 2 --sharding 2 are what the example
    prints (the block's ``python`` commands, run here; the step times aside)."""
    commands, want = _example_block()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    got = []
    for line in commands.strip().splitlines():
        argv = line.split()
        if argv[0] != "python":   # mpiexec: tests/test_fleet_strategies_parallel.py runs it
            continue
        out = subprocess.run([sys.executable, *argv[1:]], cwd=root, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=600).stdout
        got.append("\n".join(out.strip().splitlines()[-2:]))
    assert _no_times("\n".join(got)) == _no_times(want)
