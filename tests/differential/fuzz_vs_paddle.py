"""Differential fuzzing against real PaddlePaddle (optional; not part of the default test run).

Builds random programs with the same builder bound once to refimpl and once to
Paddle 3.3.1 (legacy IR), and checks that refimpl gives the same main and
startup programs, the same eager-deletion plans, and — started from Paddle's
initial values on the same feeds — the same losses and parameters (rtol 1e-5).

    tox -e fuzz-paddle
    python tests/differential/fuzz_vs_paddle.py --cases 30 --seed 0     # with paddlepaddle installed

``sweep_builders_vs_paddle.py`` runs the oracle's model builders over random configs.
The file name has no ``test_`` prefix, so pytest does not collect it.
"""
import argparse
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("FLAGS_enable_pir_api", "0")

import numpy as np  # noqa: E402

ACTS = [None, "relu", "tanh", "sigmoid", "gelu"]
OPTS = ["SGD", "Momentum", "Adam", "AdamW"]


def random_case(rng):
    """A model description: layers (width, activation), skip links, loss kind, optimizer."""
    n = rng.randint(1, 4)
    return {"din": rng.randint(2, 6), "layers": [(rng.randint(2, 7), rng.choice(ACTS)) for _ in range(n)],
            "skip": rng.random() < 0.5, "square": rng.random() < 0.5, "scale": rng.choice([None, 0.5, 2.0]),
            "opt": rng.choice(OPTS), "batch": rng.randint(1, 5)}


def build(paddle, case):
    """The model, with only legacy static-graph API calls both frameworks support."""
    x = paddle.static.data("x", [None, case["din"]], "float32")
    h, first = x, None
    for width, act in case["layers"]:
        h = paddle.static.nn.fc(h, width, activation=act)
        first = h if first is None else first
        if case["skip"] and h is not first and list(h.shape) == list(first.shape):
            h = h + first
    if case["square"]:
        h = paddle.square(h)
    loss = paddle.mean(h)
    if case["scale"]:
        loss = loss * case["scale"]
    opt = getattr(paddle.optimizer, case["opt"])(learning_rate=0.05)
    opt.minimize(loss)
    return loss


def build_in(paddle, case):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            loss = build(paddle, case)
    return main, startup, loss


def paddle_program_dict(program):
    """Paddle's legacy Program in refimpl's program/v1 format."""
    from paddle.base import core, framework
    blocks = []
    for b in program.blocks:
        vars_ = []
        for name in sorted(b.vars):
            v = b.vars[name]
            d = {"name": name, "type": str(v.type).split(".")[-1].replace("LOD_TENSOR", "DENSE_TENSOR"),
                 "persistable": bool(v.persistable), "stop_gradient": bool(v.stop_gradient),
                 "is_parameter": isinstance(v, framework.Parameter), "is_data": bool(v.is_data)}
            if d["type"] == "DENSE_TENSOR":
                d["shape"] = [int(s) for s in v.shape]
                d["dtype"] = str(v.dtype).replace("paddle.", "")
            vars_.append(d)
        ops = []
        for op in b.ops:
            attrs = {}
            for k in op.attr_names:
                if k in ("op_callstack", "with_quant_attr"):
                    continue
                kind = op.desc.attr_type(k)
                attrs[k] = ({"block": op._block_attr_id(k)} if kind == core.AttrType.BLOCK else
                            {"blocks": list(op._blocks_attr_ids(k))} if kind == core.AttrType.BLOCKS else op.attr(k))
            ops.append({"type": op.type, "inputs": {s: op.input(s) for s in op.input_names},
                        "outputs": {s: op.output(s) for s in op.output_names}, "attrs": attrs})
        blocks.append({"idx": b.idx, "parent_idx": b.parent_idx, "vars": vars_, "ops": ops})
    return {"format": "program/v1", "blocks": blocks}


def check(case, seed):
    import paddle
    import refimpl
    from oracle import diff_programs
    paddle.enable_static()
    pmain, pstart, ploss = build_in(paddle, case)
    rmain, rstart, rloss = build_in(refimpl, case)
    problems = diff_programs(rmain.to_dict(), paddle_program_dict(pmain))
    problems += diff_programs(rstart.to_dict(), paddle_program_dict(pstart))
    plan = paddle.base.core._get_eager_deletion_vars(pmain.desc, [ploss.name])
    if refimpl.executor.eager_deletion_vars(rmain, [rloss.name]) != plan:
        problems.append("eager-deletion plans differ")
    # numbers: refimpl starts from Paddle's initial values
    paddle.seed(seed)
    pscope = paddle.static.Scope()
    pexe = paddle.static.Executor(paddle.CPUPlace())
    pexe.run(pstart, scope=pscope)
    rscope = refimpl.static.Scope()
    for v in pmain.list_vars():
        if v.persistable and pscope.find_var(v.name) is not None:
            rscope.var(v.name).get_tensor().set(np.array(pscope.find_var(v.name).get_tensor()))
    rexe = refimpl.static.Executor()
    rng = np.random.default_rng(seed)
    for _ in range(2):
        x = rng.standard_normal((case["batch"], case["din"])).astype("float32")
        (pl,) = pexe.run(pmain, feed={"x": x}, fetch_list=[ploss], scope=pscope)
        (rl,) = rexe.run(rmain, feed={"x": x}, fetch_list=[rloss.name], scope=rscope)
        if not np.allclose(rl, pl, rtol=1e-5, atol=1e-6):
            problems.append(f"loss {float(rl)} != Paddle's {float(pl)}")
    for p in pmain.all_parameters():
        if not np.allclose(np.array(rscope.find_var(p.name).get_tensor()),
                           np.array(pscope.find_var(p.name).get_tensor()), rtol=1e-5, atol=1e-6):
            problems.append(f"parameter {p.name} differs after two steps")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        import paddle  # noqa: F401
    except ImportError:
        print("paddlepaddle is not installed: pip install paddlepaddle==3.3.1 (this check is optional)")
        return 0
    rng, failures = random.Random(args.seed), 0
    for i in range(args.cases):
        case = random_case(rng)
        problems = check(case, args.seed + i)
        if problems:
            failures += 1
            print(f"case {i} {case}:\n  " + "\n  ".join(problems[:10]))
    print(f"{args.cases - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
