"""Sharding inside a pipeline (``sharding_configs['pp_degree'] > 1``): Paddle 3.3.1's section programs.

``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python tests/oracle_sharding_pp/sharding_pp_cases.py`` writes
``programs.json`` next to this file. Each case builds a net of Paddle's
``test/collective/fleet/fleet_meta_optimizer_base.py`` -- ``pp_net`` (x, y on ``gpu:0``; three fc 64 tanh
on each of the two stages; fc 2 softmax, cross entropy, mean on ``gpu:1``) or ``boundary_net`` (a
``Linear(4, 8)`` on ``gpu:0``, a ``Linear(8, 5)`` and a mean on ``gpu:1``, no biases) -- as one trainer
of the world, with the case's strategy (the strategies of that file's ``set_strategy`` and of
``test_fleet_hybrid_meta_optimizer.py``), runs fleet's ``minimize`` with ``Momentum(0.01, 0.9)`` and records
this trainer's ``main._pipeline_opt['section_program']`` and ``startup._pipeline_opt['startup_program']``
(every op: type, sorted inputs and outputs, the attrs of ``KEYS``; the persistable vars; the vars of both
global blocks) and the plain entries of ``main._pipeline_opt``.

The recorder patches what ``tests/oracle_sharding/sharding_cases.py`` patches (Paddle's CPU wheel
building what its GPU build builds; the ring bring-up ops it writes get the common ``op_role_var`` and
``op_device`` attrs every op of the GPU build carries), and one more fact of the GPU build: Paddle's legacy
``PipelineOptimizer`` (``paddle/incubate/optimizer/pipeline.py``) asks ``core.is_compiled_with_cuda()``
for its device kind (``"gpu"``) and its places; the recorder answers True there (a CPU place stands in).
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle_sharding"))
import sharding_cases as sc  # noqa: E402

KEYS = sc.KEYS + ("peer", "use_calc_stream", "op_role_var", "copy_data", "use_align", "set_constant",
                  "constant", "pipeline_flag", "in_dtype", "out_dtype", "op_device")
AMP = {"amp": True, "amp_configs": sc.AMP_CONFIGS}
PIPE = {"pipeline": True, "pipeline_configs": {"schedule_mode": "1F1B", "micro_batch_size": 2,
                                              "accumulate_steps": 4}}
DPOPT = {"sharding_degree": 1, "pp_degree": 2, "dp_degree": 2, "_dp_as_optimizer_sharding": True}
FUSE = {"fuse_all_reduce_ops": True, "fuse_grad_size_in_MB": 32}
RC4 = {"recompute": True, "recompute_configs": {"checkpoints": ["fc_0.tmp_2", "fc_1.tmp_2", "fc_2.tmp_2",
                                                                "fc_3.tmp_2"]}}
SH2PP2 = {"sharding_degree": 2, "pp_degree": 2, "dp_degree": 1, "sharding_segment_strategy": "segment_broadcast_MB",
          "segment_broadcast_MB": 0.2}
AVG = {"scale_strategy": "avg", "scale_gradient": True}
FOUR, EIGHT, TWO = sc.FOUR, sc.EIGHT, sc.TWO

#: case -> (net, trainer id, endpoints, sharding_configs, strategy fields in order, optimizer extras)
CASES = {
    # the seven programs of test_fleet_hybrid_meta_optimizer.py
    "dpopt": ("pp", 3, FOUR, DPOPT, dict(PIPE, fuse_all_reduce_ops=False), {}),
    "dpopt+fuse": ("pp", 3, FOUR, DPOPT, dict(PIPE, **FUSE), {}),
    "dpopt+amp+clip+fuse": ("pp", 3, FOUR, DPOPT, dict(AMP, **PIPE, **FUSE), {"clip": True}),
    "dpopt+amp+clip+fuse+fgm": ("pp", 3, FOUR, DPOPT, dict(AMP, **PIPE, **FUSE, fuse_grad_merge=True),
                                {"clip": True}),
    "dpopt+amp+rc+fuse+fgm+cast": ("pp", 3, FOUR, dict(DPOPT, optimize_cast=True),
                                   dict(PIPE, **AMP, amp_configs2={"custom_black_varnames": ["fc_6.b_0"]},
                                        **RC4, **FUSE, fuse_grad_merge=True), {}),
    "boundary": ("boundary", 3, FOUR, DPOPT, dict(AMP, **PIPE, **FUSE), {"clip": True}),
    "boundary_card1": ("boundary", 1, FOUR, DPOPT, dict(AMP, **PIPE, **FUSE), {"clip": True}),
    # more of the same family
    "dpopt_t0": ("pp", 0, FOUR, DPOPT, dict(PIPE, fuse_all_reduce_ops=False), {}),
    "dpopt+amp+clip_t0": ("pp", 0, FOUR, DPOPT, dict(AMP, **PIPE, fuse_all_reduce_ops=False), {"clip": True}),
    "pp2dp2": ("pp", 3, FOUR, dict(DPOPT, _dp_as_optimizer_sharding=False), dict(PIPE, fuse_all_reduce_ops=False),
               {}),
    "pp2dp2_t0+amp+clip": ("pp", 0, FOUR, dict(DPOPT, _dp_as_optimizer_sharding=False),
                           dict(AMP, **PIPE, fuse_all_reduce_ops=False), {"clip": True}),
    "pp2": ("pp", 1, TWO, dict(DPOPT, dp_degree=1, _dp_as_optimizer_sharding=False),
            dict(PIPE, fuse_all_reduce_ops=False), {}),
    "pp2_t0+rc": ("pp", 0, TWO, dict(DPOPT, dp_degree=1, _dp_as_optimizer_sharding=False),
                  dict(PIPE, **RC4, fuse_all_reduce_ops=False), {}),
    "sh2pp2": ("pp", 1, FOUR, SH2PP2, dict(PIPE, fuse_all_reduce_ops=False), {}),
    "sh2pp2_t2+amp+clip": ("pp", 2, FOUR, SH2PP2, dict(AMP, **PIPE, fuse_all_reduce_ops=False), {"clip": True}),
    "sh2pp2dp2_t5": ("pp", 5, EIGHT, dict(SH2PP2, dp_degree=2), dict(PIPE, fuse_all_reduce_ops=False), {}),
    "sh2pp2_t3+amp+rc+clip": ("pp", 3, FOUR, SH2PP2, dict(AMP, **PIPE, **RC4, fuse_all_reduce_ops=False),
                              {"clip": True}),
    # the merged gradients' other paths: fused pure-dp allreduce, averaged after the sum (scale_gradient: a
    # scale per gradient, or under dynamic AMP the loss scaling's), reduced to the sharding owners in the
    # optimizer (pp_allreduce_in_optimize)
    "pp2dp2+fuse": ("pp", 3, FOUR, dict(DPOPT, _dp_as_optimizer_sharding=False), dict(PIPE, **FUSE), {}),
    "pp2dp2+avg": ("pp", 3, FOUR, dict(DPOPT, _dp_as_optimizer_sharding=False),
                   dict(PIPE, fuse_all_reduce_ops=False, gradient_scale_configs=AVG), {}),
    "pp2dp2_t0+amp+avg": ("pp", 0, FOUR, dict(DPOPT, _dp_as_optimizer_sharding=False),
                          dict(AMP, **PIPE, fuse_all_reduce_ops=False, gradient_scale_configs=AVG), {}),
    "sh2pp2+in_optimize": ("pp", 1, FOUR, dict(SH2PP2, pp_allreduce_in_optimize=True),
                           dict(PIPE, fuse_all_reduce_ops=False), {}),
    # optimize_offload and pure fp16 inside the pipeline
    "sh2pp2+amp+offload": ("pp", 1, FOUR, dict(SH2PP2, optimize_offload=True), dict(AMP, **PIPE, fuse_all_reduce_ops=False),
                           {}),
    "dpopt+amp+offload": ("pp", 3, FOUR, dict(DPOPT, optimize_offload=True), dict(AMP, **PIPE, fuse_all_reduce_ops=False),
                          {}),
    "sh2pp2+pure_fp16": ("pp", 1, FOUR, SH2PP2, dict(sc.PURE_FP16, **PIPE, fuse_all_reduce_ops=False), {}),
    # tensor-parallel rings around the pipeline (the net has no split layers: mp only brings up ring 0,
    # combines the found-inf flag and the global norm over it and broadcasts the parameters on it)
    "mp2pp2_t1": ("pp", 1, FOUR, dict(DPOPT, mp_degree=2, dp_degree=1, _dp_as_optimizer_sharding=False),
                  dict(PIPE, fuse_all_reduce_ops=False), {}),
    "mp2pp2_t3+amp+clip": ("pp", 3, FOUR, dict(DPOPT, mp_degree=2, dp_degree=1, _dp_as_optimizer_sharding=False),
                           dict(AMP, **PIPE, fuse_all_reduce_ops=False), {"clip": True}),
}


def _pp_net(paddle, fleet):
    base = paddle.base
    with base.device_guard("gpu:0"):
        x = paddle.static.data(name="x", shape=[-1, 32], dtype="float32")
        y = paddle.static.data(name="y", shape=[-1, 1], dtype="int64")
    for stage in range(2):
        with base.device_guard(f"gpu:{stage}"):
            for _ in range(3):
                x = paddle.static.nn.fc(x=x, size=64, activation="tanh")
    with base.device_guard("gpu:1"):
        pred = paddle.static.nn.fc(x=[x], size=2, activation="softmax")
        cost = paddle.nn.functional.cross_entropy(input=pred, label=y, reduction="none", use_softmax=False)
        return paddle.mean(x=cost)


def _boundary_net(paddle, fleet):
    x = paddle.static.data(name="x", shape=[-1, 4], dtype="float32")
    with paddle.static.device_guard("gpu:0"):
        out = paddle.nn.Linear(4, 8, bias_attr=False)(x)
    with paddle.static.device_guard("gpu:1"):
        out = paddle.nn.Linear(8, 5, bias_attr=False)(out)
        return paddle.mean(out)


def build(paddle, case):
    """Build ``case`` with ``paddle`` (Paddle or refimpl); returns (main, startup)."""
    fleet = paddle.distributed.fleet
    net, trainer, endpoints, configs, fields, extras = CASES[case]
    os.environ["PADDLE_TRAINER_ID"] = str(trainer)
    os.environ["PADDLE_TRAINER_ENDPOINTS"] = endpoints
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        fleet.init(fleet.PaddleCloudRoleMaker(is_collective=True))
        loss = (_pp_net if net == "pp" else _boundary_net)(paddle, fleet)
    strategy = fleet.DistributedStrategy()
    for k, v in fields.items():
        setattr(strategy, "amp_configs" if k == "amp_configs2" else k, v)
    strategy.sharding = True
    strategy.sharding_configs = dict(configs)
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        clip = paddle.nn.ClipGradByGlobalNorm(1.0) if extras.get("clip") else None
        opt = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, grad_clip=clip)
        fleet.distributed_optimizer(opt, strategy=strategy).minimize(loss)
    return main, startup


def _ops(block):
    return [[op.type, sorted(op.input_arg_names), sorted(op.output_arg_names),
             {k: sc._plain(op.attr(k)) for k in op.attr_names if k in KEYS}] for op in block.ops]


def record(main, startup):
    section = main._pipeline_opt["section_program"]
    start = startup._pipeline_opt["startup_program"]
    out = {f"main{b.idx}": _ops(b) for b in section.blocks}
    out["startup"] = _ops(start.global_block())
    out["persist"] = sorted(v.name for v in section.list_vars() if v.persistable)
    out["vars"] = sorted(section.global_block().vars)
    out["startup_vars"] = sorted(start.global_block().vars)
    out["pipeline_opt"] = {k: main._pipeline_opt[k] for k in ("pipeline_stage", "num_pipeline_stages",
                                                              "schedule_mode", "inner_parallelism",
                                                              "num_microbatches")}
    return out


def _common_attrs(ops):
    """The ring bring-up ops the markers stand for, with the common attrs every op proto of the GPU build has
    (``OpProtoAndCheckerMaker``: ``op_role_var`` [], and ``op_device`` "" outside a device_guard)."""
    for op in ops:
        if op[0] in ("c_gen_nccl_id", "c_comm_init"):
            op[3].update({"op_role_var": [], "op_device": ""})


def _patch_pipeline():
    from paddle.incubate.optimizer import pipeline
    core = pipeline.core

    class GpuBuild:  # the CUDA build's answers, where the legacy pipeline asks
        def __getattr__(self, name):
            return getattr(core, name)

        def is_compiled_with_cuda(self):
            return True

        def CUDAPlace(self, index):
            return core.CPUPlace()

    pipeline.core = GpuBuild()


def main():
    import paddle
    paddle.enable_static()
    comms = sc._patch_paddle(paddle)
    _patch_pipeline()
    out = {}
    os.chdir(tempfile.mkdtemp())
    for case in CASES:
        comms.clear()
        rec = record(*build(paddle, case))
        sc._rename_markers(rec["startup"], comms)
        _common_attrs(rec["startup"])
        out[case] = rec
    sc.write_programs(out, os.path.join(HERE, "programs.json"))


if __name__ == "__main__":
    os.environ.setdefault("FLAGS_enable_pir_api", "0")
    sys.exit(main())
