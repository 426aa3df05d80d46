"""Record Paddle 3.3.1's pass_utils results for the oracle models (run with real Paddle).

    FLAGS_enable_pir_api=0 /tmp/pvenv/bin/python tests/oracle_split/generate.py

For every builder of the repository's ``oracle/models.py`` (PUBLIC) and
``tests/oracle_extra/extra_models.py`` (EXTRA) it builds the legacy-IR
program as the oracle does and writes ``<source>_<NN>_<case>.json`` here
(see README.md for the keys). Paddle is needed only to regenerate.
"""
import ast
import importlib.util
import json
import os
import sys

os.environ["FLAGS_enable_pir_api"] = "0"
import paddle  # noqa: E402
from paddle.distributed.passes import pass_utils  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ORACLE = os.environ.get("REFIMPL_ORACLE", os.path.join(ROOT, "oracle"))  # see oracle/SYNC.md
TYPES = ["forward", "backward", "optimizer"]


class Job:
    """Duck-typed core.Job that also reports the skip vars Paddle set."""

    def __init__(self, type, mb):
        self._type, self._mb, self.skip = type, mb, None

    def type(self):
        return self._type

    def micro_batch_id(self):
        return self._mb

    def set_skip_gc_vars(self, names):
        self.skip = sorted(names)


def job_order(schedule, m, with_opt=True):
    """Single-stage job orders: FThenB = F0..F(m-1) B0..B(m-1); 1F1B = F0 B0 F1 B1 ..."""
    if schedule == "FThenB":
        jobs = [("forward", i) for i in range(m)] + [("backward", i) for i in range(m)]
    else:
        jobs = [(t, i) for i in range(m) for t in ("forward", "backward")]
    return jobs + ([("optimizer", 0)] if with_opt else [])


def skip_gc(parts, schedule, m, with_opt):
    order = job_order(schedule, m, with_opt)
    jobs = [Job(t, i) for t, i in order]
    types, progs = (TYPES, parts) if with_opt else (TYPES[:2], parts[:2])
    try:
        pass_utils._set_skip_gc_vars_in_old_ir(m, types, progs, jobs)
    except AssertionError as exc:
        msg = str(exc)
        found = ast.literal_eval(msg[msg.index("but it is ") + len("but it is "):].rstrip("."))
        return {"error": "AssertionError", "skip_gc_vars_of_backward": sorted(found)}
    return {"jobs": [[j.type(), j.micro_batch_id(), j.skip] for j in jobs]}


class _DistOp:
    def __init__(self, op):
        self.op = op

    def get_serial_input(self, name):
        return self.op.block._var_recursive(name)

    get_serial_output = get_serial_input


class _DistContext:
    """Stands in for a DistributedContext: every op's serial vars are its block's vars."""

    def get_dist_op_for_program(self, op):
        return _DistOp(op)


def memory(parts, program_types):
    est = pass_utils.PipelineMemoryEstimator()
    type_to_program = dict(zip(TYPES, parts))
    try:
        est.set_program_skip_gc_vars({t: type_to_program[t] for t in program_types}, program_types)
    except AssertionError:
        return {"program_types": program_types, "error": "AssertionError"}
    out = {"program_types": program_types, "estimates": []}
    for t in program_types:
        mem_usage, max_memory = est.estimate_memory(type_to_program[t], t, _DistContext())
        out["estimates"].append([t, mem_usage, max_memory])
    out["skip_gc_var_sizes"] = {t: dict(sorted(v.items())) for t, v in est.type_to_skip_gc_vars.items()}
    return out


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(models, case, cfg):
    models.bind(paddle, paddle.nn.functional)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            models.MODELS[case](cfg)
    return main


def optimizer_start(roles):
    """The first optimize op; with none in the global block (gradient merge runs the optimizer
    in a conditional block), the op after the last backward op."""
    first = next((i for i, r in enumerate(roles) if r & 2), None)
    if first is not None:
        return first
    return max(i for i, r in enumerate(roles) if r & 1) + 1


def record(main, source_file):
    ops = main.global_block().ops
    roles = [int(op.attr("op_role")) for op in ops]
    indices = [next(i for i, r in enumerate(roles) if r & 1), optimizer_start(roles)]
    parts, ins, outs = pass_utils.split_program(main, indices)
    out = {"source": source_file, "num_blocks": main.num_blocks, "op_types": [op.type for op in ops],
           "split": {"op_indices": indices,
                     "sub_program_ops": [[op.type for op in p.global_block().ops] for p in parts],
                     "input_vars": ins, "output_vars": outs,
                     "required_vars": [sorted(pass_utils._get_required_vars_of_program(p)) for p in parts]}}
    for key, with_opt in (("skip_gc", True), ("skip_gc_no_optimizer", False)):
        out[key] = {f"{s}_m{m}": skip_gc(parts, s, m, with_opt) for s in ("FThenB", "1F1B") for m in (1, 2, 4)}
    if main.num_blocks == 1:
        out["memory"] = [memory(parts, ["forward", "backward"]), memory(parts, TYPES)]
    return out


def main():
    paddle.enable_static()
    sources = [("oracle", load_module(os.path.join(ORACLE, "models.py"), "m_pub"), "PUBLIC",
                lambda nn, case: os.path.join(ORACLE, "programs", f"{nn:02d}_{case}.json")),
               ("oracle_extra", load_module(os.path.join(ROOT, "tests", "oracle_extra", "extra_models.py"), "m_ext"),
                "EXTRA", lambda nn, case: os.path.join(ROOT, "tests", "oracle_extra", f"{nn:02d}_{case}.json"))]
    for tag, models, listname, path_of in sources:
        for nn, entry in enumerate(getattr(models, listname)):
            case, cfg = entry[0], entry[1]
            src = path_of(nn, case)
            prog = build(models, case, cfg)
            with open(src) as f:
                stored = json.load(f)["main"]["blocks"][0]["ops"]
            if [o["type"] for o in stored] != [op.type for op in prog.global_block().ops]:
                sys.exit(f"{src}: the rebuilt program differs from the stored one")
            data = record(prog, f"{tag}/{os.path.basename(src)}")
            name = f"{'public' if tag == 'oracle' else 'extra'}_{nn:02d}_{case}.json"
            with open(os.path.join(HERE, name), "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            print("wrote", name)


if __name__ == "__main__":
    main()
