"""The n:m sparse-mask algorithms of automatic sparsity (ASP), in NumPy.

Mirrors ``paddle/incubate/asp/utils.py`` of Paddle 3.3.1: ``MaskAlgo`` /
``CheckMethod``, ``calculate_density``, the 1D checks and masks (at least
``n`` zeros in every ``1 x m`` run of a row), the 2D ones (at least ``n``
zeros in every row and every column of each ``m x m`` block: greedy, or the
best of all valid block patterns by L1 norm), and ``create_mask`` /
``check_sparsity`` for tensors of rank 1 to 4 (a 4-D conv filter
``(h, w, in, out)`` is viewed as ``(h * w * out, in)``, as Paddle's GEMM conv
kernel sees it). Rows and columns that are not a multiple of ``m`` are padded
with zeros first.

The answers are Paddle's bit for bit, ties included: the same NumPy sorts
(``np.argsort``'s default kind) pick the entries to drop, and the valid 2D
patterns are enumerated in Paddle's order (a Python ``set`` of the
permutations, see :func:`_compute_valid_2d_patterns`), so ``argmax`` breaks
ties the same way. ``check_mask_2d`` keeps Paddle's rule that a block fails
only when some row *and* some column hold more than ``m - n`` non-zeros.

Differences: bad arguments are typed errors instead of Paddle's
``assert`` / ``ValueError`` -- a ``func_name`` that is no ``MaskAlgo`` /
``CheckMethod`` and ``n``/``m`` outside ``0 <= n <= m``, ``m >= 1``
(InvalidArgument), a tensor of rank 0 or above 4 (InvalidArgument, still a
ValueError).
"""
from __future__ import annotations

import itertools
import threading
from collections import Counter
from enum import Enum
from typing import Any, Dict, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument


class MaskAlgo(Enum):
    """The mask generators; each value names its function in this module."""

    MASK_1D = "get_mask_1d"
    MASK_2D_GREEDY = "get_mask_2d_greedy"
    MASK_2D_BEST = "get_mask_2d_best"


class CheckMethod(Enum):
    """The sparsity checks; each value names its function in this module."""

    CHECK_1D = "check_mask_1d"
    CHECK_2D = "check_mask_2d"

    @staticmethod
    def get_checking_method(mask_algo: MaskAlgo) -> "CheckMethod":
        """The check that matches ``mask_algo``: 1D for ``MASK_1D``, 2D for both 2D generators."""
        if not isinstance(mask_algo, MaskAlgo):
            raise InvalidArgument(f"CheckMethod.get_checking_method: mask_algo must be a MaskAlgo, "
                                  f"got {mask_algo!r}")
        return CheckMethod.CHECK_1D if mask_algo is MaskAlgo.MASK_1D else CheckMethod.CHECK_2D


def _check_n_m(api: str, n: Any, m: Any) -> None:
    ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (n, m))
    if not ok or m < 1 or not 0 <= n <= m:
        raise InvalidArgument(f"{api}: n:m sparsity needs integers 0 <= n <= m and m >= 1, got n={n!r}, m={m!r}")


def calculate_density(x: np.ndarray) -> float:
    """The fraction of non-zero entries of ``x``."""
    flat = np.asarray(x).flatten()
    return float(np.count_nonzero(flat)) / flat.size


# ---- 1D: runs of m along each row -----------------------------------------------------------------
def _rows_of_m(mat: np.ndarray, m: int) -> Tuple[np.ndarray, Tuple[int, int]]:
    """``mat`` (2-D) cut into runs of ``m`` along its rows, one run a row, and the padded 2-D shape.

    Paddle pads only when needed, and then into a new float64 array."""
    if mat.ndim != 2:
        raise InvalidArgument(f"ASP 1D masks take a 2-D matrix, got shape {list(mat.shape)}")
    rows, cols = mat.shape
    extra = (-cols) % m
    if extra:
        padded = np.zeros((rows, cols + extra))
        padded[:, :cols] = mat
        mat = padded
    return mat.reshape(-1, m), mat.shape


def check_mask_1d(mat: np.ndarray, n: int, m: int) -> bool:
    """True when every run of ``m`` along the rows of ``mat`` (a 1-D ``mat`` is one row) has at most
    ``m - n`` non-zeros."""
    mat = np.asarray(mat)
    runs, _ = _rows_of_m(mat.reshape(1, -1) if mat.ndim <= 1 else mat, m)
    return all(np.count_nonzero(run) <= m - n for run in runs)


def get_mask_1d(mat: np.ndarray, n: int, m: int) -> np.ndarray:
    """The 1D ``n:m`` mask of ``mat`` (2-D): in each run of ``m`` the ``n`` smallest magnitudes are 0.

    The mask has ``mat``'s dtype."""
    _check_n_m("get_mask_1d", n, m)
    mat = np.asarray(mat)
    runs, padded_shape = _rows_of_m(mat, m)
    mask_runs = np.ones_like(runs)
    for i, run in enumerate(runs):
        mask_runs[i, np.argsort(np.absolute(run))[:n]] = 0
    mask = np.ones_like(mat)
    mask[:, :] = mask_runs.reshape(padded_shape)[:, :mat.shape[1]]
    return mask


# ---- 2D: m x m blocks -------------------------------------------------------------------------------
def _blocks_of_m(mat: np.ndarray, m: int) -> Tuple[np.ndarray, Tuple[int, int]]:
    """The ``m x m`` blocks of ``mat`` (2-D, zero-padded to multiples of ``m``), each flattened row-major,
    in row-major block order, and the padded shape."""
    if mat.ndim != 2:
        raise InvalidArgument(f"ASP 2D masks take a 2-D matrix, got shape {list(mat.shape)}")
    rows, cols = mat.shape
    padded = np.zeros((rows + (-rows) % m, cols + (-cols) % m))
    padded[:rows, :cols] = mat
    pr, pc = padded.shape
    blocks = padded.reshape(pr // m, m, pc // m, m).transpose(0, 2, 1, 3).reshape(-1, m * m)
    return blocks, padded.shape


def _from_blocks(blocks: np.ndarray, padded_shape: Tuple[int, int], m: int, shape: Tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`_blocks_of_m`, cut back to ``shape`` (float64, as Paddle's ``np.empty``)."""
    pr, pc = padded_shape
    full = np.asarray(blocks, dtype=np.float64).reshape(pr // m, pc // m, m, m).transpose(0, 2, 1, 3)
    return full.reshape(pr, pc)[:shape[0], :shape[1]]


def check_mask_2d(mat: np.ndarray, n: int, m: int) -> bool:
    """False when some ``m x m`` block of ``mat`` has both a row and a column with more than ``m - n``
    non-zeros (Paddle's rule), else True."""
    blocks, _ = _blocks_of_m(np.asarray(mat), m)
    for block in blocks:
        nz = np.absolute(block.reshape(m, m)) > 0
        if (nz.sum(axis=1) > m - n).any() and (nz.sum(axis=0) > m - n).any():
            return False
    return True


def get_mask_2d_greedy(mat: np.ndarray, n: int, m: int) -> np.ndarray:
    """The 2D ``n:m`` mask of ``mat`` (2-D), greedily: in each block, entries from the largest magnitude
    down are kept while their row and column hold fewer than ``n`` kept entries."""
    _check_n_m("get_mask_2d_greedy", n, m)
    mat = np.asarray(mat)
    blocks, padded_shape = _blocks_of_m(mat, m)
    masks = np.zeros_like(blocks).reshape(-1, m, m)
    for block, mask in zip(blocks, masks):
        kept_in_row, kept_in_col = Counter(), Counter()
        for flat in np.argsort(np.absolute(block))[::-1]:
            r, c = int(flat) // m, int(flat) % m
            if kept_in_row[r] == n or kept_in_col[c] == n:
                continue
            mask[r, c] = 1.0
            kept_in_row[r] += 1
            kept_in_col[c] += 1
    return _from_blocks(masks, padded_shape, m, mat.shape)


_valid_2d_patterns_lock = threading.Lock()
_valid_2d_patterns: Dict[str, np.ndarray] = {}


def _compute_valid_2d_patterns(n: int, m: int) -> np.ndarray:
    """Every valid 2D ``n:m`` block pattern, shape ``(count, m, m)``, cached under ``"{m}_{n}"``.

    A pattern stacks ``m`` rows, each with ``n`` ones; it is valid when no column has more than ``n``.
    The candidates are drawn as Paddle draws them -- ordered picks of ``m`` rows from the list of
    distinct rows written twice, gathered in a Python ``set`` -- so the patterns come in Paddle's
    order (what ``get_mask_2d_best`` breaks ties by). Drawing from each row twice also bounds how
    often one row repeats, as in Paddle.
    """
    key = f"{m}_{n}"
    with _valid_2d_patterns_lock:
        cached = _valid_2d_patterns.get(key)
    if cached is not None:
        return cached
    distinct_rows = list(set(itertools.permutations([1.0] * n + [0.0] * (m - n))))
    candidates = np.asarray(list(set(itertools.permutations(distinct_rows * 2, m))))
    valid = candidates[(candidates.sum(axis=1) <= n).all(axis=1)].astype(np.float64)
    with _valid_2d_patterns_lock:
        return _valid_2d_patterns.setdefault(key, valid)


def get_mask_2d_best(mat: np.ndarray, n: int, m: int) -> np.ndarray:
    """The 2D ``n:m`` mask of ``mat`` (2-D) keeping, in each block, the valid pattern of largest sum of
    kept values (the first such pattern in :func:`_compute_valid_2d_patterns`'s order)."""
    _check_n_m("get_mask_2d_best", n, m)
    mat = np.asarray(mat)
    patterns = _compute_valid_2d_patterns(n, m)
    blocks, padded_shape = _blocks_of_m(mat, m)
    best = np.argmax(blocks @ patterns.reshape(len(patterns), m * m).T, axis=1)
    return _from_blocks(patterns[best], padded_shape, m, mat.shape)


# ---- tensors of rank 1 to 4 -------------------------------------------------------------------------
def _as_matrix(api: str, t: np.ndarray) -> np.ndarray:
    """The 2-D view the mask functions work on (see the module docstring)."""
    s = t.shape
    if t.ndim == 1:
        return t.reshape(1, s[0])
    if t.ndim == 2:
        return t
    if t.ndim == 3:
        return t.reshape(s[0] * s[1], s[2])
    if t.ndim == 4:  # conv filter (h, w, in, out) -> (h * w * out, in)
        return t.transpose(0, 1, 3, 2).reshape(s[0] * s[1] * s[3], s[2])
    raise InvalidArgument(f"{api}: tensors of 1 to 4 dimensions are supported, got {t.ndim} "
                          f"(shape {list(s)})")


def create_mask(tensor: np.ndarray, func_name: MaskAlgo = MaskAlgo.MASK_1D, n: int = 2, m: int = 4) -> np.ndarray:
    """The ``n:m`` mask of ``tensor`` (rank 1 to 4) made by ``func_name``, in ``tensor``'s shape and dtype."""
    if not isinstance(func_name, MaskAlgo):
        raise InvalidArgument(f"create_mask: func_name must be a MaskAlgo ({[a.name for a in MaskAlgo]}), "
                              f"got {func_name!r}")
    _check_n_m("create_mask", n, m)
    tensor = np.asarray(tensor)
    mask = _GENERATORS[func_name](_as_matrix("create_mask", tensor.astype(float)), n=n, m=m)
    s = tensor.shape
    if tensor.ndim == 4:
        mask = mask.reshape(s[0], s[1], s[3], s[2]).transpose(0, 1, 3, 2)
    return mask.reshape(s).astype(tensor.dtype)


def check_sparsity(tensor: np.ndarray, func_name: CheckMethod = CheckMethod.CHECK_1D, n: int = 2,
                   m: int = 4) -> bool:
    """Whether ``tensor`` (rank 1 to 4) passes the ``n:m`` check ``func_name``."""
    if type(func_name) is not CheckMethod:
        raise InvalidArgument(f"check_sparsity: func_name must be a CheckMethod "
                              f"({[c.name for c in CheckMethod]}), got {func_name!r}")
    _check_n_m("check_sparsity", n, m)
    matrix = _as_matrix("check_sparsity", np.asarray(tensor).astype(float))
    return _CHECKS[func_name](matrix, n=n, m=m)


_GENERATORS = {MaskAlgo.MASK_1D: get_mask_1d, MaskAlgo.MASK_2D_GREEDY: get_mask_2d_greedy,
               MaskAlgo.MASK_2D_BEST: get_mask_2d_best}
_CHECKS = {CheckMethod.CHECK_1D: check_mask_1d, CheckMethod.CHECK_2D: check_mask_2d}

__all__ = ["MaskAlgo", "CheckMethod", "calculate_density", "check_mask_1d", "get_mask_1d", "check_mask_2d",
           "get_mask_2d_greedy", "get_mask_2d_best", "create_mask", "check_sparsity"]
