# paddle.is_grad_enabled / set_grad_enabled / no_grad / enable_grad, before and after enable_static.
import numpy as np
import paddle

print("import:", paddle.is_grad_enabled())
with paddle.set_grad_enabled(False):
    print("in set_grad_enabled(False):", paddle.is_grad_enabled())
print("after:", paddle.is_grad_enabled())
paddle.set_grad_enabled(False)
print("set_grad_enabled(False) call:", paddle.is_grad_enabled())
paddle.set_grad_enabled(True)
paddle.enable_static()
print("static:", paddle.is_grad_enabled())
with paddle.no_grad():
    print("no_grad:", paddle.is_grad_enabled())
    with paddle.enable_grad():
        print("enable_grad inside no_grad:", paddle.is_grad_enabled())
    print("back in no_grad:", paddle.is_grad_enabled())
print("after no_grad:", paddle.is_grad_enabled())


@paddle.no_grad()
def decorated(a):
    return a, paddle.is_grad_enabled()


print("decorated:", decorated(7), paddle.is_grad_enabled())


@paddle.no_grad()
def gen():
    for i in range(2):
        yield i, paddle.is_grad_enabled()


print("generator:", list(gen()), paddle.is_grad_enabled())
print("decorated name:", decorated.__name__)

# in static mode the switch changes nothing that is built
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [2, 3], "float32")
    x.stop_gradient = False
    with paddle.no_grad():
        y = x * 2.0
    loss = paddle.mean(y)
    grads = paddle.static.gradients([loss], [x])
print("y.stop_gradient:", y.stop_gradient, "grad:", grads[0].name)
exe = paddle.static.Executor(paddle.CPUPlace())
g, = exe.run(main, feed={"x": np.ones([2, 3], "float32")}, fetch_list=[grads[0]])
print(g.tolist())
