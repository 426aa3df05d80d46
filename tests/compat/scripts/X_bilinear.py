import numpy as np
import paddle

paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", shape=[-1, 3], dtype="float32")
    y = paddle.static.data("y", shape=[-1, 2], dtype="float32")
    x.stop_gradient = False
    y.stop_gradient = False
    out = paddle.static.nn.bilinear_tensor_product(x, y, size=4, act="tanh")
    layer = paddle.nn.Bilinear(3, 2, 4)
    out2 = layer(x, y)
    w3 = paddle.static.create_parameter([4, 3, 2], "float32")
    out3 = paddle.nn.functional.bilinear(x, y, w3)
    loss = paddle.mean(out) + paddle.mean(out2 * out3)
    paddle.static.append_backward(loss)
for op in main.global_block().ops:
    print(op.type, {n: op.input(n) for n in sorted(op.input_names)}, {n: op.output(n) for n in sorted(op.output_names)})
print(out.name, out.shape, out2.name, out3.name)
print([(p.name, p.shape) for p in main.all_parameters()])
print(layer.extra_repr())

exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
scope = paddle.static.global_scope()
rng = np.random.RandomState(3)
for p in main.all_parameters():
    scope.find_var(p.name).get_tensor().set(rng.uniform(-1, 1, p.shape).astype("float32"), paddle.CPUPlace())
feed = {"x": rng.uniform(-1, 1, (5, 3)).astype("float32"), "y": rng.uniform(-1, 1, (5, 2)).astype("float32")}
fetch = [out, out2, out3, "x@GRAD", "y@GRAD", "bilinear_tensor_product_0.w_0@GRAD",
         "bilinear_tensor_product_0.b_0@GRAD", "bilinear_0.w_0@GRAD", "bilinear_0.b_0@GRAD", w3.name + "@GRAD"]
for name, value in zip(["out", "out2", "out3", "dx", "dy", "dw", "db", "dw2", "db2", "dw3"], exe.run(main, feed=feed, fetch_list=fetch)):
    print(name, value.shape, np.round(value, 5).tolist())
