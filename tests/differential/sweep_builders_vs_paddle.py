"""Sweep the oracle model builders over random configs against real PaddlePaddle (optional).

Every builder of ``oracle/models.py`` and ``tests/oracle_extra/extra_models.py``
is run with random configs (every config key the builder reads, batch 1..8,
steps 1..6). Paddle 3.3.1 (legacy IR) records the case in the oracle's format
(``record_from_paddle.py``, which also writes ``tests/oracle_extra/NN_*.json``), and
refimpl is checked the way the recorded-case tests check it:
``tests/test_oracle_programs.py`` (same main/startup programs, eager-deletion plans
with and without skip vars, the executor frees exactly the plan, no-need-buffer
slots, losses and final persistables from Paddle's initial values within rtol
1e-5) and ``tests/test_pass_utils.py`` (split_program, required vars, skip-GC
vars per schedule with and without an optimizer job, the memory estimator),
the latter computed by Paddle with ``tests/oracle_split/generate.py``.

    FLAGS_enable_pir_api=0 PYTHONPATH=. /tmp/pvenv/bin/python tests/differential/sweep_builders_vs_paddle.py \
        --per-builder 10 --seed 0            # optionally --only CASE[,CASE]
    ... sweep_builders_vs_paddle.py --record NN   # = record_from_paddle.py NN: write EXTRA entry NN

A config whose only differences are numbers is reported as ill-conditioned, not as a
failure, when Paddle itself leaves rtol 1e-5 once its feeds and initial values move by
one ulp (then the last bits of BLAS sums decide the result). The file name has no
``test_`` prefix, so pytest does not collect it.
"""
import argparse
import random
import sys

# record_from_paddle (beside this file) puts the project on sys.path and selects the legacy IR
from record_from_paddle import build, paddle_split, record, record_extra, sources  # noqa: E402

import numpy as np  # noqa: E402

SIZE_KEYS = {"din", "hid", "dout", "h1", "h2", "dim", "seq", "a", "b", "c", "part"}


# ---------------------------------------------------------------- configs
class _Reads(dict):
    """A config that remembers which keys the builder read (``cfg[k]`` or ``cfg.get(k)``)."""

    def __init__(self, *a):
        super().__init__(*a)
        self.read = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self.read.add(k)
        return super().get(k, default)


def _size(rng):
    """1 and 2 often, small sizes mostly, now and then one past the 8-wide SIMD blocks."""
    return rng.choice([1, 2, rng.randint(1, 9), rng.randint(1, 9), rng.randint(10, 40)])


DRAW = {
    "classes": lambda r: r.choice([1, 2, r.randint(3, 12)]), "n": lambda r: r.randint(1, 6),
    "vocab": lambda r: r.choice([1, 2, r.randint(3, 30)]), "k": lambda r: r.randint(1, 4),
    "avg": lambda r: r.random() < 0.5, "staircase": lambda r: r.random() < 0.5,
    "lr": lambda r: r.choice([0.1, 1e-3, 0.5, round(r.uniform(0.001, 1.0), 4)]),
    "beta1": lambda r: round(r.uniform(0.0, 0.99), 3), "wd": lambda r: r.choice([0.0, round(r.uniform(0, 0.5), 3)]),
    "p": lambda r: r.choice([0.0, 1e-9, 1e-7]), "p_infer": lambda r: r.choice([0.0, round(r.uniform(0, 0.9), 3)]),
    "step_size": lambda r: r.randint(1, 4), "gamma": lambda r: round(r.uniform(0.1, 0.99), 3),
    "decay_steps": lambda r: r.randint(1, 5), "decay_rate": lambda r: round(r.uniform(0.1, 0.99), 3),
}


def draw_config(rng, keys, base):
    cfg = dict(base)
    for k in sorted(keys):
        if k in SIZE_KEYS:
            cfg[k] = _size(rng)
        elif k in DRAW:
            cfg[k] = DRAW[k](rng)
        else:
            raise KeyError(f"no generator for config key {k!r}: add one to DRAW")
    return cfg


# ---------------------------------------------------------------- checking refimpl
def check(rmodels, d, split_rec):
    """Differences between refimpl and the recorded case ``d`` (empty list if none)."""
    import refimpl as rp
    from oracle import diff_programs
    from refimpl.executor import Trace, eager_deletion_vars
    from refimpl.framework import Program
    from refimpl.ops import get_op_def
    from test_oracle_programs import _run_recorded
    problems = []

    def guard(what, fn):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - every failure is a difference to report
            problems.append(f"{what}: {type(exc).__name__}: {str(exc)[:600]}")

    def programs():
        main, startup, loss, _ = build(rp, rmodels, d["case"], d["config"])
        if loss.name != d["loss_name"]:
            problems.append(f"loss name {loss.name} != {d['loss_name']}")
        problems.extend("main: " + s for s in diff_programs(main.to_dict(), d["main"])[:8])
        problems.extend("startup: " + s for s in diff_programs(startup.to_dict(), d["startup"])[:8])
        if split_rec["num_blocks"] == 1:
            from refimpl.distributed.passes import pass_utils as pu
            _, ins, outs = pu.split_program(main, split_rec["split"]["op_indices"])
            if (ins, outs) != (split_rec["split"]["input_vars"], split_rec["split"]["output_vars"]):
                problems.append("split of the refimpl-built main: input/output vars differ")
    guard("build", programs)

    def plans():
        prog = Program.from_dict(d["main"])
        for skip, key in (([d["loss_name"]], "eager_deletion_vars"), ([], "eager_deletion_vars_no_skip")):
            got = eager_deletion_vars(prog, skip)
            if got != d[key]:
                bad = [(b, i, g, w) for b, (gb, wb) in enumerate(zip(got, d[key]))
                       for i, (g, w) in enumerate(zip(gb, wb)) if g != w]
                problems.append(f"{key}: (block, op, got, want) {bad[:4]}")
        for op_type, slots in d["no_need_buffer_slots"].items():
            if sorted(get_op_def(op_type).no_need_buffer) != sorted(slots):
                problems.append(f"no_need_buffer {op_type}: {sorted(get_op_def(op_type).no_need_buffer)} != {slots}")
    guard("plans", plans)

    def numbers():
        _, scope, losses, _ = _run_recorded(d)
        final = {n: np.array(scope.find_var(n).get_tensor()) for n in d["final_persistables"] if scope.find_var(n)}
        problems.extend(number_problems(d, losses, final))
    guard("numbers", numbers)

    def frees():
        trace = Trace()
        _run_recorded(d, trace=trace)
        for b, block_plan in enumerate(d["eager_deletion_vars"]):
            ran = {e.op for e in trace.of_kind("op") if e.block == b}
            want = {i: n for i, n in enumerate(block_plan) if n and i in ran}
            if trace.frees_by_op(block=b) != want:
                problems.append(f"executor frees of block {b} differ from the plan")
    guard("frees", frees)
    guard("pass_utils", lambda: problems.extend(check_split(d, split_rec)))
    return problems


def number_problems(d, losses, final):
    """How a run's losses and final persistables (name -> array) differ from ``d``'s (rtol 1e-5, atol 1e-6)."""
    out = []
    for step, (got, want) in enumerate(zip(losses, d["fetched_loss"])):
        w = np.array(want["data"], want["dtype"]).reshape(want["shape"])
        if not np.allclose(got, w, rtol=1e-5, atol=1e-6):
            out.append(f"numbers: loss step {step}: {np.asarray(got).tolist()} != {w.tolist()}")
    for name, e in d["final_persistables"].items():
        w, got = np.array(e["data"], e["dtype"]).reshape(e["shape"]), final.get(name)
        if got is None or got.shape != w.shape or not np.allclose(got, w, rtol=1e-5, atol=1e-6):
            out.append(f"numbers: final {name} differs")
    return out


def paddle_moves_by_itself(pmain, d):
    """Whether Paddle, rerun with its float feeds and/or initial persistables one ulp up or down, leaves
    rtol 1e-5 of its own recording: then rounding differences decide the result and refimpl can't be told apart."""
    import paddle

    def arrays(entries, toward):
        out = {k: np.array(e["data"], e["dtype"]).reshape(e["shape"]) for k, e in entries.items()}
        if toward is None:
            return out
        return {k: np.nextafter(v, toward).astype(v.dtype) if v.dtype.kind == "f" else v for k, v in out.items()}

    for feeds_to, init_to in ((np.inf, np.inf), (-np.inf, -np.inf), (None, np.inf), (np.inf, None)):
        scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
        for name, value in arrays(d["initial_persistables"], init_to).items():
            scope.var(name).get_tensor().set(value, paddle.CPUPlace())
        losses, sched = [], getattr(pmain, "lr_scheduler", None)
        if sched is not None:
            sched.step(0)  # back to the first step's learning rate
        for feed in d["feeds"]:
            losses.append(exe.run(pmain, feed=arrays(feed, feeds_to), fetch_list=[d["loss_name"]], scope=scope)[0])
            if sched is not None:
                sched.step()
        final = {n: np.array(scope.find_var(n).get_tensor()) for n in d["final_persistables"] if scope.find_var(n)}
        if number_problems(d, losses, final):
            return True
    return False


def check_split(d, rec):
    import refimpl as rp
    from refimpl.distributed.passes import pass_utils as pu
    from refimpl.framework import Program
    from test_pass_utils import TYPES, _normalised, _same_lists, _skip_gc_result
    problems = []
    rp.set_flags({"FLAGS_enable_pir_api": False})
    try:
        sp = rec["split"]
        parts, ins, outs = pu.split_program(Program.from_dict(d["main"]), sp["op_indices"])
        if [[op.type for op in p.global_block().ops] for p in parts] != sp["sub_program_ops"]:
            problems.append("split: sub-program op types differ")
        ordered = rec["num_blocks"] == 1
        if not (_same_lists(ins, sp["input_vars"], ordered) and _same_lists(outs, sp["output_vars"], ordered)):
            problems.append("split: input/output vars differ")
        got = [sorted(pu._get_required_vars_of_program(p)) for p in parts]
        if got != sp["required_vars"]:
            problems.append(f"required_vars: {got} != {sp['required_vars']}")
        for key, with_opt in (("skip_gc", True), ("skip_gc_no_optimizer", False)):
            for sched, want in rec[key].items():
                got = _skip_gc_result(parts, sched, with_opt)
                if got != _normalised(want):
                    problems.append(f"{key} {sched}: {got} != {want}")
        by_type = dict(zip(TYPES, parts))
        for mem in rec.get("memory", []):
            est, types = pu.PipelineMemoryEstimator(), mem["program_types"]
            try:
                est.set_program_skip_gc_vars({t: by_type[t] for t in types}, types)
            except pu.SkipGCVarsError:
                if "error" not in mem:
                    problems.append(f"memory {types}: refimpl refused, Paddle did not")
                continue
            if "error" in mem:
                problems.append(f"memory {types}: Paddle refused, refimpl did not")
                continue
            got = [[t, *est.estimate_memory(by_type[t], t)] for t in types]
            if got != mem["estimates"] or est.type_to_skip_gc_vars != mem["skip_gc_var_sizes"]:
                problems.append(f"memory {types}: {got} != {mem['estimates']}")
    finally:
        rp.set_flags({"FLAGS_enable_pir_api": True})
    return problems


# ---------------------------------------------------------------- driver
def sweep(per_builder, seed, only=None):
    import refimpl as rp
    old = rp.get_flags(["FLAGS_enable_pir_api", "FLAGS_eager_delete_tensor_gb"])
    rng, failures, total, refused, ill = random.Random(seed), [], 0, 0, 0
    for tag, pmodels, rmodels, listname in sources():
        base = {e[0]: e[1] for e in getattr(pmodels, listname)}
        for case in pmodels.MODELS:
            if only and case not in only:
                continue
            reads = _Reads(base[case])
            build(rp, rmodels, case, reads)
            for _ in range(per_builder):
                cfg = draw_config(rng, reads.read, base[case])
                batch, steps = rng.randint(1, 8), rng.randint(1, 6)
                rec_seed = seed * 1000 + total
                try:
                    d, pmain = record(pmodels, case, cfg, batch, steps, rec_seed)
                except Exception as exc:  # noqa: BLE001 - no recorded case can hold such a config
                    refused += 1
                    print(f"skip {tag}/{case} {cfg}: Paddle refuses it ({type(exc).__name__}: {str(exc)[:80]})")
                    continue
                problems = check(rmodels, d, paddle_split(pmain))
                rp.set_flags(old)
                total += 1
                where = f"{tag}/{case} {cfg} batch={batch} steps={steps} seed={rec_seed}"
                if problems and all(p.startswith("numbers: ") for p in problems) and paddle_moves_by_itself(pmain, d):
                    ill += 1
                    print(f"ill-conditioned {where}: {problems[0]}")
                elif problems:
                    failures.append(where)
                    print(f"FAIL {where}:\n  " + "\n  ".join(problems[:12]))
            print(f"{tag}/{case}: {per_builder} configs", flush=True)
    print(f"{total - len(failures) - ill} of {total} configs agree with Paddle, {len(failures)} differ, {ill} are too "
          f"ill-conditioned to tell (Paddle moves by itself); {refused} that Paddle refuses to build skipped")
    return 1 if failures else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-builder", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated builder names")
    ap.add_argument("--record", type=int, default=None, help="record EXTRA entry NN instead of sweeping")
    args = ap.parse_args(argv)
    try:
        import paddle  # noqa: F401
    except ImportError:
        print("paddlepaddle is not installed: pip install paddlepaddle==3.3.1 (this check is optional)")
        return 0
    if args.record is not None:
        record_extra(args.record)
        return 0
    return sweep(args.per_builder, args.seed, set(filter(None, args.only.split(","))))


if __name__ == "__main__":
    sys.exit(main())
