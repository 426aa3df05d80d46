import numpy as np
import paddle
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
main.random_seed = startup.random_seed = 5
with paddle.static.program_guard(main, startup):
    x = paddle.static.data('x', [2, 3], 'float32')
    y = paddle.static.nn.fc(x, 4)
    w = paddle.create_parameter([3, 2], 'float32', default_initializer=paddle.nn.initializer.Normal(0.0, 1.0))
print([(op.type, op.attr('seed')) for op in startup.global_block().ops if op.has_attr('seed')])
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
for p in main.global_block().all_parameters():
    print(p.name, np.round(np.array(paddle.static.global_scope().find_var(p.name).get_tensor()), 6).tolist())
