import numpy as np
import paddle
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
main.random_seed = startup.random_seed = 7
with paddle.static.program_guard(main, startup):
    x = paddle.static.data('x', [4, 6], 'float32')
    y = paddle.nn.functional.dropout(x, 0.5)
d = [op for op in main.global_block().ops if op.type == 'dropout'][0]
print(d.attr('seed'), d.attr('fix_seed'))
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
for _ in range(2):
    print(exe.run(main, feed={'x': np.ones((4, 6), 'float32')}, fetch_list=[y])[0].astype(int).tolist())
