"""``exe.run`` of Paddle's legacy pipeline sections, as a training script sees it: learning-rate schedules,
fed dtypes, and what lives in a ``coalesce_tensor`` buffer.

Two stages of a small net built by ``paddle.incubate.optimizer.PipelineOptimizer`` (one program per
in-process rank, the stage-pair rings bound as fleet binds them), run with ``exe.run(main, feed=...)``:

* an LR scheduler's value is pushed before each run (Paddle 2.6.2's ``_run_pipeline`` does): a
  ``PiecewiseDecay`` to 0 stops the updates on both stages;
* the feed is checked as ``Executor.run`` checks it: a bfloat16 data var fed Paddle's uint16 bit patterns
  trains as on one device; a misspelled name is ``NotFound`` before anything runs;
* a var that is no member of a fused buffer never holds a view of one: ``reshape2`` of a member keeps its
  value when the member is written later (Paddle 3.3.1 printed ``out = 1`` for the program of
  ``test_a_reshape_of_a_fused_member_keeps_its_value``); a value that cannot fit its place in the buffer
  is PreconditionNotMet naming the var.
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import NotFound, PreconditionNotMet
from refimpl.distributed.communication import context, run_in_process
from refimpl.incubate.optimizer.pipeline import PipelineOptimizer

M, MB = 2, 2   # micro-batches, rows each


def _net(dtype):
    with paddle.static.device_guard("gpu:0"):
        x = paddle.static.data(name="x", shape=[-1, 4], dtype=dtype)
        h = paddle.static.nn.fc(x=x, size=8, activation="tanh")
        if dtype != "float32":
            h = paddle.cast(h, "float32")
    with paddle.static.device_guard("gpu:1"):
        return paddle.mean(paddle.static.nn.fc(x=h, size=3, activation="tanh"))


def _stage(rank, optimizer, dtype="float32"):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        loss = _net(dtype)
        main._pipeline_opt = {"schedule_mode": "F-then-B", "micro_batch_size": MB, "local_rank": rank,
                              "global_rank": rank, "use_sharding": False, "ring_id": 20, "global_ring_id": 3,
                              "mp_degree": 1, "mp_rank": 0}
        _, _, _, pairs, rings = PipelineOptimizer(optimizer, M).minimize(loss)
    return main, startup, loss, pairs, rings


def _bind(pairs, rings):
    for prev, cur in pairs:
        context.current().add_group(rings[prev * 1000 + cur], [prev, cur])


def test_a_learning_rate_schedule_reaches_every_stage():
    def rank_fn():
        r = context.current().rank
        sched = paddle.optimizer.lr.PiecewiseDecay(boundaries=[1], values=[0.1, 0.0])
        main, startup, _, pairs, rings = _stage(r, paddle.optimizer.SGD(learning_rate=sched))
        _bind(pairs, rings)
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        exe.run(startup, scope=scope)
        param = main._pipeline_opt["section_program"].global_block().all_parameters()[0].name
        changes = []
        for _ in range(3):
            before = np.array(scope.find_var(param).get_tensor())
            exe.run(main, feed={"x": np.ones((M * MB, 4), "float32")}, scope=scope)
            changes.append(float(np.abs(np.array(scope.find_var(param).get_tensor()) - before).max()))
            sched.step()
        return changes
    for changes in run_in_process(2, rank_fn, timeout=60):
        assert changes[0] > 0 and changes[1:] == [0.0, 0.0], changes


def _bf16_run(rank_feed):
    def rank_fn():
        r = context.current().rank
        main, startup, loss, pairs, rings = _stage(r, paddle.optimizer.SGD(0.1), "bfloat16")
        _bind(pairs, rings)
        scope, exe = paddle.static.Scope(), paddle.static.Executor()
        paddle.seed(3)
        exe.run(startup, scope=scope)
        out = exe.run(main, feed=rank_feed, fetch_list=[loss], scope=scope)
        return None if out[0] is None else float(np.mean(out[0]))
    return run_in_process(2, rank_fn, timeout=60)


def test_a_bfloat16_feed_of_bit_patterns_trains_as_real_bfloat16():
    import ml_dtypes
    x = np.linspace(-1, 1, M * MB * 4).reshape(M * MB, 4).astype(ml_dtypes.bfloat16)
    real = _bf16_run({"x": x})
    patterns = _bf16_run({"x": x.view(np.uint16)})   # what Paddle's users feed (its fetches give the same)
    assert real[0] is None and real[1] is not None and patterns == real


def test_a_feed_name_no_stage_declares_is_not_found():
    main, startup, loss, _, _ = _stage(0, paddle.optimizer.SGD(0.1))
    exe = paddle.static.Executor()
    with pytest.raises(NotFound, match="'z' is not a variable of the program"):
        exe.run(main, feed={"x": np.ones((M * MB, 4), "float32"), "z": np.ones(2)}, fetch_list=[loss],
                scope=paddle.static.Scope())


def _fused_program(scale_shape=None):
    """a = 1 (2 x 2), c = 0 (3); coalesce_tensor(a, c) -> buf; r = reshape2(a); a = scale(a, 5) (or, with
    ``scale_shape``, a = reshape2(c)); out = scale(r, 1)."""
    main = paddle.static.Program()
    block = main.global_block()
    for n, shape in (("a", [2, 2]), ("c", [3]), ("r", [4]), ("out", [4]), ("xs", [-1])):
        block.create_var(name=n, shape=shape, dtype="float32")
    block.create_var(name="buf", shape=[-1], dtype="float32")
    for n, shape, value in (("a", [2, 2], 1.0), ("c", [3], 0.0)):
        block.append_op(type="fill_constant", outputs={"Out": [n]}, attrs={"shape": shape, "dtype": 5, "value": value})
    block.append_op(type="coalesce_tensor", inputs={"Input": ["a", "c"]}, outputs={"Output": ["a", "c"],
                    "FusedOutput": ["buf"]}, attrs={"copy_data": True, "dtype": 5})
    block.append_op(type="reshape2", inputs={"X": ["a"]}, outputs={"Out": ["r"], "XShape": ["xs"]},
                    attrs={"shape": [4]})
    if scale_shape is None:
        block.append_op(type="scale", inputs={"X": ["a"]}, outputs={"Out": ["a"]}, attrs={"scale": 5.0})
    else:
        block.append_op(type="reshape2", inputs={"X": ["c"]}, outputs={"Out": ["a"], "XShape": ["xs"]},
                        attrs={"shape": scale_shape})
    block.append_op(type="scale", inputs={"X": ["r"]}, outputs={"Out": ["out"]}, attrs={"scale": 1.0})
    return main


def test_a_reshape_of_a_fused_member_keeps_its_value():
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    out, buf = exe.run(_fused_program(), fetch_list=["out", "buf"], scope=scope)
    assert out.tolist() == [1.0] * 4          # r was taken before a was scaled
    assert buf[:4].tolist() == [5.0] * 4      # and a's write went into the buffer


def test_a_value_that_cannot_fit_its_place_in_the_buffer_is_refused():
    scope, exe = paddle.static.Scope(), paddle.static.Executor()
    with pytest.raises(PreconditionNotMet, match="output 'a'.*shape \\[3\\].*does not fit"):
        exe.run(_fused_program(scale_shape=[3]), fetch_list=["out"], scope=scope)
