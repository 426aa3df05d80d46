"""CUDA kernels for refimpl.ops.lars_lamb_ops: lamb and lars_momentum, in place.

Same formulas and rounding order as the NumPy kernels (Paddle 3.3.1's CPU
order). The squared norms follow :func:`refimpl.ops.lars_lamb_ops.squared_norm`
exactly: the host plans the runs (``norm_plan``), one thread per run adds its
run in Eigen's lane order, and one thread adds the runs' sums in the plan's
tree, so both backends give the same bits. (Paddle's GPU kernels use a cub
reduction instead, whose order differs.) The learning rate, norms and the
trust ratio stay on the device; ``SkipUpdate`` is read back to the host, as
the adam kernel does.
"""
from typing import List

import numpy as np

from refimpl.ops.lars_lamb_ops import LANE_BYTES, LEAF, check_shapes, float_attr, lamb_master, lars_check, norm_plan
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, empty, flat, kernel_factory, launch, launch_config, scalar_of, to_device
from .fmath import sqrt64
from .ops_manipulation import cast_to

_STACK = 64  # the tree of runs is balanced: its depth is about log2(n / 8192)


def _tree_program(n: int, lanes: int) -> List[int]:
    """The runs' sums as a postfix program: i >= 0 pushes run i's sum, -1 adds the top two (left + right)."""
    starts = [s for s, _ in norm_plan(n, LANE_BYTES // lanes)]
    prog: List[int] = []

    def walk(first: int, count: int) -> None:
        if count > lanes * LEAF:
            half = lanes * -(-(first + -(-count // 2)) // lanes)
            left = min(half - first, count)
            walk(first, left)
            if left < count:
                walk(half, count - left)
                prog.append(-1)
        else:
            prog.append(starts.index(first))
    walk(0, n)
    return prog


@kernel_factory
def _run_sums(DT):
    """One thread per run of the plan: its squares added in Eigen's lane order."""
    lanes = LANE_BYTES // np.dtype(DT).itemsize

    @cuda.jit
    def run_sums(x, starts, counts, out):
        for r in range(cuda.grid(1), starts.size, cuda.gridsize(1)):
            s, c = starts[r], counts[r]
            pair = cuda.local.array(16, DT)
            acc = cuda.local.array(8, DT)
            for lane in range(2 * lanes):
                pair[lane] = DT(0)
            n2 = c // (2 * lanes) * (2 * lanes)
            for j in range(0, n2, 2 * lanes):
                for lane in range(2 * lanes):
                    v = x[s + j + lane]
                    pair[lane] = pair[lane] + v * v
            for lane in range(lanes):
                acc[lane] = pair[lane] + pair[lanes + lane] if n2 > 0 else DT(0)
            start = n2
            if start <= c - lanes:
                for lane in range(lanes):
                    v = x[s + start + lane]
                    acc[lane] = acc[lane] + v * v
                start += lanes
            tail = DT(0)
            for j in range(start, c):
                v = x[s + j]
                tail = tail + v * v
            half = lanes // 2
            while half >= 1:
                for lane in range(half):
                    acc[lane] = acc[lane] + acc[lane + half]
                half //= 2
            out[r] = tail + acc[0]
    return run_sums


@kernel_factory
def _tree_sum(DT):
    """One thread: the runs' sums added as the postfix program of ``_tree_program`` says."""
    @cuda.jit
    def tree(sums, prog, out):
        if cuda.grid(1) == 0:
            stack = cuda.local.array(_STACK, DT)
            top = 0
            for i in range(prog.size):
                if prog[i] >= 0:
                    stack[top] = sums[prog[i]]
                    top += 1
                else:
                    stack[top - 2] = stack[top - 2] + stack[top - 1]
                    top -= 1
            out[0] = stack[0] if top > 0 else DT(0)
    return tree


def squared_norm(x, out):
    """sum(x * x) of device array ``x`` into ``out[0]`` (a 1-element device array), in the NumPy kernel's order."""
    x = flat(x)
    lanes = LANE_BYTES // x.dtype.itemsize
    plan = norm_plan(x.size, x.dtype.itemsize)
    run_sums, tree = _run_sums(x.dtype.type), _tree_sum(x.dtype.type)
    sums = empty((len(plan),), x.dtype)
    starts = to_device(np.array([s for s, _ in plan], np.int64))
    counts = to_device(np.array([c for _, c in plan], np.int64))
    launch(run_sums, len(plan), x, starts, counts, sums)
    launch_config(tree, 1, 1, sums, to_device(np.array(_tree_program(x.size, lanes), np.int64)), out)
    return out


# ---- lamb ----------------------------------------------------------------------------------------------
@kernel_factory
def _lamb_moments(DT):
    """m1, m2 in place and Paddle's trust_ratio_div into ``r``."""
    one = DT(1)

    @cuda.jit
    def moments(p, g, m1, m2, b1pow, b2pow, b1, b2, eps, wd, r):
        b1p, b2p = DT(b1pow[0]), DT(b2pow[0])
        for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
            gi = DT(g[i])
            a = m1[i] * b1
            a = a + (one - b1) * gi
            s = (one - b2) * gi
            s = s * gi
            q = m2[i] * b2
            q = q + s
            m1[i] = a
            m2[i] = q
            t = a / (one - b1p)
            d = DT(sqrt64(q / (one - b2p))) + eps
            r[i] = t / d + wd * p[i]
    return moments


@kernel_factory
def _lamb_update(DT):
    """p -= (lr * |p| / |r|) r, the ratio 1 when a norm is 0 (or was not computed)."""
    one = DT(1)

    @cuda.jit
    def update(p, r, lr, pn_sq, rn_sq):
        pn, rn = DT(sqrt64(pn_sq[0])), DT(sqrt64(rn_sq[0]))
        ratio = pn / rn if (pn > 0 and rn > 0) else one
        step = DT(lr[0]) * ratio
        for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
            p[i] = p[i] - r[i] * step
    return update


@cuda.jit
def _advance_pows(b1pow, b2pow, b1, b2):
    if cuda.grid(1) == 0:
        b1pow[0] = b1pow[0] * b1
        b2pow[0] = b2pow[0] * b2


def _like_zero(dtype):
    return to_device(np.zeros(1, dtype))


def lamb(Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow, MasterParam, SkipUpdate, *,
         weight_decay, beta1, beta2, epsilon, always_adapt, multi_precision):
    m1, m2, b1pow, b2pow = dev(Moment1), dev(Moment2), dev(Beta1Pow), dev(Beta2Pow)
    master = dev(MasterParam) if multi_precision else None
    param = dev(Param)
    if SkipUpdate is not None and bool(scalar_of(SkipUpdate)):
        return param, m1, m2, b1pow, b2pow, master
    p = dev(lamb_master(param, master, multi_precision))
    check_shapes("lamb", p, Grad, ("Moment1", m1), ("Moment2", m2))
    dt = p.dtype.type
    moments, update = _lamb_moments(dt), _lamb_update(dt)
    r = empty(p.shape, p.dtype)
    b1, b2, eps, wd = (float_attr(dt, a) for a in (beta1, beta2, epsilon, weight_decay))
    launch(moments, p.size, flat(p), flat(dev(Grad)), flat(m1), flat(m2), flat(b1pow), flat(b2pow), b1, b2, eps, wd,
           flat(r))
    pn, rn = _like_zero(p.dtype), _like_zero(p.dtype)
    if wd > 0 or always_adapt:
        squared_norm(p, pn)
        squared_norm(r, rn)
    lr = dev(LearningRate)
    launch(update, p.size, flat(p), flat(r), flat(lr if lr.dtype == p.dtype else cast_to(lr, p.dtype)), pn, rn)
    if p.size:
        launch_config(_advance_pows, 1, 1, flat(b1pow), flat(b2pow), b1pow.dtype.type(b1), b2pow.dtype.type(b2))
    if p is not param:
        param.copy_to_device(cast_to(p, param.dtype))
    return param, m1, m2, b1pow, b2pow, master


# ---- lars_momentum ---------------------------------------------------------------------------------------
@kernel_factory
def _lars_rescale(DT):
    @cuda.jit
    def rescale(g, scale, out):
        for i in range(cuda.grid(1), g.size, cuda.gridsize(1)):
            out[i] = scale * DT(g[i])
    return rescale


@kernel_factory
def _lars_update(DT):
    """v = mu v + local_lr (g' + wd p); p -= v, local_lr from the norms on the device."""
    @cuda.jit
    def update(p, rg, v, lr, pn_sq, gn_sq, mu, coeff, wd, eps):
        pn, gn = DT(sqrt64(pn_sq[0])), DT(sqrt64(gn_sq[0]))
        local = DT(lr[0])
        if wd > 0 and pn > 0 and gn > 0:
            local = local * coeff * pn / (gn + wd * pn + eps)
        for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
            t = rg[i] + wd * p[i]
            vi = v[i] * mu + local * t
            v[i] = vi
            p[i] = p[i] - vi
    return update


def lars_momentum(Param, Grad, Velocity, LearningRate, MasterParam, *, mu, lars_coeff, lars_weight_decay, epsilon,
                  multi_precision, rescale_grad):
    lars_check(Param, Grad, Velocity, LearningRate, MasterParam, lars_weight_decay, multi_precision)
    params, vels = [dev(p) for p in Param], [dev(v) for v in Velocity]
    masters = [dev(m) for m in MasterParam] if multi_precision else None
    for i, (param, g, v) in enumerate(zip(params, Grad, vels)):
        p = masters[i] if masters is not None else param
        check_shapes("lars_momentum", p, g, ("Velocity", v))
        dt = p.dtype.type
        rescale, update = _lars_rescale(dt), _lars_update(dt)
        rg = empty(p.shape, p.dtype)
        launch(rescale, p.size, flat(dev(g)), float_attr(dt, rescale_grad), flat(rg))
        pn, gn = squared_norm(p, _like_zero(p.dtype)), squared_norm(rg, _like_zero(p.dtype))
        lr = dev(LearningRate[i])
        lr = flat(lr if lr.dtype == p.dtype else cast_to(lr, p.dtype))
        launch(update, p.size, flat(p), flat(rg), flat(v), lr, pn, gn,
               *(float_attr(dt, a) for a in (mu, lars_coeff, lars_weight_decay[i], epsilon)))
        if p is not param:
            param.copy_to_device(cast_to(p, param.dtype))
    return params, vels, masters


register_kernel("lamb", "cuda", lamb)
register_kernel("lars_momentum", "cuda", lars_momentum)
