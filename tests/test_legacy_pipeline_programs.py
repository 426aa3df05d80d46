"""Paddle's legacy ``paddle.incubate.optimizer.PipelineOptimizer`` (refimpl/incubate/optimizer/pipeline/).

1. Each case of ``tests/oracle_legacy_pipeline/pipeline_cases.py`` built with refimpl gives Paddle
   3.3.1's section program (every op: type, sorted inputs / outputs, recorded attrs), split startup
   program, vars, persistables, plain ``_pipeline_opt`` entries, ``pipeline_pair`` and ``pp_ring_map``
   (recorded by that file from Paddle; AMP cases see the GPU build's fp16 kernels, as the recorder does).
2. The section programs of both stages, run by refimpl's SectionWorker on two in-process ranks (one
   program per rank, the pair rings bound to both), train a float64 net to the parameters of a
   one-device run on the whole batch (F-then-B and 1F1B).
   The same holds for refimpl's ``device_guard("stage:k")`` spelling and for a RecomputeOptimizer
   wrapping the Momentum (recompute changes no number).
3. The ``stage:k`` spelling builds the programs, pairs and ring map of the ``gpu:k`` spelling.
4. Bad input is refused with typed errors that name the problem.
"""
import json
import os
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import EnforceNotMet
from refimpl.distributed.communication import context, run_in_process
from refimpl.executor.section_worker import SectionWorker
from refimpl.incubate.optimizer import PipelineOptimizer
from refimpl.incubate.optimizer.pipeline import PipelineBuildError
from refimpl.incubate.optimizer.recompute import RecomputeOptimizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "oracle_legacy_pipeline"))
import pipeline_cases as pc  # noqa: E402

with open(os.path.join(HERE, "oracle_legacy_pipeline", "programs.json")) as f:
    ORACLE = json.load(f)
BUILT = [c for c in pc.CASES if "error" not in ORACLE[c]]


@pytest.fixture(autouse=True)
def _static():
    paddle.enable_static()
    yield


@pytest.mark.parametrize("case", BUILT)
def test_section_program_equals_paddle(case, gpu_amp_lists):
    expected = ORACLE[case]
    main, startup, _, ret, acc, _ = pc.build(paddle, case)
    got = pc.record(main, startup, ret, acc)
    for key in sorted(k for k in expected if k.startswith(("main", "startup")) and k != "startup_vars"):
        assert got.get(key) == expected[key], f"{case}: {key}"
    for key in ("vars", "startup_vars"):
        assert sorted(got[key]) == sorted(expected[key]), f"{case}: {key}"
        for name, (shape, dtype, persistable) in expected[key].items():
            if pc.CASES[case]["acc"] == "fuse" and ".cast_fp16@GRAD" in name:
                # Paddle's compile-time dtype of an fp16 gradient that a coalesce_tensor lays out reads
                # float32 (its build-time inference); refimpl keeps float16, the dtype it has at run time
                assert got[key][name][2] == persistable, f"{case}: {key} {name}"
                continue
            assert got[key][name][1:] == [dtype, persistable], f"{case}: {key} {name}"
            if name.startswith("Fused") and shape == []:  # Paddle infers no compile-time shape there
                continue
            assert got[key][name][0] == shape, f"{case}: {key} {name} shape"
    for key in ("persist", "pipeline_opt", "pipeline_pair", "pp_ring_map", "num_programs", "accumulated"):
        assert got[key] == expected[key], f"{case}: {key}"
    assert isinstance(main._pipeline_opt, dict) and set(main._pipeline_opt) >= set(pc.PLAIN_KEYS) | {
        "section_program", "place"}
    assert set(startup._pipeline_opt) == {"startup_program"}


def test_a_decorated_optimizer_without_inner_opt_is_refused_as_paddle_fails(gpu_amp_lists):
    assert "_param_device_map" in ORACLE["amp_no_inner_r0"]["error"]
    with pytest.raises(PipelineBuildError, match="_param_device_map"):
        pc.build(paddle, "amp_no_inner_r0")


# ---- numbers --------------------------------------------------------------------------------------------
M, MB = 4, 2  # micro-batches, micro-batch size


def _net(spell="gpu", hidden=None):
    """Two fc layers on two stages; ``hidden`` (a list) receives the stage-0 output (a checkpoint)."""
    with paddle.static.device_guard(f"{spell}:0"):
        x = paddle.static.data(name="x", shape=[-1, 4], dtype="float64")
        h = paddle.static.nn.fc(x=x, size=8, activation="tanh")
        h = paddle.static.nn.fc(x=h, size=8, activation="tanh")
    if hidden is not None:
        hidden.append(h)
    with paddle.static.device_guard(f"{spell}:1"):
        h = paddle.static.nn.fc(x=h, size=3, activation="tanh")
        return paddle.mean(h)


def _one_device(feeds, init):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        loss = _net()
        paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    for n, v in init.items():
        scope.var(n).get_tensor().set(v)
    for feed in feeds:
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in init}


def _stage(rank, mode, spell="gpu", recompute=False, num_microbatches=M):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        hidden = []
        loss = _net(spell, hidden)
        main._pipeline_opt = {"schedule_mode": mode, "micro_batch_size": MB, "local_rank": rank, "global_rank": rank,
                              "use_sharding": False, "ring_id": 20, "global_ring_id": 3, "mp_degree": 1,
                              "mp_rank": 0}
        opt = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
        if recompute:
            opt = RecomputeOptimizer(opt)
            opt._set_checkpoints(hidden)
        ret = PipelineOptimizer(opt, num_microbatches).minimize(loss)
    return main._pipeline_opt, startup._pipeline_opt["startup_program"], ret[3], ret[4]


def _init_params():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        _net()
    rng = np.random.default_rng(1)
    return {p.name: rng.standard_normal(p.shape) * 0.5 for p in main.global_block().all_parameters()}


@pytest.mark.parametrize("mode,spell,recompute", [("F-then-B", "gpu", False), ("1F1B", "gpu", False),
                                                   ("1F1B", "stage", False), ("F-then-B", "gpu", True),
                                                   ("1F1B", "stage", True)])
def test_two_stages_under_section_worker_train_to_one_device_parameters(mode, spell, recompute):
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((M * MB, 4))} for _ in range(3)]
    init = _init_params()
    expected = _one_device(feeds, init)
    stages = [_stage(r, mode, spell, recompute) for r in range(2)]

    def rank_fn():
        r = context.current().rank
        opt, start, pairs, rings = stages[r]
        for prev, cur in pairs:  # ring rank 0 is the sending stage of the pair (peer ids 1 / 0), as fleet's
            context.current().add_group(rings[prev * 1000 + cur], [prev, cur])  # pair rings number them
        scope = paddle.static.Scope()
        paddle.static.Executor().run(start, scope=scope)
        section = opt["section_program"]
        mine = {n: v for n, v in init.items() if n in section.global_block().vars}
        for n, v in mine.items():
            scope.var(n).get_tensor().set(v)
        worker = SectionWorker(section, opt["pipeline_stage"], opt["num_pipeline_stages"], opt["num_microbatches"],
                               0 if opt["schedule_mode"] == "F-then-B" else 1)
        for feed in feeds:
            worker.train(scope, feed if r == 0 else {})
        return {n: np.array(scope.find_var(n).get_tensor()) for n in mine}

    results = run_in_process(2, rank_fn, timeout=60)
    assert sorted(n for r in results for n in r) == sorted(expected)
    for params in results:
        for n, v in params.items():
            assert not np.allclose(v, init[n]), n  # it trained
            np.testing.assert_allclose(v, expected[n], rtol=1e-10, atol=1e-12, err_msg=n)


# ---- refimpl's stage:k spelling ----------------------------------------------------------------------------
def _program_text(program):
    ops = [(op.type, sorted((k, list(v)) for k, v in op.inputs.items()),
            sorted((k, list(v)) for k, v in op.outputs.items()),
            sorted((k, repr(v)) for k, v in op.all_attrs().items() if k not in ("op_callstack", "sub_block")))
           for op in program.global_block().ops]
    return ops, sorted(program.global_block().vars)


@pytest.mark.parametrize("rank", [0, 1])
def test_the_stage_spelling_builds_what_the_gpu_spelling_builds(rank):
    gpu_opt, gpu_start, gpu_pairs, gpu_rings = _stage(rank, "1F1B", "gpu")
    opt, start, pairs, rings = _stage(rank, "1F1B", "stage")
    assert gpu_pairs == [(0, 1), (1, 0)] and gpu_rings == {1: 20, 1000: 21}  # one pair each way (Paddle's rule)
    assert (pairs, rings) == (gpu_pairs, gpu_rings)
    assert _program_text(opt["section_program"]) == _program_text(gpu_opt["section_program"])
    assert _program_text(start) == _program_text(gpu_start)
    kinds = [op.type for op in opt["section_program"].global_block().ops if op.type in ("send_v2", "recv_v2")]
    assert kinds == (["send_v2", "recv_v2"] if rank == 0 else ["recv_v2", "send_v2"]), kinds


def test_the_inner_optimizers_device_map_keeps_its_spelling_and_the_pipeline_reads_gpu():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        loss = _net("stage")
        main._pipeline_opt = dict(pc.pipeline_opt(pc.CASES["plain_r0"]))
        inner = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
        po = PipelineOptimizer(inner, 2)
        po.minimize(loss)
    params = sorted(p.name for p in main.global_block().all_parameters())
    assert sorted(po._param_device_map) == params
    assert sorted(set(inner._param_device_map.values())) == ["stage:0", "stage:1"]
    assert sorted(set(po._param_device_map.values())) == ["gpu:0", "gpu:1"]


def test_a_recompute_optimizer_is_looked_through_to_the_optimizer_it_wraps():
    inner = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
    assert PipelineOptimizer(RecomputeOptimizer(inner))._origin_optimizer is inner


# ---- bad input ------------------------------------------------------------------------------------------
def _build_with(net, opt=None):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        loss = net()
        main._pipeline_opt = dict(pc.pipeline_opt(pc.CASES["plain_r0"])) if opt is None else opt
        PipelineOptimizer(paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9), 4).minimize(loss)


def test_stages_out_of_device_order_are_refused():
    def net():
        x = paddle.static.data(name="x", shape=[-1, 4], dtype="float32")
        with paddle.static.device_guard("gpu:1"):
            h = paddle.static.nn.fc(x=x, size=4)
        with paddle.static.device_guard("gpu:0"):
            return paddle.mean(paddle.static.nn.fc(x=h, size=2))
    with pytest.raises(PipelineBuildError, match=r"order of their ids.*'gpu:1', 'gpu:0'"):
        _build_with(net)


def test_an_op_device_of_another_kind_is_refused():
    def net():
        x = paddle.static.data(name="x", shape=[-1, 4], dtype="float32")
        with paddle.static.device_guard("gpu:0"):
            h = paddle.static.nn.fc(x=x, size=4)
        with paddle.static.device_guard("cpu"):
            return paddle.mean(paddle.static.nn.fc(x=h, size=2))
    with pytest.raises(PipelineBuildError, match=r"'cpu'"):
        _build_with(net)


@pytest.mark.parametrize("drop", ["local_rank", "schedule_mode", "mp_rank"])
def test_missing_pipeline_opt_keys_are_named(drop):
    opt = pc.pipeline_opt(pc.CASES["plain_r0"])
    del opt[drop]
    with pytest.raises(EnforceNotMet, match=drop):
        _build_with(lambda: pc.spc._boundary_net(paddle, None), opt)


def test_an_unknown_schedule_mode_is_named():
    opt = dict(pc.pipeline_opt(pc.CASES["plain_r0"]), schedule_mode="Eager1F1B")
    with pytest.raises(PipelineBuildError, match="Eager1F1B"):
        _build_with(lambda: pc.spc._boundary_net(paddle, None), opt)


@pytest.mark.parametrize("device", ["gpu", "gpu:x", "gpu:"])
def test_an_op_device_without_a_stage_id_is_refused_naming_op_and_device(device):
    def net():
        with paddle.static.device_guard("gpu:0"):
            x = paddle.static.data(name="x", shape=[-1, 4], dtype="float32")
            h = paddle.static.nn.fc(x=x, size=4)
        with paddle.static.device_guard(device):
            return paddle.mean(paddle.static.nn.fc(x=h, size=2))
    with pytest.raises(PipelineBuildError, match=rf"op 'mul' is on device '{device}'.*'gpu:<stage id>'"):
        _build_with(net)


def test_constructor_checks():
    with pytest.raises(EnforceNotMet, match="optimizer"):
        PipelineOptimizer(object())
    for bad in (0, np.int64(0), 2.0, True):
        with pytest.raises(EnforceNotMet, match="num_microbatches"):
            PipelineOptimizer(paddle.optimizer.SGD(0.1), num_microbatches=bad)


def test_a_numpy_integer_number_of_micro_batches_is_accepted():
    opt, _, _, _ = _stage(0, "1F1B", num_microbatches=np.int64(M))
    assert opt["num_microbatches"] == M and type(opt["num_microbatches"]) is int


# ---- the nop op the 1F1B pass emits: its NumPy and CUDA kernels ------------------------------------------
def test_nop_kernels_pass_their_inputs_through():
    import subprocess
    from refimpl.ops.registry import get_op_def
    a, b = np.arange(6.0).reshape(2, 3), np.ones(2, "float32")
    out = get_op_def("nop").kernel("numpy")[0]([a, b])
    assert out[0] is a and out[1] is b
    code = ("import numpy as np; import cuda_backend.ops_nop; from cuda_backend.device import to_device, to_host; "
            "from refimpl.ops.registry import get_op_def; a = to_device(np.arange(6.0)); "
            "out = get_op_def('nop').kernel('cuda')[0]([a]); "
            "assert out[0] is a and (to_host(out[0]) == np.arange(6.0)).all(); print('ok')")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", REFIMPL_BACKEND="cuda")
    run = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(HERE), env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and "ok" in run.stdout, run.stdout + run.stderr
