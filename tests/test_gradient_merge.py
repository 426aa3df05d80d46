"""Gradient merge, both forms: ``incubate.optimizer.GradientMergeOptimizer`` and the
``auto_parallel_gradient_merge_pass``.

(1) k steps of batch B equal one step of batch k*B (avg) or of the loss scaled by
    k (sum), for SGD, Momentum and Adam, and the parameters do not move between
    updates; (2) with data parallelism on in-process ranks, syncing after
    accumulation gives the same numbers with k times fewer allreduces (counted in
    the event trace); (3) the program the pass builds; (4) typed errors naming the
    bad attr. Every multi-rank run has a timeout, so nothing can hang.
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, NotFound, PreconditionNotMet
from refimpl.distributed.communication import run_in_process
from refimpl.distributed.passes import new_pass
from refimpl.distributed.passes import auto_parallel_gradient_merge  # noqa: F401  (registers the pass)
from refimpl.distributed.passes.gradient_accumulation import accumulate_gradients
from refimpl.executor import Trace
from refimpl.framework import Program, unique_name
from refimpl.framework.op_role import OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole

PASS = "auto_parallel_gradient_merge_pass"
DIN, HID, B, UPDATES = 5, 8, 3, 3
T = 20.0  # seconds: timeout of every multi-rank run
OPTS = {"sgd": lambda: paddle.optimizer.SGD(0.1),
        "momentum": lambda: paddle.optimizer.Momentum(0.05, momentum=0.9),
        "adam": lambda: paddle.optimizer.Adam(0.01)}


# ---- building and running -----------------------------------------------------------------
def insert_dp_allreduce(main, params_grads, nranks, op_type="c_allreduce_sum"):
    """What a data-parallel rewrite inserts: allreduce + scale(1/nranks) after each gradient.

    ``op_type`` "all_reduce" is Paddle 3.3.1's op (sum, slots x/out); "c_allreduce_avg"
    averages itself, so no scale follows it.
    """
    block = main.global_block()
    for _, g in params_grads:
        at = max(i for i, op in enumerate(block.ops)
                 if g.name in op.output_arg_names and not op.role() & OpRole.Optimize)
        slots = ("x", "out") if op_type == "all_reduce" else ("X", "Out")
        block._insert_op(at + 1, type=op_type, inputs={slots[0]: [g]}, outputs={slots[1]: [g]},
                         attrs={"ring_id": 0, OP_ROLE_ATTR: OpRole.Backward})
        if op_type != "c_allreduce_avg":
            block._insert_op(at + 2, type="scale", inputs={"X": [g]}, outputs={"Out": [g]},
                             attrs={"scale": 1.0 / nranks, OP_ROLE_ATTR: OpRole.Backward})


def build(opt="sgd", form="plain", k=1, avg=True, loss_scale=1.0, dp=0, sync_after=False, pass_pg=True,
          dp_op="c_allreduce_sum"):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, DIN], "float32")
        y = paddle.static.data("y", [None, 1], "float32")
        h = paddle.static.nn.fc(x, HID, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1) - y))
        if loss_scale != 1.0:
            loss = loss * loss_scale
        o = OPTS[opt]()
        if form == "optimizer":
            o = paddle.incubate.optimizer.GradientMergeOptimizer(o, k_steps=k, avg=avg)
        _, params_grads = o.minimize(loss)
    if dp:
        insert_dp_allreduce(main, params_grads, dp, dp_op)
    if form == "pass":
        attrs = {"k_steps": k, "avg": avg, "gradient_sync_after_accumulate": sync_after}
        if pass_pg:
            attrs["params_grads"] = params_grads
        new_pass(PASS, attrs).apply([main], [startup])
    return main, startup, loss


def data(rows, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, DIN)).astype("float32"), rng.standard_normal((rows, 1)).astype("float32")


def init_params():
    paddle.seed(7)
    main, startup, _ = build()
    scope = paddle.static.Scope()
    paddle.static.Executor().run(startup, scope=scope)
    return params(main, scope)


def params(main, scope):
    # .copy(): np.array(tensor) may hand back the live buffer, which the next step updates in place
    return {p.name: np.array(scope.find_var(p.name).get_tensor()).copy() for p in main.all_parameters()}


INIT = init_params()


def start(main, startup):
    """A scope with ``startup`` run and the shared initial parameters set."""
    scope = paddle.static.Scope()
    paddle.static.Executor().run(startup, scope=scope)
    for name, a in INIT.items():
        scope.var(name).get_tensor().set(a)
    return scope


def train(main, startup, loss, X, Y, steps, trace=None):
    """Run ``steps`` steps on equal slices of (X, Y); return the parameters after every step."""
    scope, exe = start(main, startup), paddle.static.Executor()
    n = len(X) // steps
    after = []
    for s in range(steps):
        exe.run(main, feed={"x": X[s * n:(s + 1) * n], "y": Y[s * n:(s + 1) * n]}, fetch_list=[loss],
                scope=scope, trace=trace)
        after.append(params(main, scope))
    return after


def assert_params_close(got, want):
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7, err_msg=name)


def check_merged(merged, reference, k):
    """Params move only every k-th step, and then equal the reference's update."""
    before = INIT
    for s, p in enumerate(merged):
        if (s + 1) % k:
            for name in p:
                np.testing.assert_array_equal(p[name], before[name], err_msg=f"step {s}: {name} moved")
        else:
            assert_params_close(p, reference[s // k])
            assert any(not np.array_equal(p[n], before[n]) for n in p)
        before = p


# ---- (1) k steps of batch B == one step of batch k*B -------------------------------------------
@pytest.mark.parametrize("form", ["optimizer", "pass"])
@pytest.mark.parametrize("opt", sorted(OPTS))
@pytest.mark.parametrize("k", [2, 4])
def test_k_steps_equal_one_step_on_k_times_the_batch(form, opt, k):
    X, Y = data(UPDATES * k * B)
    reference = train(*build(opt), X, Y, UPDATES)
    merged = train(*build(opt, form, k=k), X, Y, UPDATES * k)
    check_merged(merged, reference, k)


@pytest.mark.parametrize("form", ["optimizer", "pass"])
@pytest.mark.parametrize("opt", sorted(OPTS))
@pytest.mark.parametrize("k", [2, 4])
def test_avg_false_sums_the_gradients(form, opt, k):
    # the sum of k mean-gradients is the gradient of k * (mean over the k*B batch)
    X, Y = data(UPDATES * k * B, seed=1)
    reference = train(*build(opt, loss_scale=float(k)), X, Y, UPDATES)
    merged = train(*build(opt, form, k=k, avg=False), X, Y, UPDATES * k)
    check_merged(merged, reference, k)


def test_k_steps_one_updates_every_step_and_gc_off_agrees():
    X, Y = data(UPDATES * B, seed=2)
    reference = train(*build("adam"), X, Y, UPDATES)
    check_merged(train(*build("adam", "pass", k=1), X, Y, UPDATES), reference, 1)
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": -1.0})
    try:
        check_merged(train(*build("adam", "pass", k=2), *data(UPDATES * 2 * B, seed=2), UPDATES * 2),
                     train(*build("adam"), *data(UPDATES * 2 * B, seed=2), UPDATES), 2)
    finally:
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})


def test_params_grads_inferred_from_op_role_var_gives_the_same_numbers():
    X, Y = data(UPDATES * 2 * B, seed=3)
    a = train(*build("momentum", "pass", k=2), X, Y, UPDATES * 2)
    b = train(*build("momentum", "pass", k=2, pass_pg=False), X, Y, UPDATES * 2)
    for pa, pb in zip(a, b):
        for name in pa:
            np.testing.assert_array_equal(pa[name], pb[name])


# ---- (2) data parallelism: sync after accumulation, k times fewer allreduces ---------------------
def dp_train(n, k, sync_after, X, Y):
    """n in-process ranks; step s of rank r trains on its slice of update s // k's batch."""
    progs = [build("adam", "pass", k=k, dp=n, sync_after=sync_after) for _ in range(n)]

    def rank_fn():
        r = paddle.distributed.get_rank()
        main, startup, loss = progs[r]
        scope, exe, trace = start(main, startup), paddle.static.Executor(), Trace()
        for s in range(UPDATES * k):
            rows = slice((s * n + r) * B, (s * n + r + 1) * B)
            exe.run(main, feed={"x": X[rows], "y": Y[rows]}, fetch_list=[loss], scope=scope, trace=trace)
        count = sum(1 for e in trace if e.kind == "op" and e.op_type == "c_allreduce_sum")
        return params(main, scope), count
    return run_in_process(n, rank_fn, timeout=T)


@pytest.mark.parametrize("n,k", [(2, 2), (2, 4), (4, 2)])
def test_sync_after_accumulate_same_numbers_k_times_fewer_allreduces(n, k):
    X, Y = data(UPDATES * k * n * B, seed=4)
    every_step = dp_train(n, k, False, X, Y)
    after = dp_train(n, k, True, X, Y)
    reference = train(*build("adam"), X, Y, UPDATES)[-1]  # one device, batch n*k*B per update
    n_grads = len(INIT)
    for r in range(n):
        assert every_step[r][1] == UPDATES * k * n_grads
        assert after[r][1] == UPDATES * n_grads
        assert every_step[r][1] == k * after[r][1]
        assert_params_close(after[r][0], every_step[r][0])
        assert_params_close(after[r][0], reference)
        for name in INIT:  # every rank holds the same parameters
            np.testing.assert_array_equal(after[r][0][name], after[0][0][name])


# ---- (3) the program the pass builds ----------------------------------------------------------------
def _ops(block, type):
    return [op for op in block.ops if op.type == type]


@pytest.mark.parametrize("sync_after", [False, True])
def test_pass_program(sync_after):
    main, startup, _ = build("sgd", "pass", k=4, dp=2, sync_after=sync_after)
    g, sub = main.global_block(), main.block(1)
    merges = [p + "@GRAD@MERGE" for p in INIT]
    for m in merges:
        assert g.var(m).persistable and startup.global_block().var(m).persistable
        fill = [op for op in startup.global_block().ops if op.output_arg_names == [m]]
        assert len(fill) == 1 and fill[0].type == "fill_constant" and fill[0].attr("value") == 0.0
    for op in _ops(g, "elementwise_add"):
        if op.output_arg_names[0] in merges:
            m = op.output_arg_names[0]
            grad = m[:-len("@MERGE")]
            assert op.input("X") == [m] and op.input("Y") == [grad]
            prev = g.ops[op.idx - 1]
            assert grad in prev.output_arg_names and op.role() == prev.role() == OpRole.Backward
            # right after the gradient's producer, or after the DP scale that ends its sync
            assert prev.type.endswith("_grad") if sync_after else prev.type == "scale"
    assert [op.type for op in g.ops if op.has_attr("op_device") and op.attr("op_device") == "cpu"] == \
        ["increment", "elementwise_mod", "equal"]
    cb = g.ops[-1]
    assert cb.type == "conditional_block" and cb.input("Cond") == ["gradient_merge_cond"]
    assert cb.role() == OpRole.Optimize and cb.attr("sub_block").idx == 1
    assert not [op for op in g.ops if op.role() & OpRole.Optimize and op is not cb]
    types = [op.type for op in sub.ops]
    assert types[:4] == ["scale"] * 4 and types[-4:] == ["fill_constant"] * 4 and types.count("sgd") == 4
    assert all(op.role() == OpRole.Optimize for op in sub.ops)
    assert not any(op.has_attr(OP_ROLE_VAR_ATTR) and op.attr(OP_ROLE_VAR_ATTR) for op in sub.ops)
    assert sorted(n for op in _ops(sub, "sgd") for n in op.input("Grad")) == sorted(merges)
    in_sub, in_main = _ops(sub, "c_allreduce_sum"), _ops(g, "c_allreduce_sum")
    if sync_after:
        assert not in_main and sorted(op.input("X")[0] for op in in_sub) == sorted(merges)
        for op in in_sub:  # the scale by 1/nranks follows its allreduce, on the buffer
            nxt = sub.ops[op.idx + 1]
            assert nxt.type == "scale" and nxt.input("X") == op.input("X") and nxt.attr("scale") == 0.5
    else:
        assert not in_sub and len(in_main) == 4


@pytest.mark.parametrize("dp_op,after", [("all_reduce", ["scale"]), ("c_allreduce_avg", ["c_allreduce_avg", "sgd"])])
def test_other_sync_ops_move_too(dp_op, after):
    main, _, _ = build("sgd", "pass", k=2, dp=2, sync_after=True, dp_op=dp_op)
    g, sub = main.global_block(), main.block(1)
    assert not _ops(g, dp_op) and not _ops(g, "scale")
    moved = _ops(sub, dp_op)
    assert sorted(op.input_arg_names[0] for op in moved) == sorted(p + "@GRAD@MERGE" for p in INIT)
    assert all(sub.ops[op.idx + 1].type in after for op in moved)


def test_pass_records_the_buffers_in_the_context_and_grad_to_global_grad():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, DIN], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 1))
        _, pg = paddle.optimizer.SGD(0.1).minimize(loss)
    mapping = {}
    ctx = new_pass(PASS, {"k_steps": 2, "params_grads": pg, "grad_to_global_grad": mapping}).apply([main], [startup])
    want = {g.name: p.name + "@GRAD@MERGE" for p, g in pg}
    assert mapping == want and ctx.get_attr("grad_to_merge_grad") == want


def test_accumulate_gradients_every_run_form_unchanged():
    main, startup, _ = build("sgd")
    merged = accumulate_gradients(main, startup, 2)
    assert merged == [(p, p + "@GRAD@MERGE") for p, _ in merged]
    assert not _ops(main.global_block(), "conditional_block")


# ---- (4) typed errors naming the attr ------------------------------------------------------------------
@pytest.mark.parametrize("attrs,attr", [
    ({"k_steps": 0}, "k_steps"), ({"k_steps": -3}, "k_steps"), ({"k_steps": 2.0}, "k_steps"),
    ({"k_steps": True}, "k_steps"), ({}, "k_steps"),
    ({"k_steps": 2, "avg": "yes"}, "avg"),
    ({"k_steps": 2, "gradient_sync_after_accumulate": 1}, "gradient_sync_after_accumulate"),
    ({"k_steps": 2, "params_grads": "w@GRAD"}, "params_grads"),
    ({"k_steps": 2, "params_grads": [("fc_0.w_0",)]}, "params_grads"),
    ({"k_steps": 2, "params_grads": []}, "params_grads"),
])
def test_bad_attrs_raise_invalid_argument_naming_the_attr(attrs, attr):
    main, startup, _ = build("sgd")
    with pytest.raises(InvalidArgument, match=f"'{attr}'"):
        new_pass(PASS, attrs).apply([main], [startup])


def test_params_grads_required_when_it_cannot_be_inferred():
    main, startup, _ = build("sgd")
    for op in main.global_block().ops:
        op._remove_attr(OP_ROLE_VAR_ATTR)
    with pytest.raises(InvalidArgument, match="'params_grads' is required"):
        new_pass(PASS, {"k_steps": 2}).apply([main], [startup])


def test_unknown_or_unwritten_gradient_is_not_found():
    main, startup, _ = build("sgd")
    with pytest.raises(NotFound, match=r"'params_grads'\[0\].*'nope@GRAD'"):
        new_pass(PASS, {"k_steps": 2, "params_grads": [("fc_0.w_0", "nope@GRAD")]}).apply([main], [startup])
    main.global_block().create_var(name="orphan@GRAD", shape=[1], dtype="float32")
    with pytest.raises(NotFound, match=r"'params_grads'\[0\].*no op .* writes the gradient 'orphan@GRAD'"):
        new_pass(PASS, {"k_steps": 2, "params_grads": [("fc_0.w_0", "orphan@GRAD")]}).apply([main], [startup])


def test_program_without_optimizer_or_merged_twice_is_refused():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, DIN], "float32")
        w = paddle.static.create_parameter([DIN, 1], "float32", name="w")
        loss = paddle.mean(x @ w)
        pg = paddle.static.append_backward(loss)
    with pytest.raises(PreconditionNotMet, match="no optimizer ops"):
        new_pass(PASS, {"k_steps": 2, "params_grads": pg}).apply([main], [startup])
    main, startup, _ = build("sgd", "pass", k=2)
    with pytest.raises(PreconditionNotMet, match="gradient_merge_step"):
        new_pass(PASS, {"k_steps": 2, "params_grads": [("fc_0.w_0", "fc_0.w_0@GRAD")]}).apply([main], [startup])
