import numpy as np
import paddle

paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    predict = paddle.static.data("predict", shape=[-1, 2], dtype="float32")
    label = paddle.static.data("label", shape=[-1, 1], dtype="int64")
    global_auc, batch_auc, states = paddle.static.auc(predict, label, num_thresholds=7, slide_steps=2)
    roc = paddle.static.auc(predict, label)
print(global_auc.name, batch_auc.name, [(s.name, s.shape, s.persistable) for s in states])
print(roc[0].name, [s.name for s in roc[2]])
for op in main.global_block().ops:
    print(op.type, {n: op.input(n) for n in sorted(op.input_names)}, op.attr("slide_steps") if op.type == "auc" else "")
print([(op.type, op.output("Out"), op.attr("shape")) for op in startup.global_block().ops])

exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
rng = np.random.RandomState(7)
for step in range(4):
    p = rng.uniform(0, 1, (6, 1)).astype("float32")
    feed = {"predict": np.concatenate([1 - p, p], axis=1), "label": rng.randint(0, 2, (6, 1)).astype("int64")}
    g, b, s0, s2, r = exe.run(main, feed=feed, fetch_list=[global_auc, batch_auc, states[0], states[2], roc[0]])
    print(step, g, b, s0.tolist(), s2.tolist(), r)
