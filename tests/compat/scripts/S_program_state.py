import atexit
import os
import shutil
import tempfile
import warnings

import numpy as np
import paddle
import paddle.static as static

paddle.enable_static()
paddle.seed(3)
x = static.data(name="x", shape=[None, 4], dtype='float32')
y = static.nn.fc(x, 3)
loss = paddle.mean(static.nn.fc(y, 2))
paddle.optimizer.Adam(learning_rate=0.01).minimize(loss)
exe = static.Executor(paddle.CPUPlace())
exe.run(static.default_startup_program())
prog = static.default_main_program()
feed = {"x": np.linspace(-1, 1, 8, dtype="float32").reshape(2, 4)}
exe.run(prog, feed=feed, fetch_list=[loss])

work = tempfile.mkdtemp()
atexit.register(shutil.rmtree, work)  # the files go to a scratch folder
os.chdir(work)
static.save(prog, "./ckpt/temp")
print("files:", sorted(f for f in os.listdir("ckpt") if f.endswith((".pdparams", ".pdopt", ".pdmodel"))))
state = static.load_program_state("./ckpt/temp")
print("state:", sorted((k, v.shape, str(v.dtype)) for k, v in state.items()))
same = static.load_program_state("./ckpt/temp.pdparams")
print("same through .pdparams:", sorted(same) == sorted(state))

scope = static.global_scope()
saved = {k: v.copy() for k, v in state.items()}
exe.run(prog, feed=feed, fetch_list=[loss])  # one more step changes every state
print("changed:", sorted(k for k in saved if not np.array_equal(np.array(scope.find_var(k).get_tensor()), saved[k])))
static.set_program_state(prog, state)
print("set back:", all(np.array_equal(np.array(scope.find_var(k).get_tensor()), saved[k]) for k in saved))

extra = dict(state, not_in_program=np.zeros([2], "float32"))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    static.set_program_state(prog, extra)
print("warned:", [str(w.message) for w in caught if "not set" in str(w.message)])

bad = dict(state, **{"fc_0.w_0": np.zeros([3, 3], "float32")})
try:
    static.set_program_state(prog, bad)
except Exception as e:
    print("shape mismatch raises:", "shape of" in str(e))
print("unchanged after the failed set:", np.array_equal(np.array(scope.find_var("fc_0.w_0").get_tensor()),
                                                         saved["fc_0.w_0"]))
