"""The AMP ops and float16 / bfloat16 kernels, cuda against NumPy (see kernel_check.py).

``CASES`` (run by test_op_kernels.py): check_finite_and_unscale and update_loss_scaling on float32
gradients with and without inf / nan, every counter branch. The tests below run low-precision
inputs: ``cast`` between float32, float16 and bfloat16 (ties, NaN, inf, overflow, subnormals), and
mul, matmul_v2, elementwise_add, relu and check_finite_and_unscale through the low-precision wrapper
(``refimpl/ops/low_precision.py``: widen, compute in float32, round the outputs) on both backends.
"""
import ml_dtypes
import numpy as np
import pytest

import cuda_backend
from cuda_backend.device import to_host
from kernel_check import Inputs, check_case, params
from refimpl.ops import low_precision
from refimpl.ops.registry import get_op_def

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

V = Inputs(18)
f32 = V.f32
BF16 = np.dtype(ml_dtypes.bfloat16)


def i32(v):
    return np.array([v], np.int32)


def with_value(x, v, at=1):
    x = x.copy()
    x.reshape(-1)[at] = v
    return x


ULS = dict(incr_every_n_steps=2, decr_every_n_nan_or_inf=2, incr_ratio=2.0, decr_ratio=0.5)
SCALE = np.array([1024.0], np.float32)
CASES = [
    ("check_finite_and_unscale", [[f32(2, 3), f32(4)], SCALE], {}),
    ("check_finite_and_unscale", [[f32(2, 3), with_value(f32(4), np.inf), f32(3)], SCALE], {}),
    ("check_finite_and_unscale", [[with_value(f32(5), np.nan, 0), f32(2)], np.array([3.0], np.float32)], {}),
    ("check_finite_and_unscale", [[np.zeros((0, 3), np.float32)], SCALE], {}),
    ("update_loss_scaling", [[f32(2, 3), f32(4)], np.array([False]), SCALE, i32(1), i32(0), None], ULS),
    ("update_loss_scaling", [[f32(2, 3)], np.array([False]), SCALE, i32(0), i32(0), None], ULS),
    ("update_loss_scaling", [[f32(2, 3), f32(4)], np.array([True]), SCALE, i32(3), i32(1), None], ULS),
    ("update_loss_scaling", [[f32(3)], np.array([True]), np.array([1.5], np.float32), i32(0), i32(1), None], ULS),
    ("update_loss_scaling", [[f32(3)], np.array([True]), SCALE, i32(0), i32(0), np.array([True])], ULS),
    ("update_loss_scaling", [[f32(3)], np.array([False]), SCALE, i32(1), i32(0), None],
     dict(ULS, stop_update=True)),
]

EDGES = np.array([1 + 2**-8, 1 + 3 * 2**-8, -1 - 2**-8, 3.14159, np.inf, -np.inf, np.nan, -np.nan, 1e-40,
                  3.4e38, 65504.0, 70000.0, 1e-8, -0.0, 0.0], np.float32)
with np.errstate(over="ignore"):
    F16_EDGES = EDGES.astype(np.float16)
CAST = [(EDGES, 22), (EDGES, 4), (EDGES.astype(BF16), 5), (EDGES.astype(BF16), 4),
        (F16_EDGES, 22), (F16_EDGES, 5), (EDGES.astype(BF16), 22),
        (np.arange(-3, 4).astype(np.int64), 22), (np.array([1.5, -2.5, 3.9, -0.0, 300.0], np.float32).astype(BF16), 3)]


def _to_host(a):
    return [_to_host(x) for x in a] if isinstance(a, list) else (to_host(a) if a is not None else None)


def _same(got, want, what):
    if isinstance(want, list):
        assert len(got) == len(want), what
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{what}[{k}]")
        return
    got, want = _to_host(got), np.asarray(want)
    assert (got.shape, got.dtype) == (want.shape, want.dtype), f"{what}: cuda {got.dtype}, numpy {want.dtype}"
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"{what}: {got} != {want}"


def _dev(a):
    return [_dev(x) for x in a] if isinstance(a, list) else (cuda_backend.to_device(a) if a is not None else None)


def _host(a):
    """A cuda kernel's input left on the host (a persistable set with ``tensor.set``, ``amp_init``...)."""
    return [_host(x) for x in a] if isinstance(a, list) else (np.array(a) if a is not None else None)


WHERE = {"device": _dev, "host": _host}


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("x, out_dtype", CAST, ids=[f"cast-{x.dtype}-{d}" for x, d in CAST])
def test_cast_low_precision(x, out_dtype, where):
    """A host input (ml_dtypes.bfloat16 included) gives the same bits as a device one."""
    cuda_backend.require()
    od = get_op_def("cast")
    want = od.kernel("numpy")[0](x.copy(), out_dtype=out_dtype)
    got = od.kernel("cuda")[0](WHERE[where](x.copy()), out_dtype=out_dtype)
    _same(got, want, f"cast {x.dtype} -> {out_dtype}")


@pytest.mark.parametrize("x", [EDGES, F16_EDGES], ids=["float32", "float16"])
def test_legacy_truncating_cast_on_both_backends(x):
    from refimpl.core.bfloat16 import legacy_truncating_cast
    cuda_backend.require()
    od = get_op_def("cast")
    with legacy_truncating_cast():
        want = od.kernel("numpy")[0](x.copy(), out_dtype=22)
        got = od.kernel("cuda")[0](_dev(x.copy()), out_dtype=22)
    assert want.view(np.uint16).tolist() == (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tolist()
    _same(got, want, "truncating cast")


def lp(dtype, *arrays):
    return [a.astype(dtype) if a.dtype == np.float32 else a for a in arrays]


LOW = [
    ("mul", lambda dt: lp(dt, f32(3, 4), f32(4, 5)), {}, [True]),
    ("mul_grad", lambda dt: lp(dt, f32(3, 4), f32(4, 5), f32(3, 5)), {}, [True, True]),
    ("matmul_v2", lambda dt: lp(dt, f32(2, 3, 4), f32(4, 2)), {}, [True]),
    ("matmul_v2", lambda dt: lp(dt, f32(2, 3, 4), f32(2, 5, 4)), {"trans_y": True}, [True]),
    ("matmul_v2_grad", lambda dt: lp(dt, f32(2, 3, 4), f32(4, 2), f32(2, 3, 2)), {}, [True, True]),
    ("elementwise_add", lambda dt: lp(dt, f32(4, 3), f32(3)), {}, [True]),
    ("elementwise_add_grad", lambda dt: lp(dt, f32(4, 3), f32(3), f32(4, 3)), {}, [True, True]),
    ("relu", lambda dt: lp(dt, f32(2, 5)), {}, [True]),
    ("relu_grad", lambda dt: lp(dt, np.maximum(f32(2, 5), 0), f32(2, 5)), {}, [True]),
    ("check_finite_and_unscale", lambda dt: [lp(dt, f32(3), with_value(f32(2), np.inf)), SCALE], {}, [True, False]),
]


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("op_type, make, attrs, rounded", LOW, ids=[c[0] for c in LOW])
def test_low_precision_kernels(op_type, make, attrs, rounded, dtype, where):
    """Both backends' wrapped kernels give the same bits; each rounded output has the low dtype; the
    cuda kernels' inputs on the device or (as a host persistable is) on the host."""
    cuda_backend.require()
    od = get_op_def(op_type)
    inputs = make(BF16 if dtype == "bfloat16" else np.float16)
    outs = [[dtype] * len(inputs[0]) if s.duplicable else dtype if r else None
            for s, r in zip(od.outputs, rounded)]
    results = []
    for backend, conv in (("numpy", lambda a: a), ("cuda", WHERE[where])):
        fn, names, wants_need = od.kernel(backend)
        kw = {a: attrs.get(a, od.default(a)) for a in names}
        if wants_need:
            kw["need"] = (True,) * len(od.outputs)
        res = low_precision.widened(fn, backend, outs, len(od.outputs) == 1)(*[conv(a) for a in inputs], **kw)
        results.append(res if len(od.outputs) > 1 else (res,))
    want, got = results
    for slot, w, g, r in zip(od.outputs, want, got, rounded):
        if r:
            first = w[0] if isinstance(w, list) else w
            assert first.dtype == (BF16 if dtype == "bfloat16" else np.float16), slot.name
        _same(g, w, f"{op_type} {slot.name}")


@pytest.mark.parametrize("op_type,inputs,attrs", params(CASES))
def test_amp_kernel_matches_numpy(op_type, inputs, attrs):
    check_case(op_type, inputs, attrs)


# ---- the zoo's AMP programs on both backends ----------------------------------------------------
ZOO_AMP = ["05_mlp_bf16", "07_mlp_fp16", "16_mlp_fp16"]


@pytest.mark.parametrize("case", ZOO_AMP)
def test_zoo_amp_program_on_both_backends(case):
    """Same GC events, memory stats and numbers (within rtol 1e-6; the bf16 MLP is bit for bit here)."""
    import os
    from harness import assert_same_run, run_recorded
    from oracle import load, oracle_file
    d = load(oracle_file(os.path.join("zoo", "programs", case + ".json")))
    assert_same_run(run_recorded(d, "cuda"), run_recorded(d, "numpy"))


def test_bfloat16_program_on_both_backends():
    """fill_constant, scale, cast and mul in bfloat16 through the executor: the same bits on both backends."""
    import refimpl as paddle
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [2, 3], "float32")
        xb = paddle.cast(x, "bfloat16")
        w = paddle.full([3, 2], 0.1, "bfloat16")
        h = paddle.static.nn.fc(x, 2)
        y = paddle.scale(paddle.matmul(xb, w), scale=0.353553, bias=0.1)
        out = [xb, w, y, paddle.cast(y, "float32"), paddle.cast(paddle.cast(h, "float16"), "bfloat16")]
    feed = {"x": V.f32(2, 3)}
    results = []
    for place in (paddle.CPUPlace(), paddle.CUDAPlace(0)):
        exe = paddle.static.Executor(place)
        scope = paddle.static.Scope()
        exe.run(startup, scope=scope)
        if results:  # the same fc weights on both
            for name, arr in results[0][1].items():
                scope.var(name).get_tensor().set(arr)
        params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
        results.append((exe.run(main, feed=feed, fetch_list=out, scope=scope), params))
    (want, _), (got, _) = results
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8)), k
