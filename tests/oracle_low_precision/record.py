"""Record what Paddle 3.3.1 does with bfloat16 ops and the AMP loss-scaling ops (the data of
tests/test_low_precision.py).

Run with the Paddle oracle, in this folder (Paddle is never a dependency of refimpl or its tests):

    FLAGS_enable_pir_api=0 python record.py

Writes ``ops_bf16.json`` (single ops on random bfloat16 inputs, forward and backward),
``amp_steps.json`` (14 steps of check_finite_and_unscale + update_loss_scaling) and
``amp_cases.json`` (update_loss_scaling's edge cases). bfloat16 values are uint16 bit patterns,
as Paddle feeds and fetches them.
"""
import json

import numpy as np
import paddle

paddle.enable_static()


def bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even (the values here hold no NaN)."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def widened(b):
    return (np.asarray(b, np.uint32) << 16).view(np.float32)


MUL = {"x_num_col_dims": 1, "y_num_col_dims": 1}
MM = {"trans_x": False, "trans_y": False}
AX = {"axis": -1}
# name: (op type, {slot: shape, or a list of shapes for a duplicable slot}, output slots, attrs, backward?)
OPS = {
    "mul": ("mul", {"X": [8, 16], "Y": [16, 5]}, ["Out"], MUL, True),
    "mul_big": ("mul", {"X": [4, 300], "Y": [300, 3]}, ["Out"], MUL, True),
    "add": ("elementwise_add", {"X": [64, 6], "Y": [6]}, ["Out"], AX, True),
    "add4d": ("elementwise_add", {"X": [2, 2, 40, 3], "Y": [40, 3]}, ["Out"], AX, True),
    "add_same": ("elementwise_add", {"X": [4, 6], "Y": [4, 6]}, ["Out"], AX, True),
    "sub": ("elementwise_sub", {"X": [64, 6], "Y": [6]}, ["Out"], AX, True),
    "mulw": ("elementwise_mul", {"X": [64, 6], "Y": [6]}, ["Out"], AX, True),
    "relu": ("relu", {"X": [8, 6]}, ["Out"], {}, True),
    "gelu": ("gelu", {"X": [8, 6]}, ["Out"], {"approximate": False}, True),
    "softmax": ("softmax", {"X": [4, 40]}, ["Out"], AX, True),
    "matmul_v2": ("matmul_v2", {"X": [2, 8, 32], "Y": [2, 32, 5]}, ["Out"], MM, True),
    "matmul_v2_b": ("matmul_v2", {"X": [2, 8, 32], "Y": [32, 5]}, ["Out"], MM, True),
    "matmul_v2_t": ("matmul_v2", {"X": [2, 2, 4, 8], "Y": [2, 2, 4, 8]}, ["Out"], dict(MM, trans_y=True), True),
    "scale": ("scale", {"X": [8, 6]}, ["Out"], {"scale": 0.353553, "bias": 0.0, "bias_after_scale": True}, True),
    "sum": ("sum", {"X": [[8, 6], [8, 6], [8, 6], [8, 6]]}, ["Out"], {}, False),
    "transpose2": ("transpose2", {"X": [2, 3, 4]}, ["Out", "XShape"], {"axis": [0, 2, 1]}, True),
    "reshape2": ("reshape2", {"X": [2, 3, 4]}, ["Out", "XShape"], {"shape": [6, 4]}, True),
    "layer_norm": ("layer_norm", {"X": [4, 40], "Scale": [40], "Bias": [40]}, ["Y", "Mean", "Variance"],
                   {"epsilon": 1e-5, "begin_norm_axis": 1}, False),
    "reduce_mean": ("reduce_mean", {"X": [4, 40]}, ["Out"], {"dim": [1], "keep_dim": False, "reduce_all": False},
                    False),
    "reduce_sum": ("reduce_sum", {"X": [4, 300]}, ["Out"], {"dim": [1], "keep_dim": False, "reduce_all": False},
                   False),
}


def _append_loss(blk, out, shape, rng, feed, rec):
    """loss = sum(cast(out, float32) * g) with g fed (bf16-exact), so that Out@GRAD == g."""
    g = paddle.static.data("gout", list(shape), "float32")
    feed["gout"] = widened(bits(rng.standard_normal(shape).astype(np.float32)))
    rec["inputs"]["Out@GRAD"] = [{"shape": list(shape), "data": bits(feed["gout"]).reshape(-1).tolist()}]
    c = blk.create_var(name="cast_out", dtype="float32", shape=list(shape))
    blk.append_op(type="cast", inputs={"X": [out]}, outputs={"Out": [c]}, attrs={"in_dtype": 22, "out_dtype": 5})
    m = blk.create_var(name="prod", dtype="float32", shape=list(shape))
    blk.append_op(type="elementwise_mul", inputs={"X": [c], "Y": [g]}, outputs={"Out": [m]}, attrs={"axis": -1})
    loss = blk.create_var(name="loss", dtype="float32", shape=[])
    blk.append_op(type="reduce_sum", inputs={"X": [m]}, outputs={"Out": [loss]},
                  attrs={"reduce_all": True, "dim": [], "keep_dim": False})
    paddle.static.append_backward(loss)


def record_op(op_type, ins, outs, attrs, backward, rng):
    main, startup = paddle.static.Program(), paddle.static.Program()
    feed, rec = {}, {"type": op_type, "attrs": attrs, "inputs": {}, "outputs": {}}
    with paddle.static.program_guard(main, startup):
        blk = main.global_block()
        in_vars, grads = {}, []
        for slot, shape in ins.items():
            for k, sh in enumerate(shape if isinstance(shape[0], list) else [shape]):
                name = f"{slot.lower()}{k}"
                v = paddle.static.data(name, sh, "bfloat16")
                v.stop_gradient = False
                feed[name] = bits(rng.standard_normal(sh).astype(np.float32))
                in_vars.setdefault(slot, []).append(v)
                rec["inputs"].setdefault(slot, []).append({"shape": sh, "data": feed[name].reshape(-1).tolist()})
                grads.append((slot, name))
        out_vars = {s: [blk.create_var(name="out_" + s.lower(), dtype="bfloat16")] for s in outs}
        blk.append_op(type=op_type, inputs=in_vars, outputs=out_vars, attrs=dict(attrs))
        names = [s for s in outs if s != "XShape"]
        fetch = [out_vars[s][0] for s in names]
        if backward:
            first = out_vars[outs[0]][0]
            shape = paddle.static.Executor(paddle.CPUPlace()).run(main.clone(), feed=feed, fetch_list=[first])[0].shape
            _append_loss(blk, first, shape, rng, feed, rec)
            for slot, name in grads:
                if blk.vars.get(name + "@GRAD") is not None:
                    fetch.append(blk.vars[name + "@GRAD"])
                    names.append(slot + "@GRAD")
    res = paddle.static.Executor(paddle.CPUPlace()).run(main, feed=feed, fetch_list=fetch)
    for s, r in zip(names, res):
        rec["outputs"][s] = {"dtype": str(r.dtype), "shape": list(r.shape), "data": r.reshape(-1).tolist()}
    return rec


def record_ops():
    rng = np.random.default_rng(0)
    out = {}
    for name, spec in OPS.items():
        try:
            out[name] = record_op(*spec, rng)
        except Exception as exc:  # an op Paddle has no bf16 CPU kernel for
            out[name] = {"error": str(exc).strip().splitlines()[-1][:200]}
    return out


# ---- check_finite_and_unscale + update_loss_scaling ------------------------------------------------
def amp_program(attrs, shapes, stop_input=False):
    """Gradients g0.. unscaled in place, copied to c0.. (what check_finite_and_unscale wrote), then updated."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        b = main.global_block()
        gs = [paddle.static.data(f"g{k}", list(s), "float32") for k, s in enumerate(shapes)]
        scale = b.create_var(name="loss_scaling", shape=[1], dtype="float32", persistable=True)
        good = b.create_var(name="good", shape=[1], dtype="int32", persistable=True)
        bad = b.create_var(name="bad", shape=[1], dtype="int32", persistable=True)
        found = b.create_var(name="found", shape=[1], dtype="bool")
        b.append_op(type="check_finite_and_unscale", inputs={"X": gs, "Scale": [scale]},
                    outputs={"Out": gs, "FoundInfinite": [found]})
        for k, g in enumerate(gs):
            copy = b.create_var(name=f"c{k}", dtype="float32")
            b.append_op(type="assign", inputs={"X": [g]}, outputs={"Out": [copy]})
        ins = {"X": gs, "FoundInfinite": [found], "PrevLossScaling": [scale], "InGoodSteps": [good],
               "InBadSteps": [bad]}
        if stop_input:
            ins["StopUpdate"] = [paddle.static.data("stop", [1], "bool")]
        b.append_op(type="update_loss_scaling", inputs=ins, attrs=attrs,
                    outputs={"Out": gs, "LossScaling": [scale], "OutGoodSteps": [good], "OutBadSteps": [bad]})
    return main


def set_state(scope, scale, good, bad):
    scope.var("loss_scaling").get_tensor().set(np.array([scale], np.float32), paddle.CPUPlace())
    scope.var("good").get_tensor().set(np.array([good], np.int32), paddle.CPUPlace())
    scope.var("bad").get_tensor().set(np.array([bad], np.int32), paddle.CPUPlace())


def record_steps():
    main = amp_program({"incr_every_n_steps": 2, "decr_every_n_nan_or_inf": 2, "incr_ratio": 3.0,
                        "decr_ratio": 0.3}, [(2, 3), (3,), (2,)])
    exe, scope = paddle.static.Executor(paddle.CPUPlace()), paddle.static.Scope()
    set_state(scope, 1000.0, 0, 0)
    rng, steps = np.random.default_rng(1), []
    kinds = ["ok", "ok", "ok", "inf1", "ok", "nan2", "inf0", "ok", "inf1", "ninf1", "ninf1", "ninf1", "ninf1", "ok"]
    for kind in kinds:  # "inf1": an inf in g1; "ninf": -inf
        feed = {"g0": (rng.standard_normal((2, 3)) * 100).astype(np.float32),
                "g1": (rng.standard_normal(3) * 100).astype(np.float32),
                "g2": (rng.standard_normal(2) * 100).astype(np.float32)}
        if kind != "ok":
            feed["g" + kind[-1]].reshape(-1)[1] = {"inf": np.inf, "nan": np.nan, "ninf": -np.inf}[kind[:-1]]
        with paddle.static.scope_guard(scope):
            outs = exe.run(main, feed=feed, fetch_list=["c0", "c1", "c2", "found", "g0", "g1", "g2",
                                                        "loss_scaling", "good", "bad"])
        steps.append({"kind": kind, "feed": {k: v.tolist() for k, v in feed.items()},
                      "unscaled": [o.tolist() for o in outs[:3]], "found": bool(outs[3][0]),
                      "final": [o.tolist() for o in outs[4:7]], "scale": outs[7].tolist(),
                      "good": outs[8].tolist(), "bad": outs[9].tolist()})
    return steps


M1 = {"incr_every_n_steps": 3, "decr_every_n_nan_or_inf": 1, "incr_ratio": 2.0, "decr_ratio": 0.25}
M2 = {"incr_every_n_steps": 1, "decr_every_n_nan_or_inf": 1, "incr_ratio": 2.0, "decr_ratio": 0.5}
CASES = {  # name: (attrs, StopUpdate input?, scale, good, bad, gradient, stop fed)
    "clamp": (M1, False, 3.0, 5, 0, [1.0, np.inf, 2.0], None),          # 3 * 0.25 < 1: the scale becomes 1
    "incr_inf": (M1, False, 3e38, 2, 0, [6.0, 3.0, 1.5], None),         # 3e38 * 2 overflows: the scale stays
    "good_past": (M1, False, 8.0, 7, 0, [6.0, 3.0, 1.5], None),         # 8 good steps never equal 3
    "stop_attr_inf": (dict(M2, stop_update=True), False, 8.0, 0, 0, [1.0, np.nan, 2.0], None),
    "stop_attr_ok": (dict(M2, stop_update=True), False, 8.0, 0, 0, [1.0, 4.0, 2.0], None),
    "stop_input_true": (M2, True, 8.0, 0, 0, [1.0, 4.0, 2.0], True),
    "stop_input_false": (M2, True, 8.0, 0, 0, [1.0, 4.0, 2.0], False),
    "stop_input_true_inf": (M2, True, 8.0, 0, 0, [1.0, -np.inf, 2.0], True),
}


def record_cases():
    exe, res = paddle.static.Executor(paddle.CPUPlace()), {}
    for name, (attrs, stop_input, scale, good, bad, grad, stop) in CASES.items():
        main = amp_program(attrs, [(3,)], stop_input)
        scope = paddle.static.Scope()
        set_state(scope, scale, good, bad)
        feed = {"g0": np.array(grad, np.float32)}
        if stop is not None:
            feed["stop"] = np.array([stop])
        with paddle.static.scope_guard(scope):
            outs = exe.run(main, feed=feed, fetch_list=["g0", "loss_scaling", "good", "bad", "found"])
        res[name] = [o.tolist() for o in outs]
    return res


if __name__ == "__main__":
    for path, make in (("ops_bf16.json", record_ops), ("amp_steps.json", record_steps),
                       ("amp_cases.json", record_cases)):
        with open(path, "w") as f:
            json.dump(make(), f)
        print("wrote", path)
