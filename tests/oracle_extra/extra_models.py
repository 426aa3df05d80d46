"""Extra model builders (same style as the repository's oracle/models.py).

Each builder uses only Paddle's legacy static-graph API, through the module
globals `paddle` and `F` (paddle.nn.functional), which `bind()` sets. Build as

    bind(paddle, paddle.nn.functional)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            loss, feed_spec = MODELS[case](config)

with `case`, `config`, batch size and steps as in EXTRA (file NN is entry NN).
feed_spec: name -> (dtype, per-example shape) for float feeds (standard normal),
name -> ("int64", shape, n) for int feeds (uniform in [0, n)).
"""
paddle = None
F = None


def bind(paddle_module, functional_module):
    global paddle, F
    paddle, F = paddle_module, functional_module


def m_mlp3_sigmoid_sgd(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    h = paddle.static.nn.fc(x, cfg["h1"], activation="sigmoid")
    h = paddle.static.nn.fc(h, cfg["h2"], activation="sigmoid")
    y = paddle.static.nn.fc(h, cfg["dout"])
    loss = paddle.mean(y)
    paddle.optimizer.SGD(learning_rate=cfg.get("lr", 0.1)).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_mlp_ce_nesterov(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    lab = paddle.static.data("label", [None, 1], "int64")
    h = paddle.static.nn.fc(x, cfg["hid"], activation="tanh")
    logits = paddle.static.nn.fc(h, cfg["classes"])
    ce = F.cross_entropy(logits, lab)
    loss = paddle.mean(ce)
    paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.8, use_nesterov=True).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]]), "label": ("int64", [1], cfg["classes"])}


def m_residual_adam_beta(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    h = paddle.static.nn.fc(x, cfg["hid"])
    h2 = paddle.static.nn.fc(h, cfg["hid"], activation="relu")
    z = h + h2
    y = paddle.static.nn.fc(z, 3, activation="sigmoid")
    loss = paddle.mean(y * y)
    paddle.optimizer.Adam(learning_rate=0.02, beta1=cfg["beta1"]).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_matmul_layernorm_adamw_wd(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    w = paddle.static.create_parameter([cfg["din"], cfg["hid"]], "float32", name="w_proj")
    h = x @ w
    h = paddle.static.nn.layer_norm(h)
    h = paddle.static.nn.fc(h, cfg["hid"], activation="gelu")
    y = paddle.static.nn.fc(h, 2)
    loss = paddle.mean(paddle.square(y))
    paddle.optimizer.AdamW(learning_rate=0.01, weight_decay=cfg["wd"]).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_embedding_seq5(cfg):
    ids = paddle.static.data("ids", [None, cfg["seq"]], "int64")
    emb = paddle.static.nn.embedding(ids, size=[cfg["vocab"], cfg["dim"]])
    flat = paddle.reshape(emb, [-1, cfg["seq"] * cfg["dim"]])
    y = paddle.static.nn.fc(flat, 2, activation="tanh")
    loss = paddle.mean(paddle.square(y))
    paddle.optimizer.SGD(learning_rate=0.3).minimize(loss)
    return loss, {"ids": ("int64", [cfg["seq"]], cfg["vocab"])}


def m_shared_weight_3x(cfg):
    x = paddle.static.data("x", [None, cfg["hid"]], "float32")
    w = paddle.static.create_parameter([cfg["hid"], cfg["hid"]], "float32", name="w_shared")
    h = F.relu(x @ w)
    h = F.silu(h @ w)
    h = h @ w
    loss = paddle.mean(paddle.square(h))
    paddle.optimizer.SGD(learning_rate=0.05).minimize(loss)
    return loss, {"x": ("float32", [cfg["hid"]])}


def m_gradient_merge_sgd(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    h = paddle.static.nn.fc(x, cfg["hid"], activation="relu")
    y = paddle.static.nn.fc(h, 1)
    loss = paddle.mean(y)
    opt = paddle.optimizer.SGD(learning_rate=0.1)
    opt = paddle.incubate.optimizer.GradientMergeOptimizer(opt, k_steps=cfg["k"], avg=cfg["avg"])
    opt.minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_gradient_merge_momentum(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    h = paddle.static.nn.fc(x, cfg["hid"], activation="tanh")
    y = paddle.static.nn.fc(h, 1)
    loss = paddle.mean(paddle.square(y))
    opt = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
    opt = paddle.incubate.optimizer.GradientMergeOptimizer(opt, k_steps=cfg["k"], avg=cfg["avg"])
    opt.minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_softmax_transpose_4d(cfg):
    a, b, c = cfg["a"], cfg["b"], cfg["c"]
    x = paddle.static.data("x", [None, a, b, c], "float32")
    t = paddle.transpose(x, [0, 3, 1, 2])
    s = F.softmax(t, axis=1)
    r = paddle.reshape(s, [-1, a * b * c])
    cat = paddle.concat([r * 3.0, r], axis=1)
    y = paddle.static.nn.fc(cat, 3)
    loss = paddle.mean(y) * 2.0
    paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return loss, {"x": ("float32", [a, b, c])}


def m_sub_div_sum(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    a = paddle.static.nn.fc(x, cfg["hid"])
    b = paddle.static.nn.fc(x, cfg["hid"], activation="sigmoid")
    d = a - b
    q = a / (b + 1.0)
    # paddle.sum is C-only in Paddle 3.3.1 (fails on legacy Variables): use add_n ('sum' op)
    s = paddle.add_n([d * q, a, b])
    loss = paddle.mean(paddle.mean(s, axis=1)) + paddle.mean(b) * 0.01
    paddle.optimizer.SGD(learning_rate=0.05).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_split_cast(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    lab = paddle.static.data("label", [None, 1], "int64")
    h = paddle.static.nn.fc(x, 3 * cfg["part"])
    p1, p2, p3 = paddle.split(h, 3, axis=1)
    c = paddle.cast(paddle.cast(p1, "float64") * 2.0, "float32")
    lf = paddle.cast(lab, "float32")
    z = c + p2 * p3 + lf
    loss = paddle.mean(z)
    paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]]), "label": ("int64", [1], cfg["n"])}


def m_dropout_softlabel(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    t = paddle.static.data("t", [None, cfg["classes"]], "float32")
    h = paddle.static.nn.fc(x, cfg["hid"], activation="relu")
    h = F.dropout(h, p=0.0, training=True)  # p == 0: Paddle emits no op at all
    h = F.dropout(h, p=cfg["p"], training=True)  # tiny p: dropout op, mask all ones
    h = F.dropout(h, p=cfg["p_infer"], training=False, mode="downscale_in_infer")
    logits = paddle.static.nn.fc(h, cfg["classes"])
    soft = F.softmax(t)
    ce = F.cross_entropy(logits, soft, soft_label=True)
    loss = paddle.mean(ce)
    paddle.optimizer.Adam(learning_rate=0.01).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]]), "t": ("float32", [cfg["classes"]])}


def m_gelu_pow_logsigmoid(cfg):
    # F.gelu / paddle.exp / paddle.log / paddle.sqrt are C-only in Paddle 3.3.1
    # (fail on legacy Variables); fc's activation="gelu", paddle.pow, x ** k,
    # F.log_sigmoid and paddle.reciprocal still emit legacy ops.
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    h = paddle.static.nn.fc(x, cfg["hid"], activation="gelu")
    s = paddle.pow(paddle.square(h) + 1.0, 0.5)
    lg = F.log_sigmoid(h)
    r = paddle.reciprocal(s)
    q = h ** 2
    loss = paddle.mean(lg * s + r + q * 0.1)
    paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.5).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_var_used_3x(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    h = paddle.static.nn.fc(x, cfg["hid"])
    a = F.relu(h)
    b = F.leaky_relu(h, 0.1)
    c = h * h
    loss = paddle.mean(a + b + c)
    paddle.optimizer.SGD(learning_rate=0.05).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_lr_stepdecay_sgd(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    h = paddle.static.nn.fc(x, cfg["hid"], activation="relu")
    y = paddle.static.nn.fc(h, 1)
    loss = paddle.mean(y)
    sched = paddle.optimizer.lr.StepDecay(learning_rate=0.1, step_size=cfg["step_size"], gamma=cfg["gamma"])
    paddle.optimizer.SGD(learning_rate=sched).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_lr_expdecay_momentum(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    h = paddle.static.nn.fc(x, cfg["hid"], activation="tanh")
    y = paddle.static.nn.fc(h, 2)
    loss = paddle.mean(paddle.square(y))
    sched = paddle.optimizer.lr.ExponentialDecay(learning_rate=0.1, gamma=cfg["gamma"])
    paddle.optimizer.Momentum(learning_rate=sched, momentum=0.9).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_lr_decay_ops_sgd(cfg):
    # The legacy functional decay emits LRSched (op_role 16) ops in main; the
    # optimizer takes the resulting Variable through its _learning_rate_map
    # (the public constructor only accepts float / LRScheduler).
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    h = paddle.static.nn.fc(x, cfg["hid"], activation="relu")
    y = paddle.static.nn.fc(h, 1)
    loss = paddle.mean(y)
    lr = paddle.optimizer.lr.exponential_decay(
        learning_rate=0.1, decay_steps=cfg["decay_steps"], decay_rate=cfg["decay_rate"], staircase=cfg["staircase"])
    opt = paddle.optimizer.SGD(learning_rate=0.1)
    opt._learning_rate_map[paddle.static.default_main_program()] = lr
    opt.minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_detach_branch(cfg):
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    a = paddle.static.nn.fc(x, cfg["hid"], activation="relu")
    a.stop_gradient = True
    b = paddle.static.nn.fc(x, cfg["hid"])
    y = paddle.static.nn.fc(a * b, 1)
    loss = paddle.mean(y)
    paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_matmul_transpose_linear(cfg):
    # paddle.matmul is C-only in Paddle 3.3.1; x @ w, F.linear and paddle.mm emit matmul_v2
    x = paddle.static.data("x", [None, cfg["din"]], "float32")
    w = paddle.static.create_parameter([cfg["hid"], cfg["din"]], "float32", name="w_t")
    bias = paddle.static.create_parameter([cfg["hid"]], "float32", name="b_t", is_bias=True)
    h = x @ paddle.transpose(w, [1, 0]) + bias
    w2 = paddle.static.create_parameter([cfg["hid"], cfg["hid"]], "float32", name="w_lin")
    b2 = paddle.static.create_parameter([cfg["hid"]], "float32", name="b_lin", is_bias=True)
    h = F.linear(h, w2, b2)
    h = h * F.hardsigmoid(h)
    loss = paddle.mean(paddle.mean(h, axis=1))
    paddle.optimizer.Adam(learning_rate=0.01, beta2=0.99).minimize(loss)
    return loss, {"x": ("float32", [cfg["din"]])}


def m_layer_norm_pairs_adam(cfg):
    # Rows of cfg["hid"] into layer_norm through elementwise ops only (no matmul rounding upstream).
    # With 2 elements a row's input gradient is a tiny difference of O(1) terms, so only a kernel
    # that rounds in Paddle's order gets it; Adam turns that gradient into an O(lr) update.
    x = paddle.static.data("x", [None, cfg["hid"]], "float32")
    w = paddle.static.create_parameter([cfg["hid"]], "float32", name="w_in")
    h = paddle.static.nn.layer_norm(x * w)
    loss = paddle.mean(h * x)
    paddle.optimizer.Adam(learning_rate=cfg["lr"]).minimize(loss)
    return loss, {"x": ("float32", [cfg["hid"]])}


MODELS = {
    "mlp3_sigmoid_sgd": m_mlp3_sigmoid_sgd,
    "mlp_ce_nesterov": m_mlp_ce_nesterov,
    "residual_adam_beta": m_residual_adam_beta,
    "matmul_layernorm_adamw_wd": m_matmul_layernorm_adamw_wd,
    "embedding_seq5": m_embedding_seq5,
    "shared_weight_3x": m_shared_weight_3x,
    "gradient_merge_sgd": m_gradient_merge_sgd,
    "gradient_merge_momentum": m_gradient_merge_momentum,
    "softmax_transpose_4d": m_softmax_transpose_4d,
    "sub_div_sum": m_sub_div_sum,
    "split_cast": m_split_cast,
    "dropout_softlabel": m_dropout_softlabel,
    "gelu_pow_logsigmoid": m_gelu_pow_logsigmoid,
    "var_used_3x": m_var_used_3x,
    "lr_stepdecay_sgd": m_lr_stepdecay_sgd,
    "lr_expdecay_momentum": m_lr_expdecay_momentum,
    "lr_decay_ops_sgd": m_lr_decay_ops_sgd,
    "detach_branch": m_detach_branch,
    "matmul_transpose_linear": m_matmul_transpose_linear,
    "layer_norm_pairs_adam": m_layer_norm_pairs_adam,
}

EXTRA = [
    ("mlp3_sigmoid_sgd", {"din": 5, "h1": 7, "h2": 6, "dout": 2, "lr": 0.05}, 6, 3),
    ("mlp_ce_nesterov", {"din": 7, "hid": 12, "classes": 10}, 8, 3),
    ("residual_adam_beta", {"din": 6, "hid": 10, "beta1": 0.8}, 5, 3),
    ("matmul_layernorm_adamw_wd", {"din": 5, "hid": 9, "wd": 0.1}, 3, 3),
    ("embedding_seq5", {"seq": 5, "vocab": 20, "dim": 3}, 4, 3),
    ("shared_weight_3x", {"hid": 5}, 4, 3),
    ("gradient_merge_sgd", {"din": 5, "hid": 4, "k": 3, "avg": False}, 3, 7),
    ("gradient_merge_momentum", {"din": 4, "hid": 5, "k": 2, "avg": True}, 4, 5),
    ("softmax_transpose_4d", {"a": 2, "b": 3, "c": 4}, 2, 3),
    ("sub_div_sum", {"din": 6, "hid": 4}, 4, 3),
    ("split_cast", {"din": 6, "part": 2, "n": 3}, 4, 3),
    ("dropout_softlabel", {"din": 6, "hid": 8, "classes": 4, "p": 1e-09, "p_infer": 0.25}, 5, 3),
    ("gelu_pow_logsigmoid", {"din": 4, "hid": 6}, 4, 3),
    ("var_used_3x", {"din": 4, "hid": 5}, 3, 3),
    ("lr_stepdecay_sgd", {"din": 4, "hid": 6, "step_size": 1, "gamma": 0.5}, 4, 4),
    ("lr_expdecay_momentum", {"din": 3, "hid": 5, "gamma": 0.9}, 4, 4),
    ("lr_decay_ops_sgd", {"din": 4, "hid": 5, "decay_steps": 2, "decay_rate": 0.5, "staircase": False}, 4, 4),
    ("detach_branch", {"din": 4, "hid": 5}, 4, 3),
    ("matmul_transpose_linear", {"din": 5, "hid": 7}, 4, 3),
    ("dropout_softlabel", {"din": 2, "hid": 2, "classes": 2, "p": 1e-09, "p_infer": 0.0}, 2, 2),
    ("layer_norm_pairs_adam", {"hid": 2, "lr": 0.1}, 2, 3),
]
