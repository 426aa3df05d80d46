"""paddle.static.InputSpec: construction, repr, batch / unbatch, from_numpy / from_tensor (Paddle 3.3.1)."""
import numpy as np

import paddle
from paddle.static import InputSpec

paddle.enable_static()
s = InputSpec([None, 784], "float32", "x")
print(s)
print(s.shape, s.name, s.stop_gradient)
print(InputSpec(shape=[4], dtype="int64"))
print(InputSpec([2, 3], "float64", "y", stop_gradient=True))
print(InputSpec([8, 3]).unbatch())
b = InputSpec([3], "float32", "b")
print(b.batch(16) is b, b)
print(InputSpec.from_numpy(np.ones((2, 5), "int32"), name="n"))
main = paddle.static.Program()
with paddle.static.program_guard(main, paddle.static.Program()):
    v = paddle.static.data("img", [None, 1, 28, 28], "float32")
print(InputSpec.from_tensor(v))
for bad in ("abc", 5):
    try:
        InputSpec(bad)
    except (TypeError, ValueError) as e:
        print("rejected", repr(bad))
try:
    InputSpec([]).unbatch()
except ValueError as e:
    print("unbatch rejected:", "len(shape) == 0" in str(e))
