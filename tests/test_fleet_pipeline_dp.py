"""Fleet's pipeline, gradient-merge and data-parallel meta-optimizers on in-process ranks.

Expected values come from one device: the same MLP trained with Momentum (and
``GradientMergeOptimizer`` where the strategy merges) on the whole batch, which the ranks'
parameters and losses must equal. The chains asserted are Paddle 3.3.1's (see
``tests/test_strategy_compiler.py``, which records them).
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.fleet.meta_optimizers import DistributedOptimizer
from refimpl.framework import Program, unique_name

STEPS = 4


def build(pp=1):
    """An MLP; with pp > 1 its layers are marked for pp stages with device_guard("gpu:k")."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        h = paddle.static.data("x", [None, 8], "float32")
        for i in range(4):
            with paddle.static.device_guard(f"gpu:{i * pp // 4}" if pp > 1 else None):
                h = paddle.static.nn.fc(h, 16, activation="tanh")
        with paddle.static.device_guard(f"gpu:{pp - 1}" if pp > 1 else None):
            loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
    return main, startup, loss


def reference(batches, k):
    main, startup, loss = build()
    with paddle.static.program_guard(main, startup):
        opt = paddle.optimizer.Momentum(0.05, 0.9)
        (paddle.incubate.optimizer.GradientMergeOptimizer(opt, k_steps=k) if k > 1 else opt).minimize(loss)
    paddle.seed(5)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"x": b}, fetch_list=[loss], scope=scope)[0]) for b in batches]
    return losses, {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def strategy(dp, pp, m, k, schedule="1F1B", recompute=False):
    s = DistributedStrategy()
    if recompute:
        s.recompute, s.recompute_configs = True, {"checkpoints": ["fc_0.tmp_2", "fc_1.tmp_2"]}
    s.hybrid_configs = {"dp_degree": dp, "pp_degree": pp}
    if pp > 1:
        s.pipeline = True
        s.pipeline_configs = {"accumulate_steps": m, "micro_batch_size": 2, "schedule_mode": schedule}
    if k > 1:
        s.gradient_merge = True
        s.gradient_merge_configs = {"k_steps": k, "avg": True}
    return s


def train(dp, pp, m, k, schedule="1F1B", recompute=False):
    rows = 2 * m if pp > 1 else 4
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((dp * rows, 8)).astype("float32") for _ in range(STEPS)]

    def rank_fn():
        r = context.current().rank
        main, startup, loss = build(1 if schedule == "VPP" else pp)  # VPP: cut evenly into chunks
        opt = DistributedOptimizer(paddle.optimizer.Momentum(0.05, 0.9), strategy(dp, pp, m, k, schedule, recompute))
        with paddle.static.program_guard(main, startup):
            opt.minimize(loss)
        paddle.seed(5)
        exe = paddle.static.Executor()
        exe.run(startup)
        d = r // pp
        losses = []
        for b in batches:
            out = exe.run(main, feed={"x": b[d * rows:(d + 1) * rows]}, fetch_list=[loss])
            losses.append(None if out[0] is None else float(np.mean(out[0])))
        scope = paddle.static.global_scope()
        owned = [p.name for p in main.all_parameters()
                 if getattr(main, "_pipeline_opt", None) is None or main._pipeline_opt.has_var(p.name)]
        return losses, {n: np.array(scope.find_var(n).get_tensor()) for n in owned}, opt
    return batches, run_in_process(dp * pp, rank_fn, timeout=60)


@pytest.mark.parametrize("dp, pp, m, k, schedule", [
    (2, 2, 4, 2, "1F1B"), (2, 2, 4, 1, "FThenB"), (1, 2, 4, 3, "ZBH1"), (2, 1, 1, 2, None), (4, 1, 1, 1, None),
    (1, 4, 4, 1, "VPP"),
])
def test_meta_optimizers_equal_single_device(dp, pp, m, k, schedule):
    batches, results = train(dp, pp, m, k, schedule)
    ref_losses, ref_params = reference(batches, k)
    for losses, params, _ in results:
        for n, v in params.items():
            np.testing.assert_allclose(v, ref_params[n], rtol=1e-5, atol=1e-6, err_msg=n)
    owners = [ls for ls, _, _ in results if ls[0] is not None]
    np.testing.assert_allclose(np.mean(owners, axis=0), ref_losses, rtol=1e-5)
    # Paddle 3.3.1's compiler: pipeline + gradient merge chains RawProgram -> GradientMerge and drops the
    # pipeline (GradientMergeOptimizer is not in PipelineOptimizer's white list); pipeline alone drops
    # the raw program
    pipelined = pp > 1 and k == 1
    applied = results[0][2]._get_applied_meta_list()
    assert ("PipelineOptimizer" in applied) == pipelined
    assert ("GradientMergeOptimizer" in applied) == (k > 1)
    assert ("RawProgramOptimizer" in applied) == (not pipelined)
    final = results[0][2]._final_strategy()
    assert final.gradient_merge == (k > 1) and final.pipeline == pipelined


def test_pipeline_with_recompute_equals_single_device():
    """Paddle 3.3.1 chains PipelineOptimizer -> RecomputeOptimizer (recompute is in its white list)."""
    batches, results = train(1, 2, 4, 1, "1F1B", recompute=True)
    _, ref_params = reference(batches, 1)
    for _, params, opt in results:
        assert opt._get_applied_meta_list() == ["PipelineOptimizer", "RecomputeOptimizer"]
        for n, v in params.items():
            np.testing.assert_allclose(v, ref_params[n], rtol=1e-5, atol=1e-6, err_msg=n)


def test_unimplemented_strategy_is_named():
    for switch in ("sync_batch_norm", "qat"):
        s = DistributedStrategy()
        setattr(s, switch, True)
        main, startup, loss = build()
        with paddle.static.program_guard(main, startup):
            with pytest.raises(Unimplemented, match=switch):
                DistributedOptimizer(paddle.optimizer.SGD(0.1), s).minimize(loss)
        assert [op.type for op in main.global_block().ops][-1] != "sgd"  # raised before anything was built


@pytest.mark.parametrize("mbs, rows, raises", [(3, 4, True), (2, 4, False), (None, 6, False)])
def test_fed_rows_must_match_micro_batch_size(mbs, rows, raises):
    """micro_batch_size x accumulate_steps rows, when micro_batch_size is given (Paddle sizes its
    receive buffers from it); left at its default, any batch that splits evenly runs."""
    def rank_fn():
        main, startup, loss = build(2)
        s = DistributedStrategy()
        s.hybrid_configs = {"dp_degree": 1, "pp_degree": 2}
        s.pipeline = True
        s.pipeline_configs = {"accumulate_steps": 2} if mbs is None else {"accumulate_steps": 2,
                                                                          "micro_batch_size": mbs}
        opt = DistributedOptimizer(paddle.optimizer.Momentum(0.05, 0.9), s)
        with paddle.static.program_guard(main, startup):
            opt.minimize(loss)
        exe = paddle.static.Executor()
        exe.run(startup)
        first = {p.name: np.array(paddle.static.global_scope().find_var(p.name).get_tensor())
                 for p in main.all_parameters() if main._pipeline_opt.has_var(p.name)}
        try:
            exe.run(main, feed={"x": np.ones((rows, 8), "float32")}, fetch_list=[loss])
        except InvalidArgument as e:
            after = {n: np.array(paddle.static.global_scope().find_var(n).get_tensor()) for n in first}
            return str(e), all(np.array_equal(first[n], after[n]) for n in first)
        return None, None
    for msg, unchanged in run_in_process(2, rank_fn, timeout=60):
        if raises:
            assert "pipeline_configs['micro_batch_size'] = 3" in msg and "'x' has 4" in msg and unchanged
        else:
            assert msg is None
