"""Sharding + AMP with a weight shared by two layers: Paddle 3.3.1's programs, for Paddle and refimpl alike.

``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python tests/oracle_sharding/tied_amp_cases.py`` writes
``tied_amp_programs.json`` next to this file, the way ``sharding_cases.py`` records its cases (same
patches of the CPU wheel, same record): the net is four fc 16 relu layers, the first and the last
sharing the weight ``tied``, then fc 2 softmax, cross entropy, mean; ``Momentum(0.01, 0.9)``;
sharding over 2 ranks with ``segment_broadcast_MB`` 0.001 and ``strategy.amp``; as trainer 0
(``tied0``, the owner of ``tied``) and trainer 1 (``tied1``). ``tests/test_sharding_amp_tied.py``
builds the same on refimpl and compares (trainer 1 on purpose differs, see that file).
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sharding_cases as sc  # noqa: E402

#: case -> trainer id
CASES = {"tied0": 0, "tied1": 1}
CONFIGS = {"segment_broadcast_MB": 0.001, "sharding_degree": 2}


def build(paddle, case):
    fleet = paddle.distributed.fleet
    os.environ["PADDLE_TRAINER_ID"] = str(CASES[case])
    os.environ["PADDLE_TRAINER_ENDPOINTS"] = sc.TWO
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        fleet.init(fleet.PaddleCloudRoleMaker(is_collective=True))
        h = paddle.static.data(name="x16", shape=[-1, 16], dtype="float32")
        y = paddle.static.data(name="y", shape=[-1, 1], dtype="int64")
        for i in range(4):
            tie = paddle.ParamAttr(name="tied") if i in (0, 3) else None
            h = paddle.static.nn.fc(h, 16, activation="relu", weight_attr=tie)
        pred = paddle.static.nn.fc(x=[h], size=2, activation="softmax")
        cost = paddle.nn.functional.cross_entropy(input=pred, label=y, reduction="none", use_softmax=False)
        loss = paddle.mean(x=cost)
    strategy = fleet.DistributedStrategy()
    strategy.sharding = True
    strategy.sharding_configs = dict(CONFIGS)
    strategy.amp = True
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        opt = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9)
        fleet.distributed_optimizer(opt, strategy=strategy).minimize(loss)
    return main, startup


def main():
    import paddle
    paddle.enable_static()
    comms = sc._patch_paddle(paddle)
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    os.chdir(tempfile.mkdtemp())
    for case in CASES:
        comms.clear()
        rec = sc.record(*build(paddle, case))
        sc._rename_markers(rec["startup"], comms)
        out[case] = rec
    with open(os.path.join(here, "tied_amp_programs.json"), "w") as f:
        json.dump(out, f, indent=0)


if __name__ == "__main__":
    main()
