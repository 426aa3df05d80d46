import numpy as np
import paddle

paddle.enable_static()
F = paddle.nn.functional


def values(shape, k):
    """Small fixed multiples of 1/8 (exact in float32)."""
    n = int(np.prod(shape))
    return (((np.arange(n) * k) % 11 - 5) / 8.0).astype("float32").reshape(shape)


main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x2 = paddle.static.data("x2", [2, 4, 3, 3], "float32")
    x2.stop_gradient = False
    x3 = paddle.static.data("x3", [1, 2, 2, 3, 3], "float32")
    x3.stop_gradient = False
    x1 = paddle.static.data("x1", [2, 2, 5], "float32")
    outs = [
        paddle.static.nn.conv2d_transpose(x2, 4, filter_size=3, stride=2, padding=1, groups=2),
        paddle.static.nn.conv2d_transpose(x2, 2, output_size=[8, 7], stride=2, padding=[1, 0]),
        paddle.nn.Conv2DTranspose(4, 6, 2, stride=2, output_padding=1, dilation=1)(x2),
        paddle.nn.Conv2DTranspose(4, 4, 3, groups=4, padding=1, data_format="NCHW")(x2),
        paddle.static.nn.conv3d_transpose(x3, 3, filter_size=2, stride=[1, 2, 2], act="relu"),
        paddle.nn.Conv3DTranspose(2, 2, 2, stride=2, padding=1)(x3, output_size=[2, 5, 4]),
        paddle.static.nn.conv3d(x3, 2, filter_size=[2, 2, 2], padding=1),
        paddle.nn.Conv3D(2, 4, 2, groups=2, data_format="NCDHW")(x3),
        paddle.nn.Conv1DTranspose(2, 3, 3, stride=2, padding=1)(x1),
        paddle.nn.Conv1D(2, 3, 2)(x1),
    ]
    loss = outs[0].mean()
    for o in outs[1:]:
        loss = loss + o.mean()
    grads = paddle.static.append_backward(loss)

exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
scope = paddle.static.global_scope()
params = sorted(p.name for p in main.all_parameters())
for i, name in enumerate(params):
    t = scope.find_var(name).get_tensor()
    shape = np.array(t).shape
    t.set(values(shape, 3 + i), paddle.CPUPlace())
feed = {"x2": values([2, 4, 3, 3], 5), "x3": values([1, 2, 2, 3, 3], 7), "x1": values([2, 2, 5], 2)}
fetch = outs + [x2.name + "@GRAD", x3.name + "@GRAD"] + [p + "@GRAD" for p in params]
res = exe.run(main, feed=feed, fetch_list=fetch)
names = [o.name for o in outs] + fetch[len(outs):]
for name, r in zip(names, res):
    print(name, r.shape, np.round(r.astype("float64").sum(), 4))
    print((np.round(r.reshape(-1)[:12], 4) + 0.0).tolist())  # + 0.0: no signed zeros
