"""Benchmark: preparing and running nested ``conditional_block``s is linear in the depth.

A program of ``depth`` conditional_blocks, each inside the last (every level
computes a temporary that its eager-deletion plan frees, then runs the next
level; the innermost writes a persistable of block 0), is prepared and run
once by a fresh ``Executor`` with GC on (``FLAGS_eager_delete_tensor_gb=0``):
that first ``run`` is what it costs to prepare (``PreparedProgram``: every
block's kernels, holders, GC plan) plus one step. Printed per depth: seconds
(best of a few runs), µs per level, and the ratio µs per level at that depth
/ at the first depth, measured in the same run (flat is linear; at depth 1
the program's fixed cost makes one level dear); then the
cached program's run (the step alone). A second table prepares (only) the
same nesting with two ``conditional_block`` ops per level running the next
block, the shape that used to prepare every level twice (2^depth blocks;
running it runs the innermost block 2^depth times, so it is not run).

    python benchmarks/prepare_nesting.py             # depths 1, 14, 16, 24, 300, 1000
    python benchmarks/prepare_nesting.py 1 24 400    # chosen depths (the first is the baseline)
"""
import argparse
import time

import numpy as np

import refimpl as paddle
from refimpl.executor.executor import PreparedProgram
from refimpl.framework import Program, unique_name

DEPTHS = (1, 14, 16, 24, 300, 1000)


def nested(depth, refs=1):
    """``depth`` nested conditional_blocks, ``refs`` per level (built without Python recursion)."""
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [2], "float32")
        pred = paddle.static.data("p", [1], "bool")
        out = main.global_block().create_var(name="out", shape=[2], dtype="float32", persistable=True)
        for _ in range(depth):
            main._create_block()
            paddle.scale(x, 2.0)
        main.current_block().append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [out]},
                                       attrs={"scale": 3.0})
        for _ in range(depth):
            sub = main.current_block()
            main._rollback()
            parent = main.current_block()
            for _ in range(refs):
                parent.append_op(type="conditional_block", inputs={"Cond": [pred], "Input": [x]},
                                 outputs={"Out": [out], "Scope": [parent.create_var(type="STEP_SCOPES")]},
                                 attrs={"sub_block": sub, "is_scalar_condition": True})
    return main


def measure(depth, repeats):
    """(seconds of the first run: prepare + one step, seconds of a cached run), best of ``repeats``."""
    main = nested(depth)
    feed = {"x": np.array([1.0, -2.0], dtype="float32"), "p": np.array([True])}
    first = again = float("inf")
    for _ in range(repeats):
        exe = paddle.static.Executor(paddle.CPUPlace())
        scope = paddle.static.Scope()
        t0 = time.perf_counter()
        got, = exe.run(main, feed=feed, fetch_list=["out"], scope=scope)
        t1 = time.perf_counter()
        exe.run(main, feed=feed, fetch_list=["out"], scope=scope)
        t2 = time.perf_counter()
        first, again = min(first, t1 - t0), min(again, t2 - t1)
        assert np.array_equal(got, 3 * feed["x"]), "the innermost level did not run"
    return first, again


def measure_prepare(depth, repeats):
    """Seconds to prepare (only) the nesting with two conditional_blocks per level, best of ``repeats``."""
    program = nested(depth, refs=2)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        PreparedProgram(program, paddle.static.Scope(), ("x", "p"), ("out",), "numpy", 0)
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("depths", nargs="*", type=int, default=list(DEPTHS))
    args = p.parse_args()
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})
    rows = [(d, *measure(d, 5 if d <= 300 else 2)) for d in args.depths]
    base_first, base_again = rows[0][1] / rows[0][0], rows[0][2] / rows[0][0]
    print(f"nested conditional_block, GC on; ratio = us per level / us per level at depth {rows[0][0]}")
    print(f"{'depth':>6} {'prepare+run s':>14} {'us/level':>9} {'ratio':>6}   {'cached run s':>12} {'us/level':>9} "
          f"{'ratio':>6}")
    for d, first, again in rows:
        print(f"{d:>6} {first:>14.4f} {first / d * 1e6:>9.1f} {first / d / base_first:>6.2f}   {again:>12.5f} "
              f"{again / d * 1e6:>9.1f} {again / d / base_again:>6.2f}")
    print("two conditional_blocks per level running the next block: prepare only")
    print(f"{'depth':>6} {'prepare s':>14} {'us/level':>9} {'ratio':>6}")
    prep = [(d, measure_prepare(d, 5 if d <= 300 else 2)) for d in args.depths]
    base = prep[0][1] / prep[0][0]
    for d, sec in prep:
        print(f"{d:>6} {sec:>14.4f} {sec / d * 1e6:>9.1f} {sec / d / base:>6.2f}")


if __name__ == "__main__":
    main()
