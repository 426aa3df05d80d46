"""The tensor-parallel ops (refimpl/ops/model_parallel_ops.py) in static programs on 2 and 4 in-process
ranks, against the one-device NumPy math, their grad ops against Paddle 3.3.1's, and their typed errors.

Each rank builds its own program holding its shard (as a tensor-parallel trainer does), binds the
program's ring 1 to its model-parallel group (``program_rings.bind_rings``), runs forward and the
backward of ``append_backward`` with the executor, and compares with closed-form NumPy on the whole
tensors, in float64.
"""
import numpy as np
import pytest

from refimpl.core.errors import InvalidArgument, NotFound, Unimplemented
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet.meta_optimizers.program_rings import bind_rings, partition
from refimpl.framework import Program
from refimpl.ops.registry import get_op_def
from refimpl.static import Executor, Scope, append_backward, data, program_guard

RING = 1
TOL = dict(rtol=1e-12, atol=1e-13)
# (world size, model-parallel degree): one ring over all ranks, and two rings of two ranks in a world of 4
LAYOUTS = [(2, 2), (4, 4), (4, 2)]


# ---- building and running -----------------------------------------------------------------------
def _op(block, type, inputs, attrs=None, outs=("Out",), dtype="float64"):
    """Append ``type``; its outputs are new vars named ``<type>_<k>.<slot>``."""
    k = sum(o.type == type for o in block.ops)
    made = {s: block.create_var(name=f"{type}_{k}.{s.lower()}", dtype=dtype) for s in outs}
    block.append_op(type=type, inputs=inputs, outputs=made, attrs=attrs or {})
    return made[outs[0]] if len(outs) == 1 else made


def _mean_square(block, y):
    return _op(block, "reduce_mean", {"X": _op(block, "square", {"X": y})}, {"reduce_all": True, "dim": [0]})


def _var(name, shape, dtype="float64", grad=True):
    v = data(name, list(shape), dtype)
    v.stop_gradient = not grad
    return v


def _on_ranks(world, degree, fn):
    """Run ``fn(mp_rank, degree)`` on ``world`` ranks, ring 1 bound to each rank's group of ``degree``."""
    def body():
        assert bind_rings([(RING, partition(world, degree, 1))])
        return fn(context.current().rank % degree, degree)
    return run_in_process(world, body, timeout=60)


def _run(build, feed, fetch):
    main, startup = Program(), Program()
    with program_guard(main, startup):
        loss = build(main.global_block())
        append_backward(loss)
    return main, Executor().run(main, feed=feed, fetch_list=fetch, scope=Scope())


def _cols(a, r, n):
    w = a.shape[-1] // n
    return a[..., r * w:(r + 1) * w]


RNG = np.random.default_rng(19)
X6, W68 = RNG.standard_normal((4, 6)), RNG.standard_normal((6, 8))
X8, W85 = RNG.standard_normal((4, 8)), RNG.standard_normal((8, 5))
TABLE, IDS = RNG.standard_normal((8, 3)), RNG.integers(0, 8, (2, 5))
LOGITS = RNG.standard_normal((5, 12)) * 3
LABEL = np.array([[3], [11], [-100], [0], [7]])


# ---- numerics against one device ----------------------------------------------------------------
@pytest.mark.parametrize("world,degree", LAYOUTS)
def test_column_parallel_linear(world, degree):
    """c_identity -> matmul with a column shard of W -> c_concat equals X @ W; grads are the shards."""
    y = X6 @ W68
    dy = 2 * y / y.size

    def rank_fn(r, n):
        def build(b):
            xi = _op(b, "c_identity", {"X": _var("x", X6.shape)}, {"ring_id": RING})
            yr = _op(b, "matmul_v2", {"X": xi, "Y": _var("w", (6, 8 // n))})
            return _mean_square(b, _op(b, "c_concat", {"X": yr}, {"ring_id": RING, "rank": r, "nranks": n}))
        main, got = _run(build, {"x": X6, "w": _cols(W68, r, n)}, ["c_concat_0.out", "x@GRAD", "w@GRAD"])
        return r, [o.type for o in main.global_block().ops], got

    for r, types, (out, dx, dw) in _on_ranks(world, degree, rank_fn):
        assert "all_reduce" in types and "c_split" in types  # the grads of c_identity and c_concat
        np.testing.assert_allclose(out, y, **TOL)
        np.testing.assert_allclose(dx, dy @ W68.T, **TOL)
        np.testing.assert_allclose(dw, _cols(X6.T @ dy, r, degree), **TOL)


@pytest.mark.parametrize("world,degree", LAYOUTS)
def test_row_parallel_linear(world, degree):
    """c_split of X -> matmul with a row shard of W -> mp_allreduce_sum equals X @ W."""
    y = X8 @ W85
    dy = 2 * y / y.size

    def rank_fn(r, n):
        rows = slice(r * 8 // n, (r + 1) * 8 // n)

        def build(b):
            xr = _op(b, "c_split", {"X": _var("x", X8.shape)}, {"ring_id": RING, "rank": r, "nranks": n})
            yr = _op(b, "matmul_v2", {"X": xr, "Y": _var("w", (8 // n, 5))})
            return _mean_square(b, _op(b, "mp_allreduce_sum", {"X": yr}, {"ring_id": RING}))
        main, got = _run(build, {"x": X8, "w": W85[rows]}, ["mp_allreduce_sum_0.out", "x@GRAD", "w@GRAD"])
        return rows, [o.type for o in main.global_block().ops], got

    for rows, types, (out, dx, dw) in _on_ranks(world, degree, rank_fn):
        assert "c_identity" in types and "c_concat" in types  # the grads of mp_allreduce_sum and c_split
        np.testing.assert_allclose(out, y, **TOL)
        np.testing.assert_allclose(dx, dy @ W85.T, **TOL)
        np.testing.assert_allclose(dw, (X8.T @ dy)[rows], **TOL)


@pytest.mark.parametrize("world,degree", LAYOUTS)
def test_vocab_parallel_embedding(world, degree):
    """c_embedding over vocab shards + mp_allreduce_sum equals the lookup in the whole table."""
    emb = TABLE[IDS]
    d_emb = 2 * emb / emb.size
    d_table = np.zeros_like(TABLE)
    for i, row in zip(IDS.reshape(-1), d_emb.reshape(-1, 3)):
        d_table[i] += row

    def rank_fn(r, n):
        per = 8 // n

        def build(b):
            part = _op(b, "c_embedding", {"W": _var("w", (per, 3)), "Ids": _var("ids", IDS.shape, "int64", False)},
                       {"start_index": r * per, "vocab_size": 8})
            return _mean_square(b, _op(b, "mp_allreduce_sum", {"X": part}, {"ring_id": RING}))
        _, got = _run(build, {"w": TABLE[r * per:(r + 1) * per], "ids": IDS},
                      ["c_embedding_0.out", "mp_allreduce_sum_0.out", "w@GRAD"])
        return r, per, got

    for r, per, (part, out, dw) in _on_ranks(world, degree, rank_fn):
        mine = (IDS >= r * per) & (IDS < (r + 1) * per)
        np.testing.assert_array_equal(part, np.where(mine[..., None], emb, 0.0))  # zero rows off the shard
        np.testing.assert_allclose(out, emb, **TOL)
        np.testing.assert_allclose(dw, d_table[r * per:(r + 1) * per], **TOL)


def _full_softmax_ce(logits, label, ignore=-100):
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    lab = label.reshape(-1)
    safe = np.where(lab == ignore, 0, lab)
    loss = -np.log(p[np.arange(len(lab)), safe])
    loss[lab == ignore] = 0
    onehot = np.eye(logits.shape[1])[safe]
    grad = (p - onehot) / len(lab)  # of the mean of the loss
    grad[lab == ignore] = 0
    return p, loss.reshape(-1, 1), grad


@pytest.mark.parametrize("world,degree", LAYOUTS)
def test_parallel_cross_entropy(world, degree):
    """c_softmax_with_cross_entropy over class shards equals softmax-CE of the whole logits."""
    p, loss, grad = _full_softmax_ce(LOGITS, LABEL)

    def rank_fn(r, n):
        def build(b):
            outs = _op(b, "c_softmax_with_cross_entropy",
                       {"Logits": _var("logits", (5, 12 // n)), "Label": _var("label", (5, 1), "int64", False)},
                       {"ring_id": RING, "rank": r, "nranks": n}, outs=("Softmax", "Loss"))
            return _op(b, "reduce_mean", {"X": outs["Loss"]}, {"reduce_all": True, "dim": [0]})
        _, got = _run(build, {"logits": _cols(LOGITS, r, n), "label": LABEL},
                      ["c_softmax_with_cross_entropy_0.softmax", "c_softmax_with_cross_entropy_0.loss",
                       "logits@GRAD"])
        return r, got

    for r, (sm, ls, dl) in _on_ranks(world, degree, rank_fn):
        np.testing.assert_allclose(sm, _cols(p, r, degree), **TOL)
        np.testing.assert_allclose(ls, loss, **TOL)
        np.testing.assert_allclose(dl, _cols(grad, r, degree), **TOL)


def test_cross_entropy_ignore_index_inside_the_classes():
    """ignore_index may be a class id: its rows get loss 0 and gradient 0 (Paddle's kernels)."""
    label = np.array([[2], [5], [2], [1]])
    logits = RNG.standard_normal((4, 6))

    def rank_fn(r, n):
        def build(b):
            outs = _op(b, "c_softmax_with_cross_entropy",
                       {"Logits": _var("logits", (4, 3)), "Label": _var("label", (4, 1), "int64", False)},
                       {"ring_id": RING, "rank": r, "nranks": n, "ignore_index": 2}, outs=("Softmax", "Loss"))
            return _op(b, "reduce_mean", {"X": outs["Loss"]}, {"reduce_all": True, "dim": [0]})
        return r, _run(build, {"logits": _cols(logits, r, n), "label": label},
                       ["c_softmax_with_cross_entropy_0.loss", "logits@GRAD"])[1]

    p, loss, grad = _full_softmax_ce(logits, label, ignore=2)
    for r, (ls, dl) in _on_ranks(2, 2, rank_fn):
        np.testing.assert_allclose(ls, loss, **TOL)
        np.testing.assert_allclose(dl, _cols(grad, r, 2), **TOL)
        assert not ls[[0, 2]].any() and not _cols(grad, r, 2)[[0, 2]].any()


# ---- the grad ops append_backward writes, against Paddle 3.3.1 ------------------------------------
# Read from Paddle 3.3.1 (FLAGS_enable_pir_api=0): the same one-op programs (matmul_v2 -> op -> mean)
# through paddle.static.append_backward, and core.get_grad_op_desc for c_split (whose append_backward
# fails in Paddle, see below). Each entry: forward attrs given, the grad op's type, inputs, outputs and attrs.
PADDLE_GRADS = {
    "c_identity": ({"ring_id": 1}, "all_reduce", {"x": ["{out}@GRAD"]}, {"out": ["{x}@GRAD"]},
                   {"reduce_type": 0, "ring_id": 1, "use_calc_stream": True, "use_model_parallel": True}),
    "c_concat": ({"ring_id": 1, "rank": 0, "nranks": 2}, "c_split", {"X": ["{out}@GRAD"]}, {"Out": ["{x}@GRAD"]},
                 {"ring_id": 1, "rank": 0, "nranks": 2, "use_calc_stream": True, "use_model_parallel": True}),
    "mp_allreduce_sum": ({"ring_id": 1}, "c_identity", {"X": ["{out}@GRAD"]}, {"Out": ["{x}@GRAD"]},
                         {"ring_id": 1, "use_calc_stream": True, "use_model_parallel": True}),
}
# Paddle 3.3.1's forward defaults (an op appended with no attrs, or nranks=2 where 1 is refused)
PADDLE_DEFAULTS = {
    "c_identity": {"ring_id": 0, "use_calc_stream": True, "use_model_parallel": True},
    "c_concat": {"rank": 0, "nranks": 1, "ring_id": 0, "use_calc_stream": True, "use_model_parallel": True},
    "c_split": {"rank": 0, "nranks": 1, "ring_id": 0, "use_model_parallel": True},
    "mp_allreduce_sum": {"ring_id": 0},
    "c_embedding": {"start_index": 0, "vocab_size": -1},
    "c_softmax_with_cross_entropy": {"ignore_index": -100, "ring_id": 0, "rank": 0, "nranks": 0},
}


def _grad_of(block, fwd):
    """The op append_backward wrote for forward op ``fwd`` (the one producing its inputs' grads)."""
    targets = {n + "@GRAD" for n in fwd.input_arg_names}
    return next(o for o in block.ops if o.attr("op_role") == 1 and set(o.output_arg_names) & targets)


def _check_grad(grad, itype, ins, outs, attrs, names):
    assert grad.type == itype
    assert grad.inputs == {s: [v.format(**names) for v in vs] for s, vs in ins.items()}
    assert grad.outputs == {s: [v.format(**names) for v in vs] for s, vs in outs.items()}
    assert {k: grad.attr(k) for k in attrs} == attrs


@pytest.mark.parametrize("op_type", sorted(PADDLE_GRADS))
def test_grad_ops_are_paddles(op_type):
    fwd_attrs, gtype, gins, gouts, gattrs = PADDLE_GRADS[op_type]
    main = Program()
    with program_guard(main, Program()):
        b = main.global_block()
        y = _op(b, "matmul_v2", {"X": _var("x", (2, 4)), "Y": _var("w", (4, 4))})
        out = _op(b, op_type, {"X": y}, fwd_attrs)
        append_backward(_mean_square(b, out))
    fwd = next(o for o in b.ops if o.type == op_type)
    _check_grad(_grad_of(b, fwd), gtype, gins, gouts, gattrs, {"x": y.name, "out": out.name})


def test_embedding_and_cross_entropy_grad_ops_are_paddles():
    main = Program()
    with program_guard(main, Program()):
        b = main.global_block()
        emb = _op(b, "c_embedding", {"W": _var("w", (5, 4)), "Ids": _var("ids", (2, 3), "int64", False)},
                  {"start_index": 5, "vocab_size": 10})
        logits = _op(b, "matmul_v2", {"X": _var("x", (2, 4)), "Y": _var("v", (4, 4))})
        ce = _op(b, "c_softmax_with_cross_entropy", {"Logits": logits, "Label": _var("lab", (2, 1), "int64", False)},
                 {"ring_id": 1, "rank": 0, "nranks": 2}, outs=("Softmax", "Loss"))
        total = _op(b, "elementwise_add", {"X": _mean_square(b, emb), "Y": _mean_square(b, ce["Loss"])})
        append_backward(total)
    ops = {o.type: o for o in b.ops}
    _check_grad(ops["c_embedding_grad"], "c_embedding_grad",
                {"W": ["w"], "Ids": ["ids"], "Out@GRAD": [emb.name + "@GRAD"]}, {"W@GRAD": ["w@GRAD"]},
                {"start_index": 5, "vocab_size": 10}, {})
    _check_grad(ops["c_softmax_with_cross_entropy_grad"], "c_softmax_with_cross_entropy_grad",
                {"Softmax": [ce["Softmax"].name], "Label": ["lab"], "Loss@GRAD": [ce["Loss"].name + "@GRAD"]},
                {"Logits@GRAD": [logits.name + "@GRAD"]},
                {"ring_id": 1, "rank": 0, "nranks": 2, "ignore_index": -100}, {})


def test_c_split_grad_is_c_concat():
    """Paddle 3.3.1's maker writes all_gather with slots X/Out (which all_gather lacks: its own
    append_backward fails in infer-shape); refimpl writes the c_concat that undoes the split."""
    main = Program()
    with program_guard(main, Program()):
        b = main.global_block()
        x = _var("x", (2, 4))
        out = _op(b, "c_split", {"X": x}, {"ring_id": 1, "rank": 1, "nranks": 2})
        append_backward(_mean_square(b, out))
    fwd = next(o for o in b.ops if o.type == "c_split")
    _check_grad(_grad_of(b, fwd), "c_concat", {"X": ["{out}@GRAD"]}, {"Out": ["x@GRAD"]},
                {"ring_id": 1, "rank": 1, "nranks": 2, "use_model_parallel": True}, {"out": out.name})


@pytest.mark.parametrize("op_type", sorted(PADDLE_DEFAULTS))
def test_forward_defaults_are_paddles(op_type):
    assert get_op_def(op_type).attrs == PADDLE_DEFAULTS[op_type]


def test_no_need_buffer_slots_are_paddles():
    # Paddle 3.3.1's core.infer_no_need_buffer_slots: {'W'} for c_embedding_grad, none for the CE grad
    assert get_op_def("c_embedding_grad").no_need_buffer == ("W",)
    assert get_op_def("c_softmax_with_cross_entropy_grad").no_need_buffer == ()


# ---- bad input: typed errors naming the op ---------------------------------------------------------
def _build_one(op_type, inputs, attrs, outs=("Out",)):
    main = Program()
    with program_guard(main, Program()):
        b = main.global_block()
        made = _op(b, op_type, {k: _var(k.lower(), s, dt, False) for k, (s, dt) in inputs.items()}, attrs, outs)
    return main, made


def _execute(op_type, inputs, values, attrs, outs=("Out",)):
    main, _ = _build_one(op_type, inputs, attrs, outs)
    Executor().run(main, feed={k.lower(): v for k, v in values.items()}, scope=Scope())


@pytest.mark.parametrize("op_type,attrs", [("c_concat", {"ring_id": 7, "nranks": 2}),
                                           ("mp_allreduce_sum", {"ring_id": 7})])
def test_missing_ring(op_type, attrs):
    with pytest.raises(NotFound, match=f"{op_type}.*ring_id 7"):
        _execute(op_type, {"X": ((2, 4), "float64")}, {"X": np.ones((2, 4))}, attrs)


def test_missing_ring_of_cross_entropy():
    with pytest.raises(NotFound, match="c_softmax_with_cross_entropy.*ring_id 5"):
        _execute("c_softmax_with_cross_entropy", {"Logits": ((2, 3), "float64"), "Label": ((2, 1), "int64")},
                 {"Logits": np.ones((2, 3)), "Label": np.zeros((2, 1), np.int64)},
                 {"ring_id": 5, "nranks": 2, "rank": 0}, outs=("Softmax", "Loss"))


def test_ring_size_differs_from_nranks():
    def rank_fn(r, n):
        with pytest.raises(InvalidArgument, match="c_concat: attr nranks=4 but ring_id 1 has 2 ranks"):
            _execute("c_concat", {"X": ((2, 4), "float64")}, {"X": np.ones((2, 4))},
                     {"ring_id": RING, "rank": r, "nranks": 4})
        return True
    assert _on_ranks(2, 2, rank_fn) == [True, True]


@pytest.mark.parametrize("start,rows,vocab", [(6, 5, 10), (-1, 2, 10)])
def test_embedding_shard_outside_the_vocabulary(start, rows, vocab):
    with pytest.raises(InvalidArgument, match=r"c_embedding: the shard rows"):
        _execute("c_embedding", {"W": ((rows, 3), "float64"), "Ids": ((4,), "int64")},
                 {"W": np.ones((rows, 3)), "Ids": np.arange(4)}, {"start_index": start, "vocab_size": vocab})


def test_embedding_id_outside_the_vocabulary():
    with pytest.raises(InvalidArgument, match=r"c_embedding: id 10 is out of the vocabulary \[0, 10\)"):
        _execute("c_embedding", {"W": ((5, 3), "float64"), "Ids": ((3,), "int64")},
                 {"W": np.ones((5, 3)), "Ids": np.array([1, 10, 2])}, {"start_index": 5, "vocab_size": 10})


def test_split_of_a_last_dim_not_divisible():
    with pytest.raises(InvalidArgument, match=r"c_split: the last dim \(5\) of X is not divisible by nranks \(2\)"):
        _build_one("c_split", {"X": ((2, 5), "float64")}, {"nranks": 2})
    with pytest.raises(InvalidArgument, match=r"c_split: the last dim \(6\) of X is not divisible by nranks \(4\)"):
        _execute("c_split", {"X": ((-1, -1), "float64")}, {"X": np.ones((2, 6))}, {"nranks": 4, "rank": 1})


@pytest.mark.parametrize("op_type", ["c_concat", "c_split"])
def test_split_attrs(op_type):
    with pytest.raises(InvalidArgument, match=f"{op_type}: attr nranks must be at least 2, got 1"):
        _build_one(op_type, {"X": ((2, 4), "float64")}, {})
    with pytest.raises(InvalidArgument, match=rf"{op_type}: attr rank=2 is not in \[0, nranks=2\)"):
        _build_one(op_type, {"X": ((2, 4), "float64")}, {"nranks": 2, "rank": 2})


@pytest.mark.parametrize("label,err,msg", [
    (np.array([[1], [4]]), InvalidArgument, r"label 4 is out of the classes \[0, 4\)"),
    (np.array([[1, 2], [0, 1]]), Unimplemented, "soft labels"),
    (np.array([1, 2]), InvalidArgument, "Label shape"),
])
def test_cross_entropy_bad_labels(label, err, msg):
    def rank_fn(r, n):
        with pytest.raises(err, match="c_softmax_with_cross_entropy: .*" + msg):
            _execute("c_softmax_with_cross_entropy",
                     {"Logits": ((2, 2), "float64"), "Label": (label.shape, "int64")},
                     {"Logits": np.ones((2, 2)), "Label": label},
                     {"ring_id": RING, "rank": r, "nranks": n}, outs=("Softmax", "Loss"))
        return True
    assert _on_ranks(2, 2, rank_fn) == [True, True]
