"""CUDA kernels for ``log_softmax``, ``one_hot_v2`` and ``sigmoid_cross_entropy_with_logits`` of
``refimpl/ops/reduce_ops.py`` (the rest of that module's ops are in ``ops_reduce.py``).

Mirrors Paddle's ``paddle/phi/kernels/gpu/log_softmax_kernel.cu``, ``one_hot_kernel.cu`` and
``sigmoid_cross_entropy_with_logits_kernel.cu`` with the NumPy kernels' arithmetic: one thread per
row for log_softmax (the max, exp(x - max), NumPy's sum of those via ``ew.row_sum``, then
(x - max) - log(sum)), one thread per element otherwise. exp / log are computed in float64 and
rounded once (``fmath``), so these agree with NumPy's float32 exp / log to a few ulps (and, after
a cancelling subtraction, to about 1e-6 absolute); Paddle's GPU kernels use the float32 intrinsics.
The one-hot range check is one pass that raises a flag, read back to the host.
"""
import numpy as np

from refimpl.core.dtypes import to_numpy_dtype
from refimpl.core.errors import InvalidArgument
from refimpl.ops.reduce_ops import check_axis
from refimpl.ops.registry import register_kernel

from . import ew
from .device import cuda, dev, empty, flat, kernel_factory, launch, scalar_of, to_device
from .fmath import exp64, log64
from .ops_activation import row_layout
from .ops_math import const
from .ops_matmul import f_zero
from .ops_nn import f_over

B = ew.functor(2)


# ---- log_softmax -------------------------------------------------------------------------------
@kernel_factory
def _log_softmax_kernel(DT):
    @cuda.jit
    def log_softmax(x, out, rows, n, inner, zero, scratch):
        """Per row: the max (a NaN wins, as np.max), exp(x - max) into out, NumPy's sum of those, then
        (x - max) - log(sum)."""
        for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
            base = (r // inner) * n * inner + r % inner
            m = x[base]
            for j in range(1, n):
                v = x[base + j * inner]
                if m == m and (v != v or v > m):
                    m = v
            for j in range(n):
                out[base + j * inner] = DT(exp64(x[base + j * inner] - m))
            lse = DT(log64(ew.row_sum(out, r, base, n, inner, zero, scratch)))
            for j in range(n):
                k = base + j * inner
                out[k] = (x[k] - m) - lse
    return log_softmax


@kernel_factory
def _log_softmax_grad_kernel(DT):
    @cuda.jit
    def log_softmax_grad(o, d, out, rows, n, inner, zero, scratch):
        for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
            base = (r // inner) * n * inner + r % inner
            s = ew.row_sum(d, r, base, n, inner, zero, scratch)
            for j in range(n):
                k = base + j * inner
                out[k] = d[k] - DT(exp64(o[k])) * s
    return log_softmax_grad


def log_softmax(X, *, axis):
    X = dev(X)
    shape = tuple(X.shape)
    rows, n, inner = row_layout(shape, check_axis("log_softmax", "axis", axis, len(shape)))
    out = empty(shape, X.dtype)
    if not shape:
        return ew.run1(f_zero, X)
    launch(_log_softmax_kernel(X.dtype.type), rows, flat(X), flat(out), rows, n, inner, X.dtype.type(0),
           ew.scratch_for(rows, n, X.dtype))
    return out


def log_softmax_grad(Out, dOut, *, axis):
    Out, dOut = dev(Out), dev(dOut)
    shape = tuple(Out.shape)
    rows, n, inner = row_layout(shape, check_axis("log_softmax_grad", "axis", axis, len(shape)))
    if not shape:
        return ew.run1(f_zero, dOut)
    out = empty(shape, Out.dtype)
    launch(_log_softmax_grad_kernel(Out.dtype.type), rows, flat(Out), flat(dOut), flat(out), rows, n, inner,
           Out.dtype.type(0), ew.scratch_for(rows, n, Out.dtype))
    return out


register_kernel("log_softmax", "cuda", log_softmax)
register_kernel("log_softmax_grad", "cuda", log_softmax_grad)


# ---- one_hot_v2 --------------------------------------------------------------------------------------
@cuda.jit
def _out_of_range(x, depth, flag):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        if x[i] < 0 or x[i] >= depth:
            flag[0] = 1


@cuda.jit
def _one_hot(x, out, depth):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = 1 if x[i // depth] == i % depth else 0


def one_hot_v2(X, depth_tensor, *, depth, dtype, allow_out_of_range):
    X = dev(X)
    if depth_tensor is not None:
        depth = int(scalar_of(depth_tensor))
    if depth < 1:
        raise InvalidArgument(f"one_hot_v2: depth={depth} must be at least 1")
    if X.size and not allow_out_of_range:
        flag = to_device(np.zeros(1, np.int32))
        launch(_out_of_range, X.size, flat(X), depth, flag)
        if flag.copy_to_host()[0]:
            raise InvalidArgument(f"one_hot_v2: X holds a label outside [0, depth={depth})")
    out = empty(tuple(X.shape) + (depth,), to_numpy_dtype(dtype))
    launch(_one_hot, out.size, flat(X), flat(out), depth)
    return out


register_kernel("one_hot_v2", "cuda", one_hot_v2)


# ---- sigmoid_cross_entropy_with_logits ------------------------------------------------------------------
@kernel_factory
def _sce_kernel(DT):
    @cuda.jit
    def sce(x, label, pw, has_pw, ignore_index, out):
        """Paddle 3.3.1's CPU formulas: max(x, 0) - x * label + log(1 + exp(-|x|)); with pos_weight
        (m = max(-x, 0)) (1 - label) * x + pos_weight * (log(exp(-m) + exp(-x - m)) + m)."""
        for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            v, lab = x[i], label[i]
            if np.int32(lab) == ignore_index:
                out[i] = DT(0)
                continue
            if not has_pw:
                out[i] = ((v if v > 0 else DT(0)) - v * lab) + DT(log64(DT(1) + DT(exp64(-abs(v)))))
            else:
                mx = -v if v < 0 else DT(0)
                soft = DT(log64(DT(exp64(-mx)) + DT(exp64(-v - mx))))
                out[i] = (DT(1) - lab) * v + pw[i] * (soft + mx)
    return sce


@kernel_factory
def _sce_grad_kernel(DT):
    @cuda.jit
    def sce_grad(x, label, pw, has_pw, d, ignore_index, out):
        for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            v, lab = x[i], label[i]
            if np.int32(lab) == ignore_index:
                out[i] = DT(0)
                continue
            if not has_pw:
                e = DT(exp64(-abs(v)))
                up = -e * (DT(1) if v >= 0 else DT(-1))
                diff = ((DT(1) if v > 0 else DT(0)) - lab) + up / (DT(1) + e)
            else:
                mx = -v if v < 0 else DT(0)
                t1 = DT(-1) if v < 0 else DT(0)
                d1, d2 = DT(exp64(-mx)), DT(exp64(-v - mx))
                t2 = d1 * -t1 + d2 * (DT(-1) - t1)
                diff = pw[i] * (t2 / (d1 + d2) + t1) + (DT(1) - lab)
            out[i] = d[i] * diff
    return sce_grad


@B
def f_not_ignored(DT):
    def keep(lab, ign, a, b):
        diff = lab - ign
        return 1 if (diff < -a or diff > a) else 0
    return keep


def _normalized(out, Label, ignore_index):
    """out / the count of labels more than 1e-6 away from ignore_index (Paddle's normalizer)."""
    t = Label.dtype.type
    keep = ew.run_n(f_not_ignored, [Label, const(ignore_index, Label.dtype)], 1e-6, out_dtype=np.int64,
                    shape=tuple(Label.shape))
    n = scalar_of(ew.sum_axes(flat(keep), (0,), keep_shape=(1,)))
    return ew.run1(f_over, out, t(n))


def _sce_args(X, Label, pos_weight, name):
    if tuple(X.shape) != tuple(Label.shape):
        raise InvalidArgument(f"{name}: X {list(X.shape)} and Label {list(Label.shape)} differ in shape")
    pw = flat(dev(pos_weight)) if pos_weight is not None else to_device(np.ones(1, X.dtype))
    return flat(dev(X)), flat(dev(Label)), pw, pos_weight is not None


def sigmoid_cross_entropy_with_logits(X, Label, pos_weight, *, normalize, ignore_index):
    x, lab, pw, has_pw = _sce_args(X, Label, pos_weight, "sigmoid_cross_entropy_with_logits")
    out = empty(tuple(X.shape), X.dtype)
    launch(_sce_kernel(X.dtype.type), X.size, x, lab, pw, has_pw, ignore_index, flat(out))
    return _normalized(out, dev(Label), ignore_index) if normalize else out


def sigmoid_cross_entropy_with_logits_grad(X, Label, pos_weight, dOut, *, normalize, ignore_index):
    x, lab, pw, has_pw = _sce_args(X, Label, pos_weight, "sigmoid_cross_entropy_with_logits_grad")
    out = empty(tuple(X.shape), X.dtype)
    launch(_sce_grad_kernel(X.dtype.type), X.size, x, lab, pw, has_pw, flat(dev(dOut)), ignore_index, flat(out))
    return _normalized(out, dev(Label), ignore_index) if normalize else out


register_kernel("sigmoid_cross_entropy_with_logits", "cuda", sigmoid_cross_entropy_with_logits)
register_kernel("sigmoid_cross_entropy_with_logits_grad", "cuda", sigmoid_cross_entropy_with_logits_grad)
