"""Recompute with checkpoint offload: ``RecomputeOptimizer._enable_offload`` and fleet's
``recompute_configs['enable_offload']`` build Paddle's programs and train as recompute does.

The programs (and Paddle's refusals) are what Paddle 3.3.1 built for the same MLPs:
``tests/oracle_recompute_offload/programs.json``, written by ``FLAGS_enable_pir_api=0
/tmp/pd33/bin/python tests/oracle_recompute_offload/offload_models.py``. The numbers are compared
with recompute without offload (the copies must not change a bit), on both backends.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.incubate.optimizer.recompute_offload import OffloadError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "oracle_recompute_offload"))
import offload_models  # noqa: E402

with open(os.path.join(HERE, "oracle_recompute_offload", "programs.json")) as _f:
    RECORDED = json.load(_f)


def test_the_program_equals_paddles():
    main, startup, _, err = offload_models.build(paddle, **offload_models.CASES["mlp3"])
    assert err is None
    got = json.loads(json.dumps(offload_models.summary(main, startup, None)))
    want = RECORDED["mlp3"]
    for i, (g, w) in enumerate(zip(got["main"], want["main"])):
        assert g == w, f"main op {i}"
    assert len(got["main"]) == len(want["main"])
    assert got["startup"] == want["startup"]
    assert got["vars"] == want["vars"]


def test_the_recorded_program_offloads_all_checkpoints_but_the_last():
    """The oracle itself: two forward memcpy to pinned memory (2), two backward fetches (1)."""
    ops = RECORDED["mlp3"]["main"]
    copies = [(o[1]["X"][0], o[2]["Out"][0], o[3], o[4]) for o in ops if o[0] == "memcpy"]
    assert copies == [("fc_0.tmp_1", "fc_0.tmp_1@Pinned_0", 0, 2), ("fc_1.tmp_1", "fc_1.tmp_1@Pinned_0", 0, 2),
                      ("fc_1.tmp_1@Pinned_0", "fc_1.tmp_1@Fetch_0", 1, 1),
                      ("fc_0.tmp_1@Pinned_0", "fc_0.tmp_1@Fetch_0", 1, 1)]
    backward_reads = [n for o in ops if o[3] == 1 for names in o[1].values() for n in names]
    assert "fc_0.tmp_1" not in backward_reads and "fc_1.tmp_1" not in backward_reads


@pytest.mark.parametrize("case", ["relu_in_fc", "one_ckpt", "empty_shape"])
def test_paddles_refusals_are_typed_errors(case):
    kind, message = RECORDED[case]["error"]
    assert kind == "AssertionError"
    words = message.replace("checkpoints shape", "").split("[")[0].strip()
    with pytest.raises(OffloadError) as info:
        _, _, _, err = offload_models.build(paddle, **offload_models.CASES[case])
        raise err
    assert isinstance(info.value, InvalidArgument) and isinstance(info.value, AssertionError)
    assert words in str(info.value)


_TRAIN = r"""
import sys, json
import numpy as np
sys.path.insert(0, sys.argv[1])
import refimpl as paddle
import offload_models
def train(offload):
    main, startup, loss, err = offload_models.build(paddle, 3, False, (4, 8), offload=offload)
    assert err is None, err
    exe = paddle.static.Executor()
    scope = paddle.static.Scope()
    rng = np.random.RandomState(0)
    losses = []
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        for p in main.all_parameters():  # the same start for both runs
            scope.find_var(p.name).get_tensor().set(rng.randn(*p.shape).astype("float32"), paddle.CPUPlace())
        for _ in range(3):
            feed = {"x": rng.randn(4, 8).astype("float32"), "y": rng.randint(0, 2, (4, 1)).astype("int64")}
            losses.append(exe.run(main, feed=feed, fetch_list=[loss])[0].tolist())
        params = {p.name: np.array(scope.find_var(p.name).get_tensor()).tolist()
                  for p in main.all_parameters()}
        stats = exe.memory_stats()
    return losses, params, stats
a, b = train(True), train(False)
assert a[0] == b[0], (a[0], b[0])
assert a[1] == b[1]
print(json.dumps({"losses": a[0], "stats": a[2]["peak_by_category"]}))
"""


@pytest.mark.parametrize("cudasim", [False, True], ids=["numpy", "cuda"])
def test_offload_trains_bit_for_bit_as_recompute(cudasim):
    """Its own process: the CUDA simulator flag must be set before numba loads."""
    env = dict(os.environ, REFIMPL_BACKEND="cuda" if cudasim else "numpy")
    if cudasim:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    res = subprocess.run([sys.executable, "-c", _TRAIN, os.path.join(HERE, "oracle_recompute_offload")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(out["losses"]) == 3 and all(np.isfinite(out["losses"]))


def test_the_cuda_memcpy_to_pinned_memory_is_a_host_copy():
    code = ("import numpy as np\nfrom cuda_backend import ops_index, to_device\n"
            "x = to_device(np.arange(6, dtype=np.float32).reshape(2, 3))\n"
            "h = ops_index.memcpy(x, dst_place_type=2)\n"
            "assert type(h) is np.ndarray and h.tolist() == [[0, 1, 2], [3, 4, 5]], type(h)\n"
            "d = ops_index.memcpy(h, dst_place_type=1)\n"
            "assert type(d) is not np.ndarray and d.copy_to_host().tolist() == h.tolist()\n")
    res = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1"),
                         capture_output=True, text=True, timeout=300, cwd=os.path.dirname(HERE))
    assert res.returncode == 0, res.stderr[-3000:]


def test_fleet_enable_offload_builds_the_offload_program():
    from refimpl.distributed import fleet
    from refimpl.distributed.fleet import DistributedStrategy
    kw = offload_models.CASES["mlp3"]
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [4, 8], "float32")
        h1 = paddle.static.nn.fc(x, 8)
        h2 = paddle.static.nn.fc(paddle.nn.functional.relu(h1), 8)
        loss = paddle.mean(paddle.static.nn.fc(paddle.nn.functional.relu(h2), 1))
        s = DistributedStrategy()
        s.recompute = True
        s.recompute_configs = {"checkpoints": [h1.name, h2.name], "enable_offload": True,
                               "checkpoint_shape": list(kw["shape"])}
        fleet.init(is_collective=True)
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), s).minimize(loss)
    copies = [(op.input("X")[0], op.output("Out")[0], op.attr("dst_place_type"))
              for op in main.global_block().ops if op.type == "memcpy"]
    assert copies == [(h1.name, h1.name + "@Pinned_0", 2), (h1.name + "@Pinned_0", h1.name + "@Fetch_0", 1)]
