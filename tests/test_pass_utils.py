"""pass_utils: split/prune, required vars, skip-GC vars, the estimator and the rewrites, against Paddle.

Recorded data: the ``split`` key of every ``../shared/oracle/programs`` case,
and ``tests/oracle_split/*.json`` (written by ``tests/oracle_split/generate.py``
with Paddle 3.3.1 for the public and the extra models: split, skip-GC with and
without an optimizer job, and the memory estimator).
"""
import glob
import importlib.util
import os

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import EnforceNotMet
from refimpl.distributed.passes import pass_utils as pu
from refimpl.executor.plan import Job, Plan
from refimpl.executor.plan_executor import PlanExecutor
from refimpl.framework import Program, op_role, unique_name
from refimpl.ops import has_op

from oracle import EXTRA, array, case_files, load, load_models, oracle_file

HERE = os.path.dirname(os.path.abspath(__file__))
SPLIT = sorted(glob.glob(os.path.join(HERE, "oracle_split", "*.json")))
PUBLIC_SPLIT = [p for p in case_files() if load(p).get("split")]
MEMORY = [p for p in SPLIT if "memory" in load(p)]
TYPES = ["forward", "backward", "optimizer"]
CASES = [(p, "oracle") for p in PUBLIC_SPLIT] + [(p, "split") for p in SPLIT]
CASE_IDS = [os.path.basename(p) for p, _ in CASES]


@pytest.fixture(autouse=True)
def _restore_flags():
    old = paddle.get_flags(["FLAGS_enable_pir_api", "FLAGS_eager_delete_tensor_gb"])
    yield
    paddle.set_flags(old)


def _source(rec):
    """The recorded case (``oracle/NN.json`` or ``oracle_extra/NN.json``) a split record was made from."""
    kind, name = rec["source"].split("/")
    return load(oracle_file(os.path.join("programs", name)) if kind == "oracle" else os.path.join(EXTRA, name))


def _load_case(path, kind):
    """(main program, split record with its skip_gc, number of blocks)."""
    d = load(path)
    if kind == "oracle":
        return Program.from_dict(d["main"]), d["split"], 1
    return Program.from_dict(_source(d)["main"]), dict(d["split"], skip_gc=d["skip_gc"]), d["num_blocks"]


def _same_lists(got, want, ordered):
    return got == want if ordered else [sorted(g) for g in got] == [sorted(w) for w in want]


@pytest.mark.parametrize("path,kind", CASES, ids=CASE_IDS)
def test_split_program_matches_paddle(path, kind):
    main, rec, num_blocks = _load_case(path, kind)
    parts, ins, outs = pu.split_program(main, rec["op_indices"])
    assert [[op.type for op in p.global_block().ops] for p in parts] == rec["sub_program_ops"]
    # a conditional_block's Input/Out order is a set order in Paddle: compare those as sets
    assert _same_lists(ins, rec["input_vars"], ordered=num_blocks == 1)
    assert _same_lists(outs, rec["output_vars"], ordered=num_blocks == 1)
    assert [sorted(pu._get_required_vars_of_program(p)) for p in parts] == rec["required_vars"]


def _jobs(key, with_optimizer=True):
    schedule, m = key.split("_m")
    m = int(m)
    if schedule == "FThenB":
        order = [("forward", i) for i in range(m)] + [("backward", i) for i in range(m)]
    else:
        order = [(t, i) for i in range(m) for t in ("forward", "backward")]
    order += [("optimizer", 0)] if with_optimizer else []
    return m, [Job(t, i) for t, i in order]


def _skip_gc_result(parts, key, with_optimizer):
    m, jobs = _jobs(key, with_optimizer)
    n = 3 if with_optimizer else 2
    try:
        type_to_program = pu.set_skip_gc_vars(m, TYPES[:n], parts[:n], jobs)
    except pu.SkipGCVarsError as exc:
        assert isinstance(exc, AssertionError) and isinstance(exc, EnforceNotMet)
        assert exc.job_type == "backward" and "must be empty" in str(exc)
        return {"error": "AssertionError", "skip_gc_vars_of_backward": exc.skip_gc_vars_of_backward}
    assert list(type_to_program) == TYPES[:n]
    return {"jobs": [[j.type(), j.micro_batch_id(), j.skip_gc_vars()] for j in jobs]}


def _normalised(want):
    if "error" in want:
        return {"error": "AssertionError", "skip_gc_vars_of_backward": want["skip_gc_vars_of_backward"]}
    return want


@pytest.mark.parametrize("path,kind", CASES, ids=CASE_IDS)
def test_set_skip_gc_vars_matches_paddle(path, kind):
    paddle.set_flags({"FLAGS_enable_pir_api": False})  # Paddle recorded these with the legacy IR
    main, rec, _ = _load_case(path, kind)
    parts, _, _ = pu.split_program(main, rec["op_indices"])
    for key, want in rec["skip_gc"].items():
        assert _skip_gc_result(parts, key, True) == _normalised(want), key
    if kind == "split":
        for key, want in load(path)["skip_gc_no_optimizer"].items():
            assert _skip_gc_result(parts, key, False) == want, key


@pytest.mark.parametrize("path", MEMORY, ids=[os.path.basename(p) for p in MEMORY])
def test_memory_estimator_matches_paddle(path):
    d = load(path)
    parts, _, _ = pu.split_program(Program.from_dict(_source(d)["main"]), d["split"]["op_indices"])
    by_type = dict(zip(TYPES, parts))
    for rec in d["memory"]:
        est = pu.PipelineMemoryEstimator()
        types = rec["program_types"]
        if "error" in rec:
            with pytest.raises(pu.SkipGCVarsError):
                est.set_program_skip_gc_vars({t: by_type[t] for t in types}, types)
            continue
        est.set_program_skip_gc_vars({t: by_type[t] for t in types}, types)
        got = [[t, *est.estimate_memory(by_type[t], t)] for t in types]
        assert got == rec["estimates"]
        assert est.type_to_skip_gc_vars == rec["skip_gc_var_sizes"]


def _recorded_scope(d):
    scope = paddle.static.Scope()
    for name, entry in d["initial_persistables"].items():
        scope.var(name).get_tensor().set(array(entry))
    persist = sum(array(e).nbytes for e in d["initial_persistables"].values())
    feed = {k: array(v) for k, v in d["feeds"][0].items()}
    return scope, persist, feed, next(iter(feed.values())).shape[0]


def _unwritten_bytes(program, batch):
    """Bytes of outputs a kernel leaves unwritten: dropout's Mask in test mode."""
    block = program.global_block()
    masks = [block.var(op.output("Mask")[0]) for op in block.ops if op.type == "dropout" and op.attr("is_test")]
    return sum(int(np.prod([batch if d == -1 else d for d in v.shape])) * np.dtype(v.dtype).itemsize
               for v in masks)


SINGLE_BLOCK = [p for p in case_files() + sorted(glob.glob(os.path.join(EXTRA, "*.json")))
                if len(load(p)["main"]["blocks"]) == 1]


@pytest.mark.parametrize("path", SINGLE_BLOCK, ids=[os.path.basename(p) for p in SINGLE_BLOCK])
def test_estimate_without_paddle_quirks_is_the_executor_peak(path):
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})
    d = load(path)
    main = Program.from_dict(d["main"])
    scope, persist, feed, batch = _recorded_scope(d)
    exe = paddle.static.Executor()
    exe.run(main, feed=feed, fetch_list=[], scope=scope)
    est = pu.PipelineMemoryEstimator(batch_size=batch, paddle_quirks=False)
    est.set_program_skip_gc_vars({"forward": main}, ["forward"])
    mem_usage, max_memory = est.estimate_memory(main, "forward")
    stats = exe.memory_stats()
    assert (mem_usage, max_memory - _unwritten_bytes(main, batch)) == \
        (stats["live_bytes"] - persist, stats["peak_bytes"] - persist)


@pytest.mark.parametrize("path", MEMORY, ids=[os.path.basename(p) for p in MEMORY])
def test_estimate_of_a_forward_job_is_the_plan_executor_peak(path):
    """A forward job keeps what the backward job needs: the estimate's end usage is those bytes."""
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0, "FLAGS_enable_pir_api": True})
    rec = load(path)
    d = _source(rec)
    fwd, bwd, _ = pu.split_program(Program.from_dict(d["main"]), rec["split"]["op_indices"])[0]
    scope, persist, feed, batch = _recorded_scope(d)
    jobs = [Job("forward", 0), Job("backward", 0)]
    pu.set_skip_gc_vars(1, TYPES[:2], [fwd, bwd], jobs)
    exe = PlanExecutor()
    exe.run(Plan(jobs[:1], {"forward": fwd}), feed=feed, scope=scope)
    est = pu.PipelineMemoryEstimator(batch_size=batch, paddle_quirks=False)
    est.set_program_skip_gc_vars({"forward": fwd, "backward": bwd}, TYPES[:2])
    mem_usage, max_memory = est.estimate_memory(fwd, "forward")
    stats = exe.memory_stats()
    unwritten = _unwritten_bytes(fwd, batch)
    assert (mem_usage - unwritten, max_memory - unwritten) == \
        (stats["live_bytes"] - persist, stats["peak_bytes"] - persist)
    assert mem_usage == sum(est.type_to_skip_gc_vars["forward"].values())


# ---------------------------------------------------------------- refimpl-built programs
def _build_with_refimpl(models, case, cfg):
    models.bind(paddle, paddle.nn.functional)
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        loss, _ = models.MODELS[case](cfg)
    return main, startup, loss


def _extra_models():
    spec = importlib.util.spec_from_file_location("extra_models", os.path.join(EXTRA, "extra_models.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_split_of_programs_built_by_refimpl_lists_names_in_paddle_slot_order():
    """Ops refimpl builds list their slots in proto order; the split still follows Paddle's sorted order."""
    for path in SPLIT:
        d = load(path)
        if d["num_blocks"] != 1:
            continue
        tag, nn, case = os.path.basename(path)[:-5].split("_", 2)
        models = load_models() if tag == "public" else _extra_models()
        cfg = (models.PUBLIC if tag == "public" else models.EXTRA)[int(nn)][1]
        main, _, _ = _build_with_refimpl(models, case, cfg)
        _, ins, outs = pu.split_program(main, d["split"]["op_indices"])
        assert (ins, outs) == (d["split"]["input_vars"], d["split"]["output_vars"]), path


# ---------------------------------------------------------------- small programs
def _tiny():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        h = paddle.static.nn.fc(x, 4, activation="relu")
        loss = paddle.mean(h)
        paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main, startup, loss


def test_inputs_outputs_and_prune():
    main, _, _ = _tiny()
    ops = main.global_block().ops
    assert pu.get_inputs_of_program(main)[:3] == ["x", "fc_0.w_0", "fc_0.b_0"]
    outs = pu.get_outputs_of_program(main)
    assert outs[0] == ops[0].output_arg_names[0] and len(outs) == len(set(outs))
    pruned = pu.prune_program(main, 1, -5)
    assert [op.type for op in pruned.global_block().ops] == [op.type for op in ops[1:-5]]
    assert "x" not in pruned.global_block().vars and "fc_0.tmp_0" in pruned.global_block().vars
    assert len(main.global_block().ops) == len(ops) and "x" in main.global_block().vars
    for bad in [(len(ops), len(ops)), (2, 2), (0, len(ops) + 1)]:
        with pytest.raises(AssertionError):
            pu.prune_program(main, *bad)
    with pytest.raises(pu.PassAssertionError):
        pu.split_program(main, [3, 2])
    with pytest.raises(AssertionError):
        pu.split_program(main, [])


def test_op_in_out_info_and_var_can_be_deleted():
    main, _, _ = _tiny()
    block = main.global_block()
    grad = next(op for op in block.ops if op.type == "reduce_mean_grad")
    info = pu.OpInOutInfo()
    info.build_info(grad)
    assert info.is_build and not info.is_needed(grad.input("X")[0]) and info.is_needed(grad.input("Out@GRAD")[0])
    plain = pu.OpInOutInfo()
    plain.build_info(block.ops[0])
    assert not plain.is_build and plain.is_needed("anything")
    assert pu.var_can_be_deleted("x", block) and not pu.var_can_be_deleted("fc_0.w_0", block)
    assert not pu.var_can_be_deleted("no_such_var", block)


def test_pir_flag_refuses_send_backward_not_backward():
    main, _, _ = _tiny()
    parts, _, _ = pu.split_program(main, [4, 9])
    paddle.set_flags({"FLAGS_enable_pir_api": True})  # restored by _restore_flags
    jobs = [Job("forward", 0), Job("backward", 0), Job("optimizer", 0)]
    pu.set_skip_gc_vars(1, TYPES, parts, jobs)
    assert jobs[1].skip_gc_vars() == ["fc_0.b_0@GRAD", "fc_0.w_0@GRAD"]
    jobs = [Job("forward", 0), Job("send_backward", 0), Job("optimizer", 0)]
    with pytest.raises(pu.SkipGCVarsError) as err:
        pu.set_skip_gc_vars(1, ["forward", "send_backward", "optimizer"], parts, jobs)
    assert err.value.job_type == "send_backward" and jobs[2].skip_gc_vars() == []
    with pytest.raises(EnforceNotMet):
        pu.set_skip_gc_vars(1, TYPES, parts, [Job("forward", 1)])
    with pytest.raises(KeyError):
        pu.set_skip_gc_vars(1, TYPES, parts, [Job("recv_forward", 0)])


def _with_roles(roles):
    main, _, _ = _tiny()
    ops = main.global_block().ops[:len(roles)]
    main.global_block().ops[len(roles):] = []
    for op, r in zip(ops, roles):
        if r is None:
            op._remove_attr("op_role")
        else:
            op._set_attr("op_role", r)
    return main


def test_forward_complete_op_role():
    main = _with_roles([0, -1, None, 0, 1, -1, 1, 2])
    pu.forward_complete_op_role(main)
    assert [op.attr("op_role") for op in main.global_block().ops] == [0, 0, 0, 0, 1, 1, 1, 2]
    for roles, msg in (([-1, 0, 0], "different op_role"), ([0, 1, -1], "can't be -1"),
                       ([0, -1, 1], "different op_role"), ([None, None], "can't be -1")):
        with pytest.raises(AssertionError, match=msg):
            pu.forward_complete_op_role(_with_roles(roles))
    pu.forward_complete_op_role(Program())


def test_infer_chunk_id():
    main, _, _ = _tiny()
    ops = main.global_block().ops
    for op, c in zip(ops, [0, 0, 0, 1, 1, 2, 1]):
        op._set_attr("chunk_id", c)
    got = [pu.infer_chunk_id(i, ops, with_dist=False) for i in range(7)]
    assert got == [0, 0, 1, -1, -1, 1, -1]
    assert pu.infer_chunk_id(1, ops) == -1  # with_dist: refimpl ops carry no dist_attr


# ---------------------------------------------------------------- forward/backward/optimizer programs
_ROLE_TESTS = (op_role.is_forward, op_role.is_backward, op_role.is_optimize)


@pytest.mark.parametrize("gc_gb", [-1.0, 0.0], ids=["no_gc", "gc"])
@pytest.mark.parametrize("path", PUBLIC_SPLIT, ids=[os.path.basename(p) for p in PUBLIC_SPLIT])
def test_fthenb_programs_run_like_the_whole_program(path, gc_gb):
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb, "FLAGS_enable_pir_api": True})
    d = load(path)
    main = Program.from_dict(d["main"])
    progs = pu._program_for_fthenb_and_1f1b(Program.from_dict(d["main"]))
    for prog, test in zip(progs, _ROLE_TESTS):
        assert prog.global_block().ops and all(test(op.role()) for op in prog.global_block().ops)
    assert sum(len(p.global_block().ops) for p in progs) == len(main.global_block().ops)
    jobs = [Job("forward", 0), Job("backward", 0), Job("optimizer", 0)]  # PIR: backward may keep vars
    plan = Plan(jobs, pu.set_skip_gc_vars(1, TYPES, progs, jobs))
    scope, _, feed, _ = _recorded_scope(d)
    loss, = PlanExecutor().run(plan, feed=feed, fetch_list=[d["loss_name"]], scope=scope)
    np.testing.assert_allclose(loss[0], array(d["fetched_loss"][0]), rtol=1e-5, atol=1e-6)
    ref_scope = _recorded_scope(d)[0]
    paddle.static.Executor().run(main, feed=feed, fetch_list=[d["loss_name"]], scope=ref_scope)
    for name in d["final_persistables"]:
        np.testing.assert_allclose(np.array(scope.find_var(name).get_tensor()),
                                   np.array(ref_scope.find_var(name).get_tensor()), rtol=1e-6, err_msg=name)


def test_fthenb_programs_refuse_lr_ops_unless_asked():
    path = os.path.join(EXTRA, "16_lr_decay_ops_sgd.json")
    main = Program.from_dict(load(path)["main"])
    with pytest.raises(ValueError, match="isn't one of Forward, Backward or Optimizer"):
        pu._program_for_fthenb_and_1f1b(main.clone())
    lr, fwd, bwd, opt = pu._program_for_fthenb_and_1f1b(main.clone(), with_lr=True)
    assert lr.global_block().ops and all(op.role() & 16 for op in lr.global_block().ops)
    assert sum(len(p.global_block().ops) for p in (lr, fwd, bwd, opt)) == len(main.global_block().ops)


def test_fthenb_programs_of_a_multi_block_program_run_whole_sub_blocks():
    main = Program.from_dict(load(oracle_file(os.path.join("programs", "06_gradient_merge.json")))["main"])
    sub_types = [op.type for op in main.block(1).ops]
    fwd, bwd, opt = pu._program_for_fthenb_and_1f1b(main)
    # block 1 of the source holds backward (scale) and optimize (sgd, fill_constant) ops
    assert [op.type for op in bwd.block(1).ops] == ["scale"] * 4 and bwd.num_blocks == 2
    assert [op.type for op in opt.block(1).ops] == sub_types[4:] and opt.global_block().ops == []
    cond = next(op for op in fwd.global_block().ops if op.type == "conditional_block")
    assert fwd.num_blocks == 2 and cond.attr("sub_block") is fwd.block(1)
    assert [op.type for op in fwd.block(1).ops] == sub_types and "fc_0.w_0" not in fwd.block(1).vars


@pytest.mark.skipif(not (has_op("send_v2") and has_op("c_sync_calc_stream")), reason="collective ops not registered")
def test_insert_sync_for_fthenb_1f1b():
    main, _, _ = _tiny()
    block = main.global_block()
    block._insert_op(3, "send_v2", inputs={"X": ["fc_0.tmp_2"]}, attrs={"op_role": 0, "ring_id": 0, "peer": 1})
    for at, name, ring in ((9, "fc_0.tmp_1@GRAD", 1), (10, "fc_0.tmp_0@GRAD", 2)):
        block._insert_op(at, "send_v2", inputs={"X": [name]}, attrs={"op_role": 1, "ring_id": ring, "peer": 0})
    pu._insert_sync_for_fthenb_1f1b(main)
    types = [op.type for op in block.ops]
    assert types[3:6] == ["c_sync_calc_stream", "send_v2", "c_sync_comm_stream"]
    assert block.ops[5].has_attr("pipeline_flag") and block.ops[5].attr("op_role") == 1
    assert block.ops[4].attr("use_calc_stream") is False and block.ops[4].attr("dynamic_shape") is False
    # the comm syncs of backward sends go before the first optimize op, the later send's first
    first_opt = types.index("sgd")
    assert types[first_opt - 2:first_opt] == ["c_sync_comm_stream"] * 2
    assert [block.ops[i].attr("ring_id") for i in (first_opt - 2, first_opt - 1)] == [2, 1]
    assert all(block.ops[i].attr("op_role") == 2 for i in (first_opt - 2, first_opt - 1))
    # with a backward recv_v2, a forward send's comm sync before it is dropped
    main, _, _ = _tiny()
    block = main.global_block()
    block._insert_op(3, "send_v2", inputs={"X": ["fc_0.tmp_2"]}, attrs={"op_role": 0, "ring_id": 0, "peer": 1})
    block._insert_op(6, "recv_v2", outputs={"Out": ["fc_0.tmp_2@GRAD"]},
                     attrs={"op_role": 1, "ring_id": 0, "peer": 1, "out_shape": [-1, 4], "dtype": 5})
    pu._insert_sync_for_fthenb_1f1b(main)
    assert "c_sync_comm_stream" not in [op.type for op in block.ops]


# ---------------------------------------------------------------- matmul_v2_grad -> matmul_v2
def _matmul_program(x_shape):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", x_shape, "float32")
        x.stop_gradient = False
        w = paddle.static.create_parameter([x_shape[-1], 6], "float32", name="w")
        loss = paddle.mean(paddle.nn.functional.relu(x @ w) * 1.5)
        grads = paddle.static.append_backward(loss)
    return main, startup, ["x@GRAD"] + [g.name for _, g in grads]


@pytest.mark.parametrize("x_shape", [[4, 3, 5], [-1, 3, 5], [7, 5]])
def test_split_matmul_grad_to_matmul_keeps_the_gradients(x_shape):
    main, startup, fetch = _matmul_program(x_shape)
    feed = {"x": np.random.default_rng(1).standard_normal([4 if d == -1 else d for d in x_shape]).astype("float32")}
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    want = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    block = main.global_block()
    idx = next(i for i, op in enumerate(block.ops) if op.type == "matmul_v2_grad")
    pu.split_matmul_grad_to_matmul(block, idx)
    types = [op.type for op in block.ops[idx:idx + 5]]
    if len(x_shape) == 3:
        assert types == ["matmul_v2", "reshape2", "reshape2", "matmul_v2", "reshape2"]
        assert block.ops[idx + 3].attr("trans_x") is True and block.ops[idx].attr("trans_y") is True
    else:
        assert types[:2] == ["matmul_v2", "matmul_v2"]
    assert "matmul_v2_grad" not in [op.type for op in block.ops]
    got = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    for g, w, name in zip(got, want, fetch):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_split_matmul_grad_refuses_transposed_matmul():
    main, _, _ = _matmul_program([4, 3, 5])
    block = main.global_block()
    idx = next(i for i, op in enumerate(block.ops) if op.type == "matmul_v2_grad")
    block.ops[idx]._set_attr("trans_y", True)
    with pytest.raises(AssertionError, match="tran_y == True is not supported"):
        pu.split_matmul_grad_to_matmul(block, idx)
