"""paddle.base / paddle.framework / top-level names and the dynamic-mode switch (Paddle 3.3.1)."""
import numpy as np

import paddle

print("dynamic before enable_static:", paddle.in_dynamic_mode())
paddle.enable_static()
print("dynamic after enable_static:", paddle.in_dynamic_mode())
print("framework.in_dynamic_mode:", paddle.framework.in_dynamic_mode())

import paddle.base as base
from paddle.base import framework, unique_name
from paddle.framework import CPUPlace, ParamAttr

print("base.Program is static.Program:", base.Program is paddle.static.Program)
print("base.framework.Program is base.Program:", framework.Program is base.Program)
print("base.Executor is static.Executor:", base.Executor is paddle.static.Executor)
print("framework.ParamAttr is paddle.ParamAttr:", ParamAttr is paddle.ParamAttr)
print("base.program_guard is static.program_guard:", base.program_guard is paddle.static.program_guard)
print("fleet reachable:", hasattr(paddle.distributed, "fleet"))
print("pir:", paddle.framework.in_pir_mode(), "dygraph:", base.framework.in_dygraph_mode(),
      "dynamic or pir:", base.framework.in_dynamic_or_pir_mode())
print("CPUPlace:", isinstance(paddle.framework.CPUPlace(), paddle.CPUPlace), base.CPUPlace is paddle.CPUPlace)

main, startup = base.Program(), base.Program()
with base.program_guard(main, startup):
    with unique_name.guard():
        x = paddle.static.data("x", [2, 3], "float32")
        y = paddle.scale(x, scale=2.0, bias=1.0)
        z = paddle.mean(y)
print("names:", x.name, y.name, z.name)
exe = base.Executor(CPUPlace())
exe.run(startup)
out_y, out_z = exe.run(main, feed={"x": np.arange(6, dtype="float32").reshape(2, 3)}, fetch_list=[y, z])
print("y:", out_y.tolist())
print("z:", float(out_z))
print("ops:", [op.type for op in main.global_block().ops])
