"""``refimpl.hapi.progressbar.ProgressBar`` against what Paddle 2.6.2's ``paddle.hapi.progressbar``
printed for the same updates (only the timings differ from run to run)."""
import contextlib
import io
import re
import subprocess
import sys

import numpy as np
import pytest

from refimpl.core.errors import InvalidArgument
from refimpl.hapi.progressbar import ProgressBar

TIME = r"\d+(us|ms|s)/step"


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_bar_line_is_paddles():
    # Paddle 2.6.2, ProgressBar(20).update(2, [('loss', 1.0), ('acc', 0.5)]) then .update(20, [('loss', 0.1)]):
    #   step  2/20 [==>...........................] - loss: 1.0000 - acc: 0.5000 - ETA: 0s - 3us/step
    #   step 20/20 [==============================] - loss: 0.1000 - 7us/step
    out = Terminal()
    bar = ProgressBar(20, file=out)
    bar.update(2, [("loss", 1.0), ("acc", 0.5)])
    bar.update(20, [("loss", 0.1)])
    first, last = out.getvalue().split("\r")[1:]
    assert re.fullmatch(r"step  2/20 \[==>\.{27}\] - loss: 1\.0000 - acc: 0\.5000 - ETA: 0s - " + TIME, first)
    assert re.fullmatch(r"step 20/20 \[={30}\] - loss: 0\.1000 - " + TIME + r" *\n", last)


def test_verbose_2_lines_are_paddles():
    # Paddle 2.6.2: ProgressBar(5, verbose=2).update(3, [('loss', 1e-5)]) printed
    #   step 3/5 - loss: 1.0000e-05 - 2us/step
    # and ProgressBar(None, verbose=2).update(3, [('loss', [1.5, 2.5])]) printed
    #   step   3 - loss: 1.5000 2.5000 - 1us/step
    out = io.StringIO()
    ProgressBar(5, verbose=2, file=out).update(3, [("loss", 1e-5)])
    ProgressBar(None, verbose=2, file=out).update(3, [("loss", [1.5, 2.5])])
    a, b = out.getvalue().splitlines()
    assert re.fullmatch(r"step 3/5 - loss: 1\.0000e-05 - " + TIME, a)
    assert re.fullmatch(r"step   3 - loss: 1\.5000 2\.5000 - " + TIME, b)


def test_off_a_terminal_a_line_per_tenth():
    out = io.StringIO()
    bar = ProgressBar(100, file=out)
    for i in range(1, 101):
        bar.update(i, [("loss", np.float32(1.0 / i))])
    lines = out.getvalue().splitlines()
    steps = [int(re.match(r"step +(\d+)/100", line).group(1)) for line in lines]
    assert steps == [1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert lines[-1].startswith("step 100/100 [" + "=" * 30 + "] - loss: 0.0100 - ")


def test_a_terminal_redraws_one_line_and_ends_it():
    out = Terminal()
    bar = ProgressBar(3, file=out)
    for i in (1, 2, 3):
        bar.update(i, [("loss", 0.5)])
    text = out.getvalue()
    assert text.count("\r") == 3 and text.count("\n") == 1 and text.endswith("\n")


@pytest.mark.parametrize("kwargs, words", [({"num": 0}, "num"), ({"num": 2.5}, "num"), ({"verbose": 7}, "verbose"),
                                           ({"width": 0}, "width must be an int >= 1, got 0"),
                                           ({"width": 2.5}, "width must be an int >= 1, got 2.5"),
                                           ({"width": True}, "width must be an int >= 1, got True")])
def test_bad_arguments_are_typed(kwargs, words):
    with pytest.raises(InvalidArgument, match=f"ProgressBar: {words}"):
        ProgressBar(**kwargs)


def test_default_file_is_the_stdout_of_each_write():
    bar = ProgressBar(3, verbose=2)
    first, second = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(first):
        bar.update(1, [("loss", 0.5)])
    with contextlib.redirect_stdout(second):
        bar.update(2, [("loss", 0.25)])
    assert re.fullmatch(r"step 1/3 - loss: 0.5000 - " + TIME + "\n", first.getvalue())
    assert second.getvalue().startswith("step 2/3 - loss: 0.2500")


def test_paddle_path_imports_under_the_compat_hook(tmp_path):
    script = tmp_path / "bar.py"
    script.write_text("from paddle.hapi.progressbar import ProgressBar\n"
                      "import paddle.hapi\n"
                      "ProgressBar(2, verbose=2).update(2, [('loss', 1.5)])\n"
                      "print(ProgressBar.__module__, paddle.hapi.ProgressBar is ProgressBar)\n")
    done = subprocess.run([sys.executable, "-m", "refimpl.compat", str(script)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch("step 2/2 - loss: 1.5000 - " + TIME, lines[0]) and lines[1] == "refimpl.hapi.progressbar True"
