# paddle.to_tensor in static mode: the ops it builds, their names and attrs, and the values it gives.
import numpy as np
import paddle

paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    vs = [paddle.to_tensor(1), paddle.to_tensor(2.5), paddle.to_tensor([1.0, 2.0]),
          paddle.to_tensor(np.arange(4, dtype="float64").reshape([2, 2])),
          paddle.to_tensor([[1, 2]], dtype="float32", stop_gradient=False), paddle.to_tensor(True),
          paddle.to_tensor(np.int32(3)), paddle.to_tensor([1, 2], dtype="int64"),
          paddle.to_tensor([[1, 2], [3, 4]], place=paddle.CPUPlace())]
    x = paddle.static.data("x", [2], "float32")
    same = paddle.to_tensor(x)
    as_int = paddle.to_tensor(x, dtype="int64")
    with paddle.static.name_scope("scope"):
        z = x + paddle.to_tensor(1.0)
print("same var:", same is x, as_int.name, z.name)
for v in vs:
    print(v.name, v.shape, v.stop_gradient, v.persistable)
for op in main.global_block().ops:
    attrs = {a: op.attr(a) for a in ("shape", "dtype", "in_dtype", "out_dtype") if op.has_attr(a)}
    print(op.type, {n: op.input(n) for n in op.input_names}, {n: op.output(n) for n in op.output_names},
          attrs, op.attr("op_device"), op.attr("op_namescope"))
exe = paddle.static.Executor(paddle.CPUPlace())
outs = exe.run(main, feed={"x": np.array([0.5, 1.5], "float32")}, fetch_list=vs + [as_int, z])
for o in outs:
    print(o.dtype, o.shape, o.tolist())
