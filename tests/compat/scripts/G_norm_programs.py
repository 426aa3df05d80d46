import paddle

paddle.enable_static()
F = paddle.nn.functional


def show(title, build, shape):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", shape, "float32")
        x.stop_gradient = False
        y = build(x)
        paddle.static.append_backward(paddle.mean(y))
    print("==", title, y.name, y.shape)
    for op in startup.global_block().ops:
        print("  startup", op.type, op.output("Out"), op.attr("shape"))
    for op in main.global_block().ops:
        if op.type in ("reduce_mean", "reduce_mean_grad", "fill_constant"):
            continue
        ins = {n: op.input(n) for n in sorted(op.input_names) if op.input(n)}
        outs = {n: op.output(n) for n in sorted(op.output_names) if op.output(n)}
        print("  ", op.type, ins, outs)
    for name in sorted(main.global_block().vars):
        v = main.global_block().var(name)
        if not name.startswith("x"):
            print("   var", name, v.shape, v.persistable, v.stop_gradient)


show("static group_norm", lambda x: paddle.static.nn.group_norm(x, groups=2), [2, 4, 3, 3])
show("static group_norm NHWC with params", lambda x: paddle.static.nn.group_norm(
    x, groups=3, param_attr=paddle.ParamAttr(name="gn_w"), bias_attr=paddle.ParamAttr(name="gn_b"),
    data_layout="NHWC"), [2, 3, 3, 6])
show("nn.GroupNorm", lambda x: paddle.nn.GroupNorm(2, 4)(x), [2, 4, 5])
show("static instance_norm", lambda x: paddle.static.nn.instance_norm(x), [2, 3, 4, 4])
show("nn.InstanceNorm3D", lambda x: paddle.nn.InstanceNorm3D(3)(x), [2, 3, 2, 2, 2])
show("static prelu element", lambda x: paddle.static.nn.prelu(x, "element"), [2, 3, 4])
show("static prelu channel NHWC", lambda x: paddle.static.nn.prelu(x, "channel", data_format="NHWC"), [2, 3, 4])
show("nn.PReLU", lambda x: paddle.nn.PReLU(3, init=0.1)(x), [2, 3, 4])
show("static spectral_norm", lambda x: paddle.static.nn.spectral_norm(x, dim=0, power_iters=3), [4, 6])
show("nn.SpectralNorm", lambda x: paddle.nn.SpectralNorm([3, 4, 2], dim=1)(x), [3, 4, 2])
