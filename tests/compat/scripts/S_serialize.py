import os
import tempfile

import numpy as np
import paddle

paddle.enable_static()
paddle.seed(11)
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    image = paddle.static.data(name='img', shape=[None, 8], dtype='float32')
    hidden = paddle.static.nn.fc(image, 6, activation='relu')
    hidden = paddle.nn.functional.dropout(hidden, p=0.5)
    predict = paddle.static.nn.fc(hidden, 4, activation='tanh')
    loss = paddle.mean(paddle.square(predict))
    paddle.optimizer.SGD(learning_rate=0.1).minimize(loss)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)


def show(program):
    for op in program.global_block().ops:
        extra = {a: op.attr(a) for a in ("col", "is_test") if op.has_attr(a)}
        print(" ", op.type, {k: op.input(k) for k in sorted(op.input_names)},
              {k: op.output(k) for k in sorted(op.output_names)},
              extra)
    print("  vars:", [(v.name, v.persistable, v.stop_gradient) for v in program.list_vars()])


print("normalize_program:")
normalized = paddle.static.normalize_program(main, [image], [predict])
show(normalized)
print("original keeps its ops:", len(main.global_block().ops))
print("skip_prune_program:")
unpruned = paddle.static.normalize_program(main, [image], [predict], skip_prune_program=True)
print(" ", [op.type for op in unpruned.global_block().ops])

print("program bytes round trip:")
data = paddle.static.serialize_program([image], [predict], program=main)
print(" ", type(data).__name__)
program = paddle.static.deserialize_program(data)
show(program)

print("persistable bytes round trip:")
params = paddle.static.serialize_persistables([image], [predict], exe, program=main)
print(" ", type(params).__name__)
scope = paddle.static.global_scope()
saved = {n: np.array(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0")}
for n in saved:
    scope.find_var(n).get_tensor().set(np.zeros_like(saved[n]), paddle.CPUPlace())
print(" ", paddle.static.deserialize_persistables(program, params, exe))
print("  restored:", all(np.array_equal(np.array(scope.find_var(n).get_tensor()), a) for n, a in saved.items()))

print("files:")
with tempfile.TemporaryDirectory() as d:
    paddle.static.save_to_file(os.path.join(d, "model.pdmodel"), data)
    paddle.static.save_to_file(os.path.join(d, "model.pdiparams"), params)
    print(" ", sorted(os.listdir(d)))
    print(" ", paddle.static.load_from_file(os.path.join(d, "model.pdmodel")) == data,
          paddle.static.load_from_file(os.path.join(d, "model.pdiparams")) == params)
    try:
        paddle.static.save_to_file(os.path.join(d, "x"), "not bytes")
    except ValueError as e:
        print("  ValueError:", "'content' type should be bytes." in str(e))

print("persistables:", sorted(v.name for v in paddle.static.io.get_program_persistable_vars(main)))
print("is_persistable:", [paddle.static.is_persistable(main.global_block().var(n)) for n in ("img", "fc_0.w_0")])
for bad in ("img", [image, 3]):
    try:
        paddle.static.serialize_program(bad, [predict], program=main)
    except ValueError as e:
        print("ValueError:", "'feed_vars' should be a Variable or a list of Variable." in str(e))
