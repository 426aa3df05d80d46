"""The error catalogue (issue 8, parts 1 and 5): bad input gives a typed error naming the culprit.

One table of bad inputs across the surfaces (feeds, program/v1 JSON, op
attrs, scope access, pass attrs, schedules, DistributedStrategy, topology,
role-maker environment, collectives, checkpoint files): each row says the
error type expected and a pattern the message must contain (the op, var,
rank, option or file). Then: a failed run leaves the persistables as they
were, the class hierarchy, and no pickle/eval/exec in the package.
"""
import builtins
import os
import re

import numpy as np
import pytest

import refimpl as paddle

paddle.enable_static()  # (role makers check Gloo only in static mode, as Paddle's)
import refimpl.distributed as dist
from refimpl.core import errors
from refimpl.core.errors import (EnforceNotMet, ExecutionTimeout, InvalidArgument, NotFound,
                                 PreconditionNotMet)
from refimpl.core.scope import Scope
from refimpl.core.tensor import DenseTensor
from refimpl.distributed.communication import RankFailed, context, run_in_process
from refimpl.distributed.fleet import CommunicateTopology, DistributedStrategy, PaddleCloudRoleMaker
from refimpl.distributed.passes import new_pass
from refimpl.distributed.passes.pipeline_scheduler_pass import create_job_list
from refimpl.framework import Program, unique_name
from refimpl.static import io

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def net():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        loss = paddle.mean(paddle.static.nn.fc(x, 2))
        paddle.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


def run(feed, fetch=None, startup=True, program=None):
    main, st, loss = net()
    scope, exe = Scope(), paddle.static.Executor()
    if startup:
        exe.run(st, scope=scope)
    return exe.run(program if program is not None else main, feed=feed, fetch_list=fetch or [loss], scope=scope)


X = np.zeros((2, 3), "float32")


def doc(op=None, var=None, **top):
    d = {"format": "program/v1", "blocks": [{"idx": 0, "parent_idx": -1, "vars": [var] if var else [],
                                              "ops": [op] if op else []}]}
    d.update(top)
    return d


def load(d):
    return Program.from_dict(d)


def op(type_, attrs, inputs=None, outputs=None):
    return {"type": type_, "inputs": inputs or {"X": ["a"]}, "outputs": outputs or {"Out": ["b"]}, "attrs": attrs}


def ranks(fn, n=2, timeout=10):
    return run_in_process(n, fn, timeout=timeout)


def collective(kind):
    def fn():
        r, c = dist.get_rank(), context.current().comm(0)
        if kind == "shape":
            c.all_reduce(np.zeros(3 if r == 0 else 4, "float32"))
        elif kind == "dtype":
            c.all_reduce(np.zeros(3, "float32" if r == 0 else "float64"))
        elif kind == "root":
            c.broadcast(np.zeros(3, "float32"), root=5)
        elif kind == "recv":
            if r == 0:
                c.recv(1)
        elif kind == "raise":
            if r == 1:
                raise ZeroDivisionError("bad batch on rank one")
            c.all_reduce(np.zeros(1))
    return lambda: ranks(fn, timeout=0.5 if kind == "recv" else 10)


def ckpt(tmp, damage):
    main, st, _ = net()
    scope = Scope()
    paddle.static.Executor().run(st, scope=scope)
    path = os.path.join(tmp, "ck")
    paddle.static.save(main, path, scope=scope)
    if damage == "truncate":
        raw = open(path + ".pdparams", "rb").read()
        open(path + ".pdparams", "wb").write(raw[:len(raw) // 3])
    elif damage == "novar":
        io.write_npz(path + ".pdparams", {})
    elif damage == "nofile":
        os.remove(path + ".pdparams")
    elif damage == "shape":
        io.write_npz(path + ".pdparams", {"fc_0.w_0": np.zeros((2, 2), "float32"),
                                          "fc_0.b_0": np.zeros(2, "float32")})
    elif damage == "json":
        open(path + ".pdmodel", "w").write('{"format": "inference/v1", "feed": 3')
        return lambda: paddle.static.load_inference_model(path, None)
    return lambda: paddle.static.load(main, path, scope=scope)


def env_role(env):
    def call():
        old = dict(os.environ)
        try:
            for k in [k for k in os.environ if k.startswith(("PADDLE_", "TRAINING_ROLE"))]:
                del os.environ[k]
            os.environ.update(env)
            PaddleCloudRoleMaker(is_collective=True)._generate_role()
        finally:
            os.environ.clear()
            os.environ.update(old)
    return call


def strategy(name, value):
    return lambda: setattr(DistributedStrategy(), name, value)


CASES = [
    # ---- feeds and fetches
    ("feed-unknown-name", lambda: run({"nope": X}), NotFound, "'nope'"),
    ("feed-wrong-dtype", lambda: run({"x": X.astype("float64")}), InvalidArgument, "feed 'x'.*float64"),
    ("feed-wrong-rank", lambda: run({"x": np.zeros(3, "float32")}), InvalidArgument, r"feed 'x'.*\[3\]"),
    ("feed-wrong-dim", lambda: run({"x": np.zeros((2, 4), "float32")}), InvalidArgument, r"feed 'x'.*\[2, 4\]"),
    ("feed-not-a-dict", lambda: run([X]), InvalidArgument, "feed must be a dict"),
    ("feed-missing", lambda: run({}), InvalidArgument, "feed 'x' is missing"),
    ("fetch-unknown", lambda: run({"x": X}, fetch=["ghost"]), NotFound, "fetch 'ghost'"),
    ("run-not-a-program", lambda: run({"x": X}, program="main"), InvalidArgument, "expects a Program"),
    ("run-without-startup", lambda: run({"x": X}, startup=False), PreconditionNotMet, "fc_0.w_0"),
    # ---- program/v1 JSON
    ("json-root", lambda: load([]), InvalidArgument, "<root>"),
    ("json-format", lambda: load(doc(format="program/v0")), InvalidArgument, "program/v0"),
    ("json-no-blocks", lambda: load({"format": "program/v1", "blocks": []}), InvalidArgument, "blocks"),
    ("json-unknown-op", lambda: load(doc(op(("no_such_op"), {}))), NotFound, "no_such_op"),
    ("json-var-dtype", lambda: load(doc(var={"name": "w", "dtype": "float7"})), InvalidArgument, r"\(w\).*float7"),
    ("json-var-shape", lambda: load(doc(var={"name": "w", "shape": ["3"]})), InvalidArgument, r"\(w\).*shape"),
    ("json-var-flag", lambda: load(doc(var={"name": "w", "persistable": "yes"})), InvalidArgument, "persistable"),
    ("json-parent", lambda: load({"blocks": [{"idx": 0, "parent_idx": 3}]}), InvalidArgument, "parent_idx"),
    ("json-slot", lambda: load(doc(op("relu", {}, inputs={"X": "a"}))), InvalidArgument, r"\(relu\)\.inputs\.X"),
    ("json-block-ref", lambda: load(doc(op("conditional_block", {"sub_block": {"block": 9}},
                                           inputs={"Cond": [], "Input": []}, outputs={"Out": [], "Scope": []}))),
     InvalidArgument, "sub_block.*no block 9"),
    # ---- op attrs of the wrong type (the loader checks them against the op's declared defaults)
    ("attr-float-as-str", lambda: load(doc(op("scale", {"scale": "big"}))), InvalidArgument,
     r"ops\[0\] \(scale\)\.attrs\.scale.*declared float but got str"),
    ("attr-bool-as-str", lambda: load(doc(op("matmul_v2", {"trans_x": "yes"}, {"X": ["a"], "Y": ["c"]}))),
     InvalidArgument, "'trans_x' of op 'matmul_v2' is declared bool"),
    ("attr-int-as-float", lambda: load(doc(op("softmax", {"axis": 1.5}))), InvalidArgument,
     "'axis' of op 'softmax' is declared int but got float"),
    ("attr-list-as-int", lambda: load(doc(op("reshape2", {"shape": 3}))), InvalidArgument,
     "'shape' of op 'reshape2' is declared list but got int"),
    ("attr-int-as-bool", lambda: load(doc(op("softmax", {"axis": True}))), InvalidArgument, "'axis'.*got bool"),
    ("attr-unknown-dict", lambda: load(doc(op("relu", {"extra": {"__class__": "os.system"}}))), InvalidArgument,
     "'extra' of op 'relu'.*dict"),
    ("attr-nested-list", lambda: load(doc(op("relu", {"extra": [[1], [2]]}))), InvalidArgument, "'extra'"),
    ("attr-role-as-str", lambda: load(doc(op("relu", {"op_role": "forward"}))), InvalidArgument, "'op_role'"),
    # ---- scope and tensors
    ("scope-get-missing", lambda: Scope().get("nope"), NotFound, "'nope'"),
    ("scope-empty-name", lambda: Scope().var(""), InvalidArgument, "name"),
    ("tensor-uninitialised", lambda: DenseTensor().shape(), PreconditionNotMet, ""),
    # ---- passes and schedules
    ("pass-unknown", lambda: new_pass("no_such_pass"), NotFound, "no_such_pass"),
    ("schedule-missing-attr", lambda: create_job_list("1F1B", {"num_micro_batches": 4, "pp_stage": 0}),
     InvalidArgument, "pp_degree"),
    ("schedule-unknown", lambda: create_job_list("2F2B", {}), EnforceNotMet, "2F2B"),
    ("gradient-merge-k", lambda: new_pass("auto_parallel_gradient_merge_pass", {"k_steps": 0}).apply(
        [net()[0]], [Program()]), InvalidArgument, "'k_steps'"),
    # ---- DistributedStrategy, topology, role makers
    ("strategy-unknown-key", strategy("pipeline_configs", {"bogus": 1}), InvalidArgument, "bogus"),
    ("strategy-hybrid-key", strategy("hybrid_configs", {"dp_degre": 2}), Exception, "dp_degre"),
    ("strategy-absent-attr", strategy("no_such_option", 1), Exception, "no_such_option"),
    ("topology-lengths", lambda: CommunicateTopology(["data", "pipe"], [2]), Exception, ""),
    ("role-gloo-rendezvous", env_role({"PADDLE_WITH_GLOO": "1", "PADDLE_GLOO_RENDEZVOUS": "7"}), ValueError,
     "gloo"),
    # ---- collectives across ranks
    ("collective-shape", collective("shape"), RankFailed, r"rank \d.*\[4\]"),
    ("collective-dtype", collective("dtype"), RankFailed, "rank 1.*float64"),
    ("collective-root", collective("root"), RankFailed, "root"),
    ("recv-timeout", collective("recv"), RankFailed, "recv from peer 1.*0.5 s"),
    ("rank-raises", collective("raise"), RankFailed, "rank 1 failed: ZeroDivisionError: bad batch on rank one"),
    # ---- checkpoint files
    ("ckpt-truncated", "truncate", InvalidArgument, r"ck\.pdparams.*truncated or corrupted"),
    ("ckpt-missing-var", "novar", NotFound, r"'fc_0\.b_0' is not in checkpoint file .*ck\.pdparams"),
    ("ckpt-missing-file", "nofile", NotFound, r"ck\.pdparams"),
    ("ckpt-wrong-shape", "shape", InvalidArgument, r"'fc_0\.w_0' in .*ck\.pdparams' has shape"),
    ("ckpt-bad-model-json", "json", InvalidArgument, r"ck\.pdmodel"),
]


def test_the_table_is_big_enough():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name, call, error, culprit", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_typed_error_naming_the_culprit(tmp_path, name, call, error, culprit):
    if isinstance(call, str):
        call = ckpt(str(tmp_path), call)
    with pytest.raises(error) as info:
        call()
    assert re.search(culprit, str(info.value)), str(info.value)


# ---- nothing half-applied ---------------------------------------------------------------
def state(main, scope):
    return {v.name: np.array(scope.find_var(v.name).get_tensor()).copy()
            for v in main.list_vars() if v.persistable and scope.find_var(v.name) is not None
            and scope.find_var(v.name).get_tensor()._is_initialized()}


def test_a_run_failing_midway_leaves_the_persistables_as_they_were():
    main, startup, loss = net()
    block = main.global_block()
    # an in-graph step counter written early, then an op that fails at run time after it
    counter = block.create_var(name="step_counter", shape=[1], dtype="float32", persistable=True)
    sb = startup.global_block()
    sb.create_var(name="step_counter", shape=[1], dtype="float32", persistable=True)
    sb.append_op(type="fill_constant", outputs={"Out": ["step_counter"]},
                 attrs={"shape": [1], "dtype": 5, "value": 0.0})
    block._prepend_op(type="scale", inputs={"X": [counter]}, outputs={"Out": [counter]},
                      attrs={"scale": 1.0, "bias": 1.0})
    bad = block.create_var(name="bad", shape=[-1, 3], dtype="float32")
    y = block.create_var(name="y", shape=[-1, 3], dtype="float32", is_data=True)
    block._insert_op(1, type="elementwise_add", inputs={"X": ["x"], "Y": [y]}, outputs={"Out": [bad]})
    scope, exe = Scope(), paddle.static.Executor()
    exe.run(startup, scope=scope)
    exe.run(main, feed={"x": X, "y": X}, fetch_list=[loss], scope=scope)
    before = state(main, scope)
    assert before["step_counter"][0] == 1.0
    with pytest.raises(InvalidArgument, match="elementwise_add"):
        exe.run(main, feed={"x": X, "y": np.zeros((5, 3), "float32")}, fetch_list=[loss], scope=scope)
    after = state(main, scope)
    assert after.keys() == before.keys()
    for n in before:
        np.testing.assert_array_equal(after[n], before[n], err_msg=n)
    exe.run(main, feed={"x": X, "y": X}, fetch_list=[loss], scope=scope)  # and it still trains
    assert state(main, scope)["step_counter"][0] == 2.0


# ---- the classes --------------------------------------------------------------------------
@pytest.mark.parametrize("name, builtin", [
    ("InvalidArgument", ValueError), ("NotFound", KeyError), ("OutOfRange", IndexError),
    ("AlreadyExists", ValueError), ("PreconditionNotMet", RuntimeError), ("Unimplemented", NotImplementedError),
    ("Unavailable", RuntimeError), ("ExecutionTimeout", TimeoutError), ("PermissionDenied", PermissionError),
    ("ResourceExhausted", MemoryError), ("Fatal", RuntimeError), ("External", RuntimeError)])
def test_each_class_is_an_enforce_error_and_its_builtin(name, builtin):
    cls = getattr(errors, name)
    e = cls("var 'w' of op 'relu'")
    assert isinstance(e, EnforceNotMet) and isinstance(e, builtin)
    assert str(e) == f"({name}) var 'w' of op 'relu'"  # KeyError's quoting is not applied
    assert issubclass(RankFailed, errors.Unavailable) and issubclass(ExecutionTimeout, TimeoutError)


# ---- no unsafe loading ------------------------------------------------------------------
def test_no_pickle_eval_or_exec_in_the_package():
    # (a method named eval, as nn.Layer.eval, is a definition, not a call)
    pattern = re.compile(r"pickle\.loads?\(|(?<![\w.])(?<!def )eval\(|(?<![\w.])exec\(|allow_pickle=True")
    hits = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "refimpl")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                for i, line in enumerate(open(path, encoding="utf-8"), 1):
                    if pattern.search(line):
                        hits.append(f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_loader_accepts_every_type_it_writes():
    main, _, _ = net()
    again = Program.from_dict(main.to_dict())
    assert [op.type for op in again.global_block().ops] == [op.type for op in main.global_block().ops]
    assert builtins is not None
