"""Record oracle cases from real PaddlePaddle 3.3.1 (legacy IR), as ``oracle/programs`` holds them.

``record`` builds a model builder of ``oracle/models.py`` or
``tests/oracle_extra/extra_models.py`` with Paddle and returns the case in the
oracle's format (main/startup programs, eager-deletion plans with and without
skip vars, no-need-buffer slots, initial/final persistables, feeds, fetched
losses, ``lr_per_step`` for an LRScheduler); ``paddle_split`` adds Paddle's
split / skip-GC / memory-estimator facts as ``tests/oracle_split/generate.py``
records them. Writes ``tests/oracle_extra/NN_<case>.json`` for EXTRA entry NN:

    FLAGS_enable_pir_api=0 PYTHONPATH=. /tmp/pvenv/bin/python tests/differential/record_from_paddle.py NN

Feeds: float feeds standard normal, int feeds uniform in [0, n) (the builders'
feed_spec), drawn with ``numpy.random.default_rng(seed)``; ``paddle.seed(seed)``
for the initial values (seed NN for EXTRA entry NN). Needs paddlepaddle; the
file name has no ``test_`` prefix, so pytest does not collect it.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "oracle_split"), HERE):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ["FLAGS_enable_pir_api"] = "0"

import numpy as np  # noqa: E402

from fuzz_vs_paddle import paddle_program_dict  # noqa: E402


# ---------------------------------------------------------------- sources
def sources():
    """[(tag, models module for Paddle, models module for refimpl, recorded entries)]."""
    from generate import load_module as _module
    from oracle import oracle_file
    pub, ext = oracle_file("models.py"), os.path.join(ROOT, "tests", "oracle_extra", "extra_models.py")
    return [("public", _module(pub, "p_pub"), _module(pub, "r_pub"), "PUBLIC"),
            ("extra", _module(ext, "p_ext"), _module(ext, "r_ext"), "EXTRA")]


def build(fw, models, case, cfg):
    models.bind(fw, fw.nn.functional)
    main, startup = fw.static.Program(), fw.static.Program()
    with fw.static.program_guard(main, startup):
        with fw.utils.unique_name.guard():
            loss, feed_spec = models.MODELS[case](cfg)
    return main, startup, loss, feed_spec


# ---------------------------------------------------------------- recording with Paddle
def _enc(a):
    a = np.asarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.reshape(-1).tolist()}


def _no_need_buffer_slots(program):
    from paddle.base import core
    out = {}
    for block in program.blocks:
        for op in block.ops:
            slots = core.infer_no_need_buffer_slots(
                op.type, {s: op.input(s) for s in op.input_names}, {s: op.output(s) for s in op.output_names},
                {a: op.attr(a) for a in op.attr_names})
            out.setdefault(op.type, sorted(slots))
    return dict(sorted(out.items()))


def record(models, case, cfg, batch, steps, seed):
    """The case in the oracle's format, recorded from Paddle; also Paddle's main program."""
    import paddle
    paddle.enable_static()
    paddle.seed(seed)
    main, startup, loss, feed_spec = build(paddle, models, case, cfg)
    core = paddle.base.core
    d = {"case": case, "config": cfg, "batch": batch, "steps": steps, "loss_name": loss.name,
         "main": paddle_program_dict(main), "startup": paddle_program_dict(startup),
         "eager_deletion_vars": core._get_eager_deletion_vars(main.desc, [loss.name]),
         "eager_deletion_vars_no_skip": core._get_eager_deletion_vars(main.desc, []),
         "no_need_buffer_slots": _no_need_buffer_slots(main)}
    scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup, scope=scope)
    names = sorted({v.name for p in (startup, main) for v in p.list_vars()
                    if v.persistable and str(v.type).endswith(("LOD_TENSOR", "DENSE_TENSOR"))})

    def persistables():
        out = {}
        for n in names:
            var = scope.find_var(n)
            if var is not None and var.get_tensor()._is_initialized():
                out[n] = _enc(np.array(var.get_tensor()))
        return out

    d["initial_persistables"] = persistables()
    rng = np.random.default_rng(seed)
    sched = getattr(main, "lr_scheduler", None)
    d["feeds"], d["fetched_loss"], lrs = [], [], []
    for _ in range(steps):
        feed = {}
        for name, spec in feed_spec.items():
            shape = [batch] + list(spec[1])
            feed[name] = (rng.integers(0, spec[2], shape).astype(spec[0]) if len(spec) > 2
                          else rng.standard_normal(shape).astype(spec[0]))
        if sched is not None:
            lrs.append(float(sched()))
        out, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        if sched is not None:
            sched.step()
        d["feeds"].append({k: _enc(v) for k, v in feed.items()})
        d["fetched_loss"].append(_enc(out))
    d["final_persistables"] = persistables()
    if sched is not None:
        d["lr_per_step"] = lrs
    return d, main


def paddle_split(main):
    """Paddle's split / skip-GC / memory facts, as ``tests/oracle_split/generate.py`` records them."""
    import generate
    return generate.record(main, "sweep")


def record_extra(nn):
    """Record EXTRA entry ``nn`` of extra_models.py into tests/oracle_extra/NN_<case>.json."""
    pmodels = sources()[1][1]
    case, cfg, batch, steps = pmodels.EXTRA[nn]
    d, _ = record(pmodels, case, cfg, batch, steps, seed=nn)
    path = os.path.join(ROOT, "tests", "oracle_extra", f"{nn:02d}_{case}.json")
    with open(path, "w") as f:
        json.dump(d, f, sort_keys=True)
    print("wrote", path)


if __name__ == "__main__":
    record_extra(int(sys.argv[1]))
