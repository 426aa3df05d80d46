"""Kernel factories shared by the CUDA op modules: maps, broadcasting, sums.

Plays the part of Paddle's ``funcs::ElementwiseKernel`` / ``BroadcastKernel``
and ``ReduceKernel`` templates: one grid-stride kernel per functor, made by a
factory from a ``cuda.jit(device=True)`` function ``f(x, ..., a, b)`` whose
``a``, ``b`` are scalar parameters (attrs or typed constants) passed already
cast to the array's dtype, so float32 math stays float32 on the GPU, in the
simulator and in NumPy alike.

Sums follow NumPy's order so results match the CPU kernels bit for bit where
NumPy's order is known: a reduction over trailing contiguous elements is
NumPy's pairwise sum (blocks of 8 partial sums up to 128 elements, halving
above), a reduction over leading axes adds in row-major order. When both
the last axis and an outer one are reduced (e.g. axes (0, 2)), NumPy's
buffered iterator picks an order not reproduced here: those sums (the
Y@GRAD of an elementwise op whose Y sits in the middle of X) may differ
from the CPU kernels in the last bit. Differences from
Paddle: Paddle's GPU reductions use a tree over threads; here each output
element is summed by one thread in that fixed order (deterministic, not
fast), except that long rows, when there are few of them, have the leaves
of NumPy's pairwise tree summed in parallel and then the tree's inner nodes
one height per launch — the same additions in the same order.
"""
import functools

import numpy as np

from .device import (MAXD, bcast_strides, contiguous_strides, cuda, dev, empty, flat, launch, making_kernels, padded,
                     tag, to_device)

PW_BLOCK = 128  # NumPy's PW_BLOCKSIZE
_STACK = 48     # depth of the pairwise-sum stack (enough for 2^48 elements)


def typed(v, dtype):
    """A Python attr as a scalar of the array's dtype (bool arrays compute in their own type)."""
    return np.dtype(dtype).type(v)


# ---- index helpers --------------------------------------------------------------------
@cuda.jit(device=True)
def offset(i, shape, st):
    """Element offset of flat index ``i`` of ``shape`` in an array read with strides ``st``."""
    off = 0
    for d in range(MAXD - 1, -1, -1):
        n = shape[d]
        off += (i % n) * st[d]
        i //= n
    return off


# ---- maps ----------------------------------------------------------------------------------
def _map1(f):
    @cuda.jit
    def kernel(x, out, a, b):
        for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            out[i] = f(x[i], a, b)
    return kernel


def _map2(f):
    @cuda.jit
    def kernel(x, y, out, a, b):
        for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            out[i] = f(x[i], y[i], a, b)
    return kernel


def _map2_bcast(f):
    @cuda.jit
    def kernel(x, y, out, shape, sx, sy, a, b):
        for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            out[i] = f(x[offset(i, shape, sx)], y[offset(i, shape, sy)], a, b)
    return kernel


def _map3(f):
    @cuda.jit
    def kernel(x, y, z, out, a, b):
        for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            out[i] = f(x[i], y[i], z[i], a, b)
    return kernel


def _map3_bcast(f):
    @cuda.jit
    def kernel(x, y, z, out, shape, sx, sy, sz, a, b):
        for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            out[i] = f(x[offset(i, shape, sx)], y[offset(i, shape, sy)], z[offset(i, shape, sz)], a, b)
    return kernel


_MAKERS = {1: (_map1, None), 2: (_map2, _map2_bcast), 3: (_map3, _map3_bcast)}


class Functor:
    """An elementwise functor: ``make(DT)`` gives ``f(*xs, a, b)`` for arrays of scalar type ``DT``.

    ``DT`` (e.g. ``np.float32``) lets a functor that computes in float64
    round once to the array's type (``DT(math.exp(...))``), identically on
    the GPU, in the simulator and against NumPy. Kernels are made per dtype
    on first use.
    """

    def __init__(self, make, arity):
        self.make, self.arity, self.cache = make, arity, {}

    def kernels(self, dtype):
        dtype = np.dtype(dtype)
        k = self.cache.get(dtype)
        if k is None:
            with making_kernels():
                f = cuda.jit(device=True)(self.make(dtype.type))
                same, bc = _MAKERS[self.arity]
                name = (self.make.__module__, self.make.__qualname__, dtype.str)
                k = self.cache[dtype] = (tag(same(f), "functor", *name, 0),
                                         tag(bc(f), "functor", *name, 1) if bc else None)
        return k


def functor(arity):
    """Decorator: ``@functor(2) def add(DT): return lambda-like device fn``."""
    return lambda make: Functor(make, arity)


def run1(fn, x, a=0, b=0, out_dtype=None):
    """out = f(x, a, b) elementwise; ``a``, ``b`` cast to x's dtype."""
    x = dev(x)
    out = empty(x.shape, out_dtype or x.dtype)
    launch(fn.kernels(x.dtype)[0], out.size, flat(x), flat(out), typed(a, x.dtype), typed(b, x.dtype))
    return out


def run_n(fn, arrays, a=0, b=0, out_dtype=None, shape=None):
    """out = f(*arrays, a, b) with NumPy broadcasting of ``arrays`` (to ``shape`` if given)."""
    arrays = [dev(v) for v in arrays]
    if shape is None:
        shape = tuple(np.broadcast_shapes(*[tuple(v.shape) for v in arrays]))
    shape = tuple(shape)
    dt = arrays[0].dtype
    out = empty(shape, out_dtype or dt)
    if out.size == 0:
        return out
    same, bc = fn.kernels(dt)
    if all(tuple(v.shape) == shape for v in arrays):
        launch(same, out.size, *[flat(v) for v in arrays], flat(out), typed(a, dt), typed(b, dt))
    else:
        strides = [bcast_strides(v.shape, shape) for v in arrays]
        launch(bc, out.size, *[flat(v) for v in arrays], flat(out), padded(shape), *strides,
               typed(a, dt), typed(b, dt))
    return out


# ---- NumPy-ordered sums ----------------------------------------------------------------
@cuda.jit(device=True)
def pw_leaf(g, s, step, n, zero):
    """NumPy's pairwise_sum for n <= 128 elements g[s], g[s+step], ..."""
    if n < 8:
        res = zero
        for i in range(n):
            res += g[s + i * step]
        return res
    r0, r1, r2, r3 = g[s], g[s + step], g[s + 2 * step], g[s + 3 * step]
    r4, r5, r6, r7 = g[s + 4 * step], g[s + 5 * step], g[s + 6 * step], g[s + 7 * step]
    i = 8
    while i < n - n % 8:
        p = s + i * step
        r0 += g[p]
        r1 += g[p + step]
        r2 += g[p + 2 * step]
        r3 += g[p + 3 * step]
        r4 += g[p + 4 * step]
        r5 += g[p + 5 * step]
        r6 += g[p + 6 * step]
        r7 += g[p + 7 * step]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += g[s + i * step]
        i += 1
    return res


@cuda.jit(device=True)
def _half(n):
    n2 = n // 2
    return n2 - n2 % 8


@cuda.jit(device=True)
def pw_sum(g, s, step, n, zero, V):
    """NumPy's recursive pairwise_sum, run with an explicit stack (no recursion on the device).

    ``V`` is scratch of g's dtype (at least ``_STACK`` long) for the left halves' sums.
    """
    if n <= PW_BLOCK:
        return pw_leaf(g, s, step, n, zero)
    S = cuda.local.array(_STACK, np.int64)
    N = cuda.local.array(_STACK, np.int64)
    PH = cuda.local.array(_STACK, np.int32)
    sp = 0
    S[0], N[0], PH[0] = s, n, 0
    ret = zero
    while sp >= 0:
        m = N[sp]
        if m > PW_BLOCK:  # descend into the left half
            S[sp + 1], N[sp + 1], PH[sp + 1] = S[sp], _half(m), 0
            sp += 1
            continue
        ret = pw_leaf(g, S[sp], step, m, zero)
        sp -= 1
        while sp >= 0:  # hand the value back up
            if PH[sp] == 0:  # the left half is done: keep it, do the right half
                V[sp] = ret
                PH[sp] = 1
                h = _half(N[sp])
                S[sp + 1], N[sp + 1], PH[sp + 1] = S[sp] + h * step, N[sp] - h, 0
                sp += 1
                break
            ret = V[sp] + ret
            sp -= 1
    return ret


@cuda.jit(device=True)
def row_sum(x, r, base, n, inner, zero, scratch):
    """Sum of row ``r``, x[base + j * inner] for j < n, in NumPy's order: pairwise when the row is
    contiguous, in order otherwise. ``scratch``: one :func:`pw_sum` scratch row per row (or one dummy)."""
    if inner == 1:
        return pw_sum(x, base, 1, n, zero, scratch[r if scratch.shape[0] > 1 else 0])
    total = zero
    for j in range(n):
        total += x[base + j * inner]
    return total


@cuda.jit
def _sum_inner(g, out, n, zero, scratch):
    """out[o] = pairwise sum of the n contiguous elements g[o*n : o*n+n]."""
    for o in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[o] = row_sum(g, o, o * n, n, 1, zero, scratch)


# ---- the same pairwise sums, spread over threads -----------------------------------------------------
TREE_MIN = 16384  # rows this long, when there are few of them, are summed by the tree kernels below
TREE_MAX_ROWS = 1024


@functools.lru_cache(maxsize=64)
def _tree_plan(n):
    """NumPy's pairwise-sum tree over n > PW_BLOCK elements, as device arrays.

    Nodes 0..L-1 are the leaves (at most PW_BLOCK elements each: ``start``,
    ``size``); the rest are inner nodes ``left + right``, listed by height so
    that one launch per height computes them all. Returns (start, size,
    [(ids, left, right) per height], root).
    """
    leaves, inner = [], []  # leaves: (start, size); inner: (height, left ref, right ref)

    def build(s, m):
        if m <= PW_BLOCK:
            leaves.append((s, m))
            return ("leaf", len(leaves) - 1), 0
        h = _half(m)
        (left, hl), (right, hr) = build(s, h), build(s + h, m - h)
        inner.append((max(hl, hr) + 1, left, right))
        return ("inner", len(inner) - 1), max(hl, hr) + 1
    build(0, n)
    n_leaves = len(leaves)

    def node_id(ref):
        return ref[1] if ref[0] == "leaf" else n_leaves + ref[1]
    levels = []
    for height in range(1, max(h for h, _, _ in inner) + 1):
        ks = [k for k, (h, _, _) in enumerate(inner) if h == height]
        levels.append(tuple(to_device(np.array(v, np.int64)) for v in
                            ([n_leaves + k for k in ks], [node_id(inner[k][1]) for k in ks],
                             [node_id(inner[k][2]) for k in ks])))
    start, size = (to_device(np.array(v, np.int64)) for v in zip(*leaves))
    return start, size, levels, n_leaves + len(inner) - 1


@cuda.jit
def _tree_leaves(g, vals, n, start, size, zero):
    """vals[row, leaf] = NumPy's pairwise sum of the leaf's elements of row ``row`` of g."""
    leaves = start.size
    for t in range(cuda.grid(1), vals.shape[0] * leaves, cuda.gridsize(1)):
        r, k = t // leaves, t % leaves
        vals[r, k] = pw_leaf(g, r * n + start[k], 1, size[k], zero)


@cuda.jit
def _tree_level(vals, ids, left, right):
    """vals[row, ids[j]] = vals[row, left[j]] + vals[row, right[j]] for every node of one height."""
    m = ids.size
    for t in range(cuda.grid(1), vals.shape[0] * m, cuda.gridsize(1)):
        r, j = t // m, t % m
        vals[r, ids[j]] = vals[r, left[j]] + vals[r, right[j]]


@cuda.jit
def _tree_root(vals, out, root):
    for r in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[r] = vals[r, root]


def _sum_rows_tree(g, out, rows, n):
    start, size, levels, root = _tree_plan(n)
    vals = empty((rows, root + 1), g.dtype)
    launch(_tree_leaves, rows * start.size, g, vals, n, start, size, g.dtype.type(0))
    for ids, left, right in levels:
        launch(_tree_level, rows * ids.size, vals, ids, left, right)
    launch(_tree_root, rows, vals, out, root)


def scratch_for(rows, n, dtype):
    """Scratch rows for :func:`pw_sum` (a dummy when no sum is longer than a block)."""
    return empty((rows if n > PW_BLOCK else 1, _STACK), dtype)


@cuda.jit
def _sum_general(g, out, oshape, ostr, rshape, rstr, count, zero):
    """out[o] = sum over the reduced dims, in row-major order (NumPy's order for outer axes)."""
    for o in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        base = offset(o, oshape, ostr)
        acc = zero
        for k in range(count):
            acc += g[base + offset(k, rshape, rstr)]
        out[o] = acc


def sum_axes(g, axes, keep_shape=None):
    """Sum device array ``g`` over ``axes`` (a tuple of dims); result shaped ``keep_shape`` or reduced."""
    g = dev(g)
    shape = tuple(g.shape)
    axes = tuple(sorted(set(a % max(len(shape), 1) for a in axes))) if shape else ()
    kept = tuple(d for i, d in enumerate(shape) if i not in axes)
    out_shape = keep_shape if keep_shape is not None else kept
    out = empty(out_shape, g.dtype)
    zero = g.dtype.type(0)
    count = 1
    for a in axes:
        count *= shape[a]
    if out.size == 0:
        return out
    if axes == tuple(range(len(shape) - len(axes), len(shape))):  # trailing, contiguous: pairwise
        if count >= TREE_MIN and out.size <= TREE_MAX_ROWS:  # long rows, few of them: same sums, in parallel
            _sum_rows_tree(flat(g), flat(out), out.size, count)
            return out
        launch(_sum_inner, out.size, flat(g), flat(out), count, zero,
               scratch_for(out.size, count, g.dtype))
        return out
    st = contiguous_strides(shape)
    oshape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    rshape = tuple(d if i in axes else 1 for i, d in enumerate(shape))
    ostr = tuple(0 if i in axes else s for i, s in enumerate(st))
    rstr = tuple(s if i in axes else 0 for i, s in enumerate(st))
    launch(_sum_general, out.size, flat(g), flat(out), padded(oshape), padded(ostr, 0),
           padded(rshape), padded(rstr, 0), count, zero)
    return out


def reduce_to(g, shape):
    """Sum ``g`` down to ``shape`` (undo broadcasting), as ``refimpl.ops.common.reduce_to``."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape)
                                       if d == 1 and g.shape[i + lead] != 1)
    return sum_axes(g, axes, keep_shape=shape)
