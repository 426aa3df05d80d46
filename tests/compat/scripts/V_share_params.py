import paddle

paddle.enable_static()
startup = paddle.static.Program()
train, test = paddle.static.Program(), paddle.static.Program()


def net():
    x = paddle.static.data("x", [None, 4], "float32")
    h = paddle.static.nn.fc(x, 3, weight_attr=paddle.ParamAttr(name="shared_w"))
    h2 = paddle.static.nn.fc(x, 3, weight_attr=paddle.ParamAttr(name="shared_w"))
    d = paddle.nn.functional.dropout(h + h2, 0.5)
    return paddle.mean(d)


with paddle.static.program_guard(train, startup):
    with paddle.utils.unique_name.guard():
        loss = net()
        paddle.optimizer.SGD(0.1).minimize(loss)
with paddle.static.program_guard(test, startup):
    with paddle.utils.unique_name.guard():
        tloss = net()
print([p.name for p in train.all_parameters()])
print([p.name for p in test.all_parameters()])
print([op.type for op in startup.global_block().ops])
print([v.name for v in startup.list_vars()])
print(test)
print(train.clone(for_test=True))
print(train.clone().global_block().ops[3])
