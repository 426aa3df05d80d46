"""Fleet's pipeline with AMP (strategy.amp + strategy.pipeline) on two in-process ranks.

Expected values come from one device: the same AMP program (strategy.amp alone, one rank) trained on
the whole batch, which the pipeline's parameters, losses and loss scaling must equal. On the host
backend AMP inserts no float16 casts, but still scales the loss, unscales and checks the gradients,
and updates the loss scaling; a NaN gradient on stage 0 makes every stage skip its update (the
found-inf flag is shared across stages). The op counts of ``_pipeline_opt['section_program']`` are those Paddle's
``test/collective/fleet/test_fleet_pipeline_meta_optimizer.py::test_pipeline_amp_optimizer`` asserts.
"""
import json
import os
import subprocess
import sys

import numpy as np

import refimpl as paddle
from refimpl.distributed.communication import context, run_in_process
from refimpl.distributed.fleet import DistributedStrategy
from refimpl.distributed.fleet.meta_optimizers import DistributedOptimizer
from refimpl.framework import Program, unique_name

M, MBS = 2, 2  # micro-batches per step, rows per micro-batch


def build(pp):
    """Two fc layers on stage 0, two on stage 1 (device_guard), ``z * 1.0`` on every stage ("gpu:all")."""
    main, startup = Program(), Program()
    dev = (lambda k: f"gpu:{k}") if pp > 1 else (lambda k: None)
    with paddle.static.program_guard(main, startup), unique_name.guard():
        with paddle.static.device_guard(dev(0)):
            x = paddle.static.data("x", [None, 8], "float32")
            z = paddle.static.data("z", [None, 1], "float32")
            with paddle.static.device_guard("gpu:all" if pp > 1 else None):
                z = z * 1.0
                z.stop_gradient = True
            h = paddle.static.nn.fc(paddle.static.nn.fc(x, 16, activation="tanh"), 16, activation="tanh") * z
        with paddle.static.device_guard(dev(1)):
            h = paddle.static.nn.fc(h, 16, activation="tanh")
            loss = paddle.mean(paddle.square(paddle.static.nn.fc(h, 1)))
    return main, startup, loss


def strategy(pp):
    s = DistributedStrategy()
    s.amp = True
    s.amp_configs = {"init_loss_scaling": 1024.0, "incr_every_n_steps": 2,
                     "decr_every_n_nan_or_inf": 1}
    s.hybrid_configs = {"dp_degree": 1, "pp_degree": pp}
    if pp > 1:
        s.pipeline = True
        s.pipeline_configs = {"accumulate_steps": M, "micro_batch_size": MBS}
    return s


def train(pp, batches):
    def rank_fn():
        main, startup, loss = build(pp)
        opt = DistributedOptimizer(paddle.optimizer.Adam(0.01), strategy(pp))
        with paddle.static.program_guard(main, startup):
            opt.minimize(loss)
        paddle.seed(3)
        exe = paddle.static.Executor()
        exe.run(startup)
        losses = []
        for x, z in batches:
            out = exe.run(main, feed={"x": x, "z": z}, fetch_list=[loss])
            losses.append(None if out[0] is None else float(np.mean(out[0])))
        scope = paddle.static.global_scope()
        run = getattr(main, "_pipeline_opt", None)
        owned = [p.name for p in main.all_parameters() if run is None or run.has_var(p.name)]
        values = {n: np.array(scope.find_var(n).get_tensor()) for n in owned + ["loss_scaling_0"]}
        return losses, values, main
    return run_in_process(pp, rank_fn, timeout=120)


def batches(inf_at=None):
    rng = np.random.default_rng(0)
    out = []
    for step in range(4):
        x = rng.standard_normal((M * MBS, 8)).astype("float32")
        if step == inf_at:  # forward stays finite (tanh(inf) = 1); only fc_0.w_0's gradient is NaN (inf * 0)
            x[0, 0] = np.inf
        out.append((x, rng.uniform(0.5, 1.5, (M * MBS, 1)).astype("float32")))
    return out


def check_equal(data):
    ((ref_losses, ref, _),) = train(1, data)
    results = train(2, data)
    for losses, values, _ in results:
        for n, v in values.items():
            np.testing.assert_allclose(v, ref[n], rtol=1e-5, atol=1e-6, err_msg=n)
    (owner,) = [ls for ls, _, _ in results if ls[0] is not None]
    np.testing.assert_allclose(owner, ref_losses, rtol=1e-5)
    return ref, results


def test_pipeline_amp_equals_single_device_amp():
    ref, _ = check_equal(batches())
    assert ref["loss_scaling_0"].item() == 4096.0  # 4 good steps, doubled after every 2nd (incr_every_n_steps)


def test_step_with_a_nan_gradient_on_stage_0_is_skipped_on_every_stage():
    ref, results = check_equal(batches(inf_at=1))
    # step 2 is bad: x 0.8 (decr_ratio); steps 3 and 4 are good: x 2 (incr_ratio)
    expected = np.float32(np.float32(1024.0 * 0.8) * 2.0)
    assert ref["loss_scaling_0"].item() == expected
    assert all(v["loss_scaling_0"].item() == expected for _, v, _ in results)
    assert all(np.isfinite(a).all() for _, v, _ in results for a in v.values())  # the bad step was skipped


def test_section_program_holds_the_stage_with_one_send_and_one_recv():
    for stage, (_, _, main) in enumerate(train(2, batches()[:1])):
        opt = main._pipeline_opt
        assert opt["pipeline_stage"] == stage and opt["num_pipeline_stages"] == 2
        assert opt["num_microbatches"] == M and "section_program" in opt.keys()
        types = [op.type for op in opt["section_program"].global_block().ops]
        assert types.count("send_v2") == 1 and types.count("recv_v2") == 1
        # the stage's forward, backward and optimizer, in that order; "gpu:all"'s scale on both stages
        assert types.index("scale") < types.index("tanh_grad") < types.index("update_loss_scaling") \
            < types.index("adam")
        assert types.count("check_finite_and_unscale") == 4  # this stage's two fc layers: w and b each


# float16 keeps 11 significant bits (unit roundoff 2**-11): the pipeline rounds each micro-batch's
# float16 gradient before adding it in float32, one device rounds the whole batch's; over two Adam steps
# that stays within 1e-2 relative, 1e-3 absolute.
FP16_TOL = dict(rtol=1e-2, atol=1e-3)
_CUDA_RUN = """
import json, sys
sys.path.insert(0, 'tests')
import test_pipeline_amp as T
data = T.batches()[:2]
((losses, ref, main),) = T.train(1, data)
out = {"casts": [op.type for op in main.global_block().ops].count("cast"), "ref": [losses, ref], "pp": []}
out["pp"] = [[ls, vs] for ls, vs, _ in T.train(2, data)]
print(json.dumps(out, default=lambda a: a.tolist()))
"""


def test_pipeline_amp_with_float16_casts_on_the_cuda_simulator():
    """REFIMPL_BACKEND=cuda (Paddle's GPU build): AMP casts to float16; the pipeline still equals one device."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", REFIMPL_BACKEND="cuda")
    out = subprocess.run([sys.executable, "-c", _CUDA_RUN], cwd=os.path.dirname(os.path.dirname(__file__)),
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["casts"] > 0
    ref_losses, ref = got["ref"]
    (owner,) = [ls for ls, _ in got["pp"] if ls[0] is not None]
    np.testing.assert_allclose(owner, ref_losses, **FP16_TOL)
    for _, values in got["pp"]:
        for n, v in values.items():
            np.testing.assert_allclose(v, ref[n], **FP16_TOL, err_msg=n)
