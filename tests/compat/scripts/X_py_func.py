import numpy as np
import paddle

paddle.enable_static()
calls = []


def scaled_sum(a, b):
    calls.append(("forward", np.array(a).shape))
    return np.array(a) * 2.0 + np.array(b), np.array(a) - np.array(b)


def scaled_sum_grad(a, b, out0, out1, d0, d1):
    calls.append(("backward", len([a, b, out0, out1, d0, d1])))
    d0, d1 = np.array(d0), np.array(d1)
    return d0 * 2.0 + d1, d0 - d1


def cube(x):
    return np.array(x) ** 3


def cube_grad(x, dy):
    return 3.0 * np.array(x) ** 2 * np.array(dy)


main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    a = paddle.static.data("a", shape=[2, 3], dtype="float32")
    b = paddle.static.data("b", shape=[2, 3], dtype="float32")
    a.stop_gradient = False
    b.stop_gradient = False
    block = main.current_block()
    o0 = block.create_var(name="o0", dtype="float32", shape=[2, 3])
    o1 = block.create_var(name="o1", dtype="float32", shape=[2, 3])
    res = paddle.static.py_func(scaled_sum, [a, b], [o0, o1], backward_func=scaled_sum_grad)
    c = block.create_var(name="c", dtype="float32", shape=[2, 3])
    paddle.static.py_func(cube, o0, c, backward_func=cube_grad, skip_vars_in_backward_input=c)
    paddle.static.py_func(lambda t: None, c, None)
    loss = paddle.mean(c * o1)
    paddle.static.append_backward(loss)
print([v.name for v in res])
for op in main.global_block().ops:
    if op.type == "py_func":
        print(op.input("X"), op.output("Out"), op.attr("backward_skip_vars"), op.attr("backward_callable_id") >= 0)

exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
feed = {"a": np.arange(6, dtype="float32").reshape(2, 3) / 4, "b": np.ones((2, 3), "float32")}
for name, v in zip(["c", "o1", "loss", "a@GRAD", "b@GRAD"], exe.run(main, feed=feed, fetch_list=["c", "o1", loss, "a@GRAD", "b@GRAD"])):
    print(name, np.round(v, 5).tolist())
print(calls)
