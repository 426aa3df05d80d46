"""InMemoryDataset + train_from_dataset / infer_from_dataset with fetch printing (Paddle 3.3.1, legacy IR)."""
import contextlib
import os
import re
import sys
import tempfile

import numpy as np
import paddle

paddle.enable_static()


def printed_by(fn):
    """What ``fn`` prints on stdout (Paddle prints from C++, so capture file descriptor 1), with the
    clock time masked; the "device worker program id: <address>" line is dropped (Paddle writes it
    through a buffered C++ stream, so it may come out during a later call)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+") as f:
        os.dup2(f.fileno(), 1)
        try:
            with contextlib.redirect_stdout(f):
                fn()
                sys.stdout.flush()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        f.seek(0)
        text = f.read()
    for line in text.splitlines():
        if not line.startswith("device worker program id:"):
            print(re.sub(r"time: \[[^\]]*\]", "time: [<time>]", line))


tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "part-0.txt")
with open(path, "w") as f:
    for i in range(10):
        f.write(f"2 {i * 0.5} {i * 0.25} 1 {i % 3}\n")

main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [-1, 2], "float32")
    y = paddle.static.data("y", [-1, 1], "int64")
    out = paddle.static.nn.fc(x, 1, weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.5)))
    loss = paddle.mean(out)
    label_mean = paddle.mean(paddle.cast(y, "float32"))
    paddle.optimizer.SGD(0.1).minimize(loss)

dataset = paddle.distributed.InMemoryDataset()
dataset.init(batch_size=4, thread_num=1, use_var=[x, y], pipe_command="cat")
dataset.set_filelist([path])
dataset.load_into_memory()
print("memory data size:", dataset.get_memory_data_size())

exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
printed_by(lambda: print("returns", exe.train_from_dataset(
    main, dataset, fetch_list=[loss, label_mean, x], fetch_info=["loss", "label", "x"], print_period=1)))
scope = paddle.static.global_scope()
for p in main.global_block().all_parameters():
    print(p.name, np.round(np.array(scope.find_var(p.name).get_tensor()), 4).ravel().tolist())

test = main.clone(for_test=True)
printed_by(lambda: exe.infer_from_dataset(test, dataset, fetch_list=[label_mean], fetch_info=["label"],
                                          print_period=2))
printed_by(lambda: exe.train_from_dataset(main, dataset, print_period=1))
for p in main.global_block().all_parameters():
    print(p.name, np.round(np.array(scope.find_var(p.name).get_tensor()), 4).ravel().tolist())

dataset.release_memory()
print("after release:", dataset.get_memory_data_size())
