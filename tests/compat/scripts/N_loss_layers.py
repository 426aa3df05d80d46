import numpy as np
import paddle
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data('x', [-1, 4], 'float32')
    y = paddle.static.data('y', [-1, 1], 'int64')
    z = paddle.static.data('z', [-1, 4], 'float32')
    l = paddle.nn.loss.CrossEntropyLoss()
    print(l, l.full_name(), paddle.nn.loss.CrossEntropyLoss is paddle.nn.CrossEntropyLoss)
    a = l(x, y)
    b = paddle.nn.MSELoss()(x, z)
    c = paddle.nn.BCEWithLogitsLoss()(x, z)
    print([op.type for op in main.global_block().ops])
exe = paddle.static.Executor(paddle.CPUPlace())
xv = np.linspace(-1, 1, 8).reshape(2, 4).astype('float32')
zv = np.linspace(0, 1, 8).reshape(2, 4).astype('float32')
r = exe.run(main, feed={'x': xv, 'y': np.array([[1], [3]]), 'z': zv}, fetch_list=[a, b, c])
print([np.round(v, 5) for v in r])
