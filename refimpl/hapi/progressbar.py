"""A training progress bar: ``paddle.hapi.progressbar.ProgressBar``.

Mirrors ``python/paddle/hapi/progressbar.py``:
``ProgressBar(num, width=30, verbose=1, start=True, file=None, name="step")``
and ``update(current_num, values)`` with ``values`` a list of ``(name, value)``
pairs, drawing Paddle's line::

    step  40/200 [=====>........................] - loss: 2.3456 - ETA: 3s - 21ms/step

``verbose=1`` redraws that bar in place; ``verbose=2`` writes one plain line
(``step  40/200 - loss: 2.3456 - 21ms/step``) per update.

Differences from Paddle: the bar is written to ``file``, by default the
``sys.stdout`` of the moment of each write (Paddle's default is the
``sys.stdout`` of import time, and its bar mode always writes to
``sys.stdout``); ``width`` is checked (an int >= 1); when ``file`` is not a terminal the bar is
written as a whole line only when it reaches another tenth of ``num`` (and at
``num``), so a log or a captured test output stays short, where Paddle writes
a line per update; the width is not capped by the terminal's; bf16 losses
(``uint16`` bit patterns) are not decoded.
"""
import sys
import time
from typing import Any, Iterable, Optional, Sequence, TextIO, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

__all__ = ["ProgressBar"]


def _number(v: Any) -> str:
    """Paddle's value format: 4 decimals, or scientific notation below 1e-3."""
    if isinstance(v, np.ndarray) and v.size == 1:
        v = v.item()
    if isinstance(v, (float, np.floating)):
        return f"{v:.4f}" if abs(v) > 1e-3 else f"{v:.4e}"
    return str(v)


def _per_unit(seconds: float, name: str) -> str:
    if seconds >= 1 or seconds == 0:
        return f" - {seconds:.0f}s/{name}"
    if seconds >= 1e-3:
        return f" - {seconds * 1e3:.0f}ms/{name}"
    return f" - {seconds * 1e6:.0f}us/{name}"


def _eta(seconds: float) -> str:
    if seconds > 3600:
        return "%d:%02d:%02d" % (seconds // 3600, (seconds % 3600) // 60, seconds % 60)
    if seconds > 60:
        return "%d:%02d" % (seconds // 60, seconds % 60)
    return "%ds" % seconds


class ProgressBar:
    """A bar of ``num`` steps (or a counter when ``num`` is None) with named values."""

    def __init__(self, num: Optional[int] = None, width: int = 30, verbose: int = 1, start: bool = True,
                 file: Optional[TextIO] = None, name: str = "step") -> None:
        if num is not None and (not isinstance(num, int) or num <= 0):
            raise InvalidArgument(f"ProgressBar: num should be None or an integer > 0, got {num!r}")
        if verbose not in (0, 1, 2, 3):
            raise InvalidArgument(f"ProgressBar: verbose must be 0, 1, 2 or 3, got {verbose!r}")
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise InvalidArgument(f"ProgressBar: width must be an int >= 1, got {width!r}")
        self._num, self._width, self._verbose = num, width, verbose
        self._file, self.name = file, name
        self._start = time.time() if start else None
        self._drawn = 0          # characters of the bar now on a terminal line
        self._last_tenth = -1    # the tenth of ``num`` last written off a terminal

    @property
    def file(self) -> TextIO:
        """Where the bar is written: the ``file`` given, else the current ``sys.stdout``."""
        return sys.stdout if self._file is None else self._file

    def start(self) -> None:
        """Start (or restart) the clock the per-step time and ETA are measured from."""
        self.file.flush()
        self._start = time.time()

    def _values(self, values: Iterable[Tuple[str, Any]]) -> str:
        out = ""
        for k, val in values:
            out += f" - {k}:" + "".join(" " + _number(v) for v in (val if isinstance(val, list) else [val]))
        return out

    def _count(self, current: int) -> str:
        if self._num is None:
            return f"{self.name} {current:3d}"
        digits = len(str(self._num))
        return f"{self.name} {current:{digits}d}/{self._num}"

    def _bar(self, current: int) -> str:
        if self._num is None:
            return self._count(current)
        filled = int(self._width * min(current, self._num) / self._num)
        arrow = ("=" * (filled - 1) + (">" if current < self._num else "=")) if filled > 0 else ""
        return f"{self._count(current)} [{arrow}{'.' * (self._width - filled)}]"

    def update(self, current_num: int, values: Sequence[Tuple[str, Any]] = ()) -> None:
        """Show step ``current_num`` with ``values`` (``[("loss", 2.31), ...]``)."""
        if self._start is None:
            self._start = time.time()
        per = (time.time() - self._start) / current_num if current_num else 0.0
        if self._verbose in (2, 3):
            self.file.write(self._count(current_num) + self._values(values) + _per_unit(per, self.name) + "\n")
        elif self._verbose == 1:
            self._draw(current_num, values, per)
        self.file.flush()

    def _draw(self, current: int, values: Sequence[Tuple[str, Any]], per: float) -> None:
        line = self._bar(current) + self._values(values)
        if self._num is not None and current < self._num:
            line += " - ETA: " + _eta(per * (self._num - current))
        line += _per_unit(per, self.name)
        done = self._num is None or current >= self._num
        if getattr(self.file, "isatty", lambda: False)():
            self.file.write("\r" + line + " " * max(0, self._drawn - len(line)) + ("\n" if done else ""))
            self._drawn = 0 if done else len(line)
            return
        tenth = 10 if self._num is None else int(10 * min(current, self._num) / self._num)
        if done or tenth != self._last_tenth:
            self.file.write(line + "\n")
            self._last_tenth = tenth
