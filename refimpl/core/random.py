"""Paddle's CPU random generator and the distributions its CPU kernels draw from, bit for bit.

Mirrors ``paddle/phi/core/generator.cc`` and the CPU kernels of the random ops:

* One global generator holds a ``std::mt19937_64`` engine (:mod:`refimpl.core.mt19937_64`).
  :func:`seed` (``paddle.seed``) reseeds it as ``Generator::SetCurrentSeed`` does, through
  ``std::seed_seq({seed})`` (which keeps only the seed's low 32 bits). An op whose ``seed`` attr
  is 0 draws from it, one engine word after another; an op with a non-zero seed makes a fresh
  engine seeded directly (``engine.seed(seed)``) at every run (:func:`engine_for`).
* :func:`uniform` is ``std::uniform_real_distribution<T>`` of libstdc++: one 64-bit word per
  number, ``generate_canonical`` (the word converted to T, rounded to nearest, times 2**-64, a
  result of 1 clamped to the largest T below 1), then ``u * (b - a) + a`` in T. Paddle passes
  the bounds as float, also for a double output.
* :func:`normal` is ``std::normal_distribution<T>``: Marsaglia's polar method on pairs of
  ``2u - 1`` (rejected pairs consume their two words too), first ``y * mult`` then the saved
  ``x * mult``; a new distribution object per kernel call, so an odd count drops the last saved
  value. Paddle passes mean and std as float; ``log`` is the C library's (:mod:`refimpl.core.libm`).
* :func:`truncated_normal` is Paddle's ``TruncatedNormal``: the inverse normal CDF (Paddle's own
  ``Erfinv``) of one ``uniform_real_distribution<T>(FLT_MIN, 1)`` draw per number, with the
  float/double promotions of the C++ expressions.
* :func:`dropout_keep` is the CPU dropout kernel's mask: one uniform float per element, kept when
  not below ``dropout_prob``.

The generator is per thread: in-process ranks are threads, and each behaves like a process of
its own (seeding one rank does not disturb another's draws). Paddle's GPU kernels draw from a
Philox generator instead (``seed`` + ``offset``); refimpl's CUDA kernels generate on the host with
these NumPy kernels, so refimpl's GPU numbers are Paddle's CPU numbers.

:class:`Generator` is what ``paddle.seed`` returns (``manual_seed``, ``initial_seed``, ``random``,
``get_state`` / ``set_state``); :func:`get_rng_state` / :func:`set_rng_state` are Paddle's, with one
state (the CPU generator's; :func:`get_cuda_rng_state` is empty, as on Paddle's CPU build).
Checkpoints also carry the state (Paddle keeps it apart, in ``paddle.get_rng_state``):
:func:`get_state` gives the engine's 312 words, its position and the seed; :func:`check_state`
validates such arrays read from a file and :func:`set_state` restores them, so the draws after a
resume are the draws that would have come without stopping. States written by refimpl before it
had Paddle's engine (NumPy ``SeedSequence`` entries) are refused with a typed error.
"""
import math
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from refimpl.core import libm
from refimpl.core.errors import InvalidArgument, NotFound
from refimpl.core.mt19937_64 import MT19937_64, N_WORDS

__all__ = ["Generator", "GeneratorState", "seed", "get_seed", "default_cpu_generator", "get_rng_state",
           "set_rng_state", "get_cuda_rng_state", "set_cuda_rng_state", "engine_for", "canonical", "uniform",
           "normal", "truncated_normal", "dropout_keep", "generator_for", "next_generator", "device_states",
           "get_state", "check_state", "set_state"]

_MASK64 = (1 << 64) - 1
_local = threading.local()


class GeneratorState:
    """A snapshot of a :class:`Generator` (an item of ``paddle.get_rng_state()``)."""

    def __init__(self, engine: MT19937_64, seed_value: int):
        self._engine, self._seed = engine.copy(), seed_value

    def current_seed(self) -> int:
        return self._seed


def _random_seed() -> int:
    """A 53-bit seed from the OS, as Paddle's generator takes one when none is given."""
    return int(np.random.SeedSequence().entropy) & 0x1FFFFFFFFFFFFF


class Generator:
    """A ``phi::Generator`` on the CPU (what ``paddle.seed`` returns): an engine and its seed.

    ``explicit`` tells whether the seed was given (:func:`seed`) rather than taken from the OS.
    """

    def __init__(self, seed_value: Optional[int] = None):
        self.engine = MT19937_64.__new__(MT19937_64)
        self.manual_seed(_random_seed() if seed_value is None else seed_value)
        self.explicit = seed_value is not None

    def manual_seed(self, n: int) -> "Generator":
        """``Generator::SetCurrentSeed``: the engine seeded through ``std::seed_seq({n})``."""
        n = int(n)
        if not 0 <= n <= _MASK64:
            raise InvalidArgument(f"paddle.seed: seed must be an integer in [0, 2**64), got {n}")
        self.engine.seed_seq([n])
        self.current, self.explicit = n, True
        return self

    def initial_seed(self) -> int:
        return self.current

    def seed(self) -> int:
        """Reseed from the OS; returns the new seed."""
        return self.manual_seed(_random_seed()).current

    def random(self) -> int:
        """The engine's next 64-bit word."""
        return int(self.engine.random_raw(1)[0])

    def get_state(self) -> GeneratorState:
        return GeneratorState(self.engine, self.current)

    def set_state(self, state: GeneratorState) -> None:
        if not isinstance(state, GeneratorState):
            raise InvalidArgument(f"Generator.set_state: expected a GeneratorState, got {type(state).__name__}")
        self.engine, self.current = state._engine.copy(), state._seed


def _state() -> Generator:
    st = getattr(_local, "state", None)
    if st is None:  # as Paddle's default generator: a random seed from the OS
        st = _local.state = Generator()
    return st


def seed(n: int) -> Generator:
    """Reseed this thread's generator as ``paddle.seed(n)`` does; returns the generator."""
    _local.shuffles = 0
    return _state().manual_seed(n)


def get_seed() -> Optional[int]:
    """The last seed given to :func:`seed` in this thread (None if never seeded)."""
    st = _state()
    return st.current if st.explicit else None


def default_cpu_generator() -> Generator:
    """This thread's generator (``paddle.base.core.default_cpu_generator()``)."""
    return _state()


def get_rng_state(device: Optional[str] = None) -> List[GeneratorState]:
    """``paddle.get_rng_state``: one state, this thread's generator's (refimpl's devices draw from it)."""
    return [_state().get_state()]


def set_rng_state(state_list: List[GeneratorState], device: Optional[str] = None) -> None:
    """``paddle.set_rng_state``: restore what :func:`get_rng_state` gave."""
    if not isinstance(state_list, (list, tuple)) or len(state_list) != 1:
        raise InvalidArgument(f"paddle.set_rng_state: the state list must hold one GeneratorState "
                              f"(refimpl has one generator), got {state_list!r}")
    _state().set_state(state_list[0])


def get_cuda_rng_state() -> List[GeneratorState]:
    """``paddle.get_cuda_rng_state``: empty, as on Paddle's CPU build (refimpl's CUDA draws are the CPU's)."""
    return []


def set_cuda_rng_state(state_list: List[GeneratorState]) -> None:
    """``paddle.set_cuda_rng_state``: only the empty list of :func:`get_cuda_rng_state` is accepted."""
    if list(state_list):
        raise InvalidArgument("paddle.set_cuda_rng_state: refimpl has no CUDA generator (its CUDA kernels "
                              f"draw from the CPU one); expected [], got {len(list(state_list))} states")


def engine_for(op_seed: int) -> MT19937_64:
    """The engine an op with attr ``seed`` draws from: the global one for 0, else a fresh one."""
    if op_seed:
        return MT19937_64(int(op_seed) & _MASK64)  # the kernel's int seed, sign-extended to 64 bits
    return _state().engine


# ---- distributions ------------------------------------------------------------------------------
def _real_type(dtype) -> type:
    """The C type a kernel computes in: double for float64, float for every other float type."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def canonical(engine: MT19937_64, n: int, dtype=np.float32) -> np.ndarray:
    """``n`` draws of ``std::generate_canonical<T, digits>``: uniform in [0, 1), one word each."""
    t = _real_type(dtype)
    u = engine.random_raw(n).astype(t) * t(2.0 ** -64)
    u[u >= 1] = np.nextafter(t(1), t(0))
    return u


def uniform(engine: MT19937_64, n: int, low: float, high: float, dtype=np.float32) -> np.ndarray:
    """``n`` draws of ``std::uniform_real_distribution<T>(low, high)`` (bounds given as float)."""
    t = _real_type(dtype)
    a, b = t(np.float32(low)), t(np.float32(high))
    return (canonical(engine, n, t) * (b - a) + a).astype(dtype, copy=False)


def _polar_pairs(engine: MT19937_64, pairs: int, t: type):
    """The accepted (x, y) pairs of the polar method; draws exactly the words C++ would."""
    xs, ys = [np.empty(0, t)], [np.empty(0, t)]
    need = pairs
    while need:  # each round draws only pairs that are surely needed: nothing is drawn too many
        u = canonical(engine, 2 * need, t)
        # ``T(2.0) * u - 1.0``: the product in T, the difference in double, stored as T
        v = (t(2) * u).astype(np.float64) - 1.0
        x, y = v[0::2].astype(t), v[1::2].astype(t)
        r2 = x * x + y * y
        ok = (r2 <= 1) & (r2 != 0)
        xs.append(x[ok])
        ys.append(y[ok])
        need -= int(ok.sum())
    return np.concatenate(xs), np.concatenate(ys)


def normal(engine: MT19937_64, n: int, mean: float, std: float, dtype=np.float32) -> np.ndarray:
    """``n`` draws of one ``std::normal_distribution<T>(mean, std)`` (mean and std given as float)."""
    t = _real_type(dtype)
    x, y = _polar_pairs(engine, (n + 1) // 2, t)
    r2 = x * x + y * y
    mult = np.sqrt(t(-2) * libm.log(r2, t) / r2)
    z = np.empty(2 * x.size, t)
    z[0::2], z[1::2] = y * mult, x * mult
    out = z[:n] * t(np.float32(std)) + t(np.float32(mean))
    return out.astype(dtype, copy=False)


# ---- truncated normal: Paddle's TruncatedNormal (paddle/phi/kernels/funcs/truncated_normal.h) ----
# Erfinv's rational approximations (Giles' coefficients, as Paddle's header lists them), highest
# power first: central |x| <= 0.85 (A / B), then r = sqrt(ln2 - log(1 - |x|)) <= 5 (C / D), else (E / F).
_ERFINV = {k: [float(v) for v in vals.split()] for k, vals in {
    "A": "887.09406962545514830200 11819.493347062294404278 23782.041382114385731252 "
         "16235.862515167575384252 4854.8868893843886794648 697.06266534389598238465 "
         "47.072688112383978012285 1.1975323115670912564578",
    "B": "5226.4952788528545610 28729.085735721942674 39307.895800092710610 21213.794301586595867 "
         "5394.1960214247511077 687.18700749205790830 42.313330701600911252 1.0",
    "C": "7.74545014278341407640e-4 2.27238449892691845833e-2 2.41780725177450611770e-1 "
         "1.27045825245236838258 3.64784832476320460504 5.76949722146069140550 "
         "4.63033784615654529590 1.42343711074968357734",
    "D": "1.4859850019840355905497876e-9 7.7441459065157709165577218e-4 2.1494160384252876777097297e-2 "
         "2.0945065210512749128288442e-1 9.7547832001787427186894837e-1 2.3707661626024532365971225 "
         "2.9036514445419946173133295 1.4142135623730950488016887",
    "E": "2.01033439929228813265e-7 2.71155556874348757815e-5 1.24266094738807843860e-3 "
         "2.65321895265761230930e-2 2.96560571828504891230e-1 1.78482653991729133580 "
         "5.46378491116411436990 6.65790464350110377720",
    "F": "2.891024605872965461538222e-15 2.010321207683943062279931e-7 2.611088405080593625138020e-5 "
         "1.112800997078859844711555e-3 2.103693768272068968719679e-2 1.936480946950659106176712e-1 "
         "8.482908416595164588112026e-1 1.414213562373095048801689"}.items()}


def _horner(coef, r, t):
    acc = t(coef[0]) * r + t(coef[1])
    for c in coef[2:]:
        acc = acc * r + t(c)
    return acc


def _erfinv(x: np.ndarray, t: type) -> np.ndarray:
    """Paddle's ``Erfinv<T>`` for x in (-1, 1): T arithmetic, double where the C++ promotes."""
    out = np.empty_like(x)
    ax = np.abs(x)
    mid = ax <= 0.85
    xm = x[mid]
    r = (0.180625 - 0.25 * xm.astype(np.float64) * xm).astype(t)
    out[mid] = xm * _horner(_ERFINV["A"], r, t) / _horner(_ERFINV["B"], r, t)
    xt = x[~mid]
    ln2 = np.float64(t(0.6931471805599453))
    r = np.sqrt(ln2 - libm.log(1.0 - np.abs(xt).astype(np.float64), np.float64)).astype(t)
    tail = np.empty_like(xt)
    near = r <= 5.0
    for sel, num, den, shift in [(near, "C", "D", 1.6), (~near, "E", "F", 5.0)]:
        rs = (r[sel].astype(np.float64) - shift).astype(t)
        tail[sel] = _horner(_ERFINV[num], rs, t) / _horner(_ERFINV[den], rs, t)
    out[~mid] = np.where(xt < 0, -tail, tail)
    return out


def _normal_cdf(v: float) -> float:
    return (1.0 + libm.erf(v / math.sqrt(2.0))) / 2.0


def truncated_normal(engine: MT19937_64, n: int, mean: float, std: float, a: float, b: float,
                     dtype=np.float32) -> np.ndarray:
    """``n`` draws of Paddle's CPU ``truncated_gaussian_random``: inverse CDF of one uniform each.

    The uniform is ``std::uniform_real_distribution<T>(FLT_MIN, 1)``; p = cdf(a) + (cdf(b) - cdf(a))
    * u in T; the value ``sqrt(2) * erfinv(2p - 1) * std + mean`` in double, stored as T, clamped
    to [a, b]. T is double for float64, float otherwise.
    """
    t = _real_type(dtype)
    mean, std, a, b = (t(np.float32(v)) for v in (mean, std, a, b))
    cdf_a, cdf_b = t(_normal_cdf(float((a - mean) / std))), t(_normal_cdf(float((b - mean) / std)))
    u = uniform(engine, n, float(np.finfo(np.float32).tiny), 1.0, t)
    p = cdf_a + (cdf_b - cdf_a) * u
    x = t(2) * p - t(1)
    e = np.full_like(x, np.nan)
    inside = (x > -1) & (x < 1)
    e[inside] = _erfinv(x[inside], t)
    e[x == 1], e[x == -1] = np.inf, -np.inf
    value = (math.sqrt(2.0) * e.astype(np.float64) * np.float64(std) + np.float64(mean)).astype(t)
    return np.clip(value, a, b).astype(dtype, copy=False)


def dropout_keep(shape: Tuple[int, ...], dropout_prob: float, op_seed: int = 0) -> np.ndarray:
    """The keep mask (bool) of Paddle's CPU dropout: element i kept when its draw is not below p.

    One ``std::uniform_real_distribution<float>(0, 1)`` draw per element in row-major order,
    compared with ``dropout_prob`` as a float; the caller handles ``dropout_prob == 1`` (no draws).
    """
    n = int(np.prod(shape, dtype=np.int64))
    return (canonical(engine_for(op_seed), n) >= np.float32(dropout_prob)).reshape(shape)


class _Draws:
    """What :func:`generator_for` gives: ``random(shape)``, Paddle's uniform floats in [0, 1)."""

    def __init__(self, engine: MT19937_64):
        self._engine = engine

    def random(self, shape) -> np.ndarray:
        shape = tuple(shape) if np.ndim(shape) else (int(shape),)
        return canonical(self._engine, int(np.prod(shape, dtype=np.int64))).reshape(shape)


def generator_for(op_seed: int) -> _Draws:
    """Draws for an op with attr ``seed`` (kept for kernels written before :func:`engine_for`)."""
    return _Draws(engine_for(op_seed))


def next_generator() -> np.random.Generator:
    """A NumPy generator for refimpl's own shuffles (``InMemoryDataset.local_shuffle``).

    Their numbers are not Paddle's, and drawing them leaves the engine alone (Paddle's shuffle does
    not touch its CPU generator either): the k-th call after ``seed(n)`` gets the stream
    ``(n, k)``; without a seed, fresh OS entropy.
    """
    st, _local.shuffles = _state(), getattr(_local, "shuffles", 0) + 1
    return np.random.default_rng([st.current & 0xFFFFFFFFFFFFFFFF, _local.shuffles] if st.explicit else None)


def device_states(n: int) -> List[Generator]:
    """Generators for ``n`` devices run from this thread, all seeded alike from one word of it.

    Paddle's ``paddle.seed`` seeds every device's generator alike, so the places of one
    data-parallel step draw the same numbers. Each call advances this thread's engine by one word,
    so the next step's devices draw anew and a checkpoint of this thread's state also fixes what
    the devices will draw after a resume.
    """
    word = _state().random()
    states = [Generator(word) for _ in range(n)]
    for st in states:
        st.explicit = _state().explicit
    return states


# ---- the state a checkpoint carries ----------------------------------------------------------
def get_state() -> Dict[str, np.ndarray]:
    """This thread's random state as ``{key: small integer array}`` (see :func:`set_state`)."""
    st = _state()
    words, pos = st.engine.get_state()
    return {"mt19937_64": words, "position": np.array(pos, np.int64),
            "seed": np.array([st.current] if st.explicit else [], np.uint64)}


_OLD_KEYS = ("entropy", "spawn_key", "pool_size", "n_children_spawned")


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
    old = [k for k in _OLD_KEYS if k in state]
    if old:
        raise InvalidArgument(f"random state entry {prefix + old[0]!r} in {where} is from an older refimpl "
                              f"(a NumPy SeedSequence state); this refimpl draws from Paddle's mt19937_64 "
                              f"engine and cannot resume it: load the parameters without the random state")
    words = _entry(state, "mt19937_64", where, prefix, 1)
    pos = int(_entry(state, "position", where, prefix, 0))
    if words.size != N_WORDS or pos > N_WORDS:
        raise InvalidArgument(f"random state entries {prefix + 'mt19937_64'!r} / {prefix + 'position'!r} in "
                              f"{where}: need {N_WORDS} words and a position in [0, {N_WORDS}], got "
                              f"{words.size} words and position {pos}")
    seed_arr = _entry(state, "seed", where, prefix, 1) if "seed" in state else np.array([], np.uint64)
    if seed_arr.size > 1:
        raise InvalidArgument(f"random state entry {prefix + 'seed'!r} in {where} must hold zero or one "
                              f"integer, got shape {list(seed_arr.shape)}")
    engine = MT19937_64.__new__(MT19937_64)
    engine.set_state(words.astype(np.uint64), pos)
    return {"engine": engine, "seed": int(seed_arr[0]) if seed_arr.size else None}


def set_state(state: Any, where: str = "the given state") -> None:
    """Restore a state from :func:`get_state`, :func:`check_state` or :func:`device_states` here."""
    if isinstance(state, Generator):  # a device's generator becomes this thread's
        _local.state = state
        return
    if not isinstance(state.get("engine"), MT19937_64):
        state = check_state(state, where)
    st = _state()
    st.engine = state["engine"].copy()
    st.current, st.explicit = (state["seed"], True) if state["seed"] is not None else (st.current, False)
