import numpy as np
import paddle

paddle.enable_static()
place = paddle.CPUPlace()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [2, 4, 2, 3], "float32")
    x.stop_gradient = False
    gn = paddle.nn.GroupNorm(2, 4)
    inorm = paddle.nn.InstanceNorm2D(4)
    act = paddle.nn.PReLU(4)
    h = act(gn(x) + inorm(x))
    w = paddle.static.data("w", [4, 6], "float32")
    w.stop_gradient = False
    sn = paddle.static.nn.spectral_norm(w, dim=0, power_iters=2)
    loss = paddle.mean(h * h) + paddle.mean(sn * sn)
    grads = paddle.static.gradients([loss], [x, w])
exe = paddle.static.Executor(place)
exe.run(startup)
scope = paddle.static.global_scope()
values = {
    "group_norm_0.w_0": np.array([1.0, 0.5, -0.5, 2.0], "float32"),
    "group_norm_0.b_0": np.array([0.1, 0.0, -0.1, 0.2], "float32"),
    "instance_norm2d_0.w_0": np.array([0.3, 0.6, 0.9, 1.2], "float32"),
    "instance_norm2d_0.b_0": np.array([0.0, 0.1, 0.2, 0.3], "float32"),
    "p_re_lu_0.w_0": np.array([0.1, 0.2, 0.3, 0.4], "float32"),
    "spectral_norm_0.w_0": np.array([1.0, -0.5, 0.25, 0.75], "float32"),
    "spectral_norm_0.w_1": np.linspace(-1.0, 1.0, 6).astype("float32"),
}
for name, value in values.items():
    scope.find_var(name).get_tensor().set(value, place)
xv = (np.arange(48, dtype="float32").reshape(2, 4, 2, 3) % 7 - 3.0) * 0.5
wv = np.cos(np.arange(24, dtype="float32")).reshape(4, 6)
out = exe.run(main, feed={"x": xv, "w": wv}, fetch_list=[h, sn, loss] + grads)
for name, value in zip(["h", "sn", "loss", "dx", "dw"], out):
    print(name, np.asarray(value).shape)
    rounded = np.round(np.asarray(value, "float64"), 4) + 0.0  # (+ 0.0: no -0.0)
    print(" ".join(f"{v:.4f}" for v in rounded.reshape(-1)))
