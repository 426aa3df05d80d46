# paddle.base.DataFeeder: samples become batched feeds of each variable's dtype and shape.
import numpy as np
import paddle
from paddle import base

paddle.enable_static()
place = paddle.CPUPlace()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    img = paddle.static.data(name="img", shape=[None, 2, 2], dtype="float32")
    label = paddle.static.data(name="label", shape=[None, 1], dtype="int64")
    flat = paddle.static.data(name="flat", shape=[-1, 3], dtype="float64")
    out = img * 2.0


def reader():
    for i in range(3):
        yield np.arange(4, dtype="float32") + i, [i], [float(i), i + 0.5, 2.0]


feeder = base.DataFeeder([img, "label", flat], place, program=main)
feed = feeder.feed(reader())
print(sorted(feed))
for name in ("img", "label", "flat"):
    arr = np.array(feed[name])
    print(name, arr.dtype, arr.shape, arr.tolist())
exe = paddle.static.Executor(place)
exe.run(startup)
res, = exe.run(main, feed=feed, fetch_list=[out])
print(res.tolist())
feeder2 = base.DataFeeder(feed_list=[label], place=place)  # the default main program's variables by object
print(np.array(feeder2.feed([([5],), ([6],)])["label"]).tolist())
