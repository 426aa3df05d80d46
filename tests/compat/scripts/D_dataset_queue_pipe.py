"""QueueDataset over two files through a Python pipe command, one reader thread (Paddle 3.3.1)."""
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
    clock time masked and the "device worker program id: <address>" line dropped."""
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


# raw CSV files "a,b,c,label" and a reader that turns each row into a MultiSlot line
tmp = tempfile.mkdtemp()
files = []
for k in range(2):
    files.append(os.path.join(tmp, f"part-{k}.csv"))
    with open(files[-1], "w") as f:
        for i in range(5):
            f.write(f"{k + i},{i * 0.5},{-k},{(k + i) % 2}\n")
reader = os.path.join(tmp, "my_reader.py")
with open(reader, "w") as f:
    f.write("import sys\n"
            "for row in sys.stdin:\n"
            "    *feats, label = row.strip().split(',')\n"
            "    print(len(feats), ' '.join(feats), 1, label)\n")


def build():
    """A fresh linear model for each part."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("feats", [-1, 3], "float32")
        y = paddle.static.data("label", [-1, 1], "int64")
        const = paddle.nn.initializer.Constant
        out = paddle.static.nn.fc(x, 2, weight_attr=paddle.ParamAttr(initializer=const(0.1)),
                                  bias_attr=paddle.ParamAttr(initializer=const(0.0)))
        loss = paddle.mean(out)
        paddle.optimizer.SGD(0.5).minimize(loss)
    exe.run(startup)
    return main, x, y, loss


def show_parameters(main):
    for p in main.global_block().all_parameters():
        print(p.name, [f"{v:.4f}" for v in np.array(scope.find_var(p.name).get_tensor()).ravel()])


exe = paddle.static.Executor(paddle.CPUPlace())
scope = paddle.static.global_scope()

# one reader: its batches run on from the first file into the second
main, x, y, loss = build()
dataset = paddle.distributed.QueueDataset()
dataset.init(batch_size=3, thread_num=1, use_var=[x, y], pipe_command=f"{sys.executable} {reader}")
dataset.set_filelist(files)
printed_by(lambda: exe.train_from_dataset(main, dataset, fetch_list=[x, y, loss],
                                          fetch_info=["feats", "label", "loss"], print_period=1))
show_parameters(main)
