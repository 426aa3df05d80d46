"""The global random state that random ops draw from.

Mirrors Paddle's global generator (``paddle.seed``): an op whose ``seed``
attr is 0 (``uniform_random``, ``gaussian_random``, ``dropout`` without a
``Seed`` input) draws from here; a non-zero seed makes the op use its own
generator instead. The numbers differ from Paddle's (a different engine);
only determinism is mirrored: after ``seed(n)`` the k-th draw is always the
same, whatever the earlier draws were, because every call to
:func:`next_generator` gets its own stream spawned from one ``SeedSequence``.

The state is per thread: in-process ranks are threads, and each behaves like
a process of its own (seeding one rank does not disturb another's draws).
"""
import threading

import numpy as np

_local = threading.local()


def _state():
    st = getattr(_local, "state", None)
    if st is None:
        st = _local.state = {"seq": np.random.SeedSequence(), "seed": None}
    return st


def seed(n):
    """Reset this thread's random state to seed ``n``; returns ``n``."""
    n = int(n)
    _local.state = {"seq": np.random.SeedSequence(n & 0xFFFFFFFFFFFFFFFF), "seed": n}
    return n


def get_seed():
    """The last seed given to :func:`seed` in this thread (None if never seeded)."""
    return _state()["seed"]


def next_generator():
    """A fresh ``numpy.random.Generator`` for one op run, the next in sequence."""
    (child,) = _state()["seq"].spawn(1)
    return np.random.default_rng(child)


def generator_for(op_seed):
    """The generator for an op with attr ``seed``: its own when non-zero, else the global one."""
    if op_seed:
        return np.random.default_rng(int(op_seed) & 0xFFFFFFFFFFFFFFFF)
    return next_generator()
