import paddle

paddle.enable_static()
F = paddle.nn.functional
SKIP = ("op_callstack", "op_namescope", "op_device", "with_quant_attr", "op_role_var")


def show(program):
    for op in program.global_block().ops:
        ins = {n: op.input(n) for n in sorted(op.input_names)}
        outs = {n: op.output(n) for n in sorted(op.output_names)}
        print(op.type, ins, outs, sorted((a, op.attr(a)) for a in op.attr_names if a not in SKIP))
    for v in program.global_block().vars.values():
        print("  var", v.name, tuple(v.shape), v.persistable, v.stop_gradient)


main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [None, 4, 5, 5], "float32")
    x3 = paddle.static.data("x3", [None, 4, 3, 5, 5], "float32")
    x1 = paddle.static.data("x1", [None, 4, 7], "float32")
    ys = [
        paddle.static.nn.conv2d_transpose(x, 2, filter_size=3, padding="SAME", stride=2, act="relu"),
        paddle.static.nn.conv2d_transpose(x, 4, filter_size=[3, 2], groups=4, use_cudnn=False,
                                          padding=[1, 1, 0, 1], data_format="NCHW"),
        paddle.static.nn.conv2d_transpose(x, 3, output_size=12, stride=2, dilation=2),
        paddle.static.nn.conv3d(x3, 2, 3, padding="VALID", groups=2, act="relu"),
        paddle.static.nn.conv3d_transpose(x3, 4, filter_size=[1, 3, 3], stride=[1, 2, 2], padding=[0, 1, 1]),
        paddle.static.nn.conv3d_transpose(x3, 2, output_size=[4, 7, 7], bias_attr=False),
        paddle.nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1, output_padding=1)(x),
        paddle.nn.Conv2DTranspose(4, 4, 3, groups=4, data_format="NCHW")(x, output_size=[7, 7]),
        paddle.nn.Conv1DTranspose(4, 2, 3, stride=2, padding=1, output_padding=1)(x1),
        paddle.nn.Conv1D(4, 2, 3, padding=1)(x1),
        paddle.nn.Conv3D(4, 2, 3, padding=1, stride=2)(x3),
        paddle.nn.Conv3DTranspose(4, 2, 2, stride=2, bias_attr=False)(x3),
        F.conv3d_transpose(x3, paddle.static.create_parameter([4, 1, 2, 2, 2], "float32"), groups=2),
    ]
    print([y.shape for y in ys])
    loss = paddle.mean(ys[0])
    for y in ys[1:]:
        loss = loss + paddle.mean(y)
    paddle.static.append_backward(loss)
show(main)
print("---- startup")
show(startup)
print(paddle.nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1, output_padding=1))
print(paddle.nn.Conv3DTranspose(4, 6, [1, 2, 2], groups=2, dilation=2, data_format="NDHWC"))
print(paddle.nn.Conv1D(4, 6, 3, padding=1, padding_mode="reflect"))
print(paddle.nn.Conv3D(4, 6, 3, stride=[1, 2, 2]))


def bad(build):
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        try:
            build()
            print("built")
        except ValueError:
            print("ValueError")


d4 = lambda: paddle.static.data("d", [None, 4, 5, 5], "float32")
d5 = lambda: paddle.static.data("d", [None, 4, 3, 5, 5], "float32")
bad(lambda: paddle.static.nn.conv2d_transpose(d4(), 2))                      # no filter_size, no output_size
bad(lambda: paddle.static.nn.conv2d_transpose(d4(), 2, filter_size=3, data_format="NCDHW"))
bad(lambda: paddle.static.nn.conv2d_transpose(d5(), 2, filter_size=3))      # 5-D input
bad(lambda: paddle.static.nn.conv3d(d4(), 2, 3))                            # 4-D input
bad(lambda: paddle.static.nn.conv3d(d5(), 2, 3, groups=3))
bad(lambda: paddle.static.nn.conv3d_transpose(d5(), 3, filter_size=3, groups=2))
bad(lambda: paddle.static.nn.conv3d_transpose(d5(), 2, filter_size=3, data_format="NCHW"))
bad(lambda: F.conv2d_transpose(d4(), paddle.static.create_parameter([3, 2, 3, 3], "float32")))
bad(lambda: F.conv2d_transpose(d4(), paddle.static.create_parameter([4, 2, 3, 3], "float32"), groups=3))
bad(lambda: F.conv2d_transpose(d4(), paddle.static.create_parameter([4, 2, 3, 3], "float32"),
                               output_size=[7, 7], output_padding=1))
bad(lambda: F.conv3d(d5(), paddle.static.create_parameter([2, 4, 3, 3], "float32")))
bad(lambda: F.conv3d_transpose(d5(), paddle.static.create_parameter([4, 2, 3, 3, 3], "float32"),
                               data_format="NHWC"))
bad(lambda: paddle.nn.Conv3D(4, 2, 3, groups=3))
bad(lambda: paddle.nn.Conv1DTranspose(4, 2, 3, data_format="NCHW"))
