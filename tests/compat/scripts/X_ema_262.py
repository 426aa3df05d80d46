# Recorded with Paddle 2.6.2 (/tmp/pd26/bin/python X_ema_262.py > ../expected/X_ema_262.txt): the legacy-IR
# ExponentialMovingAverage of Paddle 3.3.1 raises TypeError (its static.nn.cond calls a PIR-only logical_not).
import numpy as np
import paddle
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data(name='x', shape=[-1, 2], dtype='float32')
    w_attr = paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.5))
    h = paddle.static.nn.fc(x, size=2, weight_attr=w_attr)
    cost = paddle.mean(h)
    paddle.optimizer.SGD(learning_rate=0.5).minimize(cost)
    ema = paddle.static.ExponentialMovingAverage(0.5)
    ema.update()
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
feed = np.array([[1.0, 2.0], [3.0, -1.0]], dtype='float32')
scope = paddle.static.global_scope()
for step in range(3):
    exe.run(main, feed={'x': feed}, fetch_list=[cost])
    print("step", step, "w", np.array(scope.find_var('fc_0.w_0').get_tensor()).round(6).tolist(),
          "ema", np.array(scope.find_var('fc_0.w_0_ema_0').get_tensor()).round(6).tolist())
with ema.apply(exe):
    print("applied w", np.array(scope.find_var('fc_0.w_0').get_tensor()).round(6).tolist())
    print("applied b", np.array(scope.find_var('fc_0.b_0').get_tensor()).round(6).tolist())
print("restored w", np.array(scope.find_var('fc_0.w_0').get_tensor()).round(6).tolist())
with ema.apply(exe, need_restore=False):
    pass
print("kept w", np.array(scope.find_var('fc_0.w_0').get_tensor()).round(6).tolist())
ema.restore(exe)
print("restored again w", np.array(scope.find_var('fc_0.w_0').get_tensor()).round(6).tolist())
print("counter", np.array(scope.find_var('@EMA_STEP_COUNTER@').get_tensor()).tolist())
