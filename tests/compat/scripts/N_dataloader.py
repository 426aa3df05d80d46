"""paddle.base.io.DataLoader.from_generator feeding a static program (Paddle 3.3.1)."""
import numpy as np

import paddle
from paddle.base import io as base_io

paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [None, 2], "float32")
    s = paddle.mean(x * 3.0)
    loader = base_io.DataLoader.from_generator(feed_list=[x], capacity=4, iterable=True)


def batches():
    for k in range(3):
        yield [np.full((2, 2), k, "float32")]


loader.set_batch_generator(batches, places=[paddle.CPUPlace()])
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
for data in loader():
    (v,) = exe.run(main, feed=data, fetch_list=[s])
    print("mean:", float(v))
