"""Dropout after paddle.seed: the mask Paddle's CPU kernel draws, in both modes."""
import numpy as np
import paddle
import paddle.static as static

paddle.enable_static()
paddle.seed(102)
main, startup = static.Program(), static.Program()
with static.program_guard(main, startup):
    x = static.data(name="x", shape=[3, 5], dtype="float32")
    up = paddle.nn.functional.dropout(x, p=0.4)
    down = paddle.nn.functional.dropout(x, p=0.25, mode="downscale_in_infer")
    layer = paddle.nn.Dropout(p=0.5)
    y = layer(x)
exe = static.Executor(paddle.CPUPlace())
exe.run(startup)
feed = {"x": np.arange(1, 16, dtype="float32").reshape(3, 5)}
for step in range(2):
    for o in exe.run(main, feed=feed, fetch_list=[up, down, y]):
        print(o)
