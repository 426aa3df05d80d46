"""Fuzzing the program/v1 loader and ``refimpl run`` with a seeded mutator (issue 15, part 4).

Seed documents are real saved programs made with the public API (an MLP
with backward and SGD, a ``conditional_block`` program, a non-iterable
reader program), written as ``refimpl run`` records (``main``, ``startup``,
``feeds``, ``initial_persistables``, ``loss_name``). A seeded mutator
changes one to three values of a copy (type swaps, deletions, nulls,
out-of-range and huge ints, booleans for ints, strings, deep nesting), and
each case is run through the CLI's ``main`` in-process under a per-case
time limit and an address-space limit. Every case must end with exit code
0, or with exit code 2 and exactly one stderr line; a generic Python
exception escaping the CLI, a typed error that only wraps an internal
``TypeError`` / ``AttributeError`` ..., or a case running past its time limit
fails the test.

The default run (1,200 cases) takes about 10 s; ``REFIMPL_PROGRAM_FUZZ_CASES=5000``
runs more. ``PYTHONPATH=. python tests/test_program_fuzz.py 5000 [seed]`` prints
the counts by outcome (ok / typed error / generic exception / hang) instead of
asserting (``SHOW=20`` prints examples of the bad ones, ``LOG=file`` one JSON
line per case).
"""
import contextlib
import copy
import io
import json
import os
import random
import re
import resource
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter

import numpy as np

import refimpl as paddle
from refimpl.core.errors import EnforceNotMet
from refimpl.framework import Program, unique_name

CASES = int(os.environ.get("REFIMPL_PROGRAM_FUZZ_CASES", "1200"))
CASE_LIMIT_S = 2.0
MEMORY_HEADROOM = 2 << 30  # the fuzzed process may map 2 GiB more than it had


def _array(a):
    a = np.asarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.reshape(-1).tolist()}


def _record(main, startup, loss, feeds, initial=None):
    return {"main": main.to_dict(), "startup": startup.to_dict(), "loss_name": loss.name,
            "feeds": [{k: _array(v) for k, v in f.items()} for f in feeds],
            "initial_persistables": {k: _array(v) for k, v in (initial or {}).items()}}


def mlp_record():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 4], "float32")
        label = paddle.static.data("label", [None, 1], "int64")
        h = paddle.static.nn.fc(x, 5, activation="relu")
        logits = paddle.static.nn.fc(h, 3)
        loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, label))
        paddle.optimizer.SGD(0.1).minimize(loss)
    feed = {"x": np.linspace(-1, 1, 8, dtype="float32").reshape(2, 4), "label": np.array([[0], [2]], "int64")}
    return _record(main, startup, loss, [feed], {"fc_1.b_0": np.zeros(3, "float32")})


def cond_record():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        c = paddle.static.data("c", [1], "bool")
        h = paddle.static.nn.fc(x, 3)

        def branch():  # h = 2 h, in the sub-block
            block = paddle.static.default_main_program().current_block()
            block.append_op(type="scale", inputs={"X": [h]}, outputs={"Out": [h]}, attrs={"scale": 2.0})
        paddle.static.nn.cond(c, branch)
        loss = paddle.mean(h)
    feed = {"x": np.ones((2, 3), "float32"), "c": np.array([True])}
    return _record(main, startup, loss, [feed])


def reader_record():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [-1, 4], "float32")
        y = paddle.static.data("y", [-1, 1], "float32")
        paddle.io.DataLoader.from_generator(feed_list=[x, y], capacity=2, iterable=False)
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(x, 1) - y))
        paddle.optimizer.SGD(0.1).minimize(loss)
    return _record(main, startup, loss, [{"x": np.ones((2, 4), "float32"), "y": np.ones((2, 1), "float32")}])


def seed_records():
    return [mlp_record(), cond_record(), reader_record()]


# ---- the mutator -----------------------------------------------------------

DEEP = "\x00deep\x00"  # placeholder for a deeply nested value, spliced into the JSON text
ODD_INTS = [-1, -2, 0, 1, 2, 3, 7, 99, 2 ** 31, 2 ** 40, 2 ** 63, 10 ** 30, -(2 ** 63)]
ODD_VALUES = [None, True, False, "", "x", "float99", "fc_0.w_0", "@GRAD", [], {}, [None], [[1]], {"block": 1},
              {"block": -1}, {"block": True}, {"blocks": [1, 1]}, 1e308, -0.0, 0.5, [1, "a"], {"data": []}]


def _paths(doc):
    """Every (container, key) pair in the document, found without recursion."""
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            if isinstance(v, (dict, list)):
                stack.append(v)
    return out


def _swap(rng, value):
    """A value of another type (or an odd value of the same type)."""
    if isinstance(value, bool):
        return rng.choice([int(value), str(value).lower(), None, [value]])
    if isinstance(value, int):
        return rng.choice(ODD_INTS + [float(value), str(value), bool(value % 2), [value]])
    if isinstance(value, float):
        return rng.choice([int(value), str(value), 1e308, -1e308, [value], None])
    if isinstance(value, str):
        return rng.choice([value + "_x", "", 5, [value], {"name": value}, None, value * 3])
    if isinstance(value, list):
        return rng.choice([value[:1], value * 2, [], {"0": value}, len(value), [value], None, "list"])
    if isinstance(value, dict):
        return rng.choice([[], list(value)[:2], "dict", 0, None, {}])
    return rng.choice([0, -1, "", [], {}, False])  # null


def mutate(rng, doc):
    """One to three random changes to a deep copy of ``doc``."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(doc)
        if not paths:
            break
        node, key = rng.choice(paths)
        how = rng.random()
        if how < 0.15:
            del node[key]
        elif how < 0.55:
            node[key] = _swap(rng, node[key])
        elif how < 0.8:
            node[key] = copy.deepcopy(rng.choice(ODD_VALUES + ODD_INTS))
        elif how < 0.85:
            node[key] = DEEP
        elif how < 0.95 and isinstance(node[key], list) and node[key]:
            node[key].append(copy.deepcopy(rng.choice(node[key])))  # a duplicate element
        else:
            other = rng.choice(paths)  # a value moved from elsewhere in the document
            node[key] = copy.deepcopy(other[0][other[1]])
    return doc


def to_text(rng, doc):
    text = json.dumps(doc)
    while json.dumps(DEEP) in text:
        depth = rng.choice([50, 900, 5000])
        text = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth, 1)
    return text


# ---- running one case ------------------------------------------------------

class Hang(BaseException):
    """Raised by the per-case timer; a BaseException so that no ``except Exception`` swallows it."""


def _on_alarm(signum, frame):
    raise Hang()


INTERNAL = re.compile(r"'NoneType' object|object has no attribute|(TypeError|AttributeError|KeyError|IndexError|"
                      r"RecursionError|OverflowError|ZeroDivisionError|MemoryError): ")


def _site(exc):
    """``file:line`` of the innermost refimpl frame that raised ``exc``."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "refimpl" in f.filename]
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"


def run_case(path):
    """The outcome of ``refimpl run PATH``: ("ok" | "typed" | "generic" | "hang", detail)."""
    from refimpl.cli import main
    err, out = io.StringIO(), io.StringIO()
    signal.setitimer(signal.ITIMER_REAL, CASE_LIMIT_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(["run", path])
    except Hang:
        return "hang", ""
    except EnforceNotMet as e:  # typed, but escaped the CLI's handler
        return "generic", f"escaped {type(e).__name__}: {e}"[:300]
    except BaseException as e:  # noqa: B902 - SystemExit and RecursionError are findings too
        return "generic", f"{type(e).__name__}: {str(e)[:200]} @ {_site(e)}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    lines = err.getvalue().strip().splitlines()
    if rc == 0:
        return "ok", ""
    if rc == 2 and len(lines) == 1 and lines[0].startswith("refimpl run: "):
        if INTERNAL.search(lines[0]):  # a typed error that only wraps an internal one
            return "generic", "typed wrapper of an internal error: " + lines[0][:300]
        return "typed", lines[0]
    return "generic", f"rc={rc} stderr={err.getvalue()[-300:]!r}"


@contextlib.contextmanager
def bounded_process():
    """A per-case alarm handler, an address-space cap and quiet GC flags for the duration."""
    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * resource.getpagesize()
    cap = mapped + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, old_handler)
        paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})


def probe(n, seed=0, log=None):
    """Run ``n`` mutated documents; (Counter of outcomes, {outcome: [examples]}, seconds).

    ``log``: a file to write one JSON line per case to (index, outcome, detail)."""
    rng = random.Random(seed)
    seeds = seed_records()
    counts, examples = Counter(), {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, bounded_process():
        path = os.path.join(tmp, "case.json")
        for i in range(n):
            text = to_text(rng, mutate(rng, rng.choice(seeds)))
            with open(path, "w") as f:
                f.write(text)
            outcome, detail = run_case(path)
            if log is not None:
                log.write(json.dumps([i, outcome, detail]) + "\n")
            counts[outcome] += 1
            if outcome in ("generic", "hang"):
                examples.setdefault(outcome, []).append((i, detail, text[:400]))
    return counts, examples, time.perf_counter() - t0


# ---- tests -----------------------------------------------------------------

def test_mutated_programs_fail_typed_or_run_and_never_hang(tmp_path):
    outcomes = []
    for i, rec in enumerate(seed_records()):
        path = tmp_path / f"seed{i}.json"
        path.write_text(json.dumps(rec))
        with bounded_process():
            outcomes.append(run_case(str(path)))
    # the MLP and the branch run to the end; the reader program's queue is not started by the CLI
    assert [o for o, _ in outcomes[:2]] == ["ok", "ok"], outcomes
    assert outcomes[2][0] == "typed" and "(read)" in outcomes[2][1], outcomes
    rng_a, rng_b = random.Random(5), random.Random(5)  # the mutator is seeded and changes documents
    a = [to_text(rng_a, mutate(rng_a, seed_records()[0])) for _ in range(20)]
    assert a == [to_text(rng_b, mutate(rng_b, seed_records()[0])) for _ in range(20)] and len(set(a)) > 15

    counts, examples, seconds = probe(CASES, seed=15)
    bad = {k: v[:5] for k, v in examples.items()}
    assert counts["generic"] == 0 and counts["hang"] == 0, (dict(counts), bad)
    assert counts["typed"] > CASES // 4 and counts["ok"] > 0, dict(counts)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else CASES
    log = open(os.environ["LOG"], "w") if os.environ.get("LOG") else None
    counts, examples, seconds = probe(n, seed=int(sys.argv[2]) if len(sys.argv) > 2 else 0, log=log)
    print(f"{n} mutated documents in {seconds:.1f} s: " + ", ".join(f"{k} {counts[k]}" for k in
                                                                ("ok", "typed", "generic", "hang")))
    kinds = Counter(d.split(":")[0] for _, d, _ in examples.get("generic", []))
    print("generic by kind:", dict(kinds.most_common()))
    for outcome, rows in examples.items():
        for i, detail, text in rows[:int(os.environ.get("SHOW", "0"))]:
            print(f"--- {outcome} case {i}: {detail}\n    {text[:300]}")
