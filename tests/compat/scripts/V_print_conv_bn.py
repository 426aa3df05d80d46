import paddle

paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    img = paddle.static.data("img", [None, 1, 4, 4], "float32")
    c = paddle.static.nn.conv2d(img, 2, 3, padding=1)
    b = paddle.static.nn.batch_norm(c)
    p = paddle.nn.functional.max_pool2d(b, 2)
    w = paddle.static.create_parameter([3], "float32", attr=paddle.ParamAttr(name="frozen", trainable=False))
    loss = paddle.mean(p)
print(main)
print(startup)
test = main.clone(for_test=True)
print(test.global_block().ops[2])
