"""paddle.seed, then the startup program's random initialisers: the very numbers Paddle draws."""
import numpy as np
import paddle
import paddle.static as static

paddle.enable_static()
paddle.seed(2023)
main, startup = static.Program(), static.Program()
with static.program_guard(main, startup):
    x = static.data(name="x", shape=[-1, 8], dtype="float32")
    h = static.nn.fc(x, size=4)
    n = static.create_parameter([5], "float32", default_initializer=paddle.nn.initializer.Normal(0.0, 0.02))
    u = static.create_parameter([2, 3], "float64", default_initializer=paddle.nn.initializer.Uniform(-0.5, 0.5))
    k = static.create_parameter([7], "float32", default_initializer=paddle.nn.initializer.XavierNormal())
exe = static.Executor(paddle.CPUPlace())
exe.run(startup)
scope = static.global_scope()
np.set_printoptions(precision=8, suppress=True)
for name in ["fc_0.w_0", n.name, u.name, k.name]:
    a = np.array(scope.find_var(name).get_tensor())
    print(name, a.dtype, a.shape)
    print(a)
out, = exe.run(main, feed={"x": np.ones((2, 8), "float32")}, fetch_list=[h])
print(out)
