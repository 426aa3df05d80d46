"""Static sharding (``strategy.sharding``) programs of Paddle 3.3.1, for Paddle and refimpl alike.

``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python tests/oracle_sharding/sharding_cases.py`` writes
``programs.json`` next to this file: each case builds the net of Paddle's
``test/collective/fleet/fleet_meta_optimizer_base.py`` (fc 64 tanh, fc 256 tanh, fc 2 softmax,
cross entropy, mean; ``Momentum(0.01, 0.9)`` or ``Adam(0.01)``) as trainer 1 of 2 (``hy*``: 3 of
4, ``gm2*``: 0 of 2) with the strategy of the case (the strategies of that file's ``set_strategy``), runs fleet's ``minimize`` and records every op of
every block of the main program and of the startup program (type, sorted inputs and outputs, the
attrs of ``KEYS``), the persistable vars and the vars of both global blocks.
``tests/test_sharding.py`` builds the same cases on refimpl and compares.

To build on Paddle's CPU wheel what its GPU build builds, the recorder changes four things, each
a fact of Paddle 3.3.1 named where it is made (and only when run as the recorder):
``CollectiveHelper._init_communicator`` writes its CUDA branch with ``sync=False``
(``c_gen_nccl_id`` + ``c_comm_init``; the CPU wheel raises "comm_id must be generated in
paddlepaddle-xpu", and registers neither op, so two marker ops stand in while building and are
renamed in the record); the AMP lists see every op as having a float16 kernel;
``ClipGradByGlobalNorm``'s ``sqrt``, ``maximum``, ``divide`` are the legacy ops, named as Paddle
2.6.2 names them (3.3.1's legacy IR refuses to build them); ``ReduceOp.Sum`` (named by 3.3.1's
``prune_gradient_clip``, but missing) is ``ReduceOp.SUM``. Paddle writes ``main_sharding_N`` /
``start_sharding_N`` debug files into the working directory: the recorder runs in a temporary one.
"""
import json
import os
import sys
import tempfile

KEYS = ("ring_id", "root", "root_id", "op_role", "nranks", "rank", "other_endpoints", "value", "scale",
        "dtype", "shape", "reduce_type")
AMP_CONFIGS = {"init_loss_scaling": 32768, "decr_every_n_nan_or_inf": 2, "incr_every_n_steps": 1000,
               "incr_ratio": 2.0, "use_dynamic_loss_scaling": True, "decr_ratio": 0.5,
               "custom_white_list": ["softmax"], "custom_black_list": ["tanh"]}
BASE = {"sharding_segment_strategy": "segment_broadcast_MB", "segment_broadcast_MB": 0.2, "sharding_degree": 2}
HYBRID = {"sharding_segment_strategy": "segment_broadcast_MB", "segment_broadcast_MB": 0.2, "segment_anchors": None,
          "sharding_degree": 2, "dp_degree": 2, "hybrid_dp": True, "gradient_merge_acc_step": 1, "mp_degree": 1}
FOUR = "127.0.0.1:36001,127.0.0.1:36002,127.0.0.1:36003,127.0.0.1:36004"
TWO = "127.0.0.1:36001,127.0.0.1:36002"
EIGHT = ",".join(f"127.0.0.1:{36001 + i}" for i in range(8))
MP = {"sharding_segment_strategy": "segment_broadcast_MB", "segment_broadcast_MB": 0.2, "segment_anchors": None,
      "sharding_degree": 2, "hybrid_dp": False, "gradient_merge_acc_step": 1, "mp_degree": 2}
MP_DP = dict(MP, dp_degree=2, hybrid_dp=True)

AMP = {"amp": True, "amp_configs": AMP_CONFIGS}
PURE_FP16 = {"amp": True, "amp_configs": dict(AMP_CONFIGS, use_pure_fp16=True, use_fp16_guard=False)}
RECOMPUTE = {"recompute": True, "recompute_configs": {"checkpoints": ["fc_0.tmp_2", "fc_1.tmp_2"]}}
ANCHORS = {"sharding_segment_strategy": "segment_anchors", "sharding_degree": 2,
           "segment_anchors": ["fc_0.tmp_2", "fc_1.tmp_2"]}

#: case name -> (trainer id, endpoints, sharding_configs, other strategy fields (set in order), optimizer extras)
CASES = {
    "sharding": (1, TWO, BASE, {}, {}),
    "sharding+amp": (1, TWO, BASE, AMP, {}),
    "sharding+pure_fp16": (1, TWO, BASE, PURE_FP16, {}),
    "sharding+recompute": (1, TWO, BASE, RECOMPUTE, {}),
    "sharding+amp+recompute": (1, TWO, BASE, dict(AMP, **RECOMPUTE), {}),
    "sharding+wd": (1, TWO, BASE, {}, {"wd": True}),
    "sharding+clip": (1, TWO, BASE, {}, {"clip": True}),
    "sharding+amp+wd+clip": (1, TWO, BASE, AMP, {"wd": True, "clip": True}),
    "sharding+adam": (1, TWO, BASE, {}, {"adam": True}),
    "sharding+amp+adam+clip": (1, TWO, BASE, AMP, {"adam": True, "clip": True}),
    "sharding+lamb": (1, TWO, BASE, {"lamb": True, "lamb_configs": {"lamb_weight_decay": 0.01,
                                                                     "exclude_from_weight_decay": []}},
                      {"adam": True}),
    "sharding+lars": (1, TWO, BASE, {"lars": True, "lars_configs": {
        "lars_coeff": 0.001, "lars_weight_decay": 0.0005, "epsilon": 0,
        "exclude_from_weight_decay": ["batch_norm", ".b"]}}, {}),
    # both switches on: Paddle's strategy compiler applies GradientMergeOptimizer and drops sharding
    "sharding+gradient_merge": (1, TWO, BASE, {"gradient_merge": True,
                                                "gradient_merge_configs": {"k_steps": 2, "avg": True}}, {}),
    "seg": (1, TWO, {"segment_broadcast_MB": 0.01, "sharding_degree": 2}, {}, {}),
    "anchors": (1, TWO, ANCHORS, {}, {}),
    "anchors+amp": (1, TWO, ANCHORS, AMP, {}),
    "gm2": (0, TWO, dict(BASE, gradient_merge_acc_step=2), {}, {}),
    "gm2+amp": (0, TWO, dict(BASE, gradient_merge_acc_step=2), AMP, {}),
    "optimize_cast+amp+recompute": (1, TWO, dict(BASE, optimize_cast=True), dict(AMP, **RECOMPUTE), {}),
    "optimize_offload+amp": (1, TWO, dict(BASE, optimize_offload=True), AMP, {}),
    "hydp": (3, FOUR, HYBRID, {"fuse_all_reduce_ops": False}, {}),
    "hydpfuse": (3, FOUR, dict(HYBRID, segment_broadcast_MB=0.1), {"fuse_all_reduce_ops": True,
                                                                    "fuse_grad_size_in_MB": 2}, {}),
    # sharding inside tensor parallelism: Paddle's test_sharding_with_mp (the plain net), then the net of
    # ``paddle.distributed.split`` layers (``split``: see ``_forward``) with the strategies of part 1
    "mp": (3, FOUR, MP, {}, {}),
    "mp+amp+clip": (3, FOUR, MP, AMP, {"clip": True}),
    "mp+split": (3, FOUR, MP, {}, {"split": True}),
    "mp+split+adam+clip": (2, FOUR, MP, {}, {"split": True, "adam": True, "clip": True}),
    "mp+split+amp+recompute": (1, FOUR, MP, dict(AMP, recompute=True, recompute_configs={
        "checkpoints": ["relu_0.tmp_0", "relu_1.tmp_0"]}), {"split": True}),
    "mp+split3": (3, FOUR, MP, {}, {"split": 3}),
    # mp alone (sharding_degree 1): the flag and the global norm synced over the mp ring, by mp rank 1
    "mp-only+amp+clip": (1, TWO, dict(MP, sharding_degree=1), AMP, {"split": True, "clip": True}),
    "mp+dp": (5, EIGHT, MP_DP, {"fuse_all_reduce_ops": False}, {}),
    "mp+dp+split+clip": (6, EIGHT, MP_DP, {"fuse_all_reduce_ops": False}, {"split": True, "clip": True}),
}


def _forward(paddle, x, split):
    """fc 64 tanh, fc 256 tanh; ``split``: a column-parallel linear (32, 64) and a row-parallel linear
    (64, 256), each followed by relu (3.3.1's legacy IR has no static ``paddle.tanh``), over the 2 ranks of
    the model-parallel ring."""
    if not split:
        h = paddle.static.nn.fc(x=x, size=64, activation="tanh")
        return paddle.static.nn.fc(x=h, size=256, activation="tanh")
    h = paddle.distributed.split(x, (32, 64), "linear", axis=1, num_partitions=2, gather_out=False)
    h = paddle.nn.functional.relu(h)
    h = paddle.nn.functional.relu(paddle.distributed.split(h, (64, 256), "linear", axis=0, num_partitions=2))
    if split == 3:  # and a column-parallel linear (256, 8) gathered: a c_identity whose gradient is needed
        h = paddle.distributed.split(h, (256, 8), "linear", axis=1, num_partitions=2, gather_out=True)
    return h


def build(paddle, case):
    """Build ``case`` with ``paddle`` (Paddle or refimpl); returns (main, startup)."""
    fleet = paddle.distributed.fleet
    trainer, endpoints, configs, fields, extras = CASES[case]
    os.environ["PADDLE_TRAINER_ID"] = str(trainer)
    os.environ["PADDLE_TRAINER_ENDPOINTS"] = endpoints
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        fleet.init(fleet.PaddleCloudRoleMaker(is_collective=True))
        x = paddle.static.data(name="x", shape=[-1, 32], dtype="float32")
        y = paddle.static.data(name="y", shape=[-1, 1], dtype="int64")
        h = _forward(paddle, x, extras.get("split"))
        pred = paddle.static.nn.fc(x=[h], size=2, activation="softmax")
        cost = paddle.nn.functional.cross_entropy(input=pred, label=y, reduction="none", use_softmax=False)
        loss = paddle.mean(x=cost)
    strategy = fleet.DistributedStrategy()
    strategy.sharding = True
    strategy.sharding_configs = dict(configs)
    for k, v in fields.items():
        setattr(strategy, k, v)
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        kw = {"weight_decay": paddle.regularizer.L2Decay(0.0001) if extras.get("wd") else None,
              "grad_clip": paddle.nn.ClipGradByGlobalNorm(clip_norm=1.0) if extras.get("clip") else None}
        if extras.get("adam"):
            opt = paddle.optimizer.Adam(learning_rate=0.01, **kw)
        else:
            opt = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, **kw)
        fleet.distributed_optimizer(opt, strategy=strategy).minimize(loss)
    return main, startup


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return int(v)  # a VarType enum


def _ops(block):
    return [[op.type, sorted(op.input_arg_names), sorted(op.output_arg_names),
             {k: _plain(op.attr(k)) for k in op.attr_names if k in KEYS}] for op in block.ops]


def record(main, startup):
    out = {f"main{b.idx}": _ops(b) for b in main.blocks}
    out["startup"] = _ops(startup.global_block())
    out["persist"] = sorted(v.name for v in main.list_vars() if v.persistable)
    out["vars"] = sorted(main.global_block().vars)
    out["startup_vars"] = sorted(startup.global_block().vars)
    return out


# ---- recording with Paddle 3.3.1 --------------------------------------------------------------------
_GEN, _INIT = -7777.0, -8888.0  # the marker ops' values


def _patch_paddle(paddle):
    from paddle.base.layer_helper import LayerHelper
    from paddle.distributed.fleet.meta_optimizers import common
    from paddle.static.amp import fp16_lists
    comms = {}

    def init_communicator(self, program, current_endpoint, endpoints, rank, ring_id, wait_port,
                          global_ring_id=None, sync=True):
        assert sync is False, "the recorder writes the sync=False branch only (sharding's rings)"
        block = program.global_block()
        var = block.create_var(name=paddle.utils.unique_name.generate("comm_id"), persistable=True, shape=[1],
                               dtype="float32")
        comms[var.name] = (ring_id, rank, [e for e in endpoints if e != current_endpoint], len(endpoints))
        for value in (_GEN, _INIT):
            block.append_op(type="fill_constant", outputs={"Out": var},
                            attrs={"shape": [1], "dtype": 5, "value": value})

    def legacy(op_type, slots, named):
        def make(*args, **kwargs):
            kwargs.pop("name", None)
            values = dict(zip(slots, args), **kwargs)
            helper = LayerHelper(op_type)
            dtype = values[slots[0]].dtype
            out = (helper.create_variable(name=paddle.utils.unique_name.generate(op_type), dtype=dtype,
                                          persistable=False) if named
                   else helper.create_variable_for_type_inference(dtype=dtype))
            helper.append_op(type=op_type, inputs={s.upper(): [values[s]] for s in slots}, outputs={"Out": [out]},
                             attrs={"axis": -1} if len(slots) == 2 else {})
            return out
        return make

    common.CollectiveHelper._init_communicator = init_communicator
    paddle.sqrt = legacy("sqrt", ["x"], False)
    paddle.maximum = legacy("elementwise_max", ["x", "y"], True)
    paddle.divide = legacy("elementwise_div", ["x", "y"], True)
    sys_lists = fp16_lists._get_sys_unsupported_list
    fp16_lists._get_sys_unsupported_list = lambda dtype: ("GPU", set(), sys_lists(dtype)[2])
    paddle.distributed.ReduceOp.Sum = paddle.distributed.ReduceOp.SUM
    return comms


def _rename_markers(ops, comms):
    for i, (type_, _, outs, attrs) in enumerate(ops):
        if type_ == "fill_constant" and attrs.get("value") in (_GEN, _INIT):
            ring_id, rank, others, n = comms[outs[0]]
            if attrs["value"] == _GEN:
                ops[i] = ["c_gen_nccl_id", [], outs, {"op_role": 0, "other_endpoints": others, "rank": rank,
                                                      "ring_id": ring_id}]
            else:
                ops[i] = ["c_comm_init", outs, [], {"nranks": n, "op_role": 0, "rank": rank, "ring_id": ring_id}]


def main():
    import paddle
    paddle.enable_static()
    comms = _patch_paddle(paddle)
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    os.chdir(tempfile.mkdtemp())
    for case in CASES:
        comms.clear()
        rec = record(*build(paddle, case))
        _rename_markers(rec["startup"], comms)
        out[case] = rec
    write_programs(out, os.path.join(here, "programs.json"))


def write_programs(out, path):
    """``out`` ({case: record}) as JSON, one op (or var list) per line (the other recorders use it too)."""
    with open(path, "w") as f:
        f.write("{\n")
        for i, case in enumerate(out):
            f.write(f"{json.dumps(case)}: {{\n")
            keys = sorted(out[case])
            for j, key in enumerate(keys):
                value = out[case][key]
                if key.startswith(("main", "startup")) and key != "startup_vars":
                    body = ",\n  ".join(json.dumps(op) for op in value)
                    f.write(f" {json.dumps(key)}: [\n  {body}]")
                else:
                    f.write(f" {json.dumps(key)}: {json.dumps(value)}")
                f.write(",\n" if j < len(keys) - 1 else "\n")
            f.write("},\n" if i < len(out) - 1 else "}\n")
        f.write("}\n")


if __name__ == "__main__":
    os.environ.setdefault("FLAGS_enable_pir_api", "0")
    sys.exit(main())
