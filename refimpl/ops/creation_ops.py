"""Creation ops: fill_constant, fill_any_like, uniform_random, gaussian_random, assign_value,
fill_constant_batch_size_like, and the embedding lookup lookup_table_v2 (+ its grad).

Each mirrors the Paddle op of the same name: same slots, same attrs and
defaults. As in Paddle, a shape comes from ``ShapeTensorList`` first, then
``ShapeTensor``, then the ``shape`` attr; ``fill_constant``'s value comes
from ``ValueTensor``, then a non-empty ``str_value``, then ``value``.

The random ops draw Paddle's CPU numbers (``refimpl.core.random``: the
``std::mt19937_64`` engine and libstdc++'s distributions), element after
element in row-major order: after ``paddle.seed(n)`` an op with ``seed`` 0
gives what Paddle's CPU kernel gives; a non-zero ``seed`` attr gives every
run the numbers of a fresh engine seeded with it.

Differences from Paddle: ``lookup_table_v2_grad`` always produces a dense
gradient (no SelectedRows). ``assign_value`` carries its numbers in Paddle 3's
``values`` attr (a list of Python numbers; Paddle 2.6 spread them over
``fp32_values`` / ``int64_values`` ...); ``fill_constant_batch_size_like``
takes dim ``output_dim_idx`` of its ``shape`` from Input's dim
``input_dim_idx`` and reads only Input's shape.
"""
import functools

import numpy as np

from refimpl.core.dtypes import VARTYPE_TO_NAME, convert_dtype, to_numpy_dtype
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.core.random import engine_for, normal, uniform

from .common import first
from .grad_maker import simple_grad
from .registry import register_op


@functools.lru_cache(maxsize=None)
def _numpy_dtype(dtype):
    """``to_numpy_dtype`` of an op's (hashable) dtype attr, looked up once per value."""
    return to_numpy_dtype(dtype)


def _shape(ShapeTensor, ShapeTensorList, shape):
    if ShapeTensorList:
        return tuple(int(np.asarray(t).reshape(-1)[0]) for t in ShapeTensorList)
    if ShapeTensor is not None:
        return tuple(int(d) for d in np.asarray(ShapeTensor).reshape(-1))
    return tuple(int(d) for d in shape)


def _infer_shape_attr(ins, attrs):
    """Static output shape: the attr, or -1s when the shape comes from tensors."""
    shape = tuple(attrs["shape"])
    if ins.get("ShapeTensorList"):
        return shape if len(shape) == len(ins["ShapeTensorList"]) else (-1,) * len(ins["ShapeTensorList"])
    if ins.get("ShapeTensor") and not shape:
        return (-1,) * first(ins, "ShapeTensor")[0][0]
    return shape


def _dtype_infer(ins, attrs):
    return {"Out": (_infer_shape_attr(ins, attrs), VARTYPE_TO_NAME[attrs["dtype"]])}


_SHAPE_SLOTS = ["ShapeTensor?", "ShapeTensorList*?"]


# ---- fill_constant -------------------------------------------------------------
def parse_str_value(s, np_dtype):
    """``str_value`` as a number of the target kind (keeps int64 exact; "inf"/"nan" work)."""
    if np_dtype.kind in "iu":
        try:
            return int(s)
        except ValueError:
            return int(float(s))
    if np_dtype.kind == "b":
        low = s.strip().lower()
        return low == "true" if low in ("true", "false") else float(s) != 0
    return float(s)


@register_op("fill_constant", ["ValueTensor?"] + _SHAPE_SLOTS, ["Out"],
             {"dtype": 5, "shape": [], "value": 0.0, "str_value": "", "force_cpu": False,
              "place_type": -1},
             infer_shape=_dtype_infer)
def fill_constant(ValueTensor, ShapeTensor, ShapeTensorList, *, dtype, shape, value, str_value):
    dt = _numpy_dtype(dtype)
    if ValueTensor is not None:
        value = np.asarray(ValueTensor).reshape(-1)[0]
    elif str_value:
        value = parse_str_value(str_value, dt)
    return np.full(_shape(ShapeTensor, ShapeTensorList, shape), value, dtype=dt)


def _fill_any_like_infer(ins, attrs):
    shape, dt = first(ins, "X")
    return {"Out": (tuple(shape), dt if attrs["dtype"] == -1 else convert_dtype(attrs["dtype"]))}


@register_op("fill_any_like", ["X"], ["Out"], {"value": 0.0, "dtype": -1},
             infer_shape=_fill_any_like_infer)
def fill_any_like(X, *, value, dtype):
    dt = X.dtype if dtype == -1 else to_numpy_dtype(dtype)
    return np.full(X.shape, value, dtype=dt)


# ---- random ----------------------------------------------------------------------
@register_op("uniform_random", _SHAPE_SLOTS, ["Out"],
             {"shape": [], "dtype": 5, "min": -1.0, "max": 1.0, "seed": 0,
              "diag_num": 0, "diag_step": 0, "diag_val": 1.0},
             infer_shape=_dtype_infer)
def uniform_random(ShapeTensor, ShapeTensorList, *, shape, dtype, min, max, seed,
                   diag_num, diag_step, diag_val):
    dims = _shape(ShapeTensor, ShapeTensorList, shape)
    out = uniform(engine_for(seed), int(np.prod(dims)), min, max, _numpy_dtype(dtype)).reshape(dims)
    if diag_num > 0:  # Paddle's diagonal init: element i * (diag_step + 1) set to diag_val
        flat = out.reshape(-1)
        idx = np.arange(diag_num) * (diag_step + 1)
        if idx[-1] >= flat.size:
            raise InvalidArgument(f"uniform_random: diag_num {diag_num} / diag_step {diag_step} "
                                  f"exceed {flat.size} elements")
        flat[idx] = diag_val
    return out


@register_op("gaussian_random", _SHAPE_SLOTS, ["Out"],
             {"shape": [], "mean": 0.0, "std": 1.0, "seed": 0, "dtype": 5},
             infer_shape=_dtype_infer)
def gaussian_random(ShapeTensor, ShapeTensorList, *, shape, mean, std, seed, dtype):
    dims = _shape(ShapeTensor, ShapeTensorList, shape)
    return normal(engine_for(seed), int(np.prod(dims)), mean, std, _numpy_dtype(dtype)).reshape(dims)


@register_op("seed", [], ["Out"], {"seed": 0, "deterministic": False, "rng_name": "", "force_cpu": False},
             infer_shape=lambda ins, attrs: {"Out": ((1,), "int32")})
def seed(*, seed, deterministic, rng_name, force_cpu):
    """Paddle's ``seed`` op (``paddle/fluid/operators/seed_op.h``): the ``seed`` attr, or, when it is
    0, a fresh seed from the OS (Paddle: ``std::random_device``), as a ``[1]`` int32 tensor. Recompute
    puts one before each dropout so that the forward and its re-run draw the same mask."""
    if deterministic:
        raise Unimplemented(f"seed: deterministic=True (rng_name {rng_name!r}) needs Paddle's named "
                            f"generators, which refimpl lacks")
    value = int(seed) if seed != 0 else int(np.random.SeedSequence().entropy % (2**31 - 1)) + 1
    return np.array([value], dtype=np.int32)


# ---- lookup_table_v2 ----------------------------------------------------------------
def _ids(Ids, vocab):
    ids = np.asarray(Ids)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise InvalidArgument(f"lookup_table_v2: ids must be in [0, {vocab}), got "
                              f"[{ids.min()}, {ids.max()}]")
    return ids


def _lookup_infer(ins, attrs):
    ids, _ = first(ins, "Ids")
    w, dt = first(ins, "W")
    return {"Out": (tuple(ids) + (w[1],), dt)}


@register_op("lookup_table_v2", ["Ids", "W"], ["Out"], {"padding_idx": -1},
             infer_shape=_lookup_infer,
             grad=simple_grad("lookup_table_v2_grad", ["Ids", "W", "Out@GRAD"], ["W@GRAD"]))
def lookup_table_v2(Ids, W, *, padding_idx):
    ids = _ids(Ids, W.shape[0])
    out = W[ids]
    if padding_idx != -1:
        out[ids == padding_idx] = 0
    return out


@register_op("lookup_table_v2_grad", ["Ids", "W", "Out@GRAD"], ["W@GRAD"], {"padding_idx": -1},
             infer_shape=lambda ins, attrs: {"W@GRAD": first(ins, "W")}, no_need_buffer=["W"])
def lookup_table_v2_grad(Ids, W, dOut, *, padding_idx):
    """W may be a shape-only meta (no need buffer): only W.shape is read."""
    ids = _ids(Ids, W.shape[0]).reshape(-1)
    rows = dOut.reshape(ids.size, W.shape[1])
    if padding_idx != -1:
        keep = ids != padding_idx
        ids, rows = ids[keep], rows[keep]
    dW = np.zeros(W.shape, dtype=dOut.dtype)
    np.add.at(dW, ids, rows)
    return dW


# ---- assign_value -------------------------------------------------------------------------
def _assign_value_infer(ins, attrs):
    if ins.get("ValuesTensor"):
        return {"Out": first(ins, "ValuesTensor")}
    return {"Out": (tuple(attrs["shape"]), VARTYPE_TO_NAME[attrs["dtype"]])}


@register_op("assign_value", ["ValuesTensor?"], ["Out"], {"shape": [], "dtype": 5, "values": []},
             infer_shape=_assign_value_infer)
def assign_value(ValuesTensor, *, shape, dtype, values):
    """``values`` (Paddle 3's Scalar list: Python numbers) reshaped to ``shape``, in ``dtype``."""
    if ValuesTensor is not None:
        return np.array(ValuesTensor)
    n = int(np.prod(shape, dtype=np.int64))
    if len(values) != n:
        raise InvalidArgument(f"assign_value: {len(values)} values do not fill shape {list(shape)} "
                              f"({n} elements)")
    dt = _numpy_dtype(dtype)
    try:
        return np.array(values, dtype=dt).reshape(tuple(shape))
    except OverflowError:
        bad = next(v for v in values if _overflows(v, dt))
        raise InvalidArgument(f"assign_value: value {bad} does not fit dtype {convert_dtype(dtype)}") from None


def _overflows(value, dt):
    try:
        np.array(value, dtype=dt)
        return False
    except OverflowError:
        return True


# ---- eye --------------------------------------------------------------------------------------
def eye_shape(num_rows, num_columns):
    """(rows, columns) of ``eye``; ``num_columns`` -1 means square, as Paddle's ``EyeInferMeta``."""
    cols = num_rows if num_columns == -1 else num_columns
    if num_rows < 0 or cols < 0:
        raise InvalidArgument(f"eye: num_rows ({num_rows}) and num_columns ({num_columns}) must be >= 0 "
                              f"(num_columns -1: square)")
    return int(num_rows), int(cols)


@register_op("eye", [], ["Out"], {"num_rows": 0, "num_columns": -1, "dtype": 5},
             infer_shape=lambda ins, attrs: {"Out": (eye_shape(attrs["num_rows"], attrs["num_columns"]),
                                                     VARTYPE_TO_NAME[attrs["dtype"]])})
def eye(*, num_rows, num_columns, dtype):
    """Ones on the main diagonal of a [num_rows, num_columns] matrix (``paddle/phi/kernels/impl/eye_kernel_impl.h``)."""
    return np.eye(*eye_shape(num_rows, num_columns), dtype=_numpy_dtype(dtype))


# ---- fill_constant_batch_size_like ---------------------------------------------------------
def batch_size_like_shape(in_shape, shape, input_dim_idx, output_dim_idx, op="fill_constant_batch_size_like",
                          unknown_ok=False):
    """``shape`` with dim ``output_dim_idx`` taken from Input's dim ``input_dim_idx``.

    A -1 left in another dim passes the build (``unknown_ok``, as Paddle's infer-meta lets it) but is
    an InvalidArgument at run time, where Paddle fails to allocate the tensor.
    """
    if not 0 <= input_dim_idx < len(in_shape):
        raise InvalidArgument(f"{op}: input_dim_idx {input_dim_idx} is out of range for Input of rank "
                              f"{len(in_shape)}")
    if not 0 <= output_dim_idx < len(shape):
        raise InvalidArgument(f"{op}: output_dim_idx {output_dim_idx} is out of range for shape {list(shape)}")
    out = [int(d) for d in shape]
    out[output_dim_idx] = int(in_shape[input_dim_idx])
    if not unknown_ok and any(d < 0 for d in out):
        raise InvalidArgument(f"{op}: shape {list(shape)} leaves a negative dim outside output_dim_idx "
                              f"{output_dim_idx} (Out would be {out})")
    return tuple(out)


def _batch_size_like_infer(ins, attrs):
    xs, _ = first(ins, "Input")
    shape = batch_size_like_shape(xs, attrs["shape"], attrs["input_dim_idx"], attrs["output_dim_idx"],
                                  unknown_ok=True)
    return {"Out": (shape, VARTYPE_TO_NAME[attrs["dtype"]])}


@register_op("fill_constant_batch_size_like", ["Input"], ["Out"],
             {"shape": [], "input_dim_idx": 0, "output_dim_idx": 0, "dtype": 5, "value": 0.0, "str_value": "",
              "force_cpu": False},
             infer_shape=_batch_size_like_infer, no_need_buffer=["Input"])
def fill_constant_batch_size_like(Input, *, shape, input_dim_idx, output_dim_idx, dtype, value, str_value):
    """Input may be a shape-only meta (no need buffer); a non-empty ``str_value`` wins over ``value``."""
    dt = _numpy_dtype(dtype)
    if str_value:
        value = parse_str_value(str_value, dt)
    return np.full(batch_size_like_shape(Input.shape, shape, input_dim_idx, output_dim_idx), value, dtype=dt)
