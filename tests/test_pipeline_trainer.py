"""``Executor.run`` of a legacy-pipeline program (``refimpl/executor/pipeline_trainer.py``).

A program whose ``_pipeline_opt`` is Paddle's legacy dict runs this rank's ``section_program`` with a
SectionWorker over ``num_microbatches`` micro-batches (Paddle 2.6.2's ``Executor.run``); a startup whose
``_pipeline_opt`` names a ``startup_program`` runs that one. Checked on two in-process stages of the
8-layer MLP of ``examples/pipeline_mlp.py`` (stage programs cut by refimpl's ``partition``), against one
device on the whole batch, in both of Paddle's schedule modes; and the typed errors.
"""
import os
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.passes.gradient_accumulation import accumulate_gradients
from refimpl.distributed.pipeline.partition import partition

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import pipeline_mlp  # noqa: E402

MICRO = 4


def _sections():
    main, startup, loss = pipeline_mlp.build(4)
    m, s = main.clone(), startup.clone()
    accumulate_gradients(m, s, MICRO)
    stages = partition(m, 2, cuts=pipeline_mlp.even_cuts(m, 2))
    return main, startup, s, loss, [st[0] for st in stages]


@pytest.mark.parametrize("mode", ["1F1B", "F-then-B"])
def test_exe_run_trains_each_rank_section_to_one_device(mode):
    main, startup, split_startup, loss, sections = _sections()
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((8, 8))} for _ in range(3)]
    ref_losses, ref_params = pipeline_mlp.single_device(main, startup, loss, feeds, 0)
    rings = sorted({op.attr("ring_id") for p in sections for op in p.global_block().ops
                    if op.type in ("send_v2", "recv_v2")})
    paddle.seed(0)
    init_scope = paddle.static.Scope()
    paddle.static.Executor().run(startup, scope=init_scope)
    init = {n: np.array(init_scope.find_var(n).get_tensor()) for n in init_scope.local_var_names()}

    def rank_fn():
        r = context.current().rank
        for ring in rings:
            context.current().add_group(ring, range(2))
        prog = main.clone()
        prog._pipeline_opt = {"section_program": sections[r], "pipeline_stage": r, "num_pipeline_stages": 2,
                              "schedule_mode": mode, "num_microbatches": MICRO, "inner_parallelism": 2}
        start = paddle.static.Program()
        start._pipeline_opt = {"startup_program": split_startup}
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        exe.run(start, scope=scope)   # runs ``split_startup``: the merge buffers exist afterwards
        assert scope.find_var(f"{sections[r].global_block().all_parameters()[0].name}@GRAD@MERGE") is not None
        for n, v in init.items():
            scope.var(n).get_tensor().set(v)
        outs = [exe.run(prog, feed=f, fetch_list=[loss, "no_such_var"], scope=scope) for f in feeds]
        assert all(o[1] is None for o in outs)
        losses = [None if o[0] is None else float(np.mean(o[0])) for o in outs]
        assert (losses[0] is None) == (r == 0)
        assert exe.memory_stats()["peak_bytes"] > 0   # this rank's section run
        params = {n: np.array(scope.find_var(n).get_tensor()) for n, v in sections[r].global_block().vars.items()
                  if v.is_parameter}
        return losses, params
    results = run_in_process(2, rank_fn, timeout=60)
    np.testing.assert_allclose(results[1][0], ref_losses, **pipeline_mlp.TOLERANCE["float64"])
    assert sorted(set(results[0][1]) | set(results[1][1])) == sorted(ref_params)
    for _, params in results:
        for n, v in params.items():
            np.testing.assert_allclose(v, ref_params[n], **pipeline_mlp.TOLERANCE["float64"])


def test_bad_pipeline_dicts_are_typed():
    main, _, _, loss, sections = _sections()
    exe = paddle.static.Executor()
    prog = main.clone()
    prog._pipeline_opt = {"schedule_mode": "1F1B", "micro_batch_size": 2}   # configs, before a minimize
    with pytest.raises(InvalidArgument, match="holds no section_program to run"):
        exe.run(prog, feed={"x": np.zeros((8, 8))}, fetch_list=[loss])
    prog._pipeline_opt = {"section_program": sections[0], "pipeline_stage": 0, "num_pipeline_stages": 2,
                          "schedule_mode": "interleaved", "num_microbatches": MICRO}
    with pytest.raises(InvalidArgument, match="schedule_mode.*'interleaved'"):
        exe.run(prog, feed={"x": np.zeros((8, 8))}, fetch_list=[loss])
    prog._pipeline_opt = {"section_program": sections[0], "num_microbatches": MICRO}
    with pytest.raises(InvalidArgument, match="lacks.*pipeline_stage"):
        exe.run(prog, feed={"x": np.zeros((8, 8))}, fetch_list=[loss])
