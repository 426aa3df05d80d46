"""AMP cases: small models decorated by ``paddle.static.amp``, run against Paddle 3.3.1 and refimpl.

Each case builds an MLP (``static.nn.fc`` + relu, ``mean(square(y))``) in the current programs
and wraps its optimizer with ``paddle.static.amp.decorate`` or ``paddle.static.amp.bf16.decorate_bf16``.
``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python tests/oracle_amp/amp_models.py`` rebuilds every
case with Paddle 3.3.1 (CPU wheel) and writes ``programs.json`` next to this file: the main and
startup ops (type, slots, every attr but the call stack / name scope / device / quant flag),
block 0's vars (name, shape, dtype, persistable, stop_gradient) and, for the cases with
``steps``, the loss, ``loss_scaling_0`` / ``num_good_steps_0`` / ``num_bad_steps_0`` and the
parameters after each step, from fixed initial parameters and feeds (``feeds(case)``), with an
``inf`` fed where the case says so.

``gpu`` cases: Paddle's CPU wheel has no GPU kernel, so its float16 decorator counts every op as
unsupported and inserts no cast (see ``refimpl/static/amp/fp16_lists.py``). For these cases the
recorder replaces ``fp16_lists._get_sys_unsupported_list`` by "no op is unsupported" — the
program Paddle builds where every op has a float16 GPU kernel, as on its GPU wheel for these
ops — and the test does the same to refimpl; their numbers are not recorded (Paddle's CPU kernels
cannot run them). ``amp_init`` cases record the parameter dtypes and values in the scope after
``amp_init`` (that part is NumPy in Paddle and runs on the CPU).

``CASES_262`` are the cases Paddle 3.3.1's legacy IR cannot build (it ORs overflow flags with
``paddle.any``, which there takes only PIR values); ``/tmp/pd26/bin/python tests/oracle_amp/amp_models.py``
records them with Paddle 2.6.2 into ``programs_262.json``.
"""
import json
import os
import sys

import numpy as np

# case -> options
CASES = {
    # float16 O1 with custom lists, as on a GPU (keywords both signatures of decorate have: the common one)
    "fp16_o1_lists_gpu": dict(api="fp16", opt="momentum", gpu=True, white={"square"}, black={"relu"},
                              kw=dict(init_loss_scaling=128.0, use_dynamic_loss_scaling=True)),
    "fp16_o1_black_varnames_gpu": dict(api="fp16", opt="sgd", gpu=True, black_varnames={"fc_1.tmp_0"},
                                       kw=dict(init_loss_scaling=8.0, use_dynamic_loss_scaling=False)),
    "fp16_o1_adam_gpu": dict(api="fp16", opt="adam", gpu=True, kw=dict(init_loss_scaling=1024.0)),
    # a float third positional argument picks the fp16-only signature (its defaults: 1000, 2, 2.0, 0.8)
    "fp16_positional_gpu": dict(api="fp16", opt="sgd", gpu=True, args=(None, 32.0)),
    # float16 O2 (the fp16-only signature): pure fp16 with master weights (multi_precision), with and
    # without fp16_guard
    "fp16_o2_momentum_gpu": dict(api="fp16", opt="momentum_mp", gpu=True, amp_init=True,
                                 kw=dict(use_pure_fp16=True, use_fp16_guard=False, init_loss_scaling=64.0)),
    "fp16_o2_guard_sgd_gpu": dict(api="fp16", opt="sgd_mp", gpu=True, guard="fp16", amp_init=True,
                                  kw=dict(use_pure_fp16=True, use_fp16_guard=True)),
    # the common signature: level / dtype / master_weight
    "common_o2_adam_gpu": dict(api="common", opt="adam", gpu=True,
                               kw=dict(level="O2", dtype="float16", master_weight=True)),
    "common_od_gpu": dict(api="common", opt="sgd", gpu=True, kw=dict(level="OD")),
    # float16 on the CPU (no casts): loss scaling with an overflowing step (inf fed at step 2)
    "fp16_cpu_overflow_momentum": dict(api="fp16", opt="momentum", steps=5, inf_at=2,
                                       kw=dict(init_loss_scaling=16.0, incr_every_n_steps=2,
                                               decr_every_n_nan_or_inf=1, decr_ratio=0.5)),
    "fp16_cpu_overflow_adam": dict(api="common", opt="adam", steps=5, inf_at=1,
                                   kw=dict(init_loss_scaling=4.0, incr_every_n_steps=1, decr_every_n_nan_or_inf=2)),
    # dtype bfloat16 through the float16 machinery (casts keep the .cast_fp16 name; no loss scaling), promote
    "common_bf16_o1_gpu": dict(api="common", opt="momentum", gpu=True, kw=dict(dtype="bfloat16")),
    "common_o1_promote_gpu": dict(api="common", opt="sgd", gpu=True, white={"square"},
                                  kw=dict(use_promote=True, init_loss_scaling=2.0)),
    # float32 references (CPU: no casts) of two gpu cases, for their float16 runs on refimpl's CUDA backend
    "fp16_cpu_adam": dict(api="fp16", opt="adam", steps=3, kw=dict(init_loss_scaling=1024.0)),
    "fp16_cpu_o2_momentum": dict(api="fp16", opt="momentum_mp", steps=3,
                                 kw=dict(use_pure_fp16=True, use_fp16_guard=False, init_loss_scaling=64.0)),
    # amp_init(test_program=...): the test clone (taken before minimize) rewritten as the training program
    "fp16_o1_test_program_gpu": dict(api="fp16", opt="sgd", gpu=True, test_program=True),
    "bf16_o1_test_program": dict(api="bf16", opt="sgd", test_program=True),
    "fp16_cpu_o2_mixed_guard": dict(api="fp16", opt="momentum_mp", guard="fp16_tail", steps=3,
                                    kw=dict(use_pure_fp16=True, use_fp16_guard=True, init_loss_scaling=8.0)),
    # bfloat16
    "bf16_o1_lists": dict(api="bf16", opt="sgd", steps=3, bf16_lists=True),
    "bf16_o1_fp32_varnames": dict(api="bf16", opt="momentum", steps=2, fp32_varnames={"fc_1.tmp_1"}),
    "bf16_o1_guard_adam": dict(api="bf16", opt="adam", guard="bf16", steps=3, kw=dict(use_bf16_guard=True)),
    "bf16_pure_guard": dict(api="bf16", opt="momentum", guard="bf16", amp_init=True,
                            kw=dict(use_pure_bf16=True, use_bf16_guard=True)),
    "bf16_pure": dict(api="bf16", opt="sgd", amp_init=True, steps=3, kw=dict(use_pure_bf16=True, use_bf16_guard=False)),
}

# Paddle 2.6.2 (its legacy IR builds ``paddle.any``, which 3.3.1's cannot): programs_262.json, written by
# ``/tmp/pd26/bin/python tests/oracle_amp/amp_models.py``
CASES_262 = {
    # O2 with the first layer outside fp16_guard: float32 and float16 gradients, two flags ORed
    "fp16_o2_mixed_guard_gpu": dict(api="fp16", opt="momentum_mp", gpu=True, guard="fp16_tail", amp_init=True,
                                    kw=dict(use_pure_fp16=True, use_fp16_guard=True, init_loss_scaling=8.0)),
    # distributed: one check_finite_and_unscale per gradient
    "fp16_o1_distributed_gpu": dict(api="fp16", opt="sgd", gpu=True, distributed=True,
                                    kw=dict(init_loss_scaling=8.0)),
}
ALL_CASES = {**CASES, **CASES_262}


def _layers(paddle, x):
    h = paddle.static.nn.fc(x, 5, activation="relu")
    h = paddle.static.nn.fc(h, 6, activation="relu")
    return paddle.static.nn.fc(h, 3)


def _mlp(paddle, guard=None):
    """The MLP; with a guard, its layers inside it and the loss outside (so every parameter is in the guard:
    Paddle 3.3.1's legacy O2 cannot combine the overflow flags of float32 and float16 gradients, its
    ``paddle.any`` takes only PIR values)."""
    x = paddle.static.data("x", [None, 4], "float32")
    if guard == "fp16_tail":  # only the last two layers in the guard
        h = paddle.static.nn.fc(x, 5, activation="relu")
        with paddle.static.amp.fp16_guard():
            h = paddle.static.nn.fc(h, 6, activation="relu")
            y = paddle.static.nn.fc(h, 3)
        return paddle.mean(paddle.square(y))
    ctx = {"fp16": paddle.static.amp.fp16_guard, "bf16": paddle.static.amp.bf16.bf16_guard}.get(guard)
    if ctx is not None:
        with ctx():
            y = _layers(paddle, x)
    else:
        y = _layers(paddle, x)
    return paddle.mean(paddle.square(y))


def _optimizer(paddle, name):
    o = paddle.optimizer
    return {"sgd": lambda: o.SGD(learning_rate=0.1),
            "sgd_mp": lambda: o.SGD(learning_rate=0.1, multi_precision=True),
            "momentum": lambda: o.Momentum(learning_rate=0.05, momentum=0.9),
            "momentum_mp": lambda: o.Momentum(learning_rate=0.05, momentum=0.9, multi_precision=True),
            "adam": lambda: o.Adam(learning_rate=0.01)}[name]()


def build(paddle, case):
    """Build ``case`` into the current programs; returns (loss, decorated optimizer).

    A ``test_program`` case keeps ``main.clone(for_test=True)`` of the forward as ``dec.test_program``."""
    c = ALL_CASES[case]
    loss = _mlp(paddle, c.get("guard"))
    test_program = loss.block.program.clone(for_test=True) if c.get("test_program") else None
    opt = _optimizer(paddle, c["opt"])
    amp = paddle.static.amp
    kw = dict(c.get("kw", {}))
    if c["api"] == "bf16":
        if c.get("bf16_lists"):
            kw["amp_lists"] = amp.bf16.AutoMixedPrecisionListsBF16(custom_bf16_list={"elementwise_add"},
                                                                   custom_fp32_list={"relu"})
        if c.get("fp32_varnames"):
            kw["amp_lists"] = amp.bf16.AutoMixedPrecisionListsBF16(custom_fp32_varnames=c["fp32_varnames"])
        dec = amp.bf16.decorate_bf16(opt, **kw)
    else:
        if "white" in c or "black" in c or "black_varnames" in c:
            kw["amp_lists"] = amp.CustomOpLists(custom_white_list=c.get("white"), custom_black_list=c.get("black"),
                                                custom_black_varnames=c.get("black_varnames"))
        dec = amp.decorate(opt, *c.get("args", ()), **kw)
        if c.get("distributed"):
            dec._set_distributed(True)
    dec.minimize(loss)
    dec.test_program = test_program
    return loss, dec


def rewrite_test_program(case, dec):
    """``amp_init`` with the kept test clone (and low-precision testing asked for); returns the clone."""
    flag = "use_bf16_test" if ALL_CASES[case]["api"] == "bf16" else "use_fp16_test"
    dec.amp_init(None, test_program=dec.test_program, **{flag: True})
    return dec.test_program


def summary(prog):
    """Ops (type, inputs, outputs, attrs) of every block and block 0's vars."""
    skip = {"op_callstack", "op_namescope", "op_device", "with_quant_attr"}
    blocks = []
    for b in prog.blocks:
        ops = []
        for op in b.ops:
            attrs = {}
            for k in sorted(op.attr_names):
                if k in skip:
                    continue
                v = op.attr(k)
                attrs[k] = _plain(v)
            ops.append([op.type, {s: list(op.input(s)) for s in sorted(op.input_names)},
                        {s: list(op.output(s)) for s in sorted(op.output_names)}, attrs])
        blocks.append(ops)
    gvars = sorted([v.name, [int(d) for d in v.shape], str(v.dtype).replace("paddle.", ""), bool(v.persistable),
                    bool(v.stop_gradient)] for v in prog.global_block().vars.values()
                   if v.name not in ("feed", "fetch"))
    return {"blocks": blocks, "vars": gvars}


def _plain(v):
    if isinstance(v, (bool, int, str)) or v is None:
        return v
    if isinstance(v, float):
        return float(np.float32(v))
    if isinstance(v, (list, tuple)):
        return [_plain(e) for e in v]
    try:
        return int(v)  # VarType enums
    except (TypeError, ValueError):
        return str(v)


def feeds(case):
    """The feed of every step: x of [2, 4], standard normal from seed 7, inf at row 0 on ``inf_at``.

    The batch (2) differs from every layer width: with a batch equal to the output width (3), Paddle
    3.3.1's CPU bfloat16 ``elementwise_add_grad`` sums the bias gradient over the wrong axis (its
    rows instead of its columns), which no formula reproduces."""
    c = ALL_CASES[case]
    rng = np.random.default_rng(7)
    out = []
    for step in range(c.get("steps", 0)):
        x = rng.standard_normal((2, 4)).astype("float32")
        if step == c.get("inf_at"):
            x[0, 0] = np.inf
        out.append(x)
    return out


def initial_params(main):
    """Fixed initial values of every parameter: sin of a ramp, scaled by 0.5."""
    out = {}
    for p in sorted(main.global_block().all_parameters(), key=lambda v: v.name):
        n = int(np.prod(p.shape))
        out[p.name] = (0.5 * np.sin(np.arange(n, dtype=np.float64) + len(p.name))).astype("float32").reshape(p.shape)
    return out


def _record():
    import paddle
    import paddle.static.amp.fp16_lists as fl
    paddle.enable_static()
    real = fl._get_sys_unsupported_list
    out = {"paddle_version": paddle.__version__}
    v262 = paddle.__version__.startswith("2.6")
    for case, c in (CASES_262 if v262 else CASES).items():
        fl._get_sys_unsupported_list = (lambda dtype: ("GPU", set(), real(dtype)[2])) if c.get("gpu") else real
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            with paddle.utils.unique_name.guard():
                loss, dec = build(paddle, case)
        rec = {"main": summary(main), "startup": summary(startup)}
        if c.get("test_program"):
            rec["test_program"] = summary(rewrite_test_program(case, dec))
        if c.get("steps") or c.get("amp_init"):
            rec.update(_run(paddle, case, main, startup, loss, dec))
        out[case] = rec
    fl._get_sys_unsupported_list = real
    name = "programs_262.json" if v262 else "programs.json"
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name), "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)


def _run(paddle, case, main, startup, loss, dec, place=None):
    """Run ``startup``, set ``initial_params``, then ``amp_init`` (amp_init cases; float16 master weights
    rewritten from the converted parameters) and the steps; returns what the recorder keeps."""
    place = place if place is not None else paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    scope = paddle.static.Scope()
    rec = {}
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        for name, value in initial_params(main).items():
            scope.find_var(name).get_tensor().set(value, place)
        if ALL_CASES[case].get("amp_init"):
            extra = {} if ALL_CASES[case]["api"] == "bf16" else {"rewrite_master_weight": True}
            dec.amp_init(place, scope=scope, **extra)
            rec["after_amp_init"] = {p.name: _tensor(scope, p.name) for p in main.global_block().all_parameters()}
            if not ALL_CASES[case].get("steps"):
                return rec
        state = ("loss_scaling_0", "num_good_steps_0", "num_bad_steps_0")
        rec["steps"] = []
        # pure bf16: x is fed as its bit patterns (and a bfloat16 loss fetched as them)
        bf16_x = str(main.global_block().var("x").dtype).replace("paddle.", "") == "bfloat16"
        for x in feeds(case):
            x = paddle.static.amp.bf16.convert_float_to_uint16(x) if bf16_x else x
            lv, = exe.run(main, feed={"x": x}, fetch_list=[loss])
            lv = np.asarray(lv)
            if lv.dtype == np.uint16:
                lv = (lv.astype(np.uint32) << 16).view(np.float32)
            step = {"loss": float(np.asarray(lv, dtype=np.float32).reshape(-1)[0])}
            for name in state + tuple(sorted(p.name for p in main.global_block().all_parameters())):
                if scope.find_var(name) is not None:
                    step[name] = _tensor(scope, name)
            rec["steps"].append(step)
    return rec


def _tensor(scope, name):
    arr = np.array(scope.find_var(name).get_tensor())
    return {"dtype": str(arr.dtype), "data": [float(v) if arr.dtype.kind == "f" else int(v) for v in arr.reshape(-1)]}


if __name__ == "__main__":
    sys.exit(_record())
