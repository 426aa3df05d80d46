import atexit
import io
import os
import shutil
import tempfile

import numpy as np
import paddle

paddle.enable_static()
paddle.seed(7)
x = paddle.static.data(name="x", shape=[None, 6], dtype='float32')
z = paddle.static.nn.fc(x, 3)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(paddle.static.default_startup_program())
prog = paddle.static.default_main_program()
work = tempfile.mkdtemp()
atexit.register(shutil.rmtree, work)  # the files go to a scratch folder
os.chdir(work)

# a single tensor: comes back as a DenseTensor in static mode
w = paddle.static.global_scope().find_var("fc_0.w_0").get_tensor()
w_np = np.array(w)
paddle.save(w, "temp/tensor.pdtensor")
t = paddle.load("temp/tensor.pdtensor")
print(type(t).__name__, np.array(t).shape, np.array_equal(np.array(t), w_np))
print(type(paddle.load("temp/tensor.pdtensor", return_numpy=True)).__name__)

# a state dict of the program
state = prog.state_dict("param")
paddle.save(state, "temp/model.pdparams")
loaded = paddle.load("temp/model.pdparams")
print(sorted(loaded), [type(v).__name__ for _, v in sorted(loaded.items())])
print(all(np.array_equal(np.array(loaded[k]), np.array(state[k])) for k in state))
prog.set_state_dict(loaded)

# nested objects with plain values
obj = {"model": {"fc_0.b_0": np.arange(3, dtype="float32")}, "epoch": 100, "name": "run1",
       "steps": [1, 2.5, None, True], "pair": (1, "a")}
paddle.save(obj, "temp/obj.pdparams")
back = paddle.load("temp/obj.pdparams", return_numpy=True)
print(sorted(back), back["epoch"], back["name"], back["steps"], back["pair"])
print(type(back["model"]["fc_0.b_0"]).__name__, back["model"]["fc_0.b_0"].tolist())

# a Program
paddle.save(prog, "temp/main_program.pdmodel")
p = paddle.load("temp/main_program.pdmodel")
print(type(p).__name__, [op.type for op in p.global_block().ops])
print(sorted(v.name for v in p.list_vars() if v.persistable))

# BytesIO
buf = io.BytesIO()
paddle.save({"w": w_np}, buf)
buf.seek(0)
d = paddle.load(buf, return_numpy=True)
print(sorted(d), np.array_equal(d["w"], w_np))

# bad arguments: Paddle's ValueErrors (a static state dict takes any protocol)
paddle.save(state, "temp/any_protocol.pdparams", protocol=5)
print(sorted(paddle.load("temp/any_protocol.pdparams")))
for bad, text in ((lambda: paddle.save(state, "temp/"), "MUST be format of dirname/filename"),
                  (lambda: paddle.save(w_np, "temp/a.npy", protocol=5), "Expected 1<'protocol'<5"),
                  (lambda: paddle.save(state, "temp/a.pdparams", foo=1), "(foo) of `paddle.save` is not supported"),
                  (lambda: paddle.load("temp/model.pdparams", foo=1), "(foo) of `paddle.load` is not supported")):
    try:
        bad()
    except ValueError as e:
        print("ValueError", text in str(e))
