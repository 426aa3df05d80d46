import numpy as np
import paddle

paddle.enable_static()
paddle.seed(1)
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [None, 4], "float32")
    c = x.clone()
    h = paddle.static.nn.fc(c, 2, weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.5)))
    s = paddle.add(h, h)
    d = paddle.subtract(s, h, name="diff")
    loss = paddle.mean(d)
    paddle.optimizer.SGD(0.1).minimize(loss)
print(c.name, c.stop_gradient, s.name, d.name, loss.name)
print(x.grad_name, x.dim(), x.ndimension(), x.element_size(), h.element_size())
print(main.num_blocks, main.block(0) is main.global_block(), main.global_block().has_var("x"))
print([p.name for p in main.all_parameters()], [v.name for v in main.list_vars()][:4])
exe = paddle.static.Executor(paddle.CPUPlace())
scope = paddle.static.Scope()
with paddle.static.scope_guard(scope):
    exe.run(startup)
    w = main.global_block().var("fc_0.w_0")
    print(np.array(w.get_value()).tolist())
    w.set_value(np.full((4, 2), 2.0, "float32"))
    state = main.state_dict("param")
    print(sorted(state), sorted(main.state_dict("opt")), sorted(main.state_dict()))
    print(np.array(state["fc_0.w_0"]).tolist())
    out, = exe.run(main, feed={"x": np.ones((3, 4), "float32")}, fetch_list=[loss])
    print(float(out))
    main.set_state_dict({"fc_0.b_0": np.array([1.0, -1.0], "float32")})
    print(np.array(main.state_dict("param")["fc_0.b_0"]).tolist())
    try:
        w.set_value(np.ones(3, "float32"))
    except ValueError as e:
        print("ValueError", e)
try:
    w.get_value(paddle.static.Scope())
except ValueError as e:
    print("ValueError", e)
try:
    main.global_block().var(1)
except TypeError as e:
    print("TypeError", e)
try:
    main.state_dict("bad")
except ValueError as e:
    print("ValueError", e)
main.global_seed(5)
print(main.random_seed, paddle.static.Program().random_seed)
