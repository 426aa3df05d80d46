"""paddle.create_parameter with a named ParamAttr and a constant initializer (Paddle 3.3.1)."""
import numpy as np

import paddle

paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    w = paddle.create_parameter(
        shape=[2, 3], dtype="float32",
        attr=paddle.ParamAttr(name="my_w", initializer=paddle.nn.initializer.Constant(0.5)))
    b = paddle.create_parameter(shape=[3], dtype="float32", is_bias=True)
    x = paddle.static.data("x", [4, 2], "float32")
    out = paddle.add(paddle.mean(x) * 0.0, b)
print("w:", w.name, w.shape, w.persistable, w.trainable, w.stop_gradient)
print("b:", b.name, b.shape)
print("params:", [p.name for p in main.all_parameters()])
print("startup ops:", [op.type for op in startup.global_block().ops])
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
(res,) = exe.run(main, feed={"x": np.ones((4, 2), "float32")}, fetch_list=[out])
print("out:", res.tolist())
print("w value:", np.asarray(paddle.static.global_scope().find_var("my_w").get_tensor()).tolist())
