"""refimpl's float64 erf and the exact gelu / gelu_grad kernels built on it.

The numbers are defined by the Chebyshev interpolants ``activation_ops._ERF_PIECES`` evaluated with
NumPy's own ``Chebyshev.__call__`` on each piece's elements (``reference_erf`` below, a copy of how
``erf`` computes them today, kept here so that a faster ``erf`` must give the same float64 values), and
the float16 / float32 gelu and gelu_grad, whose fast path uses a cheaper erf and recomputes every
element it cannot prove rounds the same, must give exactly the float64 formulas on them, cast: the
zoo's GPT replays match Paddle's losses bit for bit through these kernels. NaN outputs are compared as
NaN (their bits depend on the array's length even within one NumPy loop). ~1.25e7 inputs of the same
kinds were checked the same way once, with the same results.

``test_erf_is_the_chebyshev_pieces_bit_for_bit`` is a regression pin: it compares ``erf`` with its own
tables and so cannot say whether they are right. What checks them against an independent erf is
``test_erf_against_glibc`` (``math.erf``, glibc's) and ``test_float32_gelu_is_glibc_gelu_rounded``: the
float32 gelu must be a float64 gelu built on ``math.erf``, rounded, except where the two float64 values
may round to different float32s (the band erf's error bound allows; see that test).
"""
import math

import numpy as np
import pytest

from refimpl.ops import activation_ops as act


def reference_erf(x):
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.ones_like(a)
    piece = np.searchsorted(act._ERF_EDGES, a, side="right") - 1
    for i, cheb in enumerate(act._ERF_PIECES):
        m = piece == i
        out[m] = a[m] * cheb(a[m])
    out[np.isnan(a)] = np.nan
    return np.copysign(out, x)


def reference_gelu(X):
    x = X.astype(np.float64)
    return (0.5 * x * (1.0 + reference_erf(x / math.sqrt(2.0)))).astype(X.dtype)


def reference_gelu_grad(X, dOut):
    x = X.astype(np.float64)
    d = 0.5 * (1.0 + reference_erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return (dOut * d).astype(dOut.dtype)


SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.2e-38, -1.2e-38, 3.4e38, -3.4e38,
           6 * math.sqrt(2), -6 * math.sqrt(2), 1.0, -1.0, 2.0, 4.0, 6.0, -6.0]


def float32_inputs(n=100_000, seed=0):
    """Dense in [-8.6, 8.6] (erf's argument x / sqrt 2 in [-6.1, 6.1]), every binade down to the
    subnormals (random bit patterns), the tails up to float32's max, and the special values."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, np.float32(8.6).view(np.int32), n, dtype=np.int32).view(np.float32)
    tails = np.exp(rng.uniform(math.log(8.5), math.log(3e38), n // 10)).astype(np.float32)
    return np.concatenate([np.linspace(-8.6, 8.6, 2 * n, dtype=np.float32), bits, -bits, tails, -tails,
                           rng.standard_normal(n).astype(np.float32), np.array(SPECIAL, np.float32)])


def assert_same_bits(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=what)
    itype = np.dtype(f"i{want.itemsize}")
    differ = np.flatnonzero(got[~nan].view(itype) != want[~nan].view(itype))
    assert differ.size == 0, f"{what}: {differ.size} differ, e.g. {got[~nan][differ[:3]]} vs {want[~nan][differ[:3]]}"


def test_erf_is_the_chebyshev_pieces_bit_for_bit():
    """A regression pin (see the module docstring): erf gives today's Chebyshev values, bit for bit."""
    x32 = float32_inputs()
    x = np.concatenate([x32.astype(np.float64), x32.astype(np.float64) / math.sqrt(2.0),
                        np.linspace(-6.5, 6.5, 100_001), [5e-324, -5e-324, 1e-310, np.nextafter(6.0, 0)]])
    with np.errstate(invalid="ignore"):
        assert_same_bits(act.erf(x), reference_erf(x), "erf")
    assert act.erf(np.zeros((0, 3))).shape == (0, 3) and act.erf(np.ones((2, 3))).shape == (2, 3)


def test_erf_against_glibc():
    x = np.concatenate([np.linspace(-7, 7, 40_001), np.geomspace(1e-300, 1e-3, 100), -np.geomspace(1e-300, 6, 100)])
    ref = np.array([math.erf(v) for v in x])
    err = np.abs(act.erf(x) - ref)
    assert err.max() < 3e-14                                          # measured on 6e6 inputs: 1.9e-14
    assert (err / np.maximum(np.abs(ref), 1e-300)).max() < 3e-14
    assert list(act.erf(np.array([np.inf, -np.inf, 0.0, -0.0]))) == [1.0, -1.0, 0.0, 0.0]
    assert np.signbit(act.erf(np.array([-0.0])))[0] and np.isnan(act.erf(np.array([np.nan])))[0]


def test_float32_gelu_is_glibc_gelu_rounded():
    """float32 gelu == float32(0.5 x (1 + math.erf(x / sqrt 2))) in float64, except in the band where
    refimpl's erf error (< 3e-14, test_erf_against_glibc) may move the float64 value across a float32
    rounding boundary: there the two roundings may differ. The band is empty for x >= -3 and small
    down to -5; below -5, 1 + erf cancels to < 6e-7 and the band covers nearly every element."""
    rng = np.random.default_rng(5)
    X = np.concatenate([np.linspace(-8.6, 8.6, 200_001, dtype=np.float32),
                        (rng.standard_normal(50_000) * 3).astype(np.float32)])
    x = X.astype(np.float64)
    glibc = 0.5 * x * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    tol = 0.5 * np.abs(x) * 3e-14
    with np.errstate(all="ignore"):
        band = np.float32(glibc - tol) != np.float32(glibc + tol)
        got = act.gelu(X, approximate=False)
    assert_same_bits(got[~band], glibc[~band].astype(np.float32), "gelu vs glibc outside the band")
    assert not band[x >= -3].any() and band[(x >= -5) & (x < -3)].mean() < 0.15


def test_fast_erf_is_well_within_its_bound():
    z = np.concatenate([np.linspace(-6.5, 6.5, 400_001), float32_inputs(20_000).astype(np.float64) / math.sqrt(2)])
    z = z[np.isfinite(z)]
    assert np.max(np.abs(act._erf_fast(z) - act.erf(z))) < act._ERF_FAST_BOUND / 20  # measured: 2.1e-14


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_gelu_and_its_grad_are_the_float64_formulas_cast(dtype):
    if dtype == np.float16:   # every float16
        X = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16).view(np.float16)
    else:
        X = float32_inputs(seed=1).astype(dtype)
    dOut = np.random.default_rng(2).standard_normal(X.size).astype(dtype)
    dOut[::7], dOut[::11] = 1, dtype(1e-3)
    with np.errstate(all="ignore"):
        assert_same_bits(act.gelu(X, approximate=False), reference_gelu(X), f"gelu {dtype.__name__}")
        assert_same_bits(act.gelu_grad(X, dOut, approximate=False), reference_gelu_grad(X, dOut),
                         f"gelu_grad {dtype.__name__}")
        X2 = X[:30_000].reshape(100, 300)
        assert_same_bits(act.gelu(X2, approximate=False), reference_gelu(X2), "gelu 2-D")


def test_fast_path_redoes_every_element_it_cannot_prove():
    """With a fast result off by 1e-7 and a bound that covers it, only the proven elements are kept;
    with a bound that does not, the output is wrong (so the bound is what keeps the bits)."""
    X = float32_inputs(20_000, seed=3)
    X = X[np.isfinite(X)]
    want = reference_gelu(X)

    def off(X, bound):
        v = reference_gelu(X).astype(np.float64) * (1 + 1e-7)
        return v, np.abs(v) * bound
    with np.errstate(all="ignore"):
        got = act._fast_then_exact(lambda X: off(X, 2e-7), act._gelu_exact, np.dtype(np.float32), X)
        assert_same_bits(got, want, "redone")
        bad = act._fast_then_exact(lambda X: off(X, 0.0), act._gelu_exact, np.dtype(np.float32), X)
    assert np.any(bad != want)
