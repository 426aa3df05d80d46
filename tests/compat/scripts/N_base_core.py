"""paddle.base.core as static scripts touch it: places, Scope, VarDesc.VarType (Paddle 3.3.1)."""
import numpy as np

import paddle
from paddle.base import core

paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [2, 2], "float32")
    i = paddle.static.data("i", [2], "int64")
    y = paddle.nn.functional.relu(x)
print("x fp32:", x.dtype == core.VarDesc.VarType.FP32, "i int64:", i.dtype == core.VarDesc.VarType.INT64)
print("x fp64:", x.dtype == core.VarDesc.VarType.FP64)
print("dense:", x.type == core.VarDesc.VarType.LOD_TENSOR)
print("dtype is paddle.float32:", x.dtype == paddle.float32)
scope = core.Scope()
exe = paddle.static.Executor(core.CPUPlace())
with paddle.static.scope_guard(scope):
    exe.run(startup)
    (out,) = exe.run(main, feed={"x": np.array([[-1, 2], [3, -4]], "float32"), "i": np.array([0, 1])},
                     fetch_list=[y])
print("relu:", out.tolist())
print("global scope has x:", paddle.static.global_scope().find_var("x") is not None)
print("base.Scope is core.Scope:", paddle.base.Scope is core.Scope)
