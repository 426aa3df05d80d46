"""CUDA kernels for refimpl.ops.creation_ops: fills, random initialisers, assign_value, embedding.

Mirrors Paddle's GPU ``FullKernel``, ``UniformRandomKernel``,
``GaussianKernel``, ``EmbeddingKernel`` / ``EmbeddingGradKernel``.
Differences: the random ops draw on the host with the CPU kernel's
generator and copy the result to the device (Paddle uses its Philox
generator on the device), so both backends start from the same numbers;
``assign_value`` copies its attr values from the host, as Paddle's GPU kernel does.
The embedding grad scatter-adds rows in id order, one thread per column
(deterministic, NumPy's ``np.add.at`` order) instead of Paddle's atomics;
out-of-range ids read as zero rows rather than raising (the check would be
a device to host read).
"""
import numpy as np

from refimpl.core.dtypes import to_numpy_dtype
from refimpl.ops import creation_ops as cpu
from refimpl.ops.registry import register_kernel

from .device import cuda, dev, empty, flat, launch, to_device, to_host


@cuda.jit
def _fill(out, v):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = v


def full(shape, value, dtype):
    dtype = np.dtype(dtype)
    out = empty(shape, dtype)
    launch(_fill, out.size, flat(out), dtype.type(value))
    return out


def host_or_none(t):
    """A host copy of ``t``, or None for None (an optional tensor input)."""
    return None if t is None else to_host(t)


def _shape(ShapeTensor, ShapeTensorList, shape):
    return cpu._shape(host_or_none(ShapeTensor), [host_or_none(t) for t in ShapeTensorList or []], shape)


def fill_constant(ValueTensor, ShapeTensor, ShapeTensorList, *, dtype, shape, value, str_value):
    dt = to_numpy_dtype(dtype)
    if ValueTensor is not None:
        value = to_host(ValueTensor).reshape(-1)[0]
    elif str_value:
        value = cpu.parse_str_value(str_value, dt)
    return full(_shape(ShapeTensor, ShapeTensorList, shape), value, dt)


def fill_any_like(X, *, value, dtype):
    return full(tuple(X.shape), value, X.dtype if dtype == -1 else to_numpy_dtype(dtype))


def uniform_random(ShapeTensor, ShapeTensorList, *, shape, dtype, min, max, seed, diag_num, diag_step,
                   diag_val):
    host = cpu.uniform_random(host_or_none(ShapeTensor), [host_or_none(t) for t in ShapeTensorList or []],
                              shape=shape, dtype=dtype, min=min, max=max, seed=seed, diag_num=diag_num,
                              diag_step=diag_step, diag_val=diag_val)
    return to_device(host)


def gaussian_random(ShapeTensor, ShapeTensorList, *, shape, mean, std, seed, dtype):
    host = cpu.gaussian_random(host_or_none(ShapeTensor), [host_or_none(t) for t in ShapeTensorList or []],
                               shape=shape, mean=mean, std=std, seed=seed, dtype=dtype)
    return to_device(host)


def fill_constant_batch_size_like(Input, *, shape, input_dim_idx, output_dim_idx, dtype, value, str_value):
    """Input is a shape-only meta (no need buffer)."""
    dt = to_numpy_dtype(dtype)
    if str_value:
        value = cpu.parse_str_value(str_value, dt)
    return full(cpu.batch_size_like_shape(tuple(Input.shape), shape, input_dim_idx, output_dim_idx), value, dt)


def assign_value(ValuesTensor, *, shape, dtype, values):
    if ValuesTensor is not None:
        return copy_array(dev(ValuesTensor))
    return to_device(cpu.assign_value(None, shape=shape, dtype=dtype, values=values))


@cuda.jit
def _copy(x, out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = x[i]


def copy_array(x):
    out = empty(tuple(x.shape), x.dtype)
    launch(_copy, out.size, flat(x), flat(out))
    return out


@cuda.jit
def _diagonal_ones(out, n, cols, one):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[i * cols + i] = one


def eye(*, num_rows, num_columns, dtype):
    rows, cols = cpu.eye_shape(num_rows, num_columns)
    dt = to_numpy_dtype(dtype)
    out = full((rows, cols), 0, dt)
    n = min(rows, cols)
    if n:
        launch(_diagonal_ones, n, flat(out), n, cols, dt.type(1))
    return out


def seed(*, seed, deterministic, rng_name, force_cpu):
    """A ``[1]`` int32 seed: the host kernel's value, copied to the device (dropout reads it back)."""
    return to_device(cpu.seed(seed=seed, deterministic=deterministic, rng_name=rng_name, force_cpu=force_cpu))


register_kernel("eye", "cuda", eye)
register_kernel("seed", "cuda", seed)
register_kernel("fill_constant", "cuda", fill_constant)
register_kernel("fill_constant_batch_size_like", "cuda", fill_constant_batch_size_like)
register_kernel("assign_value", "cuda", assign_value)
register_kernel("fill_any_like", "cuda", fill_any_like)
register_kernel("uniform_random", "cuda", uniform_random)
register_kernel("gaussian_random", "cuda", gaussian_random)


# ---- lookup_table_v2 ----------------------------------------------------------------------------
@cuda.jit
def _embed(ids, w, out, dim, vocab, padding_idx, zero):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        r = ids[i // dim]
        if r == padding_idx or r < 0 or r >= vocab:
            out[i] = zero
        else:
            out[i] = w[r * dim + i % dim]


@cuda.jit
def _embed_grad(ids, d, dw, dim, vocab, padding_idx):
    for c in range(cuda.grid(1), dim, cuda.gridsize(1)):
        for i in range(ids.size):
            r = ids[i]
            if r != padding_idx and 0 <= r < vocab:
                dw[r * dim + c] += d[i * dim + c]


def lookup_table_v2(Ids, W, *, padding_idx):
    W, ids = dev(W), dev(Ids)
    vocab, dim = W.shape
    out = empty(tuple(ids.shape) + (dim,), W.dtype)
    launch(_embed, out.size, flat(ids), flat(W), flat(out), dim, vocab, padding_idx, W.dtype.type(0))
    return out


def lookup_table_v2_grad(Ids, W, dOut, *, padding_idx):
    """W may be a shape-only meta (no need buffer): only W.shape is read."""
    ids, d = dev(Ids), dev(dOut)
    vocab, dim = W.shape
    dW = full((vocab, dim), 0, d.dtype)
    launch(_embed_grad, dim, flat(ids), flat(d), flat(dW), dim, vocab, padding_idx)
    return dW


register_kernel("lookup_table_v2", "cuda", lookup_table_v2)
register_kernel("lookup_table_v2_grad", "cuda", lookup_table_v2_grad)
