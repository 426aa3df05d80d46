"""Recompute cases: models and checkpoint choices, run against Paddle 3.3.1 and refimpl.

Each builder takes the ``paddle`` module (Paddle itself, with ``FLAGS_enable_pir_api=0``, or
refimpl), builds a model in the current programs, wraps its optimizer in
``paddle.incubate.optimizer.RecomputeOptimizer`` with the checkpoints of the case and calls
``minimize``. ``FLAGS_enable_pir_api=0 /tmp/pd33/bin/python tests/oracle_recompute/recompute_models.py``
rebuilds every case with Paddle 3.3.1 and writes ``programs.json`` next to this file: for each
case, every block's ops (type, slots, ``op_role``, ``op_role_var``), block 0's vars (name, shape,
dtype, persistable, stop_gradient) and, as ``sorted_checkpoint_names``, the checkpoint names
``append_backward(loss, checkpoints=...)`` returns for the same model.
"""
import json
import os
import sys


def _mlp(paddle, layers=3, hid=8, din=4, dout=3, side=False):
    x = paddle.static.data("x", [None, din], "float32")
    h, hs = x, []
    for i in range(layers):
        h = paddle.static.nn.fc(h, hid, activation="relu")
        hs.append(h)
        if side and i == 0:
            hs.append(paddle.static.nn.fc(h, 2))  # not on the loss path
    y = paddle.static.nn.fc(h, dout)
    return x, hs, paddle.mean(paddle.square(y))


def _residual(paddle):
    x = paddle.static.data("x", [None, 4], "float32")
    h1 = paddle.static.nn.fc(x, 6, activation="relu")
    h2 = paddle.static.nn.fc(h1, 6, activation="relu") + h1
    h3 = paddle.static.nn.fc(h2, 6, activation="tanh") + h2
    y = paddle.static.nn.fc(h3, 2)
    return x, [h1, h2, h3], paddle.mean(paddle.square(y))


def _layers(paddle):
    nn = paddle.nn
    x = paddle.static.data("x", [None, 4], "float32")
    l1, l2, l3 = nn.Linear(4, 6), nn.Linear(6, 6), nn.Linear(6, 2)
    act = nn.ReLU()
    h1 = act(l1(x))
    h2 = act(l2(h1))
    y = l3(h2)
    return x, [h1, h2], paddle.mean(paddle.square(y))


def _dropout(paddle, seeded=False):
    """Two fc layers with a dropout between them (``seeded``: the program's random_seed fixes it)."""
    if seeded:
        paddle.static.default_main_program().random_seed = 7
    x = paddle.static.data("x", [None, 4], "float32")
    h1 = paddle.static.nn.fc(x, 6, activation="relu")
    d = paddle.nn.functional.dropout(h1, 0.5)
    h2 = paddle.static.nn.fc(d, 6, activation="relu")
    return x, [h1, h2], paddle.mean(paddle.square(paddle.static.nn.fc(h2, 2)))


def _ckpts(x, hs, loss, which):
    out = []
    for w in which:
        out.append(x if w == "x" else loss if w == "loss" else w if isinstance(w, str) else hs[w])
    return out


# case -> (model, checkpoints: indices into the model's hidden list, "x", "loss" or names, optimizer)
CASES = {
    "mlp_single": ("mlp", [1], "sgd"),
    "mlp_odd_order": ("mlp", [2, 0, 1], "momentum"),
    "mlp_names": ("mlp", ["fc_0.tmp_2", 2], "momentum"),
    "mlp_duplicates_and_loss": ("mlp", [0, 0, "loss"], "sgd"),
    "mlp_with_input": ("mlp", ["x", 1], "sgd"),
    "mlp_off_path": ("mlp_side", [0, 1, 3], "adam"),
    "mlp_empty": ("mlp", [], "sgd"),
    "residual": ("residual", [0, 1], "adam"),
    "residual_all": ("residual", [0, 1, 2], "sgd"),
    "layers": ("layers", [0, 1], "adam"),
    "mlp_no_grad_set": ("mlp", [0, 2], "sgd"),  # minimize(loss, no_grad_set={fc_1.w_0, fc_2.tmp_0})
    "dropout": ("dropout", [0, 1], "sgd"),              # a seed op goes before the dropout
    "dropout_seeded": ("dropout_seeded", [0, 1], "adam"),
}
NO_GRAD = {"mlp_no_grad_set": ["fc_1.w_0", "fc_2.tmp_0"]}


def _model(paddle, model):
    if model == "mlp":
        x, hs, loss = _mlp(paddle)
    elif model == "mlp_side":
        x, hs, loss = _mlp(paddle, side=True)
    elif model == "residual":
        x, hs, loss = _residual(paddle)
    elif model.startswith("dropout"):
        x, hs, loss = _dropout(paddle, seeded=model == "dropout_seeded")
    else:
        x, hs, loss = _layers(paddle)
    return x, hs, loss


def build(paddle, case):
    """Build ``case`` into the current programs; (loss, RecomputeOptimizer)."""
    model, which, opt = CASES[case]
    x, hs, loss = _model(paddle, model)
    inner = {"sgd": lambda: paddle.optimizer.SGD(learning_rate=0.1),
             "momentum": lambda: paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9),
             "adam": lambda: paddle.optimizer.Adam(learning_rate=0.01)}[opt]()
    rc = paddle.incubate.optimizer.RecomputeOptimizer(inner)
    rc._set_checkpoints(_ckpts(x, hs, loss, which))
    rc.minimize(loss, no_grad_set=set(NO_GRAD[case]) if case in NO_GRAD else None)
    return loss, rc


def sorted_names(paddle, case):
    """The checkpoint names ``append_backward(loss, checkpoints=...)`` returns (Variables only)."""
    model, which, _ = CASES[case]
    x, hs, loss = _model(paddle, model)
    block = loss.block
    ckpts = [block.var(c) if isinstance(c, str) else c for c in _ckpts(x, hs, loss, which)]
    if not ckpts:
        return None
    return list(paddle.static.append_backward(loss, checkpoints=ckpts)[1])


SEED_ATTRS = ("seed", "fix_seed", "force_cpu", "deterministic", "rng_name", "op_device", "dropout_prob")


def summary(main):
    """The recorded form of a built case (what ``programs.json`` holds for it)."""
    blocks = []
    for b in main.blocks:
        ops = []
        for op in b.ops:
            role_var = op.attr("op_role_var") if op.has_attr("op_role_var") else []
            ops.append([op.type, {s: list(op.input(s)) for s in op.input_names},
                        {s: list(op.output(s)) for s in op.output_names},
                        int(op.attr("op_role")), list(role_var)])
            if op.type in ("seed", "dropout"):  # the attrs recompute sets or removes
                ops[-1].append({k: op.attr(k) for k in SEED_ATTRS if op.has_attr(k)})
        blocks.append({"idx": b.idx, "parent_idx": b.parent_idx, "ops": ops})
    gvars = [[v.name, [int(d) for d in v.shape], str(v.dtype).replace("paddle.", ""), bool(v.persistable),
              bool(v.stop_gradient)] for v in main.global_block().vars.values()
             if v.name not in ("feed", "fetch")]
    return {"blocks": blocks, "vars": sorted(gvars)}


def _record():
    import paddle
    paddle.enable_static()
    out = {"paddle_version": paddle.__version__}
    for case in CASES:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            with paddle.utils.unique_name.guard():
                build(paddle, case)
        out[case] = summary(main)
        with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
            with paddle.utils.unique_name.guard():
                out[case]["sorted_checkpoint_names"] = sorted_names(paddle, case)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs.json"), "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)


if __name__ == "__main__":
    sys.exit(_record())
