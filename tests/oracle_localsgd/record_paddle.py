"""Record the programs of this folder from Paddle (a maintainer's tool; the tests only read its output).

Run with Paddle 3.3.1's interpreter, the legacy IR selected:

    FLAGS_enable_pir_api=0 python tests/oracle_localsgd/record_paddle.py

It writes the JSON files beside it, or into ``$RECORD_DIR`` (see
README.md for what they hold and for the two patches it makes to Paddle
before building).
"""
import json
import os

os.environ["PADDLE_TRAINER_ID"] = "1"
os.environ["PADDLE_TRAINER_ENDPOINTS"] = "127.0.0.1:36001,127.0.0.1:36002"

import paddle  # noqa: E402
from paddle.base import framework  # noqa: E402
from paddle.base.layer_helper import LayerHelper  # noqa: E402
from paddle.distributed.fleet.base import role_maker  # noqa: E402
from paddle.distributed.fleet.meta_optimizers import fp16_allreduce_optimizer, localsgd_optimizer  # noqa: E402
from paddle.framework import core  # noqa: E402

HERE = os.environ.get("RECORD_DIR", os.path.dirname(os.path.abspath(__file__)))
KEYS = ("op_role", "ring_id", "root", "reduce_type", "scale", "step", "value", "dtype", "shape", "in_dtype",
        "out_dtype", "force_cpu", "rank", "nranks", "endpoint", "other_endpoints", "endpoints", "op_role_var")
COMM_OPS = {}  # (comm_id var, op type) -> the recorded op of the two a CPU build does not register


def patch_paddle():
    core.is_compiled_with_cuda = lambda: True
    append = framework.Block.append_op

    def recording_append(self, *args, **kwargs):
        t = kwargs.get("type")
        if t not in ("c_gen_nccl_id", "c_comm_init"):
            return append(self, *args, **kwargs)
        names = lambda d: {k: [getattr(v, "name", v) for v in (vs if isinstance(vs, list) else [vs])]
                           for k, vs in d.items()}
        rec = {"type": t, "inputs": names(kwargs.get("inputs", {})), "outputs": names(kwargs.get("outputs", {})),
               "attrs": {k: int(v) if k == "op_role" else v for k, v in kwargs.get("attrs", {}).items()}}
        var = (rec["outputs"].get("Out") or rec["inputs"].get("X"))[0]
        COMM_OPS[(var, t)] = rec
        return append(self, type="nop", inputs={"X": [var]}, outputs={"Out": [var]}, attrs={})
    framework.Block.append_op = recording_append

    def legacy(op_type, binary=False, out_dtype=None):
        original = getattr(paddle, {"elementwise_min": "minimum", "elementwise_max": "maximum"}.get(op_type, op_type))

        def f(x, y=None, name=None):
            if not isinstance(x, framework.Variable):
                return original(x, y) if binary else original(x)
            helper = LayerHelper(op_type)
            out = helper.create_variable_for_type_inference(dtype=out_dtype or x.dtype)
            ins = {"X": [x], "Y": [y]} if binary else {"X": [x]}
            helper.append_op(type=op_type, inputs=ins, outputs={"Out": [out]}, attrs={"axis": -1} if binary else {})
            return out
        return f
    paddle.logical_not = legacy("logical_not", out_dtype="bool")
    paddle.sqrt, paddle.ceil = legacy("sqrt"), legacy("ceil")
    paddle.minimum, paddle.maximum = legacy("elementwise_min", True), legacy("elementwise_max", True)


def value(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(value(x) for x in v) + "]"
    return str(int(v)) if type(v).__name__ == "OpRole" else str(v)


def line(t, ins, outs, attrs):
    """The op as the tests' ``op_line`` writes it."""
    cond = t == "conditional_block"

    def slots(d):
        return " ".join(f"{k}={','.join(sorted(v) if cond else v)}" for k, v in sorted(d.items())
                        if v and not (cond and k == "Scope"))
    shown = " ".join(f"{k}={value(attrs[k])}" for k in KEYS if k in attrs and not (k == "op_role_var" and not attrs[k]))
    return f"{t} {slots(ins)} -> {slots(outs)} | {shown}"


def program_lines(program):
    lines, done = [], set()
    for block in program.blocks:
        out = []
        for op in block.ops:
            if op.type == "nop":  # a recorded op: c_gen_nccl_id comes first for a comm_id var, then c_comm_init
                var = op.input("X")[0]
                t = "c_comm_init" if (var, "c_gen_nccl_id") in done else "c_gen_nccl_id"
                done.add((var, t))
                rec = COMM_OPS[(var, t)]
                out.append(line(t, rec["inputs"], rec["outputs"], rec["attrs"]))
            else:
                out.append(line(op.type, {k: op.input(k) for k in op.input_names},
                                {k: op.output(k) for k in op.output_names},
                                {k: op.attr(k) for k in op.attr_names if k in KEYS}))
        lines.append(out)
    return lines


def record(name, cls, inner, strategy, dtype="float32"):
    """The net of README.md with ``cls`` applied directly, or through fleet when ``cls`` is None."""
    role = role_maker.PaddleCloudRoleMaker(is_collective=True)
    paddle.distributed.fleet.init(role)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data(name="x", shape=[-1, 4], dtype=dtype)
        y = paddle.static.data(name="y", shape=[-1, 1], dtype="int64")
        pred = paddle.static.nn.fc(x=x, size=2, activation="softmax")
        cost = paddle.nn.functional.cross_entropy(input=pred, label=y, reduction="none", use_softmax=False)
        loss = paddle.mean(x=cost)
        if cls is None:
            paddle.distributed.fleet.distributed_optimizer(inner(), strategy=strategy).minimize(loss)
        else:
            opt = cls(inner())
            opt._set_basic_info(loss, role, opt.inner_opt, strategy)
            opt.minimize(loss)
    lines = {"startup": program_lines(startup), "main": program_lines(main)}
    if name.startswith("adaptive"):  # the names Paddle 2.6.2 gives the two ops 3.3.1 cannot build
        lines["main"] = [[ln.replace("elementwise_min_0.tmp_0", "elementwise_min_0")
                          .replace("elementwise_max_0.tmp_0", "elementwise_max_0") for ln in b] for b in lines["main"]]
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(lines, f, indent=1)


def main():
    paddle.enable_static()
    patch_paddle()
    fleet = paddle.distributed.fleet
    s = fleet.DistributedStrategy()
    s.localsgd, s.localsgd_configs = True, {"k_steps": 2, "begin_step": 3}
    momentum = lambda: paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9)  # noqa: E731
    record("localsgd_momentum_k2_b3", localsgd_optimizer.LocalSGDOptimizer, momentum, s)
    record("localsgd_momentum_k2_b3_fleet", None, momentum, s)
    s = fleet.DistributedStrategy()
    s.adaptive_localsgd, s.adaptive_localsgd_configs = True, {"init_k_steps": 2, "begin_step": 3}
    record("adaptive_localsgd_sgd_k2_b3", localsgd_optimizer.AdaptiveLocalSGDOptimizer,
           lambda: paddle.optimizer.SGD(learning_rate=0.01), s)
    s = fleet.DistributedStrategy()
    s.fp16_allreduce = True
    for name, dtype in (("fp16_allreduce_sgd", "float32"), ("fp16_allreduce_sgd_float16_net", "float16")):
        record(name, fp16_allreduce_optimizer.FP16AllReduceOptimizer,
               lambda: paddle.optimizer.SGD(learning_rate=0.01), s, dtype)


if __name__ == "__main__":
    main()
