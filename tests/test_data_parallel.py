"""The data-parallel rewrite (``distributed/passes/data_parallel.py``) and its numerics.

N places on batch B must equal one place on batch N*B (rtol 1e-5) for
N in {2, 4}, AllReduce and Reduce, fused and unfused, hierarchical (4 ranks
as 2x2), in-process and under ``mpiexec -n 2`` with 2 places each (the
example script, run as a subprocess with a timeout).
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.passes import new_pass
from refimpl.distributed.passes.data_parallel import (FUSED_PREFIX, buckets, hierarchical_rings, param_grads,
                                                      apply_data_parallel)
from refimpl.executor import Trace
from refimpl.framework import OpRole, Program, unique_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIVES = ("c_allreduce_sum", "c_reduce_sum", "c_broadcast")


def build(opt="adam", layers=2, width=16, decay=False):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        h = paddle.static.data("x", [None, 8], "float32")
        for _ in range(layers):
            h = paddle.static.nn.fc(h, width, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        lr = paddle.optimizer.lr.exponential_decay(0.05, 2, 0.5) if decay else 0.05
        make = {"adam": lambda: paddle.optimizer.Adam(lr), "sgd": lambda: paddle.optimizer.SGD(lr),
                "momentum": lambda: paddle.optimizer.Momentum(lr, 0.9)}[opt]
        make().minimize(loss)
    return main, startup, loss


def strategy(reduce="AllReduce", fuse=False, inter=0, fuse_mb=32):
    bs = paddle.static.BuildStrategy()
    bs.reduce_strategy = getattr(bs.ReduceStrategy, reduce)
    bs.fuse_all_reduce_ops, bs.fuse_grad_size_in_MB = fuse, fuse_mb
    if inter:
        bs.use_hierarchical_allreduce, bs.hierarchical_allreduce_inter_nranks = True, inter
    return bs


def feeds(nrows, steps=3, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((nrows, 8)).astype("float32")} for _ in range(steps)]


def train(model, fs, places=None, bs=None, trace=None):
    """Losses per step and every place's parameters (one place when ``places`` is None)."""
    main, startup, loss = model
    paddle.seed(0)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    prog = main if places is None else paddle.static.CompiledProgram(main, bs, places=[paddle.CPUPlace()] * places)
    losses = [exe.run(prog, feed=f, fetch_list=[loss], scope=scope, trace=trace if i == 0 else None)[0]
              for i, f in enumerate(fs)]
    scopes = [scope] if places is None else prog.local_scopes()
    params = [{p.name: np.array(s.find_var(p.name).get_tensor()) for p in main.all_parameters()} for s in scopes]
    return losses, params


def collectives(trace, rank, kinds=("c_allreduce_sum", "c_reduce_sum")):
    return sum(1 for e in trace.events if e.kind == "op" and e.rank == rank and e.op_type in kinds)


# ---- numerics ----------------------------------------------------------------------
CASES = [(n, r, f, 0) for n in (2, 4) for r in ("AllReduce", "Reduce") for f in (False, True)]
CASES += [(4, "AllReduce", f, 2) for f in (False, True)]


@pytest.mark.parametrize("n,reduce,fuse,inter", CASES)
def test_n_places_equal_one_place_on_n_times_the_batch(n, reduce, fuse, inter):
    model = build()
    fs = feeds(4 * n)
    ref_losses, (ref,) = train(model, fs)
    losses, params = train(model, fs, n, strategy(reduce, fuse, inter))
    assert all(l.shape == (n,) for l in losses)  # a scalar loss: one value per place
    np.testing.assert_allclose([l.mean() for l in losses], [float(r) for r in ref_losses], rtol=1e-5)
    assert len(params) == n
    for place_params in params:
        for k, v in place_params.items():
            np.testing.assert_allclose(v, ref[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("opt,reduce", [("sgd", "Reduce"), ("momentum", "AllReduce"), ("momentum", "Reduce")])
def test_other_optimizers_and_an_in_graph_lr_schedule(opt, reduce):
    model = build(opt, decay=True)  # @LR_DECAY_COUNTER@ must be copied, never shared, even in Reduce mode
    fs = feeds(8, steps=4)
    ref_losses, (ref,) = train(model, fs)
    losses, params = train(model, fs, 2, strategy(reduce, fuse=True))
    np.testing.assert_allclose([l.mean() for l in losses], [float(r) for r in ref_losses], rtol=1e-5)
    for k, v in params[1].items():
        np.testing.assert_allclose(v, ref[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_fused_allreduce_runs_fewer_collectives_than_unfused():
    model, fs = build(layers=3), feeds(8, steps=1)
    counts = {}
    for name, bs in {"unfused": strategy(), "fused": strategy(fuse=True),
                     "small buckets": strategy(fuse=True, fuse_mb=1200 / (1 << 20))}.items():
        t = Trace()
        train(model, fs, 2, bs, trace=t)
        counts[name] = (collectives(t, 0), collectives(t, 1))
    nparams = len(model[0].all_parameters())
    assert counts["unfused"] == (nparams, nparams)
    assert counts["fused"] == (1, 1)
    assert 1 < counts["small buckets"][0] < nparams


def test_hierarchical_allreduce_runs_the_node_rings_then_the_roots():
    model, fs = build(), feeds(8, steps=1)
    t = Trace()
    train(model, fs, 4, strategy(fuse=True, inter=2), trace=t)
    per_rank = [(collectives(t, r, ("c_reduce_sum",)), collectives(t, r, ("c_allreduce_sum",)),
                 collectives(t, r, ("c_broadcast",))) for r in range(4)]
    assert per_rank == [(1, 1, 1), (1, 0, 1), (1, 1, 1), (1, 0, 1)]


# ---- the rewrite -------------------------------------------------------------------------
def _ops(program):
    return program.global_block().ops


def test_allreduce_mode_puts_allreduce_and_scale_right_after_each_gradient():
    main, _, _ = build()
    pairs = param_grads(main.global_block())
    prog = apply_data_parallel(main.clone(), 4, 0, strategy())
    ops = _ops(prog)
    for _, g, _ in pairs:
        i = next(k for k, op in enumerate(ops)
                 if g in op.output_arg_names and op.type not in ("c_allreduce_sum", "scale"))
        assert [ops[i + 1].type, ops[i + 2].type] == ["c_allreduce_sum", "scale"]
        assert ops[i + 1].input("X") == ops[i + 1].output("Out") == [g]
        assert ops[i + 2].attr("scale") == pytest.approx(0.25) and ops[i + 2].role() == OpRole.Backward
    assert sum(op.type == "c_allreduce_sum" for op in ops) == len(pairs)


def test_fused_buckets_follow_production_order_and_close_at_the_size():
    main, _, _ = build(layers=2, width=16)
    block = main.global_block()
    pairs = param_grads(block)  # backward order: fc_2.b, fc_2.w, fc_1.b, fc_1.w, fc_0.b, fc_0.w
    assert [p for p, _, _ in pairs][:2] == ["fc_2.b_0", "fc_2.w_0"]
    assert [len(u) for u in buckets(block, pairs, True, 0)] == [6]
    # fc_2: 4 + 64 bytes; fc_1: 64 + 1024; fc_0: 64 + 512 -> close once >= 1000 bytes
    assert [[p for p, _, _ in u] for u in buckets(block, pairs, True, 1000 / (1 << 20))] == [
        ["fc_2.b_0", "fc_2.w_0", "fc_1.b_0", "fc_1.w_0"], ["fc_0.b_0", "fc_0.w_0"]]
    prog = apply_data_parallel(main.clone(), 2, 0, strategy(fuse=True))
    co = [op for op in _ops(prog) if op.type == "coalesce_tensor"]
    assert len(co) == 1 and co[0].input("Input") == co[0].output("Output") == [g for _, g, _ in pairs]
    assert co[0].output("FusedOutput") == [FUSED_PREFIX + pairs[0][1]] and co[0].attr("copy_data") is True


def test_reduce_mode_owners_updates_and_broadcasts():
    main, _, _ = build(opt="sgd")
    progs, ctxs = [], []
    for rank in range(2):
        prog = main.clone()
        p = new_pass("reduce_mode_multi_devices_pass", {"nranks": 2, "rank": rank})
        ctxs.append(p.apply([prog], [None]))
        progs.append(prog)
    owners = ctxs[0].get_attr("data_parallel_owners")
    # GetAppropriateDeviceID: the least-loaded rank, first on ties (sizes 1, 16, 16, 256, 16, 128)
    assert {k: v for k, v in owners.items() if "@" not in k} == {
        "fc_2.b_0": 0, "fc_2.w_0": 1, "fc_1.b_0": 0, "fc_1.w_0": 1, "fc_0.b_0": 0, "fc_0.w_0": 0}
    for rank, prog in enumerate(progs):
        updated = {op.input("Param")[0] for op in _ops(prog) if op.type == "sgd"}
        assert updated == {p for p, o in owners.items() if o == rank and "@" not in p}
        bcast = [(op.input("X")[0], op.attr("root")) for op in _ops(prog) if op.type == "c_broadcast"]
        assert bcast == sorted((p, o) for p, o in owners.items() if "@" not in p)
        assert all(op.type == "c_broadcast" for op in _ops(prog)[-6:])
        scaled = {op.input("X")[0] for op in _ops(prog) if op.type == "scale" and op.role() == OpRole.Backward}
        assert scaled == {p + "@GRAD" for p, o in owners.items() if o == rank and "@" not in p}


def test_hierarchical_rings_and_ops():
    assert hierarchical_rings(4, 2) == {1: [0, 1], 2: [2, 3], 3: [0, 2]}
    assert hierarchical_rings(6, 3) == {1: [0, 1, 2], 2: [3, 4, 5], 3: [0, 3]}
    with pytest.raises(InvalidArgument, match="4 ranks cannot form nodes of 3 ranks"):
        hierarchical_rings(4, 3)
    main, _, _ = build()
    for rank, want in [(0, ["c_reduce_sum", "c_allreduce_sum", "c_broadcast"]), (3, ["c_reduce_sum", "c_broadcast"])]:
        prog = apply_data_parallel(main.clone(), 4, rank, strategy(fuse=True, inter=2))
        comm = [(op.type, op.attr("ring_id")) for op in _ops(prog) if op.type in COLLECTIVES]
        node = 1 + rank // 2
        assert comm == [(t, 3 if t == "c_allreduce_sum" else node) for t in want]


def test_pass_names_and_one_rank():
    main, _, _ = build()
    before = [op.type for op in _ops(main)]
    for name in ("all_reduce_mode_multi_devices_pass", "reduce_mode_multi_devices_pass"):
        p = new_pass(name, {"nranks": 1})
        assert p.name == name
        p.apply([main], [None])  # one rank: nothing to do, the pass is skipped
        assert [op.type for op in _ops(main)] == before
    with pytest.raises(InvalidArgument, match="needs 0 <= rank < nranks, got rank=2 nranks=2"):
        new_pass("all_reduce_mode_multi_devices_pass", {"nranks": 2, "rank": 2}).apply([main], [None])


# ---- under mpiexec ----------------------------------------------------------------------
def _mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def test_two_trainers_of_two_places_under_mpiexec():
    pytest.importorskip("mpi4py")
    exe = _mpiexec()
    if exe is None:
        pytest.fail("mpi4py is installed but mpiexec is not on PATH (pip install mpich)")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([exe, "-n", "2", sys.executable, os.path.join(ROOT, "examples", "dp_mlp.py"),
                        "--places", "2", "--all"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [line for line in p.stdout.splitlines() if "trainers=2 places=2" in line]
    assert len(lines) == 6 and all(line.endswith("-> OK") for line in lines), p.stdout
    assert "collectives/step 1 ->" in lines[1] and "collectives/step 8 ->" in lines[0]
