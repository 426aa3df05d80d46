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

Checkpoints carry the state (Paddle keeps it apart, in
``paddle.get_rng_state`` / ``paddle.set_rng_state``): :func:`get_state`
gives it as a few small integer arrays (the ``SeedSequence``'s entropy,
spawn key, pool size, the number of streams spawned so far, and the seed),
:func:`check_state` validates such arrays read from a file and
:func:`set_state` restores them, so that the draws after a resume are the
draws that would have come without stopping. An op with a non-zero seed
(attr or ``Seed`` input) makes a fresh generator from it at every run, so it
has no state to save.
"""
import threading
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from refimpl.core.errors import InvalidArgument, NotFound

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


def device_states(n: int) -> List[Dict[str, Any]]:
    """States for ``n`` devices run from this thread, each a copy of one child of this thread's stream.

    Paddle's ``paddle.seed`` seeds every device's generator alike, so the places of one data-parallel
    step draw the same numbers (``paddle/phi/core/generator.cc``). Each call advances this thread's
    state by one draw, so the next step's devices draw anew and a checkpoint of this thread's state
    also fixes what the devices will draw after a resume.
    """
    (child,) = _state()["seq"].spawn(1)
    seed_value = _state()["seed"]
    return [{"seq": np.random.SeedSequence(child.entropy, spawn_key=child.spawn_key, pool_size=child.pool_size),
             "seed": seed_value} for _ in range(n)]


# ---- the state a checkpoint carries ----------------------------------------------------------
def get_state() -> Dict[str, np.ndarray]:
    """This thread's random state as ``{key: small integer array}`` (see :func:`set_state`)."""
    st = _state()
    seq, n = st["seq"], st["seed"]
    entropy = int(seq.entropy)
    words = [(entropy >> (32 * i)) & 0xFFFFFFFF for i in range(max(1, (entropy.bit_length() + 31) // 32))]
    fits = n is not None and -2 ** 63 <= n < 2 ** 63
    return {"entropy": np.array(words, np.uint32), "spawn_key": np.array(seq.spawn_key, np.int64),
            "pool_size": np.array(seq.pool_size, np.int64),
            "n_children_spawned": np.array(seq.n_children_spawned, np.int64),
            "seed": np.array([n] if fits else [], np.int64)}


def _entry(state: Mapping[str, Any], key: str, where: str, prefix: str, ndim: int) -> np.ndarray:
    if key not in state:
        raise NotFound(f"random state entry {prefix + key!r} is missing from {where}")
    a = np.asarray(state[key])
    if a.dtype.kind not in "iu" or a.ndim != ndim or (a.size and a.min() < 0):
        raise InvalidArgument(f"random state entry {prefix + key!r} in {where} must be a {ndim}-d array of "
                              f"non-negative integers, got dtype {a.dtype} shape {list(a.shape)}")
    return a


def check_state(state: Mapping[str, Any], where: str, prefix: str = "") -> Dict[str, Any]:
    """Validate arrays read from ``where`` (named in messages, with each entry as ``prefix + key``).

    Returns the state :func:`set_state` takes; nothing is changed here.
    """
    words = _entry(state, "entropy", where, prefix, 1)
    key = _entry(state, "spawn_key", where, prefix, 1)
    pool = int(_entry(state, "pool_size", where, prefix, 0))
    spawned = int(_entry(state, "n_children_spawned", where, prefix, 0))
    seed_arr = np.asarray(state.get("seed", np.array([], np.int64)))
    if seed_arr.dtype.kind not in "iu" or seed_arr.ndim != 1 or seed_arr.size > 1:
        raise InvalidArgument(f"random state entry {prefix + 'seed'!r} in {where} must hold zero or one "
                              f"integer, got dtype {seed_arr.dtype} shape {list(seed_arr.shape)}")
    if not words.size or words.max() > 0xFFFFFFFF or pool < 4:
        raise InvalidArgument(f"random state entries {prefix + 'entropy'!r} / {prefix + 'pool_size'!r} in "
                              f"{where}: entropy must be 32-bit words and pool_size >= 4")
    entropy = sum(int(w) << (32 * i) for i, w in enumerate(words))
    seq = np.random.SeedSequence(entropy, spawn_key=tuple(int(k) for k in key), pool_size=pool,
                                 n_children_spawned=spawned)
    seed_value: Optional[int] = int(seed_arr[0]) if seed_arr.size else None
    return {"seq": seq, "seed": seed_value}


def set_state(state: Mapping[str, Any], where: str = "the given state") -> None:
    """Restore a state from :func:`get_state` (or :func:`check_state`) in this thread."""
    _local.state = dict(state) if isinstance(state.get("seq"), np.random.SeedSequence) \
        else check_state(state, where)
