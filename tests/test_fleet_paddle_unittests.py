"""Paddle's own fleet meta-optimizer unit tests, run on refimpl (a maintainer tool).

This is not a feature test and stands in for none: it runs only when the environment variable
``REFIMPL_PADDLE_TESTS`` names a directory holding local copies of Paddle's
``test/collective/fleet/`` files (``fleet_meta_optimizer_base.py``,
``test_fleet_*_meta_optimizer.py``, ``test_fleet_amp_init.py`` ...), which the repository does not
ship. Each ``test_*.py`` there runs in its own process with ``import paddle`` mapped to refimpl
(``refimpl.compat.install``); the tests listed in ``PASSING`` must pass (run with refimpl's CUDA kernel set, as
Paddle's GPU build, see ``HOST_ONLY``), the outcome of every other
one is printed (``pytest -s``) for the maintainer to read. The behaviours those tests check are
recorded as refimpl's own tests in ``test_strategy_compiler.py`` and ``test_fleet_meta_optimizers.py``.
"""
import glob
import os
import subprocess
import sys

import pytest

DIR = os.environ.get("REFIMPL_PADDLE_TESTS", "")
pytestmark = pytest.mark.skipif(not os.path.isdir(DIR), reason="maintainer tool: set REFIMPL_PADDLE_TESTS to "
                                "a directory of Paddle's fleet unit tests")

#: passing on refimpl when this file was written: all but the pipeline+AMP test,
#: which reads Paddle's section programs (refimpl runs its own pipeline Plan)
PASSING = {
    "test_fleet_amp_init.TestFleetAMPInit.test_fleet_amp_init",
    "test_fleet_amp_init.TestFleetAMPInit.test_fleet_amp_meta_optimizer_init",
    "test_fleet_amp_meta_optimizer.TestFleetAMPOptimizer.test_amp_distributed_optimizer",
    "test_fleet_amp_meta_optimizer.TestFleetAMPOptimizer.test_amp_optimizer",
    "test_fleet_amp_meta_optimizer.TestFleetAMPOptimizer.test_amp_optimizer_backward",
    "test_fleet_amp_meta_optimizer.TestFleetAMPOptimizer.test_amp_optimizer_backward_gradients",
    "test_fleet_amp_meta_optimizer.TestFleetAMPOptimizer.test_amp_optimizer_backward_optimize",
    "test_fleet_amp_meta_optimizer.TestFleetAMPOptimizer.test_amp_recompute_lamb_optimizer",
    "test_fleet_amp_meta_optimizer.TestFleetAMPOptimizer.test_amp_recompute_lars_optimizer",
    "test_fleet_amp_meta_optimizer.TestFleetAMPOptimizer.test_amp_recompute_optimizer",
    "test_fleet_amp_meta_optimizer.TestFleetAMPOptimizer.test_pure_fp16_optimizer",
    "test_fleet_dgc_meta_optimizer.TestFleetDGCOptimizer.test_amp_recompute_lars_dgc_not_apply_optimizer",
    "test_fleet_dgc_meta_optimizer.TestFleetDGCOptimizer.test_dgc_not_apply_with_adam",
    "test_fleet_dgc_meta_optimizer.TestFleetDGCOptimizer.test_dgc_not_apply_with_one_worker",
    "test_fleet_dgc_meta_optimizer.TestFleetDGCOptimizer.test_dgc_optimizer",
    "test_fleet_dgc_meta_optimizer.TestFleetDGCOptimizer.test_dgc_optimizer_backward",
    "test_fleet_dgc_meta_optimizer.TestFleetDGCOptimizer.test_dgc_optimizer_gradients",
    "test_fleet_dgc_meta_optimizer.TestFleetDGCOptimizer.test_dgc_optimizer_optimize",
    "test_fleet_dgc_meta_optimizer.TestFleetDGCOptimizer.test_dgc_recompute_optimizer",
    "test_fleet_fp16_allreduce_meta_optimizer.TestFleetFP16CompressOptimizer.test_fp16_allreduce_not_apply_fp16_net",
    "test_fleet_fp16_allreduce_meta_optimizer.TestFleetFP16CompressOptimizer.test_fp16_allreduce_optimizer",
    "test_fleet_gradient_merge_meta_optimizer.TestFleetGradientMergeMetaOptimizer.test_gm_amp_optimizer",
    "test_fleet_gradient_merge_meta_optimizer.TestFleetGradientMergeMetaOptimizer.test_gm_pure_fp16_optimizer",
    "test_fleet_gradient_merge_meta_optimizer.TestFleetGradientMergeMetaOptimizer.test_gradient_merge_optimizer",
    "test_fleet_gradient_merge_meta_optimizer.TestFleetGradientMergeMetaOptimizer.test_recom_gm_optimizer",
    "test_fleet_lamb_meta_optimizer.TestFleetLambMetaOptimizer.test_lamb_apply_with_amp",
    "test_fleet_lamb_meta_optimizer.TestFleetLambMetaOptimizer.test_lamb_exclude_fn",
    "test_fleet_lamb_meta_optimizer.TestFleetLambMetaOptimizer.test_lamb_not_apply_with_momentum",
    "test_fleet_lamb_meta_optimizer.TestFleetLambMetaOptimizer.test_lamb_optimizer",
    "test_fleet_lars_meta_optimizer.TestFleetLarsMetaOptimizer.test_lars_apply_with_amp",
    "test_fleet_lars_meta_optimizer.TestFleetLarsMetaOptimizer.test_lars_exclude_fn",
    "test_fleet_lars_meta_optimizer.TestFleetLarsMetaOptimizer.test_lars_not_apply_with_adam",
    "test_fleet_lars_meta_optimizer.TestFleetLarsMetaOptimizer.test_lars_optimizer",
    "test_fleet_localsgd_meta_optimizer.TestFleetAdaptiveLocalSGDMetaOptimizer.test_adaptive_localsgd_optimizer",
    "test_fleet_localsgd_meta_optimizer.TestFleetAdaptiveLocalSGDMetaOptimizer.test_localsgd_amp_optimizer",
    "test_fleet_localsgd_meta_optimizer.TestFleetLocalSGDMetaOptimizer.test_localsgd_amp_optimizer",
    "test_fleet_localsgd_meta_optimizer.TestFleetLocalSGDMetaOptimizer.test_localsgd_optimizer",
    "test_fleet_pipeline_meta_optimizer.TestFleetMetaOptimizer.test_pipeline_optimizer",
    "test_fleet_pipeline_meta_optimizer.TestFleetMetaOptimizer.test_pipeline_amp_optimizer",
    "test_fleet_raw_program_meta_optimizer.TestFleetMetaOptimizer.test_pipeline_optimizer",
    "test_fleet_recompute_meta_optimizer.TestFleetRecomputeMetaOptimizer.test_recompute_lamb_optimizer",
    "test_fleet_recompute_meta_optimizer.TestFleetRecomputeMetaOptimizer.test_recompute_lars_optimizer",
    "test_fleet_recompute_meta_optimizer.TestFleetRecomputeMetaOptimizer.test_recompute_offload",
    "test_fleet_recompute_meta_optimizer.TestFleetRecomputeMetaOptimizer.test_recompute_optimizer",
    "test_fleet_recompute_meta_optimizer.TestFleetRecomputeMetaOptimizer.test_recompute_optimizer_backward",
    "test_fleet_recompute_meta_optimizer.TestFleetRecomputeMetaOptimizer.test_recompute_optimizer_backward_gradients",
    "test_fleet_recompute_meta_optimizer.TestFleetRecomputeMetaOptimizer.test_recompute_optimizer_backward_optimize",
    "test_fleet_static_mp_layers.TestDistTraining.test_column_parallel_layer",
    "test_fleet_static_mp_layers.TestDistTraining.test_row_parallel_layer",
    "test_fleet_static_mp_layers.TestDistTraining.test_parallel_embedding",
    "test_fleet_static_mp_layers.TestDistTraining.test_parallel_cross_entropy",
    # ASP (paddle.incubate.asp, fleet's ASPOptimizer): local copies of test/asp/ and the sharding test
    "test_fleet_sharding_meta_optimizer.TestFleetShardingMetaOptimizer.test_sharding_amp_asp_optimizer",
    *(f"test_asp_utils.TestASPUtils.test_{t}" for t in (
        "check_mask_1d", "check_mask_2d", "check_sparsity", "create_mask", "density", "get_check_method",
        "get_mask_1d", "get_mask_2d_best", "get_mask_2d_greedy", "threadsafe_valid_2d_patterns")),
    *(f"test_asp_pruning_static.TestASPStaticPruning{c}.test_{t}_pruning"
      for c in ("Base", "1D", "2DBest", "2DGreedy") for t in ("inference", "training")),
    "test_asp_optimize_static.TestASPStaticOptimize.test_asp_training",
    "test_asp_optimize_static.TestASPStaticOptimize.test_asp_training_with_amp",
    "test_asp_optimize_static.TestASPStaticOptimize.test_decorate",
    "test_asp_optimize_static.TestASPStaticOptimize.test_get_not_ASP_relevant_vars",
    "test_asp_optimize_static.TestASPStaticOptimize.test_is_supported_layers",
    "test_fleet_with_asp_static.TestFleetWithASPStatic.test_with_asp",
    "test_fleet_with_asp_static.TestFleetWithASPAMPStatic.test_with_asp_and_amp",
    "test_fleet_with_asp_static.TestFleetWithASPAMPStatic.test_with_asp_and_pure_fp16",
    "test_fleet_with_asp_sharding.TestFleetWithASPSharding.test_with_asp_sharding",
    "test_asp_save_load.TestASPStaticOptimize.test_save_and_load",
    "test_asp_customized_pruning.TestASPAddSupportedLayer.test_add_supported_layer_via_name",
    "test_asp_customized_pruning.TestASPStaticCustomerizedPruneFunc.test_inference_pruning",
    "test_asp_customized_pruning.TestASPStaticCustomerizedPruneFunc.test_training_pruning",
}

_RUNNER = r'''
import importlib.util, io, os, sys, unittest
import refimpl.compat
refimpl.compat.install()
path = sys.argv[1]
sys.path.insert(0, os.path.dirname(path))
spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

class Result(unittest.TextTestResult):
    def addSuccess(self, t): print("RESULT", t.id(), "ok", flush=True)
    def addFailure(self, t, e): print("RESULT", t.id(), "FAIL", str(e[1]).replace("\n", " ")[:200], flush=True)
    def addError(self, t, e):
        print("RESULT", t.id(), "ERROR", type(e[1]).__name__, str(e[1]).replace("\n", " ")[:200], flush=True)
    def addSkip(self, t, r): print("RESULT", t.id(), "skip", r, flush=True)
unittest.TextTestRunner(stream=io.StringIO(), resultclass=Result).run(
    unittest.defaultTestLoader.loadTestsFromModule(mod))
'''

#: Paddle's fleet tests are written for its GPU build (AMP's float16 casts go only where a float16 GPU kernel
#: exists), so they run with refimpl's CUDA kernel set (the simulator without a GPU), except these, which
#: train on a CUDA place: under the simulator that takes too long, and on the host they build and return
HOST_ONLY = {"test_fleet_amp_init.py", "test_asp_optimize_static.py", "test_asp_save_load.py",
             "test_fleet_with_asp_static.py", "test_fleet_with_asp_sharding.py", "test_asp_customized_pruning.py"}


def _files():
    return sorted(glob.glob(os.path.join(DIR, "test_*.py"))) if os.path.isdir(DIR) else []


@pytest.mark.parametrize("path", _files(), ids=os.path.basename)
def test_paddle_file(path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd()] + sys.path))
    if os.path.basename(path) not in HOST_ONLY:  # Paddle's GPU build: refimpl with its CUDA kernel set
        env.update(REFIMPL_BACKEND="cuda", NUMBA_ENABLE_CUDASIM=env.get("NUMBA_ENABLE_CUDASIM", "1"))
    out = subprocess.run([sys.executable, "-c", _RUNNER, path], capture_output=True, text=True, timeout=600,
                         env=env, cwd=os.path.dirname(path))
    results = {}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            _, test_id, status = line.split(" ", 3)[:3]
            results[test_id] = status
            print(line)
    module = os.path.basename(path)[:-3]
    expected = {t for t in PASSING if t.startswith(module + ".")}
    failed = sorted(t for t in expected if results.get(t) != "ok")
    assert not failed, f"Paddle tests that passed on refimpl fail now: {failed}\n{out.stderr[-3000:]}"
