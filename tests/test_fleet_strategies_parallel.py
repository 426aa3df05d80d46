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
* bad degrees stop with a typed error naming the option; the issue's three commands run;
* pipeline stages (``--pp``, alone and with dp, tp, sharding, tp x sharding + recompute): every step's
  loss, fetched on the last stage, equals one device's within the same 1e-6 (the micro-batch gradients
  are averaged in float32 merge buffers: another order of the same sums), both models with the untied
  output layer; each stage holds the closed-form count of its own parameters (embeddings + block 0 /
  block 1 + final LayerNorm + output layer), ops on the stages ``device_guard`` names;
  switches fleet would drop the pipeline for are typed errors.
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
from refimpl.core.errors import InvalidArgument  # noqa: E402

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
    (["--pp", "3"], InvalidArgument, "--pp 3: GPT-mini has 2 transformer blocks"),
    (["--pp", "2", "--model", "lenet"], InvalidArgument, "--pp 2"),
    (["--pp", "2", "--ranks", "3"], InvalidArgument, "--pp 2"),
    (["--pp", "2", "--lamb"], InvalidArgument, "--lamb with --pp 2"),
    (["--pp", "2", "--gradient-merge", "2"], InvalidArgument, "--gradient-merge with --pp 2"),
    (["--sharding", "2", "--pp", "2", "--dgc"], InvalidArgument, "--dgc with --pp 2"),
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


# ---- pipeline stages (--pp) --------------------------------------------------------------------------------
def _block_floats(d):
    """One transformer block's parameter values: ln1, q/k/v, o, ln2, fc1, fc2 (weights and biases)."""
    return 2 * d + 3 * (d * d + d) + (d * d + d) + 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d)


def _stage_floats(cfg, stage, tp=1):
    """GPT-mini's values on pipeline stage ``stage`` of 2 (one block each; the output layer untied), on one
    rank of ``tp``, counted by hand: stage 0 the token + position embeddings and block 0, stage 1 block 1,
    the final LayerNorm and the output weight ``[dim, vocab]``. Under TP the token embedding, the output
    weight and the split part of a block (q/k/v/fc1 weights and biases, o/fc2 weights) are 1/tp."""
    v, s, d = cfg["vocab"], cfg["seq"], cfg["dim"]
    block_whole = 2 * d + d + 2 * d + d                       # ln1, o bias, ln2, fc2 bias
    block = (_block_floats(d) - block_whole) // tp + block_whole
    return v * d // tp + s * d + block if stage == 0 else block + 2 * d + d * v // tp


def _stage_of(rank, opts):
    """The pipeline stage of ``rank`` (ranks in Paddle's order: mp -> sharding -> pp -> dp)."""
    return (rank // (fs.degree(opts, "tp") * fs.degree(opts, "sharding"))) % fs.degree(opts, "pp")


def test_stage_count_of_one_device_is_the_untied_programs():
    """The two stages' hand counts add up to the one-device program's under --pp (its output layer untied:
    ``linear_12.w_0``, [dim, vocab], and no matmul with the token embedding)."""
    main, *_ = fs.build_program("gpt", {"pp": 2}, False)
    params = {p.name: list(p.shape) for p in main.global_block().all_parameters()}
    assert sum(int(np.prod(s)) for s in params.values()) == _stage_floats(fs.GPT, 0) + _stage_floats(fs.GPT, 1)
    assert params["linear_12.w_0"] == [fs.GPT["dim"], fs.GPT["vocab"]]
    assert not any("embedding_0.w_0" in op.input_arg_names for op in main.global_block().ops
                   if op.type == "matmul_v2")


PP_CASES = [({"pp": 2}, 2, ["PipelineOptimizer"]), ({"pp": 2, "dp": 2}, 4, ["PipelineOptimizer"]),
            ({"tp": 2, "pp": 2}, 4, ["PipelineOptimizer"]), ({"sharding": 2, "pp": 2}, 4, ["ShardingOptimizer"]),
            ({"tp": 2, "pp": 2, "sharding": 2, "recompute": True}, 8, ["ShardingOptimizer", "RecomputeOptimizer"])]


@pytest.mark.parametrize("opts, nranks, applied", PP_CASES, ids=["pp2", "pp2xdp2", "tp2xpp2", "sharding2xpp2",
                                                                "tp2xpp2xsharding2-recompute"])
def test_pipeline_stages_give_one_device(opts, nranks, applied):
    base, ranks = _train(opts, nranks)
    stages = [_stage_of(r, opts) for r in range(nranks)]
    last = [r["losses"] for r, s in zip(ranks, stages) if s == 1]
    assert len(last) == nranks // 2 and all(np.isnan(r["losses"]).all() for r, s in zip(ranks, stages) if s == 0)
    np.testing.assert_allclose(np.mean(last, axis=0), base["losses"], rtol=0, atol=TOL)
    assert all(r["applied"] == applied for r in ranks)
    tp, sharding = fs.degree(opts, "tp"), fs.degree(opts, "sharding")
    assert base["params"] == 4 * (_stage_floats(fs.GPT, 0) + _stage_floats(fs.GPT, 1))
    if sharding == 1:
        for r, s in zip(ranks, stages):   # a stage's parameters (its tp shards) whole on its ranks
            assert r["params"] == 4 * _stage_floats(fs.GPT, s, tp), (r["params"], s)
    for first in range(0, nranks, tp * sharding):   # a stage's sharding group: the ranks tp apart
        for m in range(tp):   # Paddle's sharding: each holds the parameters it owns, and their velocities
            group = [ranks[first + m + tp * k] for k in range(sharding)]
            want = 4 * _stage_floats(fs.GPT, stages[first], tp)   # one Momentum velocity per value
            for key in ("params", "opt"):
                assert sum(r[key] for r in group) == want and all(0 < r[key] <= want for r in group), key


def test_pipeline_stages_hold_what_device_guard_names():
    """Under --pp 2 stage 0 holds the embeddings and block 0 (linear_0..5, layer_norm_0/1), stage 1 block 1,
    the final LayerNorm and the untied output layer (linear_6..12, layer_norm_2..4)."""
    from refimpl.distributed.communication import run_in_process

    def rank_fn():
        main, *_ = fs.build_program("gpt", fs.layout({"pp": 2}, 2), True)
        run = main._pipeline_opt
        return run.stage, sorted(p.name for p in main.global_block().all_parameters() if run.has_var(p.name))

    out = run_in_process(2, rank_fn, timeout=120)
    names = lambda kind, ks: {f"{kind}_{k}.{w}" for k in ks for w in ("w_0", "b_0")}  # noqa: E731
    want0 = {"embedding_0.w_0", "embedding_1.w_0"} | names("linear", range(6)) | names("layer_norm", (0, 1))
    want1 = (names("linear", range(6, 12)) | {"linear_12.w_0"} | names("layer_norm", (2, 3, 4)))
    assert [o[0] for o in out] == [0, 1]
    assert set(out[0][1]) == want0 and set(out[1][1]) == want1


def test_command_line_pp_on_two_in_process_ranks():
    diff, applied, params, p_ratio, o_ratio = _run([sys.executable, "examples/fleet_strategies.py", "--pp", "2",
                                                    "--ranks", "2", "--steps", "2"])
    assert abs(diff) <= TOL and applied == "'PipelineOptimizer'" and len(params) == 2
    assert 0.45 < p_ratio < 0.55 and 0.45 < o_ratio < 0.55


def test_command_line_tp_pp_sharding_recompute_on_eight_ranks_through_launch():
    """Issue 19's command: 8 in-process ranks, tp 2 x pp 2 x sharding 2 with recompute."""
    diff, applied, params, p_ratio, o_ratio = _run(
        [sys.executable, "-m", "refimpl.distributed.launch", "--nproc_per_node", "8", "--in-process",
         "examples/fleet_strategies.py", "--tp", "2", "--pp", "2", "--sharding", "2", "--recompute", "--steps", "2"])
    assert abs(diff) <= TOL and applied == "'ShardingOptimizer', 'RecomputeOptimizer'" and len(params) == 8
    assert 0.1 < p_ratio < 0.25 and o_ratio < 0.25   # parameters too: each sharding rank holds the ones it owns


def test_command_line_sharding_with_gradient_merge_says_sharding_was_dropped():
    """Paddle 3.3.1's strategy compiler keeps GradientMergeOptimizer and drops sharding: the row says so and
    names the way to merge under sharding, instead of calling its 1.00x bytes exact sharding."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "examples/fleet_strategies.py", "--sharding", "2", "--gradient-merge", "2",
                        "--steps", "2"], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    row = next(line for line in p.stdout.splitlines() if "final loss" in line)
    assert "applied ['GradientMergeOptimizer']" in row, row
    assert "sharding dropped by the strategy compiler" in row, row
    assert "sharding_configs['gradient_merge_acc_step']" in row, row


@pytest.mark.parametrize("argv, words", [(["--tp", "3"], "tensor-parallel degree 3"),
                                         (["--dp", "0"], "--dp must be >= 1, got 0"),
                                         (["--tp", "2", "--dp", "3", "--ranks", "4"], "--tp 2 x --dp 3 = 6 ranks")])
def test_command_line_bad_degrees_print_an_error_and_exit_2(argv, words):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "examples/fleet_strategies.py"] + argv, capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env=env)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("fleet_strategies.py: error: ") and words in p.stderr, p.stderr
