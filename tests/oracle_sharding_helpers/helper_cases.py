"""The ZeRO-sharding helpers of Paddle 3.3.1 on small programs, for Paddle and refimpl alike.

``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python tests/oracle_sharding_helpers/helper_cases.py``
writes ``programs.json`` next to this file: each program below is built with Paddle 3.3.1's
legacy static API, one of Paddle's own helpers (``sharding/fp16_helper.py``,
``gradient_clip_helper.py``, ``weight_decay_helper.py``, ``offload_helper.py``, with Paddle's
``Shard``) rewrites it, and the ops it touches are recorded. ``tests/test_sharding_helpers.py``
builds the same programs on refimpl, runs refimpl's helpers and compares.

The ``flow_*`` cases are whole sharded programs (fleet's ``minimize`` with
``optimize_offload`` / ``optimize_cast``, which call ``OffloadHelper``), built and recorded
through ``tests/oracle_sharding/sharding_cases.py``.

To build what Paddle's GPU build builds on its CPU wheel, the recorder applies
``sharding_cases._patch_paddle`` (only when run as the recorder; its docstring names each change):
comm-init marker ops for the CUDA branch of ``_init_communicator``, AMP lists that see every op as
having a float16 kernel (refimpl's test does the same to its lists), ``ClipGradByGlobalNorm``'s
``sqrt`` / ``maximum`` / ``divide`` as the legacy ops named as Paddle 2.6.2 names them (3.3.1's
legacy IR refuses to build them), and ``ReduceOp.SUM`` for the ``ReduceOp.Sum`` that 3.3.1's
``prune_gradient_clip`` names but which does not exist. The ``memcpy`` place types are the CPU
wheel's (0); refimpl's test asks its helper for those.
"""
import json
import os
import sys


def net(paddle, opt_kind, amp=False, clip=False, wd=False):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data(name="x", shape=[-1, 32], dtype="float32")
        y = paddle.static.data(name="y", shape=[-1, 1], dtype="int64")
        h = paddle.static.nn.fc(x=x, size=64, activation="tanh")
        h = paddle.static.nn.fc(x=h, size=256, activation="tanh")
        pred = paddle.static.nn.fc(x=[h], size=2, activation="softmax")
        cost = paddle.nn.functional.cross_entropy(input=pred, label=y, reduction="none", use_softmax=False)
        loss = paddle.mean(x=cost)
        kw = {}
        if clip:
            kw["grad_clip"] = paddle.nn.ClipGradByGlobalNorm(clip_norm=1.0)
        if wd:
            kw["weight_decay"] = paddle.regularizer.L2Decay(0.0001)
        if opt_kind == "momentum":
            opt = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, **kw)
        else:
            opt = paddle.optimizer.Adam(learning_rate=0.01, **kw)
        if amp:
            lists = paddle.static.amp.AutoMixedPrecisionLists(custom_white_list=["softmax"],
                                                              custom_black_list=["tanh"])
            opt = paddle.static.amp.decorate(opt, amp_lists=lists, init_loss_scaling=32768.0,
                                             use_dynamic_loss_scaling=True)
        _, params_grads = opt.minimize(loss)
    return main, startup, params_grads


def summary(block):
    out = []
    for op in block.ops:
        s = op.type
        if op.type in ("check_finite_and_unscale", "update_loss_scaling", "sum", "cast", "memcpy",
                       "broadcast", "all_reduce", "fill_constant", "squared_l2_norm", "elementwise_mul",
                       "scale"):
            slots = ["X"] if op.type == "elementwise_mul" else sorted(op.input_names)
            ins = [n for k in slots for n in op.input(k)]
            outs = [n for k in sorted(op.output_names) for n in op.output(k)]
            s += " " + ",".join(ins) + " -> " + ",".join(outs)
            for a in ("ring_id", "reduce_type", "dst_place_type", "root"):
                if op.has_attr(a) and op.type in ("all_reduce", "memcpy", "broadcast"):
                    s += f" {a}={op.attr(a)}"
            if op.type in ("cast", "memcpy", "all_reduce", "broadcast", "fill_constant"):
                s += f" role={int(op.attr('op_role'))}"
        out.append(s)
    return out


def digest(block, params):
    """The lines of summary(block) for ops of role Optimize and for casts of parameters."""
    lines = summary(block)
    return [line for op, line in zip(block.ops, lines)
            if int(op.attr("op_role")) & 2 or (op.type == "cast" and op.input("X")[0] in params)]


def startup_tail(block):
    """What the helpers append to a startup program: its broadcast / cast / memcpy ops."""
    return [line for op, line in zip(block.ops, summary(block)) if op.type in ("broadcast", "cast", "memcpy")]


def persistables(block):
    return sorted(n for n, v in block.vars.items() if v.persistable)


def _net(paddle, *args, **kwargs):
    """net() and its parameter names, read before a helper can remove a parameter's var
    (Paddle's Variable then points at a freed desc)."""
    main, startup, params_grads = net(paddle, *args, **kwargs)
    return main, startup, params_grads, {p.name for p, _ in params_grads}


def shard_of(H, params_grads, worker_idx, n=2):
    s = H.Shard()
    s.setup(params_grads, worker_idx, n)
    return s


def run(paddle, H):
    res = {}
    # weight decay (Adam + L2Decay: /regularization scale + sum per param)
    for w in (0, 1):
        main, startup, pg, params = _net(paddle, "adam", wd=True)
        H.WeightDecayHelper().prune_weight_decay(main.global_block(), shard_of(H, pg, w))
        res[f"wd_w{w}"] = digest(main.global_block(), params)
    # gradient clip, sharding
    for w in (0, 1):
        main, startup, pg, params = _net(paddle, "adam", clip=True)
        H.GradientClipHelper(None).prune_gradient_clip(main.global_block(), shard_of(H, pg, w), [0, 1, -1])
        res[f"clip_w{w}"] = digest(main.global_block(), params)
    # gradient clip with more ranks than params: worker 7 of 8 owns none
    main, startup, pg, params = _net(paddle, "adam", clip=True)
    s = shard_of(H, pg, 7, n=8)
    H.GradientClipHelper(None).prune_gradient_clip(main.global_block(), s, [1])
    res["clip_w7of8"] = digest(main.global_block(), params)
    # gradient clip, mp without sharding
    for mp_rank in (0, 1):
        main, startup, pg, params = _net(paddle, "adam", clip=True)
        for name in ("fc_1.w_0", "fc_1.w_0@GRAD"):  # as if fc_1.w_0 were split over the mp ranks
            main.global_block().var(name).is_distributed = True
        H.GradientClipHelper(None).sync_global_norm(main.global_block(), [0, 2], mp_rank)
        res[f"clip_sync_mp{mp_rank}"] = digest(main.global_block(), params)
    # amp
    for w in (0, 1):
        main, startup, pg, params = _net(paddle, "momentum", amp=True)
        H.FP16Utils.prune_fp16(main.global_block(), shard_of(H, pg, w), {}, [0, 1, -1])
        res[f"amp_w{w}"] = digest(main.global_block(), params)
    main, startup, pg, params = _net(paddle, "momentum", amp=True)
    H.FP16Utils.sync_amp_check_nan_inf(main.global_block(), [-1, 2])
    res["amp_sync"] = digest(main.global_block(), params)
    main, startup, pg, params = _net(paddle, "momentum", amp=True)
    block = main.global_block()
    res["amp_fp16_casts"] = [i for i, op in enumerate(block.ops)
                             if H.FP16Utils.is_fp16_cast_op(block, op, params)]
    res["amp_fp32_casts"] = [i for i, op in enumerate(block.ops) if H.FP16Utils.is_fp32_cast_op(block, op)]
    # offload
    for case in ("offload", "offload_fp32param", "cast_fp32param_in_optimize", "opt_sharding"):
        main, startup, pg, params = _net(paddle, "adam", amp=True)
        helper = H.OffloadHelper(mp_ring_id=None if case == "offload" else 4, dp_ring_id=2)
        mb, sb = main.global_block(), startup.global_block()
        with paddle.utils.unique_name.guard():
            if case == "offload":
                helper.offload(mb, sb)
            elif case == "offload_fp32param":
                helper.offload_fp32param(mb, sb)
            elif case == "cast_fp32param_in_optimize":
                helper.cast_fp32param_in_optimize(mb, sb)
            else:
                # this rank updates only fc_2's params: drop the other update ops first
                for i in reversed(range(len(mb.ops))):
                    op = mb.ops[i]
                    if op.type == "adam" and not op.input("Param")[0].startswith("fc_2"):
                        mb._remove_op(i)
                helper.opt_sharding_cast_fp32param(mb, sb, [p.name for p, _ in pg])  # (none removed yet)
        res[case] = digest(mb, params)
        res[case + "_startup"] = startup_tail(sb)
        res[case + "_persist"] = persistables(mb)
        res[case + "_startup_persist"] = persistables(sb)
    return res


def _paddle_helpers():
    import types
    from paddle.distributed.fleet.meta_optimizers.sharding import (fp16_helper, gradient_clip_helper, offload_helper,
                                                                   shard, weight_decay_helper)
    return types.SimpleNamespace(FP16Utils=fp16_helper.FP16Utils,
                                 GradientClipHelper=gradient_clip_helper.GradientClipHelper,
                                 WeightDecayHelper=weight_decay_helper.WeightDecayHelper,
                                 OffloadHelper=offload_helper.OffloadHelper, Shard=shard.Shard)


# ---- whole sharding programs that reach the offload helper ---------------------------------------
def _sharding_cases():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(os.path.dirname(here), "oracle_sharding"))
    import sharding_cases
    return sharding_cases


def flow_cases():
    """{name: sharding_cases.CASES entry}: Adam + AMP with optimize_offload / optimize_cast."""
    sc = _sharding_cases()
    return {
        "flow_offload": (1, sc.TWO, dict(sc.BASE, optimize_offload=True), dict(sc.AMP), {"adam": True}),
        "flow_cast": (1, sc.TWO, dict(sc.BASE, optimize_cast=True), dict(sc.AMP), {"adam": True}),
        # hybrid dp: the fp16 params are broadcast over the dp ring in startup
        "flow_hydp_cast": (3, sc.FOUR, dict(sc.HYBRID, optimize_cast=True),
                           dict(sc.AMP, fuse_all_reduce_ops=False), {"adam": True}),
    }


def record_flow(paddle, name):
    """Build flow ``name`` with ``paddle`` through ``oracle_sharding/sharding_cases.py``; its record."""
    sc = _sharding_cases()
    sc.CASES.setdefault(name, flow_cases()[name])
    return sc.record(*sc.build(paddle, name))


def _dumps(result):
    """JSON with one list item (an op) per line."""
    def value(v, indent):
        if isinstance(v, dict):
            inner = ",\n".join(f"{indent} {json.dumps(k)}: {value(v[k], indent + ' ')}" for k in sorted(v))
            return "{\n" + inner + "}"
        if isinstance(v, list) and v and isinstance(v[0], (list, str)):
            return "[\n" + ",\n".join(f"{indent} {json.dumps(x)}" for x in v) + "]"
        return json.dumps(v)
    return value(result, "")


if __name__ == "__main__":
    import tempfile
    os.environ.setdefault("FLAGS_enable_pir_api", "0")
    import paddle
    paddle.enable_static()
    sc = _sharding_cases()
    comms = sc._patch_paddle(paddle)  # the changes of the module docstring, and the comm-init markers
    here = os.path.dirname(os.path.abspath(__file__))
    os.chdir(tempfile.mkdtemp())  # Paddle writes main_sharding_N debug files
    result = run(paddle, _paddle_helpers())
    for flow in flow_cases():
        comms.clear()
        rec = record_flow(paddle, flow)
        sc._rename_markers(rec["startup"], comms)
        result[flow] = rec
    with open(os.path.join(here, "programs.json"), "w") as f:
        f.write(_dumps(result) + "\n")
    sys.exit(0)
