# The mode switches and what they report, before and after enable_static / disable_static.
import paddle
from paddle import base

print("import:", paddle.in_dynamic_mode(), base.in_dygraph_mode(), base.framework.in_dygraph_mode())
print("or_pir:", paddle.framework.in_dynamic_or_pir_mode(), "pir:", paddle.framework.in_pir_mode())
paddle.enable_static()
print("enable_static:", paddle.in_dynamic_mode(), paddle.framework.in_dynamic_mode(), base.in_dygraph_mode())
print("or_pir:", paddle.framework.in_dynamic_or_pir_mode(), "pir:", paddle.framework.in_pir_mode())
paddle.disable_static()
print("disable_static:", paddle.in_dynamic_mode(), base.framework.in_dygraph_mode())
base.disable_dygraph()
print("base.disable_dygraph:", paddle.in_dynamic_mode())
base.enable_dygraph()
print("base.enable_dygraph:", paddle.in_dynamic_mode())
paddle.disable_static("cpu")
print("disable_static twice:", paddle.in_dynamic_mode())
paddle.enable_static()
paddle.enable_static()
print("enable_static twice:", paddle.in_dynamic_mode())
print("same functions:", paddle.disable_static is base.enable_dygraph, paddle.enable_static is base.disable_dygraph,
      paddle.in_dynamic_mode is base.framework.in_dygraph_mode)
with paddle.pir_utils.OldIrGuard():
    print("OldIrGuard:", paddle.framework.in_pir_mode(), paddle.in_dynamic_mode())
print("after OldIrGuard:", paddle.framework.in_pir_mode())

# a program built in static mode, then printed op by op
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [None, 3], "float32")
    y = paddle.mean(x * 2.0)
print([op.type for op in main.global_block().ops], y.name)
