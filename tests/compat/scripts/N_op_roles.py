"""core.op_proto_and_checker_maker: the op_role attr of a small SGD program, read the way fleet code reads it."""
import paddle
from paddle.base import core

paddle.enable_static()
maker = core.op_proto_and_checker_maker
role_key, role_var_key = maker.kOpRoleAttrName(), maker.kOpRoleVarAttrName()
print("attr names:", role_key, role_var_key, maker.kOpDeviceAttrName(), maker.kOpNameScopeAttrName())
print("compiled with cuda:", core.is_compiled_with_cuda())
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [4, 3], "float32")
    loss = paddle.mean(paddle.static.nn.fc(x, 2))
    paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
backward, optimize = int(maker.OpRole.Backward), int(maker.OpRole.Optimize)
for op in main.global_block().ops:
    role = int(op.attr(role_key))
    kind = "optimize" if role & optimize else "backward" if role & backward else "forward"
    print(f"{op.type:28s} role={role:<4d} {kind:9s} {op.attr(role_var_key)}")
