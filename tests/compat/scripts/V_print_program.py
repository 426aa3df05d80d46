import paddle

paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [None, 4], "float32")
    h = paddle.static.nn.fc(x, 3)
    z = paddle.add(h, h)
    loss = paddle.mean(z)
    print(main)
    paddle.optimizer.SGD(0.1).minimize(loss)
print(startup)
for op in main.global_block().ops:
    print(op)
print(main.global_block().var("fc_0.w_0"))
print(repr(x), x.grad_name, x.ndimension(), x.dim(), x.element_size())
print(main.num_blocks, [p.name for p in main.all_parameters()])
try:
    main.global_block().var("nope")
except ValueError as e:
    print("ValueError", e)
