"""A pipeline rank keeps only its own stage's persistables (PipelineRun drops the rest after the shared startup).

Paddle splits the startup program per stage (``paddle/incubate/optimizer/pipeline.py``,
``_split_startup_program``), so a rank never holds another stage's parameters or optimizer state.
refimpl runs the whole startup on every rank (same random draws as one device) and drops what only
other stages use when the pipelined program runs. Expected names and bytes come from the nets' own
stage marks (``device_guard``) and the plain startup program's var shapes and dtypes, not from the
pipeline's plans.
"""
import numpy as np

import refimpl as paddle
from refimpl.core.dtypes import to_numpy_dtype
from refimpl.distributed.communication import run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.framework import Program, unique_name

import test_tensor_pipeline as TTP
from test_sharding_hybrid import _batches
from test_sharding_hybrid_pipeline import _pp_net
from pipeline_helpers import stage_of

#: the Adam accumulators of a parameter (Paddle's names) and its gradient-merge buffer
ADAM_STATE = ("_moment1_0", "_moment2_0", "_beta1_pow_acc_0", "_beta2_pow_acc_0")
MERGE = "@GRAD@MERGE"     # refimpl's pipeline Plan's merge buffers
MERGED = "@GRAD@MERGED"   # Paddle's legacy pipeline's (sharding x pp)
#: _pp_net(split=False): stage 0 is device_guard("gpu:0")'s two fc layers, stage 1 the other two
SH_STAGES = ({"fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"}, {"fc_2.w_0", "fc_2.b_0", "fc_3.w_0", "fc_3.b_0"})
TP_STAGES = (set(TTP.STAGE0), set(TTP.LAYOUT) - set(TTP.STAGE0))


def _nbytes(startup, names):
    """Bytes of ``names`` by the startup program's shapes and dtypes (this rank's shard shapes)."""
    block = startup.global_block()
    return sum(int(np.prod(block.vars[n].shape)) * np.dtype(to_numpy_dtype(block.vars[n].dtype)).itemsize
               for n in names)


def _held(scope):
    return {n for n in scope.local_var_names() if scope.find_var(n).get_tensor()._is_initialized()}


def _derived(params, merge=MERGE):
    """Every persistable a parameter brings: itself, its merge buffer, its Adam state."""
    return {p + s for p in params for s in ("", merge) + ADAM_STATE}


def _tp_rank():
    main, startup, loss = TTP._build(1, paddle.optimizer.Adam(0.01), "float64", init_strategy=TTP._strategy(1),
                                     opt_strategy=TTP._strategy(1))
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    x, ids, label = TTP.TPT._data(steps=1, batch=4)[0]
    exe.run(main, feed={"x": x, "ids": ids, "label": label}, fetch_list=[loss], scope=scope)
    return main._pipeline_opt.layout.stage, _held(scope), startup, exe.memory_stats()["live_by_category"]


def _sh_rank():
    from refimpl.distributed import fleet
    s = DistributedStrategy()
    s.pipeline, s.sharding = True, True
    s.pipeline_configs = {"accumulate_steps": 2, "micro_batch_size": 2}   # the 4 rows fed
    s.sharding_configs = {"sharding_degree": 2, "pp_degree": 2}
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        fleet.init(is_collective=True)
        loss = _pp_net("float64", split=False)
        fleet.distributed_optimizer(paddle.optimizer.Adam(0.01), s).minimize(loss)
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    x, y = _batches(steps=1, rows=4)[0]
    exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    return stage_of(main), _held(scope), startup, exe.memory_stats()["live_by_category"]


def test_tp_pipeline_rank_holds_only_its_stage(float64_default):
    """tp 2 x pp 2, Adam: each rank holds its stage's parameters, merge buffers and Adam state (plus the
    learning rate), and memory_stats counts exactly those parameter / optimizer-state bytes."""
    for stage, held, startup, live in run_in_process(4, _tp_rank, timeout=300):
        own = TP_STAGES[stage]
        assert held == _derived(own) | {"learning_rate_0"}, stage
        assert live["parameters"] == _nbytes(startup, own)
        assert live["optimizer_state"] == _nbytes(startup, {p + s for p in own for s in ADAM_STATE})
        assert live["optimizer_state"] > 2 * live["parameters"]  # two moments per parameter, and the beta powers


def test_sharding_pipeline_rank_holds_only_its_stage_and_shard(float64_default):
    """sharding 2 x pp 2, Adam (Paddle's section programs): no tensor of the other stage; the two ranks of a
    stage own disjoint halves of the stage's parameters, with their merge buffers and Adam state, together
    all of it, as memory_stats counts."""
    results = run_in_process(4, _sh_rank, timeout=300)
    owned = {0: [], 1: []}
    for stage, held, startup, live in results:
        own, other = SH_STAGES[stage], SH_STAGES[1 - stage]
        assert not held & _derived(other, MERGED), stage
        mine = held & own
        state = held & {p + s for p in own for s in ADAM_STATE}
        assert mine and {p + MERGED for p in mine} <= held, stage
        assert state == {p + s for p in mine for s in ADAM_STATE}, stage
        assert held & _derived(own, MERGED) == _derived(mine, MERGED), stage
        assert live["parameters"] == _nbytes(startup, mine)
        assert live["optimizer_state"] == _nbytes(startup, state) > 0
        owned[stage].append(mine)
    for stage, (a, b) in owned.items():
        assert not a & b and a | b == SH_STAGES[stage], stage


def test_dropped_names_are_what_only_other_stages_use(float64_default):
    """PipelineRun.foreign_persistables of a tp x pp rank: exactly the other stage's parameter-derived names."""
    def rank():
        main, _, _ = TTP._build(1, paddle.optimizer.Adam(0.01), "float64", init_strategy=TTP._strategy(1),
                                opt_strategy=TTP._strategy(1))
        return main._pipeline_opt.layout.stage, set(main._pipeline_opt.foreign_persistables())
    for stage, foreign in run_in_process(4, rank, timeout=300):
        assert foreign == _derived(TP_STAGES[1 - stage]), stage
