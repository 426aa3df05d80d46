import sys
import numpy as np
import paddle
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data('x', [-1, 3], 'float32')
    x.stop_gradient = False
    y = paddle.static.Print(x, message="input:", summarize=4)
    loss = paddle.mean(y * 3.0)
    paddle.static.append_backward(loss)
print([op.type for op in main.global_block().ops])
sys.stdout.flush()
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(main, feed={'x': np.arange(6, dtype='float32').reshape(2, 3)})
