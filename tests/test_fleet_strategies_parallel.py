"""The strategies example under tensor parallelism and ZeRO sharding (``--tp`` / ``--sharding`` / ``--dp``).

``examples/fleet_strategies.py`` trains GPT-mini once on one device and once on the ranks; here:

* every step's loss of tp 2, tp 2 x dp 2, sharding 2, sharding 2 x dp 2 and sharding 4 equals the
  one-device loss on the same global batches within 1e-6. The runs are float32: a loss of ~3.8 has
  an ulp of 2.4e-7, and the ranks add the same products in another order (the partial sums of a split
  matmul all-reduced, the halves of a gradient reduced), each sum rounding at float32's relative
  1.2e-7; over 3 Momentum steps that leaves a few ulps at most (what we see: 0 or 1 ulp), so 1e-6
  (~4 ulps) is the float32 reading of "the same numbers";
* the bytes each rank holds: under tp 2 the parameters and the Momentum velocities are the closed-form
  count of the Megatron layout (split: token embedding, q/k/v/fc1 weights and biases, o/fc2 weights;
  whole: position embedding, LayerNorms, o/fc2 biases) -- about half of one device's; under sharding N
  each sharding group's ranks hold disjoint parts that add up to one device's optimizer state;
* the tensor-parallel model's parameters have the one-device names, and ``shard_values`` cuts them so
  that the shards put back together are the one-device values;
* tp 2 x sharding 2 gives one device too, each sharding group splitting its tp rank's shards;
* bad degrees stop with a typed error naming the option; the issue's three commands run.
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, EXAMPLES)

import fleet_strategies as fs  # noqa: E402
import gpt_parallel as gp  # noqa: E402
from refimpl.core.errors import InvalidArgument, Unimplemented  # noqa: E402

TOL = 1e-6  # float32 losses of ~3.8: ~4 ulps (the module docstring)
STEPS = 3


def _train(opts, nranks):
    """(one-device result, every rank's result) of the example on the same batches."""
    opts = fs.layout(dict(opts), nranks)
    batches = fs.make_batches("gpt", fs.data_slice(opts, 0, nranks)[1], STEPS)
    return fs.run_rank("gpt", opts, batches, 1, False), fs.run_all_ranks("gpt", opts, batches, nranks)


def _losses_match(base, ranks, group):
    """Each step's mean loss over the ranks equals one device's; the ranks of one tp group agree."""
    got = np.mean([r["losses"] for r in ranks], axis=0)
    np.testing.assert_allclose(got, base["losses"], rtol=0, atol=TOL)
    for r in ranks:
        np.testing.assert_array_equal(r["losses"], ranks[ranks.index(r) // group * group]["losses"])


def _megatron_floats(cfg, tp):
    """Parameter values one rank holds under the Megatron layout of GPT-mini, counted by hand."""
    v, s, d, layers = cfg["vocab"], cfg["seq"], cfg["dim"], cfg["layers"]
    split = v * d + layers * (3 * (d * d + d) + d * d + (d * 4 * d + 4 * d) + 4 * d * d)
    whole = s * d + 2 * d + layers * (2 * d + d + 2 * d + d)   # pos, ln_f, per block: ln1, o bias, ln2, fc2 bias
    return split // tp + whole


def test_megatron_count_of_one_device_is_the_programs():
    """The hand count at tp 1 is the one-device program's parameter count (so the count is of GPT-mini)."""
    main, *_ = fs.build_program("gpt", {}, False)
    n = sum(int(np.prod(p.shape)) for p in main.global_block().all_parameters())
    assert n == _megatron_floats(fs.GPT, 1)


@pytest.mark.parametrize("opts, nranks", [({"tp": 2}, 2), ({"tp": 2, "dp": 2}, 4)])
def test_tensor_parallel_gives_one_device(opts, nranks):
    base, ranks = _train(opts, nranks)
    _losses_match(base, ranks, group=2)
    assert all(r["applied"] == ["TensorParallelOptimizer"] for r in ranks)
    per_rank = 4 * _megatron_floats(fs.GPT, 2)       # float32 bytes
    assert base["params"] == base["opt"] == 4 * _megatron_floats(fs.GPT, 1)
    assert [r["params"] for r in ranks] == [per_rank] * nranks
    assert [r["opt"] for r in ranks] == [per_rank] * nranks   # one Momentum velocity per value
    assert per_rank / base["params"] < 0.55


@pytest.mark.parametrize("opts, nranks, group", [({"sharding": 2}, 2, 2), ({"sharding": 2, "dp": 2}, 4, 2),
                                                 ({"sharding": 4}, 4, 4)])
def test_sharding_gives_one_device_and_splits_the_optimizer_state(opts, nranks, group):
    base, ranks = _train(opts, nranks)
    _losses_match(base, ranks, group=1)
    assert all(r["applied"] == ["ShardingOptimizer"] for r in ranks)
    for g in range(0, nranks, group):      # a sharding group: consecutive ranks, disjoint owners
        opt = [r["opt"] for r in ranks[g:g + group]]
        assert sum(opt) == base["opt"] and all(0 < o < base["opt"] for o in opt), opt
        assert sum(r["params"] for r in ranks[g:g + group]) == base["params"]
    assert max(r["opt"] for r in ranks) / base["opt"] <= {2: 0.6, 4: 0.45}[group]


def test_tp_parameters_keep_the_one_device_names_and_shards_reassemble():
    from refimpl.distributed.communication import run_in_process

    def rank_fn():
        main, *_ = fs.build_program("gpt", {"tp": 2, "dp": 1}, True)
        return {p.name: list(p.shape) for p in main.global_block().all_parameters()}, gp.shard_layout(main)

    one, *_ = fs.build_program("gpt", {}, False)
    full_shapes = {p.name: list(p.shape) for p in one.global_block().all_parameters()}
    (shapes0, layout0), (shapes1, layout1) = run_in_process(2, rank_fn, timeout=120)
    assert shapes0 == shapes1 and layout0 == layout1 and set(shapes0) == set(full_shapes)
    axes = {n: a for n, a in layout0.items() if a is not None}
    # Megatron: tok rows; q, k, v, fc1 columns (weights) and their biases; o, fc2 rows (weights)
    d = fs.GPT["dim"]
    assert axes["embedding_0.w_0"] == 0 and "embedding_1.w_0" not in axes
    for b in range(fs.GPT["layers"]):
        q, k, v, o, fc1, fc2 = (f"linear_{6 * b + i}" for i in range(6))
        assert all(axes[f"{n}.w_0"] == 1 and axes[f"{n}.b_0"] == 0 for n in (q, k, v, fc1))
        assert axes[f"{o}.w_0"] == 0 and axes[f"{fc2}.w_0"] == 0
        assert f"{o}.b_0" not in axes and f"{fc2}.b_0" not in axes and full_shapes[f"{fc1}.w_0"] == [d, 4 * d]
    rng = np.random.default_rng(3)
    full = {n: rng.standard_normal(s) for n, s in full_shapes.items()}
    parts = [gp.shard_values(full, layout0, r, 2) for r in range(2)]
    for n, axis in layout0.items():
        assert list(parts[0][n].shape) == shapes0[n]
        back = parts[0][n] if axis is None else np.concatenate([parts[0][n], parts[1][n]], axis=axis)
        np.testing.assert_array_equal(back, full[n])


@pytest.mark.parametrize("argv, error, words", [
    (["--tp", "2", "--ranks", "3"], InvalidArgument, "--tp 2"),
    (["--sharding", "2", "--dp", "2", "--ranks", "2"], InvalidArgument, "--sharding 2 x --dp 2"),
    (["--tp", "4"], InvalidArgument, "heads=2"),
    (["--tp", "2", "--model", "lenet"], InvalidArgument, "--tp 2"),
    (["--pp", "2", "--ranks", "2"], Unimplemented, "--pp 2"),
    (["--tp", "2", "--compare-all"], InvalidArgument, "--compare-all"),
    (["--tp", "0"], InvalidArgument, "--tp must be >= 1"),
])
def test_bad_degrees_are_typed_errors_naming_the_option(argv, error, words):
    with pytest.raises(error, match=re.escape(words)):
        fs.main(argv + ["--steps", "2"])


def test_sharding_inside_tensor_parallelism_gives_one_device():
    """tp 2 x sharding 2 (``sharding_configs['mp_degree'] = 2``): the sharding groups are the ranks 2 apart
    (ranks 0, 2 and 1, 3), whose owners split the tp shards of their model-parallel rank."""
    base, ranks = _train({"tp": 2, "sharding": 2}, 4)
    _losses_match(base, ranks, group=2)
    assert all(r["applied"] == ["ShardingOptimizer"] for r in ranks)
    per_tp_rank = 4 * _megatron_floats(fs.GPT, 2)
    for group in ((0, 2), (1, 3)):
        assert sum(ranks[r]["params"] for r in group) == per_tp_rank
        assert sum(ranks[r]["opt"] for r in group) == per_tp_rank
        assert all(0 < ranks[r]["opt"] < per_tp_rank for r in group)


ROW = re.compile(r"final loss +([-0-9.]+) \(one device +([-0-9.]+), diff ([-+0-9.e]+)\).*applied \[([^\]]*)\]"
                 r".*\n +parameters per rank ([0-9. ]+) KiB \(([0-9.]+)x.*optimizer state per rank ([0-9. ]+) KiB "
                 r"\(([0-9.]+)x")


def _run(cmd, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    m = ROW.search(p.stdout)
    assert m, p.stdout
    return float(m.group(3)), m.group(4), m.group(5).split(), float(m.group(6)), float(m.group(8))


def test_command_line_tp_on_two_in_process_ranks():
    diff, applied, params, p_ratio, o_ratio = _run([sys.executable, "examples/fleet_strategies.py", "--tp", "2",
                                                    "--ranks", "2", "--steps", "2"])
    assert abs(diff) <= TOL and "TensorParallelOptimizer" in applied and len(params) == 2
    assert p_ratio < 0.55 and o_ratio < 0.55


def test_command_line_sharding_4_through_launch_in_process():
    diff, applied, params, p_ratio, o_ratio = _run(
        [sys.executable, "-m", "refimpl.distributed.launch", "--nproc_per_node", "4", "--in-process",
         "examples/fleet_strategies.py", "--sharding", "4", "--steps", "2"])
    assert abs(diff) <= TOL and "ShardingOptimizer" in applied and len(params) == 4 and o_ratio < 0.5


def test_command_line_tp_dp_under_mpiexec():
    pytest.importorskip("mpi4py")
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if exe is None:
        pytest.fail("mpi4py is installed but mpiexec is not on PATH (pip install mpich)")
    diff, applied, params, p_ratio, o_ratio = _run([exe, "-n", "4", sys.executable, "examples/fleet_strategies.py",
                                                    "--tp", "2", "--dp", "2", "--steps", "2"])
    assert abs(diff) <= TOL and "TensorParallelOptimizer" in applied and len(params) == 4
    assert p_ratio < 0.55 and o_ratio < 0.55


def test_benchmark_table_of_sharding_and_tensor_parallelism():
    """benchmarks/strategies.py's second table: a row per layout with its time and memory ratios to data
    parallelism on the same ranks; TP 2 and sharding 2 hold about half the parameters and optimizer state of
    a dp rank, TP 2 x sharding 2 about a quarter."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "strategies.py"), "--quick",
                          "--parallel-only"], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    for name, low, high in ((r"sharding=2 \(2 ranks\)", 0.4, 0.6), (r"tp=2 \(2 ranks\)", 0.4, 0.6),
                            (r"tp=2\+dp=2 \(4 ranks\)", 0.4, 0.6), (r"sharding=2\+dp=2 \(4 ranks\)", 0.4, 0.6),
                            (r"tp=2\+sharding=2 \(4 ranks\)", 0.2, 0.35)):
        m = re.search(rf"^{name} +step +[0-9.]+ ms +ratio +[0-9.]+x +peak/rank +[0-9.]+ KiB +ratio +[0-9.]+x +"
                      r"parameters/rank +[0-9.]+ KiB +ratio +([0-9.]+)x +optimizer state/rank +[0-9.]+ KiB +ratio +"
                      r"([0-9.]+)x", out.stdout, re.M)
        assert m, out.stdout
        assert low < float(m.group(1)) < high and low < float(m.group(2)) < high, m.group(0)
