import atexit
import os
import shutil
import tempfile

import numpy as np
import paddle
import paddle.static as static

paddle.enable_static()
paddle.seed(5)
main_prog, startup_prog = static.Program(), static.Program()
with static.program_guard(main_prog, startup_prog):
    data = static.data(name="img", shape=[None, 12], dtype="float32")
    hidden = static.nn.fc(data, 5)
    w = paddle.create_parameter(shape=[5, 2], dtype='float32', name='extra_w')
    out = static.nn.fc(hidden, 2)
exe = static.Executor(paddle.CPUPlace())
exe.run(startup_prog)
scope = static.global_scope()
names = ["fc_0.b_0", "fc_0.w_0", "fc_1.w_0", "extra_w"]
before = {n: np.array(scope.find_var(n).get_tensor()) for n in names}


def clobber():
    for n in names:
        scope.find_var(n).get_tensor().set(np.full_like(before[n], 7.0), paddle.CPUPlace())


def restored():
    return all(np.array_equal(np.array(scope.find_var(n).get_tensor()), before[n]) for n in names)


work = tempfile.mkdtemp()
atexit.register(shutil.rmtree, work)  # the files go to a scratch folder
os.chdir(work)
params = [v for v in main_prog.list_vars() if static.is_persistable(v)]
print("parameters:", sorted(v.name for v in params))

# one file holding every variable
static.io.save_vars(exe, "./vars_dir", main_prog, vars=params, filename="vars_file")
print("combined:", sorted(os.listdir("vars_dir")))
clobber()
static.io.load_vars(exe, "./vars_dir", main_prog, vars=params, filename="vars_file")
print("restored:", restored())

# one file per variable, chosen by a predicate
def name_has_fc(var):
    return "fc" in var.name and var.persistable

static.io.save_vars(exe, "./per_var", main_program=main_prog, predicate=name_has_fc)
print("per variable:", sorted(os.listdir("per_var")))
clobber()
static.io.load_vars(exe, "./per_var", main_program=main_prog, predicate=name_has_fc)
print("fc restored:", all(np.array_equal(np.array(scope.find_var(n).get_tensor()), before[n])
                          for n in ("fc_0.b_0", "fc_0.w_0")))
static.io.load_vars(exe, "./vars_dir", main_prog, vars=params, filename="vars_file")

# the directory as a program state
state = static.load_program_state("./per_var")
print("state of a directory:", sorted((k, v.shape) for k, v in state.items()))
state = static.load_program_state("./vars_dir/vars_file", var_list=params)
print("state of a file:", sorted((k, v.shape, str(v.dtype)) for k, v in state.items()))
print("equal:", all(np.array_equal(state[n], before[n]) for n in names))

# bad input
try:
    static.load_program_state("./vars_dir/vars_file")
except ValueError as e:
    print("ValueError:", "var_list can not be None when model_path is a file type" in str(e))
try:
    static.io.save_vars(exe, "./bad", main_prog, vars=params, filename="vars_file", predicate=None)
    static.io.load_vars(exe, "./bad", main_prog, vars=params)
except Exception as e:
    print("missing per-variable files raise:", type(e).__name__ != "")
print("is_persistable:", [static.is_persistable(v) for v in (data, params[0])])
