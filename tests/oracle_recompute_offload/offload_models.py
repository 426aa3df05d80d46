"""Small MLPs built with ``RecomputeOptimizer`` + ``_enable_offload``, for Paddle and refimpl alike.

``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python tests/oracle_recompute_offload/offload_models.py``
writes ``programs.json`` next to this file from Paddle 3.3.1 (its CPU wheel builds offload
programs: only running them needs CUDA). ``tests/test_recompute_offload.py`` builds the same
cases on refimpl and compares.
"""
import json
import os
import sys

CASES = {
    # three checkpoints, each an fc output before its relu (the two first are offloaded)
    "mlp3": dict(n_ckpt=3, act_in_fc=False, shape=(4, 8)),
    # the checkpoints are relu outputs, which relu_grad reads after the segment before it is
    # fetched: Paddle's schedule refuses it
    "relu_in_fc": dict(n_ckpt=3, act_in_fc=True, shape=(4, 8)),
    # a single checkpoint: nothing to offload, Paddle refuses it
    "one_ckpt": dict(n_ckpt=1, act_in_fc=False, shape=(4, 8)),
    "empty_shape": dict(n_ckpt=3, act_in_fc=False, shape=()),
}


def build(paddle, n_ckpt, act_in_fc, shape, offload=True):
    """(main, startup, loss, error): the program, or the error Paddle's minimize raised."""
    from_pkg = paddle.incubate.optimizer.RecomputeOptimizer
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        x = paddle.static.data("x", [4, 8], "float32")
        y = paddle.static.data("y", [4, 1], "int64")
        hs, h = [], x
        for _ in range(3):
            h = paddle.static.nn.fc(h, 8, activation="relu" if act_in_fc else None)
            hs.append(h)
            if not act_in_fc:
                h = paddle.nn.functional.relu(h)
        logits = paddle.static.nn.fc(h, 2)
        loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, y))
        opt = from_pkg(paddle.optimizer.SGD(0.1))
        opt._set_checkpoints(hs[:n_ckpt])
        if offload:
            opt._enable_offload()
            opt.checkpoint_shape = list(shape)
        try:
            opt.minimize(loss)
        except Exception as e:  # recorded: Paddle's refusals
            return main, startup, loss, e
    return main, startup, loss, None


def _ops(block):
    out = []
    for op in block.ops:
        place = op.attr("dst_place_type") if op.type == "memcpy" else (
            op.attr("place_type") if op.has_attr("place_type") else None)
        out.append([op.type, {k: op.input(k) for k in sorted(op.input_names)},
                    {k: op.output(k) for k in sorted(op.output_names)}, int(op.attr("op_role")), place])
    return out


def summary(main, startup, error):
    if error is not None:
        return {"error": [type(error).__name__, str(error)]}
    gvars = main.global_block().vars
    return {"main": _ops(main.global_block()), "startup": _ops(startup.global_block()),
            "vars": {n: [list(v.shape), str(v.dtype).replace("paddle.", ""), v.persistable, v.stop_gradient]
                     for n, v in sorted(gvars.items()) if "@Pinned" in n or "@Fetch" in n}}


if __name__ == "__main__":
    import paddle
    paddle.enable_static()
    rec = {}
    for name, kw in CASES.items():
        main, startup, _, err = build(paddle, **kw)
        rec[name] = summary(main, startup, err)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs.json"), "w") as f:
        json.dump(rec, f, indent=0, sort_keys=True)
    sys.exit(0)
