"""CompiledProgram and BuildStrategy: the behaviour of Paddle's ``paddle/fluid/framework/compiled_program.cc``.

Places, local scopes, the broadcast of persistables (copy or share), the
Reduce fallback, the hierarchical-allreduce checks, async mode, feed
splitting, fetch merging, GC and the trace. The MPI cases run this file as a
script under ``mpiexec -n 2`` (``python tests/test_compiled_program.py CASE``)
with a subprocess timeout.
"""
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unavailable, Unimplemented
from refimpl.core.tensor import DenseTensor
from refimpl.executor import Trace, eager_deletion_vars
from refimpl.framework import Program, unique_name
from refimpl.static import BuildStrategy, CompiledProgram
from refimpl.static.compiled_program import REDUCE_FALLBACK

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RS = BuildStrategy.ReduceStrategy


def build(opt="sgd", lr=0.1):
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        h = paddle.static.nn.fc(x, 8, activation="tanh")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
        (paddle.optimizer.SGD(lr) if opt == "sgd" else paddle.optimizer.Adam(lr)).minimize(loss)
    return main, startup, loss


def ready(opt="sgd", lr=0.1, seed=0):
    main, startup, loss = build(opt, lr)
    paddle.seed(seed)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    return main, loss, scope, exe


def places(n):
    return [paddle.CPUPlace()] * n


def strategy(**kw):
    bs = BuildStrategy()
    for k, v in kw.items():
        setattr(bs, k, v)
    return bs


X = np.arange(24, dtype="float32").reshape(6, 4) / 24


# ---- BuildStrategy -------------------------------------------------------------
def test_build_strategy_defaults_match_paddle_3_3_1():
    bs = BuildStrategy()
    assert bs.reduce_strategy is RS.AllReduce and str(bs.reduce_strategy) == "ReduceStrategy.AllReduce"
    assert (int(RS.AllReduce), int(RS.Reduce), int(RS._NoReduce)) == (0, 1, 2)
    assert (bs.fuse_all_reduce_ops, bs.enable_inplace, bs.memory_optimize, bs.async_mode) == (True, True, None, False)
    assert (bs.num_trainers, bs.trainer_id, bs.nccl_comm_num, bs.hierarchical_allreduce_inter_nranks) == (1, 0, 1, 0)
    assert (bs.use_hierarchical_allreduce, bs.trainers_endpoints, bs.debug_graphviz_path) == (False, [], "")
    assert bs.fuse_grad_size_in_MB == 32 and bs.mkldnn_enabled_op_types == set()


def test_build_strategy_refuses_wrong_types_and_unknown_names():
    bs = BuildStrategy()
    for name, value in [("num_trainers", "a"), ("reduce_strategy", 1), ("fuse_all_reduce_ops", 1),
                        ("num_trainers", True), ("debug_graphviz_path", 3)]:
        with pytest.raises(InvalidArgument, match=f"BuildStrategy.{name}: incompatible value"):
            setattr(bs, name, value)
    with pytest.raises(AttributeError):
        bs.no_such_setting = 1
    bs.memory_optimize, bs.enable_inplace = True, False  # accepted, no effect
    assert bs.memory_optimize is True


def test_reduce_falls_back_to_allreduce_on_one_rank(caplog):
    main, loss, scope, exe = ready()
    bs = strategy(reduce_strategy=RS.Reduce)
    cp = CompiledProgram(main, bs)
    with caplog.at_level(logging.INFO, logger="refimpl"):
        out = exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)
    assert REDUCE_FALLBACK in caplog.text
    assert REDUCE_FALLBACK == ("If you set build_strategy.reduce with 'Reduce',"
                               "the number of places should be greater than 1.")  # compiled_program.cc's text, no space
    assert cp._strategy.reduce_strategy is RS.AllReduce and bs.reduce_strategy is RS.Reduce  # a copy changes
    assert out[0].shape == ()  # one place: the plain value


# ---- errors of compiled_program.cc --------------------------------------------------------
@pytest.mark.parametrize("n,inter,msg", [
    (1, 2, "The num_trainers should be greater than 1, but received 1."),
    (4, 1, "The inter_nranks should be greater than 1, but received 1."),
    (4, 3, "num_trainers:4 mod inter_nranks:3 != 0")])
def test_hierarchical_allreduce_checks(n, inter, msg):
    main, loss, scope, exe = ready()
    cp = CompiledProgram(main, strategy(use_hierarchical_allreduce=True, hierarchical_allreduce_inter_nranks=inter),
                         places=places(n))
    kids = scope.kids()
    with pytest.raises(PreconditionNotMet, match=msg):
        exe.run(cp, feed={"x": np.ones((8, 4), "float32")}, fetch_list=[loss], scope=scope)
    assert scope.kids() == kids  # a failed compile leaves no local scopes behind


def test_exter_nranks_is_ranks_over_inter_nranks():
    main, loss, scope, exe = ready()
    cp = CompiledProgram(main, strategy(use_hierarchical_allreduce=True, hierarchical_allreduce_inter_nranks=2),
                         places=places(4))
    exe.run(cp, feed={"x": np.ones((8, 4), "float32")}, fetch_list=[loss], scope=scope)
    assert cp._strategy.hierarchical_allreduce_exter_nranks == 2


def test_given_local_scopes_must_match_the_places():
    main, loss, scope, exe = ready()
    cp = CompiledProgram(main, places=places(2), local_scopes=[scope])
    msg = r"member_->places_.size\(\) = 2 is not equal to local_scopes.size\(\) = 1"
    with pytest.raises(PreconditionNotMet, match=msg):
        exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)


def test_async_mode_is_cpu_only():
    main, loss, scope, _ = ready()
    exe = paddle.static.Executor(paddle.CUDAPlace(0))
    cp = CompiledProgram(main, strategy(async_mode=True), places=[paddle.CUDAPlace(0), paddle.CUDAPlace(1)])
    with pytest.raises(Unavailable, match="gpu mode does not support async_mode_ now!"):
        exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)


def test_compile_once_per_scope_and_place_type():
    main, loss, scope, exe = ready()
    cp = CompiledProgram(main, places=places(2))
    exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)
    with pytest.raises(InvalidArgument, match="Cannot compile program with different scope."):
        exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=paddle.static.Scope())
    with pytest.raises(InvalidArgument, match="Place type not match"):
        exe.run(CompiledProgram(main, places=[paddle.CUDAPlace(0)]), feed={"x": X}, scope=scope)
    with pytest.raises(InvalidArgument, match="expected Graph or Program"):
        CompiledProgram("main")
    with pytest.raises(InvalidArgument, match="The shared Program is not compiled and executed"):
        exe.run(CompiledProgram(main, places=places(2), share_vars_from=CompiledProgram(main)), feed={"x": X},
                scope=scope)


# ---- local scopes and the broadcast ----------------------------------------------------
def test_local_scopes_are_kids_of_the_run_scope_and_deleted_on_close():
    main, loss, scope, exe = ready()
    cp = CompiledProgram(main, places=places(3))
    exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)
    s0, s1, s2 = cp.local_scopes()
    assert s0 is scope and s1.parent() is scope and s2.parent() is scope
    assert scope.has_kid(s1) and scope.has_kid(s2)
    cp.close()
    assert not scope.has_kid(s1) and not scope.has_kid(s2)


def test_given_local_scopes_get_new_kids_no_broadcast_and_survive_close():
    main, loss, scope, exe = ready()
    other = paddle.static.Scope()
    for p in main.all_parameters() + [main.global_block().var("learning_rate_0")]:
        other.var(p.name).get_tensor().set(np.array(scope.find_var(p.name).get_tensor()))
    cp = CompiledProgram(main, places=places(2), local_scopes=[scope, other])
    out = exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)
    assert out[0].shape == (2,)
    s0, s1 = cp.local_scopes()
    assert s0.parent() is scope and s1.parent() is other
    assert s1.find_local_var("fc_0.w_0") is None  # no broadcast: the given scope's value is used
    cp.close()
    assert scope.has_kid(s0) and other.has_kid(s1)


def test_allreduce_copies_persistables_reduce_shares_them_on_cpu():
    for reduce, shared in [(RS.AllReduce, False), (RS.Reduce, True)]:
        main, loss, scope, exe = ready()
        cp = CompiledProgram(main, strategy(reduce_strategy=reduce), places=places(2))
        w0 = np.array(scope.find_var("fc_0.w_0").get_tensor())
        exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)
        local = cp.local_scopes()[1]
        own = local.find_local_var("fc_0.w_0")
        assert own is not None
        assert (own is scope.find_var("fc_0.w_0")) == shared
        np.testing.assert_array_equal(np.array(own.get_tensor()), np.array(scope.find_var("fc_0.w_0").get_tensor()))
        assert not np.array_equal(w0, np.array(own.get_tensor()))  # trained


def test_lr_decay_counter_is_copied_even_when_sharing():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 1))
        paddle.optimizer.SGD(paddle.optimizer.lr.exponential_decay(0.1, 2, 0.5)).minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    cp = CompiledProgram(main, strategy(reduce_strategy=RS.Reduce), places=places(2))
    for _ in range(3):
        exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)
    s0, s1 = cp.local_scopes()
    c0, c1 = s0.find_var("@LR_DECAY_COUNTER@"), s1.find_local_var("@LR_DECAY_COUNTER@")
    assert c1 is not None and c1 is not c0
    assert int(np.array(c0.get_tensor())[0]) == int(np.array(c1.get_tensor())[0]) == 2


# ---- feeds and fetches ---------------------------------------------------------------------
def test_feed_is_split_like_split_lod_tensor_and_fetches_merge_on_dim_0():
    main, loss, scope, exe = ready()
    cp = CompiledProgram(main, places=places(4))
    h = main.global_block().var("fc_0.tmp_2")
    x = np.arange(28, dtype="float32").reshape(7, 4) / 28
    loss_v, h_v = exe.run(cp, feed={"x": x}, fetch_list=[loss, h], scope=scope)
    assert loss_v.shape == (4,) and h_v.shape == (7, 8)  # slices of 2, 2, 2, 1 rows
    with pytest.raises(PreconditionNotMet, match=r"The number\(3\) of samples\[x\] of current batch is less than the "
                                                 r"count\(4\) of devices\(CPU\), currently, it is not allowed."):
        exe.run(cp, feed={"x": X[:5]}, fetch_list=[loss], scope=scope)  # ceil(5/4) = 2 rows -> 3 pieces


def test_feed_list_return_merged_and_return_numpy():
    main, loss, scope, exe = ready()
    cp = CompiledProgram(main, places=places(2))
    per = exe.run(cp, feed=[{"x": X[:2]}, {"x": X[2:]}], fetch_list=[loss], scope=scope)
    assert per[0].shape == (2,)
    un = cp._run_with_executor(exe, {"x": X}, [loss], scope, True, None, return_merged=False)
    assert len(un) == 1 and len(un[0]) == 2 and un[0][0].shape == ()
    t = cp._run_with_executor(exe, {"x": X}, [loss], scope, False, None)
    assert isinstance(t[0], DenseTensor) and np.array(t[0]).shape == (2,)
    with pytest.raises(Unimplemented, match="The feed data number 1 does not match the device number 2."):
        exe.run(cp, feed=[{"x": X}], fetch_list=[loss], scope=scope)
    with pytest.raises(InvalidArgument, match="Each element of feed list should be a dict"):
        exe.run(cp, feed=[{"x": X}, X], fetch_list=[loss], scope=scope)


# ---- async mode, GC and the trace -----------------------------------------------------
def test_async_mode_trains_each_place_on_its_own_slice():
    main, loss, scope, exe = ready()
    cp = CompiledProgram(main, strategy(async_mode=True), places=places(2))
    exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)
    for i, part in enumerate((X[:3], X[3:])):
        m2, l2, s2, e2 = ready()
        e2.run(m2, feed={"x": part}, fetch_list=[l2], scope=s2)
        got = np.array(cp.local_scopes()[i].find_var("fc_0.w_0").get_tensor())
        np.testing.assert_allclose(got, np.array(s2.find_var("fc_0.w_0").get_tensor()), rtol=1e-6)
    assert not any(op.type.startswith("c_") for op in cp._programs[0].global_block().ops)


def test_each_place_frees_what_the_eager_deletion_plan_says():
    main, loss, scope, exe = ready("adam")
    cp = CompiledProgram(main, strategy(reduce_strategy=RS.Reduce, fuse_all_reduce_ops=False), places=places(2))
    t = Trace()
    exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope, trace=t)
    for rank in range(2):
        plan = eager_deletion_vars(cp._programs[rank], skip_vars=[loss.name])[0]
        want = {i: names for i, names in enumerate(plan) if names}
        got = {}
        for e in t.events:
            if e.kind == "free" and e.rank == rank:
                got.setdefault(e.op, []).append(e.var)
        assert {k: sorted(v) for k, v in got.items()} == want
    ranks = [e.rank for e in t.events if e.kind == "op"]
    assert set(ranks) == {0, 1} and ranks == sorted(ranks)  # rank 0's events, then rank 1's
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": -1.0})
    try:
        t2 = Trace()
        exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope, trace=t2)
        assert not t2.of_kind("free")
    finally:
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})


def test_a_failing_place_names_its_rank():
    main, loss, scope, exe = ready()
    cp = CompiledProgram(main, places=places(2))
    cp._timeout = 5
    exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)
    cp.local_scopes()[1].find_var("fc_0.w_0").get_tensor().set(np.ones((3, 8), "float32"))
    with pytest.raises(Unavailable, match="rank 1 failed"):
        exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)


# ---- under mpiexec ----------------------------------------------------------------------------
def _launch(case, timeout=90):
    pytest.importorskip("mpi4py")
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if exe is None:
        pytest.fail("mpi4py is installed but mpiexec is not on PATH (pip install mpich)")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([exe, "-n", "2", sys.executable, os.path.abspath(__file__), case],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def test_trainers_take_trainer_0s_parameters():
    p = _launch("bcast")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK 0" in p.stdout and "OK 1" in p.stdout, p.stdout


def test_num_trainers_must_match_the_mpi_job():
    p = _launch("mismatch")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("build_strategy says trainer") == 2, p.stdout


def _script(case):
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    main, loss, scope, exe = ready(lr=0.0, seed=rank)  # different initial values per trainer
    if case == "bcast":
        w0 = np.array(scope.find_var("fc_0.w_0").get_tensor())
        bs = strategy(num_trainers=2, trainer_id=rank)
        cp = CompiledProgram(main, bs, places=places(2))
        exe.run(cp, feed={"x": X[:4]}, fetch_list=[loss], scope=scope)
        ref = ready(lr=0.0, seed=0)[2]  # trainer 0's initial values (lr 0: unchanged)
        for s in cp.local_scopes():
            for p in main.all_parameters():
                np.testing.assert_array_equal(np.array(s.find_var(p.name).get_tensor()),
                                              np.array(ref.find_var(p.name).get_tensor()))
        assert rank == 0 or not np.array_equal(w0, np.array(ref.find_var("fc_0.w_0").get_tensor()))
        print(f"OK {rank}", flush=True)
    elif case == "mismatch":
        cp = CompiledProgram(main, strategy(num_trainers=3, trainer_id=rank), places=places(2))
        try:
            exe.run(cp, feed={"x": X[:4]}, fetch_list=[loss], scope=scope)
        except PreconditionNotMet as exc:
            print(exc, flush=True)


if __name__ == "__main__":
    _script(sys.argv[1])
