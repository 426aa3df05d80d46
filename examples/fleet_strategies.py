"""Fleet's meta-optimizer strategies on GPT-mini and LeNet, each against one device.

    python examples/fleet_strategies.py --recompute --amp bf16           # one device
    mpiexec -n 2 python examples/fleet_strategies.py --amp fp16 --lamb   # dp=2 over MPI
    python examples/fleet_strategies.py --localsgd --ranks 4             # 4 in-process ranks
    python examples/fleet_strategies.py --compare-all --ranks 2          # every strategy, both models
    python examples/fleet_strategies.py --tp 2 --ranks 2                 # tensor parallelism, 2 ranks
    mpiexec -n 4 python examples/fleet_strategies.py --tp 2 --dp 2       # TP x data parallel over MPI
    python -m refimpl.distributed.launch --nproc_per_node 4 --in-process examples/fleet_strategies.py --sharding 4
    python examples/fleet_strategies.py --pp 2 --ranks 2                 # two pipeline stages
    python -m refimpl.distributed.launch --nproc_per_node 8 --in-process examples/fleet_strategies.py \
        --tp 2 --pp 2 --sharding 2 --recompute                           # TP x pipeline x sharding

Every run trains the chosen model (same initial values, same global
batches) once on one device, and once with
``fleet.distributed_optimizer(inner, strategy)`` on N ranks, each rank on its
slice of the batch (``--ranks N`` runs N in-process ranks; under ``mpiexec``
each process is a rank). The one-device run uses the optimizer fleet's
meta-optimizer actually runs, with the hyper-parameters fleet gives it:
``Lamb`` (the Adam's betas and epsilon, ``lamb_configs``' weight decay) for
LAMB, ``LarsMomentumOptimizer`` (``lars_configs``) for LARS,
``incubate.optimizer.GradientMergeOptimizer`` for gradient merge,
``static.amp.decorate`` / ``decorate_bf16`` for AMP, plain Momentum
otherwise. A row per strategy: the final loss and its difference from one
device, the peak bytes a rank held during a step (``exe.memory_stats()``, the
most over the ranks; also the most bytes of activations held at once, which
recompute lowers), the median step time, the meta-optimizers fleet applied,
and a note on what the diff means. A strategy refimpl cannot run prints
``not available: <error>`` in its row instead of stopping the run. Under
each row: the bytes of parameters and of optimizer state each rank holds
after the last step (``live_by_category``), the most of them against one
device's -- ~1/N under ``--tp N`` or ``--sharding N``.

``--tp T``, ``--sharding S``, ``--pp P`` and ``--dp D`` lay the ranks out (their
product is the world size; ``--dp`` defaults to what is left, ``--ranks`` to the
product; the order of the ranks is Paddle's, mp -> sharding -> pp -> dp):
``--tp`` builds GPT-mini from fleet's tensor-parallel layers
(``examples/gpt_parallel.py``) under ``strategy.tensor_parallel``, the
``T`` neighbours of a rank training on one slice of the batch;
``--sharding`` is ZeRO sharding (``sharding_configs``: ``sharding_degree``
S, ``dp_degree`` D; with ``--tp`` too, ``mp_degree`` T: sharding inside
tensor parallelism); ``--pp`` puts GPT-mini's ops on P pipeline stages
with ``device_guard`` (the embeddings on the first, the blocks split evenly,
the final LayerNorm, logits and loss on the last) under ``strategy.pipeline``
(``accumulate_steps`` 2: each rank's slice runs as two micro-batches, 1F1B),
with ``hybrid_configs`` for TP / dp, or inside sharding
(``sharding_configs['pp_degree']``: each stage's optimizer state sharded).
Under ``--pp`` the output layer is untied, a linear of its own, on one device
too (the row says so): refimpl's pipeline refuses a parameter used on two
stages, and the tied embedding would be read on the first and the last
(``examples/gpt_parallel.py``). Only the switches the pipelined chain keeps
(recompute and AMP; under sharding also LARS and LAMB) run with ``--pp``;
the others are an InvalidArgument naming the switch, since fleet would drop
the pipeline for them. A pipeline's loss is fetched on its last stage; the
row averages those ranks'. All start from the one-device run's initial
values (their shards under TP).

The inner optimizer is the one each strategy wants (Paddle's ``_can_apply``
rules): Momentum, except Adam for LAMB; bf16 AMP decorates it with
``static.amp.bf16.decorate_bf16`` (fleet's ``amp`` switch is float16 only).
Recompute checkpoints the output of every transformer block (GPT-mini) or
conv stage (LeNet). Recompute with bf16 wraps a ``RecomputeOptimizer`` in
``decorate_bf16`` and hands that to fleet without ``strategy.recompute``:
a ``RecomputeOptimizer`` over a ``decorate_bf16`` optimizer (fleet's order)
drops the bf16 rewrite -- Paddle 3.3.1 does the same (on three ``fc``
layers with SGD: no ``cast`` that way, 17 the other way) -- while the
other order keeps both.

Reading the diff column: data parallelism, recompute, LAMB, LARS, gradient
merge and LocalSGD (which fleet, as Paddle 3.3.1, chains under
``RawProgramOptimizer``, so the gradients are all-reduced every step and the
parameter averages change nothing) reproduce one device to float32
rounding (~1e-7). Not exact by design: bf16 / fp16 AMP on more than one rank
(each rank rounds its own partial sums), DGC once a parameter is large
enough to be sparsified (>= 16384 elements, Paddle's rule; GPT-mini's are
not, so its DGC is momentum + allreduce), adaptive LocalSGD (no
``RawProgramOptimizer`` under it: ranks train alone between averages),
FP16 allreduce (through fleet it inserts no collective -- Paddle chains none
under it -- so its ranks train alone), and every multi-rank LeNet row, whose
batch norm normalizes each rank's own slice. Tensor parallelism, sharding and
pipeline stages (micro-batch gradients averaged in the merge buffers) reproduce
one device to float32 rounding too, but LAMB and LARS
under TP do not: each rank's trust ratio uses its shard's norms (Paddle's
``lamb`` / ``lars_momentum`` ops see only the shard). On the NumPy backend float16
AMP inserts no casts (as Paddle's CPU wheel): its row says so instead of
measuring AMP; run with ``REFIMPL_BACKEND=cuda`` for the float16 program.
``--sharding`` with ``--gradient-merge`` is gradient merge alone (the compiler drops
sharding, as Paddle 3.3.1's; the row says so). Bad degrees: ``error: ...``, exit 2.
"""
import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpt_parallel  # noqa: E402
from gpt_parallel import data_slice, degree, layout  # noqa: E402
from strategy_optimizers import (ADAM, inner_optimizer, make_strategy, momentum,  # noqa: E402,F401
                                 one_device_optimizer, recompute_inside_bf16)
import refimpl as paddle  # noqa: E402
from refimpl.core.errors import InvalidArgument  # noqa: E402
from refimpl.distributed.fleet import Fleet, MPIRoleMaker  # noqa: E402

F = paddle.nn.functional
SEED = 5
GPT = dict(vocab=32, seq=8, dim=16, heads=2, layers=2)  # GPT-mini's size (benchmarks/strategies.py: larger)


# ---- the models: (main, startup, loss, feed maker, checkpoint names) ---------------------------------
def gpt_net(tp=1, pp=1, marked=False):
    """TinyGPT (``refimpl/demo.py``); its tensor-parallel layout over ``tp`` ranks when ``tp > 1``; with
    ``pp > 1`` its output layer untied, and (``marked``) its ops on ``pp`` pipeline stages."""
    checkpoints = []
    loss = gpt_parallel.gpt_loss(GPT, tp, checkpoints, pp, marked)

    def feed(rng, rows):
        data = rng.integers(0, GPT["vocab"], (rows, GPT["seq"] + 1))
        return {"ids": data[:, :-1].astype("int64"), "labels": data[:, 1:].astype("int64")}
    return loss, feed, checkpoints


def lenet_net(tp=1, pp=1, marked=False):
    from train_lenet import LeNet
    if tp > 1:
        raise InvalidArgument(f"--tp {tp}: only --model gpt has a tensor-parallel layout (examples/gpt_parallel.py)")
    if pp > 1:
        raise InvalidArgument(f"--pp {pp}: only --model gpt has a pipeline-stage layout (examples/gpt_parallel.py)")
    net = LeNet(width=4, hidden=16)
    img = paddle.static.data("img", [None, 1, 8, 8], "float32")
    label = paddle.static.data("label", [None, 1], "int64")
    x1 = F.max_pool2d(F.relu(net.bn1(net.conv1(img))), kernel_size=2, stride=2)
    x2 = F.max_pool2d(F.relu(net.bn2(net.conv2(x1))), kernel_size=2, stride=2)
    logits = net.fc2(F.relu(net.fc1(paddle.flatten(x2, start_axis=1))))
    loss = F.cross_entropy(logits, label)

    def feed(rng, rows):
        return {"img": rng.random((rows, 1, 8, 8)).astype("float32"),
                "label": rng.integers(0, 10, (rows, 1)).astype("int64")}
    return loss, feed, [x1.name, x2.name]


MODELS = {"gpt": gpt_net, "lenet": lenet_net}


def build_program(model, opts, distributed):
    """(main, startup, loss, applied meta-optimizers, the main program's facts: {"ops": {op type: count},
    "dtypes": the variables' dtype names}) of ``model`` under fleet (``distributed``) or on one device."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    tp, pp = (degree(opts, "tp") if distributed else 1), degree(opts, "pp")   # pp: one device untied too
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        if tp > 1:  # the mp layers read the 'model' group of fleet (the singleton) as they are built
            f = paddle.distributed.fleet.fleet
            f.init(role_maker=MPIRoleMaker(is_collective=True), strategy=make_strategy(opts, []))
        loss, _, checkpoints = MODELS[model](tp, pp, distributed and pp > 1)
        applied = []
        if distributed:
            if tp <= 1:
                f = Fleet()
                f.init(role_maker=MPIRoleMaker(is_collective=True), strategy=make_strategy(opts, checkpoints))
            again = make_strategy(opts, checkpoints) if tp > 1 and opts.get("recompute") else None  # the checkpoints
            opt = f.distributed_optimizer(inner_optimizer(opts, checkpoints), strategy=again)
            opt.minimize(loss)
            applied = f._get_applied_meta_list()
        else:
            one_device_optimizer(opts).minimize(loss)
    block = main.global_block()
    facts = {"ops": dict(collections.Counter(op.type for op in block.ops)),
             "dtypes": sorted({str(v.dtype) for v in block.vars.values()})}
    return main, startup, loss, applied, facts


def rank_slice(batch, rank, nranks):
    """This rank's rows of a global batch."""
    rows = len(next(iter(batch.values()))) // nranks
    return {k: v[rank * rows:(rank + 1) * rows] for k, v in batch.items()}


def memory_stats(exe, main=None):
    """The executor's ``memory_stats()`` of its last run of ``main``; a pipelined ``main`` (``--pp``) runs
    on its own plan executor (``program._pipeline_opt``), whose bytes are this rank's stage's."""
    run = getattr(main, "_pipeline_opt", None)
    return run.executor.memory_stats() if getattr(run, "executor", None) is not None else exe.memory_stats()


def memory_peaks(exe, main=None):
    """(peak bytes, the most bytes of activations held at once) of the executor's last run."""
    stats = memory_stats(exe, main)
    return int(stats["peak_bytes"]), int((stats.get("max_by_category") or {}).get("activations") or 0)


def one_device_start(model, opts):
    """The one-device run's initial parameter values (the same seed, the same startup program)."""
    main, startup, *_ = build_program(model, opts, False)
    paddle.seed(SEED)
    scope = paddle.static.Scope()
    paddle.static.Executor().run(startup, scope=scope)
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.global_block().all_parameters()}


def run_rank(model, opts, batches, nranks, distributed):
    """Train on this rank; return {"losses", "peak" bytes, "time": median step seconds after the first,
    "applied" meta-optimizers, "acts": the most bytes of activations held at once, the main program's
    "facts", "params" / "opt": the bytes of parameters / optimizer state held after the last step}."""
    rank = paddle.distributed.get_rank() if distributed else 0
    main, startup, loss, applied, facts = build_program(model, opts, distributed)
    paddle.seed(SEED)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor()
    exe.run(startup, scope=scope)
    tp = degree(opts, "tp") if distributed else 1
    if distributed and (tp > 1 or degree(opts, "sharding") > 1 or degree(opts, "pp") > 1):  # one device's start
        gpt_parallel.load_start(scope, main, one_device_start(model, opts), rank % tp, tp)
    part, parts = data_slice(opts, rank, nranks)
    losses, peak, acts, times = [], 0, 0, []
    for b in batches:
        t0 = time.perf_counter()
        out = exe.run(main, feed=rank_slice(b, part, parts), fetch_list=[loss], scope=scope)
        times.append(time.perf_counter() - t0)
        losses.append(float("nan") if out[0] is None else float(np.mean(out[0])))  # pp: the last stage's
        peak, acts = (max(x, y) for x, y in zip((peak, acts), memory_peaks(exe, main)))
    live = memory_stats(exe, main)["live_by_category"]
    return {"losses": losses, "peak": peak, "time": float(np.median(times[1:] if len(times) > 1 else times)),
            "applied": applied, "acts": acts, "facts": facts, "params": int(live["parameters"]),
            "opt": int(live["optimizer_state"])}


NUMBERS = ("peak", "time", "acts", "params", "opt")


def run_all_ranks(model, opts, batches, nranks):
    """Every rank's result: in-process ranks, or this rank's (an MPI process, or a thread of
    ``launch --in-process``) gathered over a group of the whole world."""
    import refimpl.distributed as dist
    if inside_ranks():
        n, r = dist.get_world_size(), dist.get_rank()
        res = run_rank(model, opts, batches, n, True)
        table = np.zeros((n, len(res["losses"]) + len(NUMBERS)))
        table[r] = [*res["losses"], *(res[k] for k in NUMBERS)]
        dist.all_reduce(table, group=dist.new_group())  # ring 0 may be bound to the model-parallel group now
        k = len(NUMBERS)
        return [dict(res, losses=list(row[:-k]), **dict(zip(NUMBERS, row[-k:]))) for row in table]
    if nranks <= 1:
        return [run_rank(model, opts, batches, 1, True)]
    from refimpl.distributed.communication import run_in_process
    return run_in_process(nranks, run_rank, model, opts, batches, nranks, True, timeout=600)


def under_mpi():
    return any(k in os.environ for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))


def inside_ranks():
    """Whether this code already runs as one rank of many: under ``mpiexec``, or as a thread of
    ``python -m refimpl.distributed.launch --in-process``."""
    from refimpl.distributed.communication import context
    return under_mpi() or (context.has_thread_context() and context.current().world_size > 1)


# ---- the report --------------------------------------------------------------------------------------------
def describe(opts):
    parts = [k if v is True else f"{k}={v}" for k, v in opts.items() if v]
    return "+".join(parts) or "data parallel"


def make_batches(model, nranks, steps, rows_per_rank=gpt_parallel.SLICE_ROWS, seed=0):
    """``steps`` global batches of ``rows_per_rank`` rows per rank."""
    rng = np.random.default_rng(seed)
    _, feed, _ = _probe(model)
    return [feed(rng, rows_per_rank * max(nranks, 1)) for _ in range(steps)]


def compare(model, opts, nranks, steps, out):
    import refimpl.distributed as dist
    if inside_ranks():
        nranks = dist.get_world_size()
        out = out if dist.get_rank() == 0 else open(os.devnull, "w")
    name = describe(opts)
    try:
        opts = layout(dict(opts), nranks)
        batches = make_batches(model, data_slice(opts, 0, nranks)[1], steps)
        base = run_rank(model, opts, batches, 1, False)
        results = run_all_ranks(model, opts, batches, nranks)
    except Exception as exc:  # noqa: BLE001 - a strategy refimpl lacks is reported, the others still run
        print(f"{model:6s} {name:34s} {not_available(exc)}", file=out, flush=True)
        return False
    final, b = float(np.nanmean([r["losses"][-1] for r in results])), base["losses"][-1]  # nan: not last stage
    peak, acts, step_time = (max(r[k] for r in results) for k in ("peak", "acts", "time"))
    print(f"{model:6s} {name:34s} final loss {final:9.5f} (one device {b:9.5f}, "
          f"diff {final - b:+.2e})  peak {peak / 1024:8.1f} KiB ({peak / max(base['peak'], 1):4.2f}x, "
          f"activations {acts / 1024:.1f} KiB vs {base['acts'] / 1024:.1f})  "
          f"step {step_time * 1e3:7.2f} ms ({step_time / max(base['time'], 1e-9):4.2f}x)  "
          f"applied {results[0]['applied']}  [{note(model, opts, nranks, results[0]['facts'], results[0]['applied'])}]",
          file=out, flush=True)
    print("       " + "; ".join(
        f"{label} per rank {' '.join(f'{r[k] / 1024:.1f}' for r in results)} KiB "
        f"({max(r[k] for r in results) / max(base[k], 1):.2f}x one device's {base[k] / 1024:.1f})"
        for k, label in (("params", "parameters"), ("opt", "optimizer state"))), file=out, flush=True)
    return True


def note(model, opts, nranks, facts, applied=()):
    """What the diff column means for this row (see the docstring's last paragraph)."""
    notes, op_counts = [], facts["ops"]
    if degree(opts, "sharding") > 1 and "ShardingOptimizer" not in applied:   # Paddle 3.3.1's compiler does so
        notes.append("sharding dropped by the strategy compiler" + (" (gradient merge excludes it): merge under "
                     "sharding with sharding_configs['gradient_merge_acc_step']" if opts.get("gradient_merge") else ""))
    if recompute_inside_bf16(opts):
        notes.append("recompute: a RecomputeOptimizer inside decorate_bf16, not fleet's")
    if opts.get("amp") == "fp16" and "float16" not in facts["dtypes"]:
        notes.append("float16 casts: none on the host backend; run with REFIMPL_BACKEND=cuda")
    elif opts.get("amp") and nranks > 1:
        notes.append(f"{'b' if opts['amp'] == 'bf16' else ''}float16 rounding of each rank's partial sums: "
                     "not exact by design")
    if opts.get("dgc"):
        notes.append("DGC sparsifies gradients: not exact by design" if op_counts.get("dgc") else
                     "no parameter reaches DGC's 16384 elements: momentum + allreduce")
    if opts.get("adaptive_localsgd"):
        notes.append("ranks train alone between parameter averages: not exact by design")
    if opts.get("fp16_allreduce"):
        notes.append("float16 rounding of the all-reduced gradients: not exact by design"
                     if any(op_counts.get(t) for t in ("c_allreduce_sum", "all_reduce")) else
                     "fleet inserts no collective under it (as Paddle 3.3.1): ranks train alone")
    if model == "lenet" and nranks > 1:
        notes.append("batch norm normalizes each rank's slice: not exact by design")
    if (opts.get("lamb") or opts.get("lars")) and degree(opts, "tp") > 1:
        notes.append("trust ratios from each shard's own norms (as Paddle's): not exact by design")
    untied = ["output layer untied (on one device too)"] if degree(opts, "pp") > 1 else []
    return "; ".join(untied + (notes or ["exact: float32 rounding"]))


def not_available(exc):
    msg = str(exc).splitlines()[0] if str(exc) else ""
    return f"not available: {type(exc).__name__}: {msg[:160]}"


def _probe(model):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        return MODELS[model]()


ALL = [{}, {"recompute": True}, {"amp": "fp16"}, {"amp": "bf16"}, {"recompute": True, "amp": "bf16"},
       {"lamb": True}, {"lars": True}, {"dgc": True}, {"localsgd": True}, {"adaptive_localsgd": True},
       {"fp16_allreduce": True}, {"gradient_merge": 2}]


def main(argv=None, out=None):
    out = out or sys.stdout
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="gpt")
    p.add_argument("--ranks", type=int, default=None,
                   help="in-process ranks (default: the product of the degrees; under mpiexec: the MPI ranks)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--recompute", action="store_true")
    p.add_argument("--amp", choices=["fp16", "bf16"])
    for flag in ("lamb", "lars", "dgc", "localsgd", "adaptive-localsgd", "fp16-allreduce"):
        p.add_argument(f"--{flag}", action="store_true")
    p.add_argument("--gradient-merge", type=int, default=0, metavar="K")
    for flag, what in (("tp", "tensor-parallel"), ("sharding", "ZeRO sharding"), ("dp", "data-parallel"),
                       ("pp", "pipeline")):
        p.add_argument(f"--{flag}", type=int, default=None, metavar="N", help=f"the {what} degree")
    p.add_argument("--compare-all", action="store_true", help="every strategy on both models")
    p.add_argument("--backend", choices=["numpy", "cuda"], default=None)
    args = p.parse_args(argv)
    if args.backend:
        paddle.set_backend(args.backend)
    import refimpl.distributed as dist
    if under_mpi():
        dist.init_parallel_env()
    opts = {k: getattr(args, k) for k in ("recompute", "amp", "lamb", "lars", "dgc", "localsgd", "adaptive_localsgd",
                                          "fp16_allreduce", "gradient_merge", "tp", "sharding", "dp", "pp")}
    parallel = {k: opts.pop(k) for k in ("tp", "sharding", "dp", "pp") if opts[k] is not None}
    if args.ranks is None:
        args.ranks = int(np.prod(list(parallel.values()) or [1]))
    check_degrees(args, opts, parallel, dist.get_world_size() if inside_ranks() else args.ranks)  # bad: stop here
    opts.update(parallel)
    runs = [(m, o) for m in sorted(MODELS) for o in ALL] if args.compare_all else [(args.model, opts)]
    for model, o in runs:
        compare(model, o, args.ranks, args.steps, out)
    return 0


def check_degrees(args, opts, parallel, nranks):
    """InvalidArgument for degrees the ranks or GPT-mini's sizes cannot take."""
    if parallel and args.compare_all:
        raise InvalidArgument(f"--compare-all runs the data-parallel strategies only; drop {sorted(parallel)}")
    layout(dict(opts, **parallel), nranks)
    if degree(parallel, "tp") > 1:
        if args.model != "gpt":
            raise InvalidArgument(f"--tp {parallel['tp']}: only --model gpt has a tensor-parallel layout")
        gpt_parallel.check_sizes(GPT["vocab"], GPT["dim"], GPT["heads"], degree(parallel, "tp"))
    if degree(parallel, "pp") > 1:
        if args.model != "gpt":
            raise InvalidArgument(f"--pp {parallel['pp']}: only --model gpt has a pipeline-stage layout")
        gpt_parallel.check_stages(degree(parallel, "pp"), GPT["layers"])


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InvalidArgument as exc:   # a bad option value: reported as argparse reports one
        print(f"{os.path.basename(sys.argv[0])}: error: {exc}", file=sys.stderr)
        sys.exit(2)
