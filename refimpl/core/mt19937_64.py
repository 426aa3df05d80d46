"""``std::mt19937_64`` and ``std::seed_seq`` in NumPy, word for word as libstdc++ computes them.

Paddle's CPU random ops draw from a ``std::mt19937_64`` engine (``paddle/phi/core/generator.cc``):
the global generator seeds it through ``std::seed_seq({seed})`` (``paddle.seed``), an op with a
non-zero ``seed`` attr makes a fresh engine with ``engine.seed(seed)``. This module is that engine:

* :meth:`MT19937_64.seed` is the integer seeding (the 64-bit Knuth recurrence, factor
  6364136223846793005); :meth:`MT19937_64.seed_seq` seeds from :func:`seed_seq_generate`'s 624
  words, two per state word, low half first, with the all-zero guard of the standard.
* The state is 312 64-bit words and a position; a draw past the end "twists" all 312 words,
  vectorised here in the three segments the recurrence allows (words 0..155 read only old words,
  156..310 read the new words 0..154, 311 reads the new words 0 and 155). Tempering is applied
  to whole arrays of draws at once.
* :meth:`MT19937_64.random_raw` gives the next ``n`` 64-bit outputs, consuming exactly ``n``
  words as ``n`` calls of the C++ engine's ``operator()`` would.

Differences from libstdc++: none in the numbers; the engine's text form (``operator<<``) is not
offered, :meth:`MT19937_64.get_state` gives the words and the position as an array instead.
"""
from typing import Iterable, Tuple

import numpy as np

__all__ = ["MT19937_64", "seed_seq_generate", "N_WORDS"]

N_WORDS = 312  # state size n
_M = 156  # shift size m
_MATRIX_A = np.uint64(0xB5026F5AA96619E9)
_UPPER = np.uint64(0xFFFFFFFF80000000)  # the top w - r = 33 bits (r = 31)
_LOWER = np.uint64(0x7FFFFFFF)
_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1
_INIT_F = 6364136223846793005
_U, _D = np.uint64(29), np.uint64(0x5555555555555555)
_S, _B = np.uint64(17), np.uint64(0x71D67FFFEDA60000)
_T, _C = np.uint64(37), np.uint64(0xFFF7EEE000000000)
_L = np.uint64(43)
_ONE = np.uint64(1)


def seed_seq_generate(values: Iterable[int], n: int = 2 * N_WORDS) -> np.ndarray:
    """``std::seed_seq(values).generate`` of ``n`` 32-bit words (each value is taken modulo 2**32)."""
    v = [int(x) & _MASK32 for x in values]
    s = len(v)
    b = [0x8B8B8B8B] * n
    t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
    p = (n - t) // 2
    q = p + t
    m = max(s + 1, n)
    for k in range(m):
        x = b[k % n] ^ b[(k + p) % n] ^ b[(k - 1) % n]
        r1 = ((x ^ (x >> 27)) * 1664525) & _MASK32
        if k == 0:
            r2 = r1 + s
        elif k <= s:
            r2 = r1 + k % n + v[k - 1]
        else:
            r2 = r1 + k % n
        r2 &= _MASK32
        b[(k + p) % n] = (b[(k + p) % n] + r1) & _MASK32
        b[(k + q) % n] = (b[(k + q) % n] + r2) & _MASK32
        b[k % n] = r2
    for k in range(m, m + n):
        x = (b[k % n] + b[(k + p) % n] + b[(k - 1) % n]) & _MASK32
        r3 = ((x ^ (x >> 27)) * 1566083941) & _MASK32
        r4 = (r3 - k % n) & _MASK32
        b[(k + p) % n] ^= r3
        b[(k + q) % n] ^= r4
        b[k % n] = r4
    return np.array(b, np.uint32)


def _temper(z: np.ndarray) -> np.ndarray:
    """The output transformation, in place over a whole array of state words."""
    t = z >> _U
    t &= _D
    z ^= t
    np.left_shift(z, _S, out=t)
    t &= _B
    z ^= t
    np.left_shift(z, _T, out=t)
    t &= _C
    z ^= t
    np.right_shift(z, _L, out=t)
    z ^= t
    return z


# the twist's constants as arrays: NumPy combines two arrays much faster than an array and a scalar
_UPPER_A, _LOWER_A = np.full(_M, _UPPER), np.full(_M, _LOWER)
_ONE_A, _MATRIX_A_A = np.full(_M, _ONE), np.full(_M, _MATRIX_A)


def _twist_run(a, b, c, out, y, t) -> None:
    """``out = c ^ (y >> 1) ^ (y odd ? A : 0)`` with ``y`` the top bits of ``a``, the low bits of ``b``."""
    n = out.size
    np.bitwise_and(a, _UPPER_A[:n], out=y)
    np.bitwise_and(b, _LOWER_A[:n], out=t)
    y |= t
    np.bitwise_and(y, _ONE_A[:n], out=t)
    t *= _MATRIX_A_A[:n]
    y >>= _ONE_A[:n]
    y ^= t
    np.bitwise_xor(c, y, out=out)


class MT19937_64:
    """The 64-bit Mersenne Twister with libstdc++'s seeding; ``seed`` is the default 5489 if omitted."""

    def __init__(self, seed: int = 5489):
        self._x = np.empty(N_WORDS, np.uint64)
        self._pos = N_WORDS
        self.seed(seed)

    def seed(self, value: int) -> None:
        """``engine.seed(value)``: the integer recurrence (value taken modulo 2**64)."""
        x = int(value) & _MASK64
        words = [x]
        for i in range(1, N_WORDS):
            x = (_INIT_F * (x ^ (x >> 62)) + i) & _MASK64
            words.append(x)
        self._x = np.array(words, np.uint64)
        self._pos = N_WORDS

    def seed_seq(self, values: Iterable[int]) -> None:
        """``engine.seed(std::seed_seq(values))``."""
        a = seed_seq_generate(values).astype(np.uint64)
        x = a[0::2] | (a[1::2] << np.uint64(32))
        if not (x[0] & _UPPER) and not x[1:].any():
            x[0] = np.uint64(1 << 63)  # the standard's guard against an all-zero state
        self._x = x
        self._pos = N_WORDS

    def _twist(self) -> None:
        x = self._x
        y, t = np.empty(_M, np.uint64), np.empty(_M, np.uint64)
        _twist_run(x[:_M], x[1:_M + 1], x[_M:], x[:_M], y, t)
        _twist_run(x[_M:-1], x[_M + 1:], x[:_M - 1], x[_M:-1], y[:-1], t[:-1])
        last = (int(x[-1]) & int(_UPPER)) | (int(x[0]) & int(_LOWER))
        x[-1] = int(x[_M - 1]) ^ (last >> 1) ^ (int(_MATRIX_A) if last & 1 else 0)
        self._pos = 0

    def random_raw(self, n: int) -> np.ndarray:
        """The next ``n`` outputs (uint64), as ``n`` calls of ``operator()``."""
        out = np.empty(n, np.uint64)
        got = 0
        while got < n:
            if self._pos >= N_WORDS:
                self._twist()
            take = min(n - got, N_WORDS - self._pos)
            out[got:got + take] = self._x[self._pos:self._pos + take]
            self._pos += take
            got += take
        return _temper(out)

    def discard(self, n: int) -> None:
        """``engine.discard(n)``: skip ``n`` outputs."""
        while n > 0:
            if self._pos >= N_WORDS:
                self._twist()
            take = min(n, N_WORDS - self._pos)
            self._pos += take
            n -= take

    def get_state(self) -> Tuple[np.ndarray, int]:
        """(a copy of the 312 state words, the position 0..312)."""
        return self._x.copy(), self._pos

    def set_state(self, words: np.ndarray, pos: int) -> None:
        """Restore :meth:`get_state`'s words and position (the caller checks them)."""
        self._x = np.array(words, np.uint64).reshape(N_WORDS)
        self._pos = int(pos)

    def copy(self) -> "MT19937_64":
        other = MT19937_64.__new__(MT19937_64)
        other._x, other._pos = self._x.copy(), self._pos
        return other
