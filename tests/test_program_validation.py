"""program/v1 documents are validated before anything is built (issue 15, parts 4 and 7).

Each row is a document that used to end in a generic Python exception, a
hang or a silently wrong program, and must now give a typed error naming
the path of the culprit (block, op, var, attr). Then: deep JSON, cycles
and long chains of sub-blocks fail fast; booleans are not dims; the
documents of real programs still load.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.dtypes import convert_dtype
from refimpl.core.errors import InvalidArgument, ResourceExhausted
from refimpl.framework import Program, unique_name
from refimpl.framework.program_schema import MAX_BLOCK_DEPTH, MAX_ELEMENTS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def op(type_, attrs=None, inputs=None, outputs=None):
    return {"type": type_, "inputs": {"X": ["a"]} if inputs is None else inputs,
            "outputs": {"Out": ["b"]} if outputs is None else outputs, "attrs": attrs or {}}


def doc(*ops, vars_=(), blocks=()):
    """A program/v1 document; block 0 declares ``vars_`` and every other name the ops use."""
    used = [n for o in list(ops) + [o for b in blocks for o in b["ops"]] if isinstance(o, dict)
            for key in ("inputs", "outputs") for names in o.get(key, {}).values() for n in names]
    known = {v["name"] for v in vars_}
    declared = list(vars_) + [{"name": n} for n in dict.fromkeys(used) if n not in known]
    b0 = {"idx": 0, "parent_idx": -1, "vars": declared, "ops": list(ops)}
    return {"format": "program/v1", "blocks": [b0] + [dict(b, idx=i + 1) for i, b in enumerate(blocks)]}


def cond_op(sub_block, **attrs):
    return op("conditional_block", dict(attrs, sub_block=sub_block), inputs={"Cond": ["c"], "Input": []},
              outputs={"Out": [], "Scope": ["s"]})


def sub(parent, *ops):
    return {"parent_idx": parent, "vars": [], "ops": list(ops)}


A_VAR = {"name": "a", "shape": [2, 3], "dtype": "float32"}

CASES = [
    # block references: in range, ints, never -1 for the last block, never null
    ("blocks-attr-out-of-range", doc(op("relu", {"blocks_attr": {"blocks": [99]}})), InvalidArgument,
     r"blocks\[0\]\.ops\[0\] \(relu\)\.attrs\.blocks_attr.*no block 99"),
    ("blocks-attr-minus-one", doc(op("relu", {"bodies": {"blocks": [-1]}}), blocks=[sub(0)]), InvalidArgument,
     r"attrs\.bodies.*no block -1.*-1 is not the last block"),
    ("block-ref-minus-one", doc(cond_op({"block": -1}), blocks=[sub(0)]), InvalidArgument,
     r"\(conditional_block\)\.attrs\.sub_block.*no block -1"),
    ("block-ref-bool", doc(cond_op({"block": True}), blocks=[sub(0)]), InvalidArgument,
     r"attrs\.sub_block.*must be an int, got bool"),
    ("block-ref-null", doc(cond_op(None), blocks=[sub(0)]), InvalidArgument,
     r"attrs\.sub_block.*must be a block reference.*got null"),
    ("block-ref-string", doc(cond_op("1"), blocks=[sub(0)]), InvalidArgument, r"attrs\.sub_block.*got str"),
    ("block-ref-missing", doc(op("conditional_block", {}, inputs={"Cond": ["c"]}, outputs={"Scope": ["s"]})),
     InvalidArgument, r"attrs\.sub_block: conditional_block needs a sub_block"),
    ("block-idx-bool", {"blocks": [{"idx": False}]}, InvalidArgument, r"blocks\[0\]\.idx"),
    ("parent-bool", {"blocks": [{"idx": 0, "parent_idx": -1}, {"idx": 1, "parent_idx": False}]},
     InvalidArgument, r"blocks\[1\]\.parent_idx.*got False"),
    # attrs of the type the op declares, named by their path
    ("attr-int-beyond-int64", doc(op("softmax", {"axis": 2 ** 64})), InvalidArgument,
     r"attrs\.axis.*out of the int64 range"),
    ("attr-float-beyond-float32", doc(op("scale", {"scale": 1e308})), InvalidArgument,
     r"\(scale\)\.attrs\.scale.*float32"),
    ("attr-list-of-bools-as-ints", doc(op("reshape2", {"shape": [True, 3]})), InvalidArgument,
     r"attrs\.shape\[0\].*list of int but element 0 is bool"),
    ("attr-list-of-floats-as-ints", doc(op("fill_constant", {"shape": [2.5]}, inputs={}, outputs={"Out": ["b"]})),
     InvalidArgument, r"\(fill_constant\)\.attrs\.shape\[0\]"),
    ("attr-dtype-not-a-vartype", doc(op("fill_constant", {"dtype": 99}, inputs={}, outputs={"Out": ["b"]})),
     InvalidArgument, r"attrs\.dtype.*99 is no VarType"),
    ("attr-role-var-of-ints", doc(op("relu", {"op_role_var": [1, 2]})), InvalidArgument,
     r"attrs\.op_role_var\[0\]"),
    ("attr-deep-value", json.loads('{"blocks": [{"ops": [{"type": "relu", "inputs": {"X": ["a"]}, "attrs": '
                                   '{"extra": ' + "[" * 900 + "]" * 900 + '}}]}]}'),
     InvalidArgument, r"attrs\.extra.*only scalars"),
    ("uniform-random-range", doc(op("uniform_random", {"min": float("-inf"), "max": 1.0}, inputs={},
                                    outputs={"Out": ["b"]})), InvalidArgument, r"\(uniform_random\)\.attrs.*finite range"),
    ("uniform-random-min-above-max", doc(op("uniform_random", {"min": 2.0, "max": 1.0}, inputs={},
                                            outputs={"Out": ["b"]})), InvalidArgument, r"min <= max"),
    ("uniform-random-diag", doc(op("uniform_random", {"diag_num": 2 ** 40}, inputs={}, outputs={"Out": ["b"]})),
     InvalidArgument, r"attrs\.diag_num"),
    # vars: dtype, shape (ints, not booleans), flags that are booleans
    ("var-dtype-dict", doc(vars_=[dict(A_VAR, dtype={"name": "float32"})]), InvalidArgument, r"\(a\).*dtype"),
    ("var-shape-bool", doc(vars_=[dict(A_VAR, shape=[True, 3])]), InvalidArgument,
     r"vars\[0\] \(a\).*shape must be a list of ints"),
    ("var-shape-negative", doc(vars_=[dict(A_VAR, shape=[-2, 3])]), InvalidArgument, r"\(a\).*-1 \(unknown\)"),
    ("var-is-parameter-str", doc(vars_=[dict(A_VAR, is_parameter="false")]), InvalidArgument,
     r"\(a\).*is_parameter must be a boolean"),
    # slots the kernels and hooks read
    ("kernel-input-missing", doc(op("mul", inputs={"X": ["a"]})), InvalidArgument,
     r"\(mul\)\.inputs\.Y.*needs one variable"),
    ("kernel-input-two-names", doc(op("relu", inputs={"X": ["a", "b"]})), InvalidArgument,
     r"\(relu\)\.inputs\.X.*needs one variable.*got \['a', 'b'\]"),
    ("fetch-without-input", doc(op("fetch", {"col": 0}, inputs={}, outputs={"Out": ["fetch"]})), InvalidArgument,
     r"\(fetch\)\.inputs\.X"),
    ("feed-without-output", doc(op("feed", {"col": 0}, inputs={"X": ["feed"]}, outputs={})), InvalidArgument,
     r"\(feed\)\.outputs\.Out"),
    ("feed-negative-column", doc(op("feed", {"col": -1}, inputs={"X": ["feed"]}, outputs={"Out": ["x"]})),
     InvalidArgument, r"\(feed\)\.attrs\.col"),
    ("read-without-reader", doc(op("read", {}, inputs={}, outputs={"Out": ["x"]})), InvalidArgument,
     r"\(read\)\.inputs\.Reader"),
    ("reader-without-queue", doc(op("create_py_reader", {}, inputs={}, outputs={"Out": ["r"]})), InvalidArgument,
     r"\(create_py_reader\)\.inputs\.blocking_queue"),
    ("reader-ranks", doc(op("create_py_reader", {"shape_concat": [-1, 4], "ranks": [2, 2], "dtypes": [5, 5],
                                                 "lod_levels": [0, 0]},
                            inputs={"blocking_queue": ["q"]}, outputs={"Out": ["r"]})),
     InvalidArgument, r"\(create_py_reader\)\.attrs\.ranks"),
    ("reader-dtype", doc(op("create_py_reader", {"shape_concat": [4], "ranks": [1], "dtypes": [77], "lod_levels": [0]},
                            inputs={"blocking_queue": ["q"]}, outputs={"Out": ["r"]})),
     InvalidArgument, r"\(create_py_reader\)\.attrs\.dtypes\[0\]"),
    ("cond-scalar-without-cond", doc(op("conditional_block", {"sub_block": {"block": 1}, "is_scalar_condition": True},
                                        inputs={"Cond": [], "Input": []}, outputs={"Scope": ["s"]}),
                                     blocks=[sub(0)]),
     InvalidArgument, r"\(conditional_block\)\.inputs\.Cond.*exactly one"),
]


@pytest.mark.parametrize("name, document, error, culprit", CASES, ids=[c[0] for c in CASES])
def test_bad_documents_give_typed_errors_naming_the_path(name, document, error, culprit):
    with pytest.raises(error, match=culprit):
        Program.from_dict(document)


def test_huge_shapes_are_refused_before_anything_is_allocated():
    big = [2 ** 20, 2 ** 20]
    with pytest.raises(ResourceExhausted, match=r"blocks\[0\]\.vars\[0\] \(a\).*more than"):
        Program.from_dict(doc(vars_=[dict(A_VAR, shape=big)]))
    fill = op("fill_constant", {"shape": big, "dtype": 5, "value": 1.0}, inputs={}, outputs={"Out": ["b"]})
    with pytest.raises(ResourceExhausted, match=r"\(fill_constant\)\.attrs\.shape"):
        Program.from_dict(doc(fill))
    Program.from_dict(doc(vars_=[dict(A_VAR, shape=[-1, MAX_ELEMENTS])]))  # -1 dims are not counted


def test_cyclic_sub_blocks_are_rejected_at_load_time():
    t0 = time.perf_counter()
    with pytest.raises(InvalidArgument, match=r"blocks\[1\]\.ops\[0\] \(conditional_block\).*cycle \(1 -> 1\)"):
        Program.from_dict(doc(cond_op({"block": 1}), blocks=[sub(0, cond_op({"block": 1}))]))
    with pytest.raises(InvalidArgument, match=r"cycle \(0 -> 1 -> 0\)"):
        Program.from_dict(doc(cond_op({"block": 1}), blocks=[sub(0, cond_op({"block": 0}))]))
    with pytest.raises(InvalidArgument, match=r"cycle \(1 -> 2 -> 1\)"):
        Program.from_dict(doc(cond_op({"block": 1}), blocks=[sub(0, cond_op({"block": 2})),
                                                             sub(1, cond_op({"block": 1}))]))
    assert time.perf_counter() - t0 < 5


def test_sub_blocks_nest_at_most_the_depth_limit():
    def chain(n):  # block i runs block i + 1 through a conditional_block
        return doc(cond_op({"block": 1}), blocks=[sub(i, *([cond_op({"block": i + 2})] if i + 2 <= n else []))
                                                  for i in range(n)])
    assert len(Program.from_dict(chain(MAX_BLOCK_DEPTH)).blocks) == MAX_BLOCK_DEPTH + 1
    with pytest.raises(InvalidArgument, match=f"nest more than {MAX_BLOCK_DEPTH} deep"):
        Program.from_dict(chain(MAX_BLOCK_DEPTH + 5))
    flat = doc(cond_op({"block": 1}), blocks=[sub(0)] * 299)  # many sibling blocks are fine
    assert len(Program.from_dict(flat).blocks) == 300


def test_booleans_are_not_dims_in_static_data():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        with pytest.raises(InvalidArgument, match=r"static.data\('x'\): bad dim True"):
            paddle.static.data("x", [True, 3], "float32")
        assert paddle.static.data("y", [None, 3], "float32").shape == (-1, 3)


def test_convert_dtype_refuses_values_that_are_no_dtype_and_still_takes_dtypes():
    for bad in ({"name": "float32"}, None):  # NumPy's ValueError; None silently meant float64
        with pytest.raises(InvalidArgument, match="unsupported dtype"):
            convert_dtype(bad)
    assert [convert_dtype(d) for d in ("float", 5, np.int64, np.dtype("bool"), float)] == \
        ["float32", "float32", "int64", "bool", "float64"]


def _cond_program():
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        x = paddle.static.data("x", [None, 3], "float32")
        c = paddle.static.data("c", [1], "bool")
        h = paddle.static.nn.fc(x, 3)

        def branch():
            block = paddle.static.default_main_program().current_block()
            block.append_op(type="scale", inputs={"X": [h]}, outputs={"Out": [h]}, attrs={"scale": 2.0})
        paddle.static.nn.cond(c, branch)
        paddle.mean(h)
    return main, startup


def test_documents_of_real_programs_load_and_one_boolean_dim_spoils_them():
    main, startup = _cond_program()
    docs = [("cond main", main.to_dict()), ("cond startup", startup.to_dict()),
            ("cond clone", main.clone(for_test=True).to_dict())]
    for name in sorted(os.listdir(os.path.join(ROOT, "oracle", "programs"))):
        rec = json.load(open(os.path.join(ROOT, "oracle", "programs", name)))
        docs += [(f"{name} {key}", rec[key]) for key in ("main", "startup")]
    for name, d in docs:
        d = json.loads(json.dumps(d))
        assert Program.from_dict(d).to_dict()["blocks"] == d["blocks"], name
        i, var = next((i, v) for i, v in enumerate(d["blocks"][0]["vars"]) if v.get("shape"))
        var["shape"] = [True] + var["shape"][1:]
        with pytest.raises(InvalidArgument, match=rf"blocks\[0\]\.vars\[{i}\] .*shape must be a list of ints"):
            Program.from_dict(d)


def test_a_tensor_too_large_for_memory_is_one_line_exit_2(tmp_path):
    """Within the element limit but beyond this process's memory: ResourceExhausted naming the op."""
    rec = doc(op("fill_constant", {"shape": [2 ** 30], "dtype": 6, "value": 1.0}, inputs={}, outputs={"Out": ["b"]}),
              vars_=[{"name": "b", "shape": [2 ** 30], "dtype": "float64"}])
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"main": rec, "loss_name": "b"}))
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY)); "
            "from refimpl.cli import main; sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "run", str(path)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("refimpl run: ResourceExhausted: block 0 op 0 (fill_constant): out of memory")
