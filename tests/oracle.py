"""Shared helpers for the oracle tests: find recorded Paddle cases and compare programs.

The recorded facts live in the repository's ``oracle/`` folder (a copy of the
workspace's ``../shared/oracle``; see ``oracle/SYNC.md``), so a fresh clone
tests itself. When ``../shared/oracle`` is there too, its files win and its
extra cases join in, since new cases arrive there first. ``$REFIMPL_ORACLE``
names one folder to read instead of both.
"""
import glob
import importlib.util
import json
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORACLE = os.environ.get("REFIMPL_ORACLE", os.path.join(ROOT, "oracle"))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "oracle")
EXTRA = os.path.join(ROOT, "tests", "oracle_extra")

IGNORED_ATTRS = {"op_namescope", "op_callstack", "with_quant_attr"}
UNORDERED = {("conditional_block", "Input"), ("conditional_block", "Out")}


def oracle_dirs() -> list[str]:
    """The oracle folders read, lowest priority first: ``ORACLE``, then ``../shared/oracle`` if present.

    With ``$REFIMPL_ORACLE`` set, only that folder: whoever sets it wants exactly those cases.
    """
    if "REFIMPL_ORACLE" in os.environ or not os.path.isdir(SHARED):
        return [ORACLE]
    return [ORACLE, SHARED]


def oracle_file(relpath: str) -> str:
    """``relpath`` (e.g. ``"joblists.json"``) in the last oracle folder that has it, else under ``ORACLE``."""
    for folder in reversed(oracle_dirs()):
        path = os.path.join(folder, relpath)
        if os.path.exists(path):
            return path
    return os.path.join(ORACLE, relpath)


def case_files() -> list[str]:
    """Every ``programs/*.json`` case of the oracle folders, by file name (a later folder's copy wins)."""
    by_name = {}
    for folder in oracle_dirs():
        for path in glob.glob(os.path.join(folder, "programs", "*.json")):
            by_name[os.path.basename(path)] = path
    if not by_name:
        pytest.fail(f"no oracle programs under {ORACLE}; the tests need the repository's oracle/ "
                    f"(or $REFIMPL_ORACLE)")
    return [by_name[name] for name in sorted(by_name)]


def load(path):
    with open(path) as f:
        return json.load(f)


def load_models():
    spec = importlib.util.spec_from_file_location("oracle_models", oracle_file("models.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def array(entry):
    return np.array(entry["data"], dtype=entry["dtype"]).reshape(entry["shape"])


def replay(d, gc_gb=0.0, trace=None):
    """Run a recorded case's main program from its initial persistables on its feeds.

    Before each step the recorded learning rate is written, as Paddle's executor writes an
    ``LRScheduler``'s value (``lr_per_step`` in the core oracle, ``lr_schedule`` in the zoo).
    ``trace`` records the first step. Returns (program, scope, losses, executor).
    """
    import refimpl as paddle
    from refimpl.framework import Program
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    prog = Program.from_dict(d["main"])
    scope = paddle.static.Scope()
    for name, entry in d["initial_persistables"].items():
        scope.var(name).get_tensor().set(array(entry))
    exe = paddle.static.Executor(paddle.CPUPlace())
    losses = []
    for step, feed in enumerate(d["feeds"]):
        _write_lr(d, step, prog, scope)
        out, = exe.run(prog, feed={k: array(v) for k, v in feed.items()}, fetch_list=[d["loss_name"]],
                       scope=scope, trace=trace if step == 0 else None)
        losses.append(out)
    return prog, scope, losses, exe


def _write_lr(d, step, prog, scope):
    if d.get("lr_per_step"):
        name = getattr(prog, "lr_var_name", "learning_rate_0")
        value = np.array(d["lr_per_step"][step], dtype="float32")
    elif d.get("lr_schedule"):
        name = d["lr_schedule"]["var"]
        value = np.full(np.array(scope.find_var(name).get_tensor()).shape, d["lr_schedule"]["values"][step],
                        dtype="float32")
    else:
        return
    scope.var(name).get_tensor().set(value)


def _norm_op(op):
    def slots(d, kind):
        return {k: (sorted(v) if (op["type"], k) in UNORDERED else list(v)) for k, v in d.items()}
    attrs = {k: v for k, v in op["attrs"].items() if k not in IGNORED_ATTRS}
    return {"type": op["type"], "inputs": slots(op["inputs"], "in"),
            "outputs": slots(op["outputs"], "out"), "attrs": attrs}


def diff_programs(got, want):
    """A list of human-readable differences between two program/v1 dicts (empty if equal)."""
    out = []
    if len(got["blocks"]) != len(want["blocks"]):
        return [f"block count {len(got['blocks'])} != {len(want['blocks'])}"]
    for gb, wb in zip(got["blocks"], want["blocks"]):
        b = gb["idx"]
        if gb["parent_idx"] != wb["parent_idx"]:
            out.append(f"block {b}: parent {gb['parent_idx']} != {wb['parent_idx']}")
        gv = {v["name"]: v for v in gb["vars"]}
        wv = {v["name"]: v for v in wb["vars"]}
        for n in sorted(set(gv) ^ set(wv)):
            out.append(f"block {b}: var {n} only in {'got' if n in gv else 'want'}")
        for n in sorted(set(gv) & set(wv)):
            if gv[n] != wv[n]:
                out.append(f"block {b}: var {n}: {gv[n]} != {wv[n]}")
        gops, wops = [_norm_op(o) for o in gb["ops"]], [_norm_op(o) for o in wb["ops"]]
        if [o["type"] for o in gops] != [o["type"] for o in wops]:
            out.append(f"block {b}: op types {[o['type'] for o in gops]} != {[o['type'] for o in wops]}")
            continue
        for i, (g, w) in enumerate(zip(gops, wops)):
            for key in ("inputs", "outputs", "attrs"):
                if g[key] != w[key]:
                    keys = set(g[key]) | set(w[key])
                    d = {k: (g[key].get(k, "<absent>"), w[key].get(k, "<absent>"))
                         for k in sorted(keys) if g[key].get(k, "<absent>") != w[key].get(k, "<absent>")}
                    out.append(f"block {b} op {i} {g['type']} {key}: {d}")
    return out


def load_fleet(section):
    """One section of ``fleet.json`` (``role_makers``, ``strategy``, ``topology`` ...)."""
    path = oracle_file("fleet.json")
    if not os.path.exists(path):
        pytest.fail(f"no fleet oracle at {path}; the tests need the repository's oracle/ (or $REFIMPL_ORACLE)",
                    pytrace=False)
    with open(path) as f:
        return json.load(f)[section]


def check_exception(exc, rec):
    """``exc`` is an instance of the builtin Paddle raised; its message carries Paddle's (or its quoted names)."""
    import builtins
    import re
    from refimpl.core.errors import EnforceNotMet
    assert isinstance(exc, getattr(builtins, rec["type"])), f"{type(exc).__mro__} is not a {rec['type']}: {exc}"
    want, got = rec["message"], str(exc)
    names = [a or b for a, b in re.findall(r"'([^']*)'|\"([^\"]*)\"", want)]
    if names:
        assert all(n in got for n in names), f"{got!r} should name {names} (Paddle: {want!r})"
    elif isinstance(exc, EnforceNotMet) and "__new__()" in want:
        pass  # a Python signature message from inside Paddle; refimpl words it its own way
    else:
        assert want in got, f"{got!r} should contain Paddle's message {want!r}"
