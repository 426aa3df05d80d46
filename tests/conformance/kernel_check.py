"""Call one registered kernel on both backends and compare (used by test_op_kernels*.py).

A case is ``(op_type, inputs, attrs)``: ``inputs`` holds one entry per input
slot of the op, in declared order (an array, ``None`` for an empty optional
slot, a list for a duplicable slot); ``attrs`` holds the attrs that differ
from the op's defaults, plus an optional ``"need"`` (one bool per output
slot, for kernels that skip unread outputs; all True when absent).

:func:`check_case` calls the NumPy kernel (the reference) on host copies and
the cuda kernel on device copies of the same values; both get a shape-only
``TensorMeta`` for an input in a no-need-buffer slot, as the executor passes
a freed var. The global random state is reseeded before each
call. It then compares every output and every input afterwards (the in-place
updates of the optimizers): same shape and dtype, and values bit for bit
(-0.0 is not 0.0; NaNs equal) except for the op types in :data:`ULP` (within
:data:`MAX_ULP` units in the last place) and :data:`CLOSE` (within rtol 1e-6).
Every cuda output must be a device array.

"""
import numpy as np
import pytest

import cuda_backend
from refimpl.core import random as rrandom
from refimpl.core.tensor import TensorMeta
from refimpl.ops.registry import OPS, get_op_def
from cuda_backend.device import is_device, to_host

from harness import assert_close

# op types whose behaviour is communication or I/O: covered by the other suites
EXCLUDED = {"feed", "fetch", "fetch_v2", "read", "create_py_reader", "create_double_buffer_reader",
            "send_v2", "recv_v2", "barrier", "conditional_block",
            "all_reduce", "all_gather", "broadcast", "reduce", "reduce_scatter",
            "partial_send", "partial_recv", "partial_allgather"}  # multi-rank: test_op_kernels_partial_p2p.py
EXCLUDED_PREFIXES = ("c_", "ps_")

# Transcendental functions: the kernels round a float64 result once (fmath), NumPy's own SIMD
# exp / log / tanh / pow (AVX2, AVX512) are not correctly rounded, so the two differ by an ulp or two.
ULP = {"tanh", "sigmoid", "exp", "log", "logsigmoid", "silu", "gelu", "pow", "elementwise_pow", "softmax",
       "softmax_with_cross_entropy", "logsigmoid_grad", "silu_grad", "gelu_grad", "pow_grad"}
MAX_ULP = 4
# Within rtol 1e-6: matrix-vector products (the NumPy kernel uses BLAS's gemv there, as Paddle's MKL
# does; larger products use BLAS too, but the cases here are small, where both kernels add over k in
# order), sums over both inner and outer axes (NumPy's buffered iterator picks its own order:
# reduce_sum over (0, 2), the grads that undo a broadcast of Y into the middle of X) and
# elementwise_pow_grad (pow and log differ by ulps). Everything else, matmuls, optimizers and
# layer_norm included, must agree bit for bit.
CLOSE = {"reduce_sum": 1e-7, "matmul_v2": 1e-7, "elementwise_add_grad": 1e-7, "elementwise_sub_grad": 1e-7,
         "elementwise_mul_grad": 1e-7, "elementwise_div_grad": 1e-7, "elementwise_pow_grad": 1e-7}

# the op families of real models keep their tolerance entries apart (one line each)
ULP |= set()    # conv_ops.py
CLOSE.update()  # conv_ops.py: none; below its BLAS threshold conv_ops.gemm sums over k in order, as the cuda matmul does
ULP |= set()    # norm_ops.py
CLOSE.update()  # norm_ops.py
ULP |= set()    # index_ops.py
CLOSE.update()  # index_ops.py
ULP |= {"sigmoid_cross_entropy_with_logits"}    # reduce_ops.py: exp / log (see above)
CLOSE.update(dict.fromkeys(["log_softmax", "log_softmax_grad", "sigmoid_cross_entropy_with_logits_grad"], 1e-6))  # reduce_ops.py: exp ulps, cancelled
ULP |= set()    # tensor ops: strided_slice, logical, bmm, accuracy, shape, assign_value
CLOSE.update()  # tensor ops: strided_slice, logical, bmm, accuracy, shape, assign_value
ULP |= set()    # conv_transpose_ops.py
CLOSE.update()  # conv_transpose_ops.py: none (conv_ops.gemm, see above)
ULP |= set()    # group_norm_ops.py, prelu_ops.py, spectral_norm_ops.py
CLOSE.update({t: 1e-6 for t in ("spectral_norm", "spectral_norm_grad")})  # group_norm_ops.py, prelu_ops.py, spectral_norm_ops.py: BLAS gemv and NumPy's pairwise norms vs the cuda kernels' in-order dot products
ULP |= set()    # extra ops: bilinear_tensor_product, auc, py_func
CLOSE.update(dict.fromkeys(["bilinear_tensor_product", "bilinear_tensor_product_grad"], 1e-7))  # extra ops: bilinear_tensor_product, auc, py_func: products above math_ops.SMALL_MATMUL go to BLAS (in order, bit for bit, below it)
ULP |= set()    # amp_ops.py
CLOSE.update()  # amp_ops.py
ULP |= set()    # lars_lamb_ops.py
CLOSE.update()  # lars_lamb_ops.py
ULP |= set()    # dgc_ops.py
CLOSE.update()  # dgc_ops.py
ULP |= {"c_softmax_with_cross_entropy"}    # model_parallel_ops.py: exp / log (see above)
CLOSE.update()  # model_parallel_ops.py

SEED = 20240611


def cuda_ops_to_cover():
    """Op types with a "cuda" kernel that a per-op case must exist for."""
    cuda_backend.require()
    return sorted(t for t, d in OPS.items() if "cuda" in d.kernels
                  and t not in EXCLUDED and not t.startswith(EXCLUDED_PREFIXES))





def params(cases):
    """pytest params for ``(op_type, inputs, attrs[, marks])`` cases, with ids ``op_type-<n>``."""
    seen, out = {}, []
    for c in cases:
        seen[c[0]] = seen.get(c[0], -1) + 1
        out.append(pytest.param(*c[:3], marks=c[3] if len(c) > 3 else (), id=f"{c[0]}-{seen[c[0]]}"))
    return out


# ---- random inputs --------------------------------------------------------------------------
class Inputs:
    """Seeded random arrays for the case tables: ``f32(2, 3)``, ``pos(4)``, ``i64(2, 3, lo=0, hi=5)``."""

    def __init__(self, seed):
        self.r = np.random.default_rng(seed)

    def f32(self, *shape):
        return self.r.standard_normal(shape).astype(np.float32)

    def f64(self, *shape):
        return self.r.standard_normal(shape)

    def pos(self, *shape, dt=np.float32):
        """Values in [0.5, 1.5)."""
        return (self.r.random(shape) + 0.5).astype(dt)

    def prob(self, *shape, dt=np.float32):
        """Values in (0, 1)."""
        return (self.r.random(shape) * 0.98 + 0.01).astype(dt)

    def i64(self, *shape, lo=-5, hi=6):
        return self.r.integers(lo, hi, shape, dtype=np.int64)

    def nonzero_i64(self, *shape):
        v = self.i64(*shape)
        return np.where(v == 0, 3, v)

    def mask(self, *shape):
        return self.r.integers(0, 2, shape).astype(np.uint8)

    def boolean(self, *shape):
        return self.r.random(shape) < 0.5


# ---- running ------------------------------------------------------------------------------------
def _prepare(value, meta, device):
    if isinstance(value, list):
        return [_prepare(v, meta, device) for v in value]
    if value is None:
        return None
    value = np.array(value, copy=True)
    if meta:
        return TensorMeta(value.shape, value.dtype)
    return cuda_backend.to_device(value) if device else value


def _call(od, backend, args, attrs, need):
    fn, attr_names, wants_need = od.kernel(backend)
    kw = {a: attrs[a] if a in attrs else od.default(a) for a in attr_names}
    if wants_need:
        kw["need"] = tuple(need) if need is not None else (True,) * len(od.outputs)
    rrandom.seed(SEED)  # the random ops and dropout draw the same numbers on both backends
    res = fn(*args, **kw)
    return res if len(od.outputs) > 1 else (res,)


def check_case(op_type, inputs, attrs):
    import cuda_backend
    cuda_backend.require()  # (an op without inputs uploads nothing that would register the kernels)
    od = get_op_def(op_type)
    attrs = dict(attrs)
    need = attrs.pop("need", None)
    unknown = set(attrs) - set(od.attrs)
    assert not unknown, f"case for {op_type} sets undeclared attrs {sorted(unknown)}"
    assert len(inputs) == len(od.inputs), f"case for {op_type}: {len(inputs)} inputs for slots {od.inputs}"
    nnb = set(od.no_need_buffer)  # both kernels get shape-only metas there, as from a freed var
    host = [_prepare(v, s.name in nnb, False) for s, v in zip(od.inputs, inputs)]
    dev = [_prepare(v, s.name in nnb, True) for s, v in zip(od.inputs, inputs)]
    want = _call(od, "numpy", host, attrs, need)
    got = _call(od, "cuda", dev, attrs, need)
    check = ("close", CLOSE[op_type]) if op_type in CLOSE else ("ulp" if op_type in ULP else "bits", None)
    assert len(got) == len(want) == len(od.outputs)
    for slot, g, w in zip(od.outputs, got, want):
        _compare(g, w, check, f"{op_type} output {slot.name}", result=True)
    for slot, g, w in zip(od.inputs, dev, host):  # in-place updates (and inputs left alone)
        _compare(g, w, check, f"{op_type} input {slot.name} after the call")


def _compare(got, want, check, what, result=False):
    if isinstance(got, TensorMeta):
        return
    if want is None or isinstance(want, list):
        assert type(got) is type(want), f"{what}: cuda gave {type(got).__name__}, numpy {type(want).__name__}"
        if want is not None:
            assert len(got) == len(want), f"{what}: {len(got)} arrays, numpy gave {len(want)}"
            for i, (g, w) in enumerate(zip(got, want)):
                _compare(g, w, check, f"{what}[{i}]", result)
        return
    assert not result or is_device(got), f"{what}: the cuda kernel returned a host {type(got).__name__}"
    got, want = to_host(got), np.asarray(want)
    assert (got.shape, got.dtype) == (want.shape, want.dtype), \
        f"{what}: cuda {got.shape} {got.dtype}, numpy {want.shape} {want.dtype}"
    mode, atol = check
    if mode == "close":
        assert_close(got, want, rtol=1e-6, atol=atol, what=what)
        return
    bad = np.flatnonzero(~(same_bits if mode == "bits" else within_ulp)(got, want))
    if bad.size:
        i = bad[:5]
        how = "not bit-identical" if mode == "bits" else f"more than {MAX_ULP} ulps apart"
        raise AssertionError(f"{what}: {bad.size} element(s) {how}, first at flat {i.tolist()}: "
                             f"cuda {got.reshape(-1)[i].tolist()} numpy {want.reshape(-1)[i].tolist()}")


def same_bits(a, b):
    """Per element (flat): equal bit for bit (-0.0 is not 0.0), NaNs of any payload counting as equal."""
    a, b = a.reshape(-1), b.reshape(-1)
    if a.dtype.kind != "f":
        return a == b
    both_nan = np.isnan(a) & np.isnan(b)
    return both_nan | ((a == b) & (np.signbit(a) == np.signbit(b)))


def within_ulp(a, b, n=MAX_ULP):
    """Per element (flat): at most ``n`` units in the last place of ``b`` apart (NaNs, infs must agree)."""
    a, b = a.reshape(-1), b.reshape(-1)
    if a.dtype.kind != "f":
        return a == b
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        ulp = np.spacing(np.abs(b)).astype(np.float64)
        return both_nan | (a == b) | (np.isfinite(b) & (diff <= n * ulp))
