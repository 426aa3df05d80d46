"""Paddle 3.3.1's legacy ``paddle.incubate.optimizer.PipelineOptimizer``, driven directly (no fleet).

``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python tests/oracle_legacy_pipeline/pipeline_cases.py`` writes
``programs.json`` next to this file. Each case builds ``pp_net`` or ``boundary_net`` of
``tests/oracle_sharding_pp/sharding_pp_cases.py`` (the nets of Paddle's
``test/collective/fleet/fleet_meta_optimizer_base.py``), sets ``main._pipeline_opt`` to the keys the
builder requires (as fleet's ShardingOptimizer would), wraps ``Momentum(0.01, 0.9)`` (with a
``ClipGradByGlobalNorm(1.0)``, AMP's ``decorate`` or a ``RecomputeOptimizer`` where the case says) in
``PipelineOptimizer(..., num_microbatches=4)`` and calls ``minimize(loss)``; ``acc`` cases then call the
builder's ``_rename_gradient_var_name`` and ``_accumulate_gradients(block, strategy=s)`` on the section
program (``s.fuse_grad_merge`` as the case says, ``s.fuse_grad_size_in_MB = 32``), as ShardingOptimizer
does. Recorded: this stage's section program (every block: type, sorted inputs and outputs, the attrs
of ``KEYS``), the split startup program, the persistable vars, the vars of both global blocks with
shape / dtype / persistable, the plain entries of ``main._pipeline_opt``, ``pipeline_pair``,
``pp_ring_map`` and what ``_accumulate_gradients`` returned.

Paddle's builder finds the user's optimizer (whose ``_param_device_map`` it reads) by following
``inner_opt``; AMP's ``decorate`` and ``RecomputeOptimizer`` keep it as ``_optimizer``, and only fleet's
meta-optimizers (AMPOptimizer, RecomputeOptimizer of fleet) expose ``inner_opt``. So, standing in for
fleet, the recorder sets ``inner_opt`` on a decorated optimizer; ``amp_no_inner_r0`` records what Paddle
does without it (an AttributeError naming ``_param_device_map``).

The recorder patches what ``sharding_pp_cases.py`` patches (Paddle's CPU wheel building what its GPU
build builds: the device kind "gpu", the AMP lists, the legacy clip ops).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle_sharding"))
sys.path.insert(0, os.path.join(HERE, "..", "oracle_sharding_pp"))
import sharding_cases as sc  # noqa: E402
import sharding_pp_cases as spc  # noqa: E402

KEYS = spc.KEYS + ("out_shape", "num", "id", "user_defined_size_of_dtype")
AMP = sc.AMP_CONFIGS
RC = ["fc_0.tmp_2", "fc_1.tmp_2", "fc_2.tmp_2", "fc_3.tmp_2"]
PLAIN_KEYS = ("trainer", "device_worker", "pipeline_stage", "num_pipeline_stages", "schedule_mode",
              "inner_parallelism", "place_id", "sync_steps", "num_microbatches", "start_cpu_core_id")


def _case(net="pp", rank=0, mode="1F1B", sharding=False, scale=False, amp=False, clip=False, rc=False,
          acc=None, mp=1, inner=True):
    """acc: None (no accumulation call), "plain" or "fuse" (strategy.fuse_grad_merge); inner: give a
    decorated optimizer the ``inner_opt`` fleet's meta-optimizers give it."""
    return dict(net=net, rank=rank, mode=mode, sharding=sharding, scale=scale, amp=amp, clip=clip, rc=rc,
                acc=acc, mp=mp, inner=inner)


CASES = {}
for _r in (0, 1):
    CASES[f"plain_r{_r}"] = _case(rank=_r)
    CASES[f"fthenb_r{_r}"] = _case(rank=_r, mode="F-then-B")
    CASES[f"scale_r{_r}"] = _case(rank=_r, scale=True)
    CASES[f"sharding_r{_r}"] = _case(rank=_r, sharding=True)
    CASES[f"sharding+acc_r{_r}"] = _case(rank=_r, sharding=True, acc="plain")
    CASES[f"sharding+fuse_r{_r}"] = _case(rank=_r, sharding=True, acc="fuse")
    CASES[f"amp_r{_r}"] = _case(rank=_r, amp=True)
    CASES[f"clip_r{_r}"] = _case(rank=_r, clip=True)
    CASES[f"amp+clip_r{_r}"] = _case(rank=_r, amp=True, clip=True)
    CASES[f"amp+clip+sharding+fuse_r{_r}"] = _case(rank=_r, amp=True, clip=True, sharding=True, acc="fuse")
    CASES[f"amp+clip+sharding+acc_r{_r}"] = _case(rank=_r, amp=True, clip=True, sharding=True, acc="plain")
    CASES[f"rc_r{_r}"] = _case(rank=_r, rc=True)
    CASES[f"boundary_r{_r}"] = _case(net="boundary", rank=_r)
    CASES[f"boundary+amp+clip_r{_r}"] = _case(net="boundary", rank=_r, amp=True, clip=True)
    CASES[f"boundary_fthenb_r{_r}"] = _case(net="boundary", rank=_r, mode="F-then-B")
CASES["amp_no_inner_r0"] = _case(amp=True, inner=False)
CASES["mp2_r0"] = _case(rank=0, mp=2)
CASES["mp2_r1"] = _case(rank=1, mp=2)


def pipeline_opt(c):
    """The keys Paddle's builder requires in ``main._pipeline_opt`` (fleet's ShardingOptimizer sets them)."""
    return {"schedule_mode": c["mode"], "micro_batch_size": 2, "local_rank": c["rank"],
            "global_rank": c["rank"], "use_sharding": c["sharding"], "ring_id": 20, "global_ring_id": 3,
            "mp_degree": c["mp"], "mp_rank": c["mp"] - 1, "scale_gradient": c["scale"]}


def _optimizer(paddle, c):
    clip = paddle.nn.ClipGradByGlobalNorm(1.0) if c["clip"] else None
    opt = inner = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, grad_clip=clip)
    if c["amp"]:
        lists = paddle.static.amp.AutoMixedPrecisionLists(custom_white_list=AMP["custom_white_list"],
                                                          custom_black_list=AMP["custom_black_list"])
        opt = paddle.static.amp.decorate(
            opt, lists, init_loss_scaling=AMP["init_loss_scaling"], incr_every_n_steps=AMP["incr_every_n_steps"],
            decr_every_n_nan_or_inf=AMP["decr_every_n_nan_or_inf"], incr_ratio=AMP["incr_ratio"],
            decr_ratio=AMP["decr_ratio"], use_dynamic_loss_scaling=AMP["use_dynamic_loss_scaling"])
    if c["rc"]:
        opt = paddle.incubate.optimizer.RecomputeOptimizer(opt)
        opt._set_checkpoints(RC)
    if opt is not inner and c["inner"]:
        opt.inner_opt = inner
    return opt


def build(paddle, case, num_microbatches=4):
    """Build ``case`` with ``paddle`` (Paddle or refimpl): (main, startup, builder, what minimize returned,
    what _accumulate_gradients returned)."""
    c = CASES[case]
    main, startup = paddle.static.Program(), paddle.static.Program()
    net = spc._pp_net if c["net"] == "pp" else spc._boundary_net
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        loss = net(paddle, None)
        main._pipeline_opt = pipeline_opt(c)
        pp = paddle.incubate.optimizer.PipelineOptimizer(_optimizer(paddle, c), num_microbatches=num_microbatches)
        ret = pp.minimize(loss)
        acc = None
        if c["acc"]:
            block = main._pipeline_opt["section_program"].global_block()
            strategy = paddle.distributed.fleet.DistributedStrategy()
            strategy.fuse_grad_merge = c["acc"] == "fuse"
            strategy.fuse_grad_size_in_MB = 32
            pp._rename_gradient_var_name(block)
            acc = pp._accumulate_gradients(block, strategy=strategy)
    return main, startup, pp, ret, acc, loss


def _ops(block):
    return [[op.type, sorted(op.input_arg_names), sorted(op.output_arg_names),
             {k: sc._plain(op.attr(k)) for k in op.attr_names if k in KEYS}] for op in block.ops]


def _vars(block):
    return {n: [list(v.shape) if v.shape is not None else None, str(v.dtype).replace("paddle.", ""),
                bool(v.persistable)] for n, v in block.vars.items()}


def record(main, startup, ret, acc):
    section = main._pipeline_opt["section_program"]
    start = startup._pipeline_opt["startup_program"]
    out = {f"main{b.idx}": _ops(b) for b in section.blocks}
    out["startup"] = _ops(start.global_block())
    out["persist"] = sorted(v.name for v in section.list_vars() if v.persistable)
    out["vars"] = _vars(section.global_block())
    out["startup_vars"] = _vars(start.global_block())
    out["pipeline_opt"] = {k: main._pipeline_opt[k] for k in PLAIN_KEYS}
    out["pipeline_pair"] = [list(p) for p in ret[3]]
    out["pp_ring_map"] = {str(k): v for k, v in ret[4].items()}
    out["num_programs"] = len(ret[2])
    out["accumulated"] = acc if acc is None else list(acc if not isinstance(acc, tuple) else acc[0])
    return out


def main():
    import paddle
    paddle.enable_static()
    sc._patch_paddle(paddle)
    spc._patch_pipeline()
    out = {}
    for case in CASES:
        try:
            main_, startup, _, ret, acc, _ = build(paddle, case)
        except Exception as exc:  # noqa: BLE001 - a case Paddle cannot build is recorded as such
            out[case] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(case, "ERROR", out[case]["error"])
            continue
        out[case] = record(main_, startup, ret, acc)
        print(case, "ok", len(out[case]["main0"]))
    sc.write_programs(out, os.path.join(HERE, "programs.json"))


if __name__ == "__main__":
    os.environ.setdefault("FLAGS_enable_pir_api", "0")
    sys.exit(main())
