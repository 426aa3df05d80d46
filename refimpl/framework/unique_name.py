"""Unique names: ``fc_0``, ``fc_0.w_0``, ``tmp_3``.

Mirrors ``paddle.utils.unique_name``: a generator keeps one counter per key
and ``generate(key)`` returns ``f"{key}_{n}"``. ``guard()`` swaps in a fresh
generator for the duration of a ``with`` block, which is how the oracle
programs get names that start from 0. The generator is per thread, so
in-process ranks (threads) name their programs as separate processes would.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Optional, Union


class UniqueNameGenerator:
    def __init__(self, prefix: str = "") -> None:
        self.ids = {}
        self.prefix = prefix

    def __call__(self, key):
        n = self.ids.get(key, 0)
        self.ids[key] = n + 1
        return f"{self.prefix}{key}_{n}"


_local = threading.local()  # one generator per thread: in-process ranks build programs side by side


def _generator():
    g = getattr(_local, "generator", None)
    if g is None:
        g = _local.generator = UniqueNameGenerator()
    return g


def generate(key: str) -> str:
    """A new unique name with the given key, e.g. ``generate("fc") -> "fc_0"``."""
    return _generator()(key)


def generate_with_ignorable_key(key: str) -> str:
    return _generator()(key)


def switch(new_generator: Optional[UniqueNameGenerator] = None) -> UniqueNameGenerator:
    """Install ``new_generator`` (a fresh one if None); return the old one."""
    old = _generator()
    _local.generator = new_generator if new_generator is not None else UniqueNameGenerator()
    return old


@contextlib.contextmanager
def guard(new_generator: Union[UniqueNameGenerator, str, None] = None) -> Iterator[None]:
    """Use a fresh (or the given) generator inside the block."""
    if isinstance(new_generator, str):
        new_generator = UniqueNameGenerator(new_generator)
    old = switch(new_generator)
    try:
        yield
    finally:
        switch(old)
