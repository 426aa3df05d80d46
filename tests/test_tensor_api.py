"""The tensor functions (refimpl/tensor): the zoo's recorded ops, their numbers, their errors.

- The pieces of ``04_tensor_ops`` and ``02_gpt_mini`` (recorded by Paddle 2.6.2) that the tensor
  functions and Variable operators emit are built here with the same calls, with stand-in vars
  (of the recorded names) for what other APIs produce, and compared op by op with the recording:
  types, inputs, outputs, attrs, and every output var's shape, dtype and stop_gradient.
- Every function runs through refimpl's Executor and is compared with a NumPy formula.
- Bad input raises a typed error naming the function, the argument and the value, at build time.
"""
import re

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, OutOfRange, Unimplemented
from refimpl.framework import unique_name

from oracle import load, oracle_file

VERSION_ONLY_ATTRS = {"use_mkldnn", "mkldnn_data_type", "use_quantizer"}


# Paddle 2.6.2 names ``paddle.add``'s output after its helper (``elementwise_add_0``); Paddle 3.3.1
# (FLAGS_enable_pir_api=0) prints ``elementwise_add_0.tmp_0`` for the same call, as refimpl names it.
_ADD_OUT_262 = re.compile(r"^elementwise_add_\d+$")


def _as_331(name):
    return name + ".tmp_0" if _ADD_OUT_262.match(name) else name


def _recorded(case):
    d = load(oracle_file(f"zoo/programs/{case}.json"))
    block = d["main"]["blocks"][0]
    ops = [dict(o, inputs={k: [_as_331(n) for n in v] for k, v in o["inputs"].items()},
                outputs={k: [_as_331(n) for n in v] for k, v in o["outputs"].items()}) for o in block["ops"]]
    return ops, {_as_331(v["name"]): v for v in block["vars"]}


def _compare(main, case):
    """Differences between every op of ``main`` and the recorded op that writes the same first output."""
    ops, rvars = _recorded(case)
    by_out = {next(iter(o["outputs"].values()))[0]: o for o in ops if o["attrs"].get("op_role", 0) == 0}
    block, out = main.global_block(), []
    for op in block.ops:
        first = next(iter(op.outputs.values()))[0]
        want = by_out.get(first)
        if want is None or want["type"] != op.type:
            out.append(f"{op.type} -> {first}: no recorded op of that type writes it")
            continue
        if {k: v for k, v in op.inputs.items() if v} != {k: v for k, v in want["inputs"].items() if v}:
            out.append(f"{op.type} -> {first}: inputs {dict(op.inputs)} != {want['inputs']}")
        if dict(op.outputs) != want["outputs"]:
            out.append(f"{op.type} -> {first}: outputs {dict(op.outputs)} != {want['outputs']}")
        for a, v in want["attrs"].items():
            if a.startswith("op_") or a in VERSION_ONLY_ATTRS or a == "with_quant_attr":
                continue
            if not op.has_attr(a) or op.attr(a) != v:
                out.append(f"{op.type} -> {first}: attr {a} {op.attr(a) if op.has_attr(a) else '<absent>'} != {v}")
        for n in op.output_arg_names:
            v, r = block.var(n), rvars[n]
            if (list(v.shape), v.dtype, v.stop_gradient) != (r["shape"], r["dtype"], r["stop_gradient"]):
                out.append(f"var {n}: {(list(v.shape), v.dtype, v.stop_gradient)} != "
                           f"{(r['shape'], r['dtype'], r['stop_gradient'])}")
    return out


def _program(fn):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fn()
    return main


def _stand_in(name, shape, dtype="float32", stop_gradient=True):
    """A var of a recorded name standing for what another API (one_hot, an nn.Layer ...) produced."""
    v = paddle.static.data(name, shape, dtype)
    v.stop_gradient = stop_gradient
    return v


def test_tensor_ops_pieces_equal_the_recorded_program():
    def build():  # zoo.py z_tensor_ops with rows 5, cols 6, out 3
        r, c, k = 5, 6, 3
        x = paddle.static.data("x", [None, r, c], "float32")
        w = paddle.static.create_parameter([c, c], "float32", name="w_ops")
        b = paddle.static.create_parameter([1, c], "float32", name="b_ops")
        h = x @ w
        s = h[:, 1:r - 1, :]
        sq = paddle.squeeze(paddle.unsqueeze(s, axis=1), axis=1)
        st = paddle.stack([sq, sq * 0.5], axis=1)
        cat = paddle.concat([st[:, 0], st[:, 1], h], axis=1)
        idx = paddle.arange(0, 3 * r - 4, 2, dtype="int64")
        g = paddle.gather(cat, idx, axis=1)
        g = paddle.where(g > 0, g, g * 0.1)
        rows = g.shape[1]
        g = g + paddle.expand(b, [rows, c])
        cs = paddle.clip(paddle.cumsum(g, axis=-1), min=-3.0, max=3.0)
        a = paddle.abs(cs)
        paddle.argmax(a, axis=-1)
        oh = _stand_in("one_hot_v2_0.tmp_0", [-1, rows, c])          # F.one_hot
        paddle.max(a * oh, axis=-1)
        paddle.min(a, axis=-1)
        paddle.full([1], 1.0)                                          # F.binary_cross_entropy_with_logits' own
        paddle.full([1], 0.5, dtype="float32")
        paddle.cast(paddle.arange(k, dtype="int64"), "float32") * 0.1 + paddle.ones([k], "float32")

    main = _program(build)
    assert len(main.global_block().ops) == 24 + 3 + 10
    assert _compare(main, "04_tensor_ops") == []


def test_gpt_mask_pieces_equal_the_recorded_program():
    def build():  # zoo.py _gpt with seq 5, dim 8, heads 2, mask "where"
        paddle.arange(5, dtype="int64")
        paddle.static.default_main_program().name_generator("tmp")    # tok(ids) + pos(...) made tmp_0
        q = _stand_in("transpose_0.tmp_0", [-1, 2, 5, 4], stop_gradient=False)
        k = _stand_in("transpose_1.tmp_0", [-1, 2, 5, 4], stop_gradient=False)
        s = paddle.scale(paddle.matmul(q, k, transpose_y=True), scale=0.5)
        causal = paddle.tril(paddle.ones([5, 5], dtype="float32"))
        paddle.where(causal > 0.5, s, paddle.full_like(s, -1e9))

    main = _program(build)
    assert [op.type for op in main.global_block().ops][-4:] == ["elementwise_add", "elementwise_add", "cast", "where"]
    assert len(main.global_block().ops) == 4 + 19
    assert _compare(main, "02_gpt_mini") == []


def test_the_comparison_sees_a_wrong_attr():
    main = _program(lambda: paddle.arange(5, dtype="int32"))
    assert any("attr dtype 2 != 3" in p for p in _compare(main, "02_gpt_mini"))


# ---- numbers ---------------------------------------------------------------------------------
RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 3, 4)).astype("float32")
Y = RNG.standard_normal((3, 4)).astype("float32")


def _run(build, feed):
    """(fetched arrays, NumPy expectations) of ``build(vars) -> [(var, expected), ...]``."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        vs = {n: paddle.static.data(n, [-1, *a.shape[1:]] if n == "x" else list(a.shape), a.dtype.name)
              for n, a in feed.items()}
        pairs = build(vs)
    exe = paddle.static.Executor(paddle.CPUPlace())
    got = exe.run(main, feed=feed, fetch_list=[v for v, _ in pairs])
    return got, [w for _, w in pairs]


def _check(build, feed, exact=False):
    got, want = _run(build, feed)
    for i, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.shape == w.shape, f"output {i}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype} != {w.dtype}"
        if exact or w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=f"output {i}")


def test_creation_numbers():
    f32, i64 = np.float32, np.int64
    _check(lambda v: [
        (paddle.full([2, 3], 7, dtype="int64"), np.full((2, 3), 7, i64)),
        (paddle.full([2], 2.5), np.full(2, 2.5, f32)),
        (paddle.zeros([2, 3]), np.zeros((2, 3), f32)),
        (paddle.ones([3], "int32"), np.ones(3, np.int32)),
        (paddle.arange(5), np.arange(5, dtype=i64)),
        (paddle.arange(1.0, 3.0, 0.5), np.arange(1.0, 3.0, 0.5, dtype=f32)),
        (paddle.arange(0, 11, 2, dtype="int64"), np.arange(0, 11, 2, dtype=i64)),
        (paddle.full_like(v["x"], 2), np.full_like(X, 2.0)),
        (paddle.zeros_like(v["y"]), np.zeros_like(Y)),
        (paddle.ones_like(v["x"], dtype="int64"), np.ones(X.shape, i64)),
        (paddle.tril(v["y"]), np.tril(Y)),
        (paddle.tril(v["y"], -1), np.tril(Y, -1)),
        (paddle.triu(v["y"], 1), np.triu(Y, 1)),
        (paddle.assign(v["y"]), Y),
        (paddle.assign(np.array([[1.5, 2.0]], "float32")), np.array([[1.5, 2.0]], f32)),
        (paddle.assign([1, 2, 3]), np.array([1, 2, 3], i64)),
    ], {"x": X, "y": Y})


def test_manipulation_numbers():
    k = np.array([2, 0], "int64")
    g = np.array([[[0, 1], [1, 2], [0, 0]]] * 2, "int64")
    _check(lambda v: [
        (paddle.flatten(v["x"]), X.reshape(-1)),
        (paddle.flatten(v["x"], 1, 2), X.reshape(2, 12)),
        (paddle.squeeze(paddle.unsqueeze(v["x"], [0, 2]), axis=0), X[:, None]),
        (paddle.unsqueeze(v["y"], -1), Y[..., None]),
        (paddle.stack([v["x"], v["x"] * 2.0], axis=1), np.stack([X, X * 2], axis=1)),
        (paddle.expand(v["y"][0:1], [3, 4]), np.broadcast_to(Y[0:1], (3, 4))),
        (paddle.broadcast_to(v["y"], [2, 3, 4]), np.broadcast_to(Y, (2, 3, 4))),
        (paddle.tile(v["y"], [2, 1]), np.tile(Y, (2, 1))),
        (paddle.gather(v["y"], v["k"]), np.take(Y, k, axis=0)),
        (paddle.gather(v["x"], v["k"], axis=2), np.take(X, k, axis=2)),
        (paddle.gather_nd(v["x"], v["g"]), X[g[..., 0], g[..., 1]]),
        (paddle.slice(v["x"], axes=[1, 2], starts=[0, 1], ends=[2, -1]), X[:, 0:2, 1:-1]),
    ], {"x": X, "y": Y, "k": k, "g": g})


def test_math_and_search_numbers():
    f32 = np.float32
    top = -np.sort(-X, axis=-1)[..., :2]
    _check(lambda v: [
        (paddle.cumsum(v["x"], axis=1), np.cumsum(X, axis=1)),
        (paddle.cumsum(v["x"]), np.cumsum(X)),
        (paddle.clip(v["x"], -0.5, 0.5), np.clip(X, -0.5, 0.5)),
        (paddle.clip(v["x"], max=0.2), np.minimum(X, f32(0.2))),
        (paddle.abs(v["x"]), np.abs(X)),
        (paddle.sign(v["x"]), np.sign(X)),
        (paddle.tanh(v["x"]), np.tanh(X)),
        (paddle.max(v["x"]), np.max(X)),
        (paddle.min(v["x"], axis=[1, 2], keepdim=True), np.min(X, axis=(1, 2), keepdims=True)),
        (paddle.prod(v["y"], axis=0), np.prod(Y, axis=0)),
        (paddle.maximum(v["x"], v["y"]), np.maximum(X, Y)),
        (paddle.minimum(v["x"], v["y"]), np.minimum(X, Y)),
        (paddle.argmax(v["x"], axis=-1), np.argmax(X, axis=-1)),
        (paddle.argmax(v["x"]), np.argmax(X)),
        (paddle.argmax(v["x"], axis=1, keepdim=True, dtype="int32"),
         np.argmax(X, axis=1)[:, None].astype(np.int32)),
        (paddle.topk(v["x"], 2)[0], top),
        (paddle.topk(v["x"], 2)[1], np.argsort(-X, axis=-1, kind="stable")[..., :2]),
        (paddle.where(v["x"] > 0, v["x"], v["x"] * 0.1), np.where(X > 0, X, X * f32(0.1))),
        (paddle.where(v["y"] > 0.5, v["x"], paddle.full_like(v["x"], -1.0)), np.where(Y > 0.5, X, f32(-1.0))),
        (paddle.matmul(v["x"], v["y"], transpose_y=True), X @ Y.T),
        (paddle.scale(v["x"], 2.0, 0.5), X * 2 + f32(0.5)),
    ], {"x": X, "y": Y})


def test_operator_numbers():
    i = np.array([[0, 1, 3]] * 2, "int64")
    _check(lambda v: [
        (v["y"] != v["y"] * 2.0, Y != Y * 2),
        (v["y"] < 0.5, Y < 0.5),
        (v["x"] >= v["y"], X >= Y),
        (v["i"] > 0, i > 0),
        (v["i"] <= 2.5, i <= 2.5),
        (2.0 / v["x"], f32_div(2.0, X)),
        (v["i"] / 2, (i / 2).astype("float32")),
        (v["x"].astype("int64"), X.astype("int64")),
        ((1.0 - v["y"]) * -1e4, (1 - Y) * np.float32(-1e4)),
        (2 ** v["y"], np.float32(2) ** Y),
        (-v["y"], -Y),
        (v["i"] * 0.5, i.astype("float32") * np.float32(0.5)),
        (v["i"] + 1, i + 1),
        (v["x"] ** 2, X ** 2),
    ], {"x": X, "y": Y, "i": i})


def f32_div(a, b):
    return (np.float32(a) / b).astype("float32")


@pytest.mark.parametrize("index", [
    (slice(None), slice(1, 3), slice(None)), 0, (slice(None), -1), (Ellipsis, -2), (None, slice(1, None)),
    (slice(None), None), (1, 2), (slice(None), slice(None, None, 2)), (slice(None), slice(2, 0, -1)),
    (0, slice(2, 0, -2)), (Ellipsis, slice(1, None, 3)),
])
def test_getitem_numbers(index):
    _check(lambda v: [(v["x"][index], X[index])], {"x": X}, exact=True)


@pytest.mark.parametrize("index", [slice(None, None, -1), (slice(None), slice(None, None, -2)),
                                   (0, slice(3, None, -2))])
def test_getitem_reversed_to_the_front(index):
    _check(lambda v: [(v["x"][index], X[index])], {"x": X}, exact=True)


def test_gpt_mask_added_runs_like_numpy():
    causal = np.tril(np.ones((3, 3), "float32"))
    s = (X @ Y.T) * np.float32(0.5)
    _check(lambda v: [
        (paddle.scale(paddle.matmul(v["x"], v["y"], transpose_y=True), scale=0.5)
         + (1.0 - paddle.tril(paddle.ones([3, 3], dtype="float32"))) * -1e4,
         s + (1 - causal) * np.float32(-1e4)),
    ], {"x": X, "y": Y})


def test_tensor_methods_are_the_functions():
    main = _program(lambda: paddle.static.data("y", [3, 4], "float32").reshape([4, 3]).unsqueeze(0).sum())
    assert [op.type for op in main.global_block().ops] == ["reshape2", "unsqueeze2", "reduce_sum"]


def test_equality_and_hashing_stay_identity():
    main = _program(lambda: None)
    with paddle.static.program_guard(main):
        a = paddle.static.data("a", [2], "float32")
        b = paddle.static.data("b", [2], "float32")
        assert a == a and not (a == b) and len({a, b, a}) == 2
        n = len(main.global_block().ops)
        assert isinstance(a != b, type(a)) and len(main.global_block().ops) == n + 1


# ---- errors ----------------------------------------------------------------------------------
def _raises(exc, words, fn):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 3, 4], "float32")
        y = paddle.static.data("y", [3, 4], "float32")
        with pytest.raises(exc) as info:
            fn(x, y)
    for w in words:
        assert w in str(info.value), f"{str(info.value)!r} should name {w!r}"


@pytest.mark.parametrize("exc, words, fn", [
    (InvalidArgument, ["where", "condition", "x", "[2, 5]"],
     lambda x, y: paddle.where(paddle.static.data("c", [2, 5], "bool"), x, y)),
    (InvalidArgument, ["where", "condition", "float32"], lambda x, y: paddle.where(y, y, y)),
    (InvalidArgument, ["gather", "axis", "3"], lambda x, y: paddle.gather(x, paddle.arange(2), axis=3)),
    (InvalidArgument, ["gather", "index", "float32"], lambda x, y: paddle.gather(x, y)),
    (InvalidArgument, ["slice", "axes", "5"], lambda x, y: paddle.slice(x, [5], [0], [1])),
    (InvalidArgument, ["unsqueeze", "axis", "5"], lambda x, y: paddle.unsqueeze(x, 5)),
    (InvalidArgument, ["squeeze", "axis", "-4"], lambda x, y: paddle.squeeze(x, -4)),
    (InvalidArgument, ["full", "dtype", "float31"], lambda x, y: paddle.full([2], 1.0, dtype="float31")),
    (InvalidArgument, ["zeros", "shape", "'a'"], lambda x, y: paddle.zeros(["a"])),
    (InvalidArgument, ["arange", "step"], lambda x, y: paddle.arange(0, 3, 0)),
    (InvalidArgument, ["flatten", "start_axis", "3"], lambda x, y: paddle.flatten(x, 3)),
    (InvalidArgument, ["flatten", "stop_axis"], lambda x, y: paddle.flatten(x, 2, 1)),
    (InvalidArgument, ["expand", "shape", "[5, 4]"], lambda x, y: paddle.expand(y, [5, 4])),
    (InvalidArgument, ["stack", "same shape"], lambda x, y: paddle.stack([x, y])),
    (InvalidArgument, ["tril", "at least 2 dims", "[4]"], lambda x, y: paddle.tril(y[0])),
    (InvalidArgument, ["argmax", "dtype", "float32"], lambda x, y: paddle.argmax(x, dtype="float32")),
    (InvalidArgument, ["topk", "k", "5"], lambda x, y: paddle.topk(x, 5)),
    (InvalidArgument, ["clip", "min", "'a'"], lambda x, y: paddle.clip(x, min="a")),
    (InvalidArgument, ["max", "axis", "3"], lambda x, y: paddle.max(x, axis=3)),
    (InvalidArgument, ["assign", "x", "str"], lambda x, y: paddle.assign("abc")),
    (OutOfRange, ["__getitem__", "'y'", "3", "dim 0"], lambda x, y: y[3]),
    (OutOfRange, ["__getitem__", "3 indices", "rank 2"], lambda x, y: y[0, 0, 0]),
    (Unimplemented, ["__getitem__", "advanced"], lambda x, y: y[[0, 1]]),
    (InvalidArgument, ["__getitem__", "step"], lambda x, y: y[::0]),
    (InvalidArgument, ["cumsum", "axis", "4"], lambda x, y: paddle.cumsum(x, axis=4)),
])
def test_bad_input_raises_a_typed_error_at_build_time(exc, words, fn):
    _raises(exc, words, fn)


def test_index_out_of_range_ends_unpacking_as_in_python():
    main = _program(lambda: None)
    with paddle.static.program_guard(main):
        a, b = paddle.static.data("p", [2, 3], "float32")
    assert a.shape == (3,) and b.shape == (3,)


@pytest.mark.parametrize("case", ["02_gpt_mini", "04_tensor_ops"])
def test_built_zoo_program_gives_the_recorded_first_loss(case):
    """The whole builder (with the layers and F functions of other modules): step 0 from the recorded
    initial persistables gives Paddle's loss (the first step's forward does not depend on gradients)."""
    from oracle import array
    from zoo_build import build
    main, _, loss, d = build(case)
    scope = paddle.static.Scope()
    for name, entry in d["initial_persistables"].items():
        scope.var(name).get_tensor().set(array(entry))
    if d.get("lr_schedule"):
        lr = d["lr_schedule"]
        shape = np.array(scope.find_var(lr["var"]).get_tensor()).shape
        scope.var(lr["var"]).get_tensor().set(np.full(shape, lr["values"][0], "float32"))
    exe = paddle.static.Executor(paddle.CPUPlace())
    got, = exe.run(main, feed={k: array(v) for k, v in d["feeds"][0].items()}, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(got, array(d["fetched_loss"][0]), rtol=1e-5, atol=1e-6)
