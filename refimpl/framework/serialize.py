"""The ``program/v1`` JSON format: Program <-> plain dict.

The format is the one the oracle files use (``shared/oracle/README.md``):
blocks with ``idx``, ``parent_idx``, ``vars`` (sorted by name) and ``ops``
(type, slot -> names, attrs; a block attr is ``{"block": idx}``). It plays
the role of Paddle's ``ProgramDesc`` protobuf. ``program_from_dict``
validates as it goes and raises InvalidArgument naming the bad path, or
NotFound for an op type that is not registered; it never evaluates content.
Attr values are checked against the type of the op's declared default (a
bool where a bool is declared, an int for an int, a number for a float, a
string for a string, a flat list of scalars for a list), and attrs the proto
does not declare must still be attribute-shaped (a scalar, a flat list of
scalars, or a block reference); anything else is InvalidArgument naming the
op, the attr and the path.
"""
from __future__ import annotations

import numbers
from typing import Any, Dict, Iterable, Optional, Sequence, TYPE_CHECKING

import numpy as np

from refimpl.core.dtypes import convert_dtype
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound
from refimpl.ops.registry import get_op_def, has_op

from .block import Block
from .operator import Operator
from .variable import VAR_TYPES, Parameter, Variable

if TYPE_CHECKING:
    from .program import Program

FORMAT = "program/v1"
_PLAIN_KINDS = {bool: "bool", int: "int", float: "float", str: "str"}  # attr values kept as they are


def _attr_to_json(v):
    if type(v) in _PLAIN_KINDS:
        return v
    if isinstance(v, Block):
        return {"block": v.idx}
    if isinstance(v, (list, tuple)) and v and all(isinstance(b, Block) for b in v):
        return {"blocks": [b.idx for b in v]}
    if isinstance(v, tuple):
        return list(v)
    return v


def block_to_dict(block: Block, ops: Optional[Sequence[Operator]] = None,
                  var_names: Optional[Iterable[str]] = None) -> Dict[str, Any]:
    """One block as a dict; ``ops`` / ``var_names`` (default: all of them) select what it lists."""
    names = block.vars if var_names is None else var_names
    return {
        "idx": block.idx, "parent_idx": block.parent_idx,
        "vars": [block.vars[n]._to_dict() for n in sorted(names)],
        "ops": [{"type": op.type,
                 "inputs": {k: list(v) for k, v in op.inputs.items()},
                 "outputs": {k: list(v) for k, v in op.outputs.items()},
                 "attrs": {k: _attr_to_json(v) for k, v in op._attrs.items()}}
                for op in (block.ops if ops is None else ops)],
    }


def program_to_dict(program: Program) -> Dict[str, Any]:
    return {"format": FORMAT, "blocks": [block_to_dict(b) for b in program.blocks]}


def _need(cond, where, what):
    if not cond:
        raise InvalidArgument(f"malformed {FORMAT} program at {where}: {what}")


def _var_from_dict(block, d, where):
    _need(isinstance(d, dict), where, "a var must be an object")
    name = d.get("name")
    _need(isinstance(name, str) and name, where, "var needs a non-empty string 'name'")
    vtype = d.get("type", "DENSE_TENSOR")
    _need(vtype in VAR_TYPES, f"{where} ({name})", f"unknown var type {vtype!r}")
    shape = d.get("shape")
    _need(shape is None or (isinstance(shape, list) and all(isinstance(x, int) for x in shape)),
          f"{where} ({name})", "shape must be a list of ints")
    dtype = d.get("dtype")
    if dtype is not None:
        try:
            convert_dtype(dtype)
        except EnforceNotMet:
            _need(False, f"{where} ({name})", f"unknown dtype {dtype!r}")
    flags = {k: d.get(k, False) for k in ("persistable", "stop_gradient", "is_data")}
    for k, v in flags.items():
        _need(isinstance(v, bool), f"{where} ({name})", f"{k} must be a boolean")
    if d.get("is_parameter"):
        v = Parameter(block, name, shape or [], dtype, trainable=not flags["stop_gradient"], **flags)
    else:
        v = Variable(block, name, shape=shape, dtype=dtype, type=vtype, **flags)
    block.vars[name] = v


_COMMON_ATTRS = {"op_role": "int", "op_role_var": "list", "op_namescope": "str", "op_device": "str",
                 "op_callstack": "list", "with_quant_attr": "bool", "is_test": "bool"}


def _kind(v):
    """The attribute kind of a value: bool, int, float, str, list, block or None (not an attr)."""
    kind = _PLAIN_KINDS.get(type(v))  # the common case, without the slower ABC checks below
    if kind is not None:
        return kind
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, numbers.Integral):
        return "int"
    if isinstance(v, numbers.Real):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, (list, tuple)):
        kinds = {_kind(x) for x in v}
        if kinds <= {"int", "float"} or len(kinds) == 1 and kinds & {"bool", "str", "int", "float"}:
            return "list"
        return "blocks" if kinds == {"block"} else None
    if isinstance(v, dict):
        if set(v) == {"block"}:
            return "block"
        if set(v) == {"blocks"}:
            return "blocks"
        return None
    if type(v).__name__ == "Block":  # a Block object, when a Program is cloned
        return "block"
    return None


def _declared_kind(opdef, name):
    if name in opdef.attrs:
        d = opdef.attrs[name]
        return None if d is None else _kind(d)
    return _COMMON_ATTRS.get(name)


_ACCEPTS = {"float": {"float", "int"}, "list": {"list"}, "int": {"int"}, "bool": {"bool"}, "str": {"str"},
            "block": {"block"}, "blocks": {"blocks", "list"}}


def _check_attr(opdef, name, value, where):
    got = _kind(value)
    if value is None and name in opdef.attrs and opdef.attrs[name] is None:
        return
    if got is None:
        _need(False, where, f"attr {name!r} of op {opdef.type!r} has a value of type "
              f"{type(value).__name__} that no attribute can hold ({_short(value)})")
    want = _declared_kind(opdef, name)
    if want is None:
        return
    ok = got in _ACCEPTS.get(want, {want}) or (want == "list" and got == "blocks" and not value)
    if not ok:
        _need(False, where, f"attr {name!r} of op {opdef.type!r} is declared {want} but got {got} "
              f"({_short(value)})")


def _short(v):
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _op_from_dict(block, d, where):
    _need(isinstance(d, dict), where, "an op must be an object")
    t = d.get("type")
    _need(isinstance(t, str), where, "op needs a string 'type'")
    if not has_op(t):
        raise NotFound(f"{where}: operator {t!r} is not registered")
    slots = {}
    for key in ("inputs", "outputs"):
        s = d.get(key, {})
        _need(isinstance(s, dict), f"{where} ({t}).{key}", "must map slot names to name lists")
        for slot, names in s.items():
            _need(isinstance(names, list) and all(isinstance(n, str) for n in names),
                  f"{where} ({t}).{key}.{slot}", "must be a list of variable names")
        slots[key] = s
    attrs = d.get("attrs", {})
    _need(isinstance(attrs, dict), f"{where} ({t}).attrs", "must be an object")
    opdef = get_op_def(t)
    for name, value in attrs.items():
        _check_attr(opdef, name, value, f"{where} ({t}).attrs.{name}")
    op = Operator(block, t, slots["inputs"], slots["outputs"], dict(attrs), fill_proto=False)
    block.ops.append(op)


def program_from_dict(d: Any) -> Program:
    from .program import Program
    _need(isinstance(d, dict), "<root>", "expected an object")
    _need(d.get("format", FORMAT) == FORMAT, "format", f"expected {FORMAT!r}, got {d.get('format')!r}")
    blocks = d.get("blocks")
    _need(isinstance(blocks, list) and blocks, "blocks", "expected a non-empty list")
    prog = Program()
    prog.blocks = []
    for i, bd in enumerate(blocks):
        _need(isinstance(bd, dict), f"blocks[{i}]", "a block must be an object")
        _need(bd.get("idx", i) == i, f"blocks[{i}].idx", "blocks must be listed in idx order")
        parent = bd.get("parent_idx", -1)
        _need(isinstance(parent, int) and -1 <= parent < i, f"blocks[{i}].parent_idx",
              f"must be -1 or an earlier block, got {parent!r}")
        prog.blocks.append(Block(prog, i, parent))
    for i, bd in enumerate(blocks):
        b = prog.blocks[i]
        _need(isinstance(bd.get("vars", []), list), f"blocks[{i}].vars", "expected a list")
        _need(isinstance(bd.get("ops", []), list), f"blocks[{i}].ops", "expected a list")
        for j, vd in enumerate(bd.get("vars", [])):
            _var_from_dict(b, vd, f"blocks[{i}].vars[{j}]")
        for j, od in enumerate(bd.get("ops", [])):
            _op_from_dict(b, od, f"blocks[{i}].ops[{j}]")
    for b in prog.blocks:
        for j, op in enumerate(b.ops):
            for k, v in op._attrs.items():
                if isinstance(v, dict) and set(v) == {"block"}:
                    _need(isinstance(v["block"], int) and 0 <= v["block"] < len(prog.blocks),
                          f"blocks[{b.idx}].ops[{j}].attrs.{k}", f"no block {v['block']!r}")
                    op._attrs[k] = prog.blocks[v["block"]]
                elif isinstance(v, dict) and set(v) == {"blocks"}:
                    op._attrs[k] = [prog.blocks[x] for x in v["blocks"]]
            for n in op.output_arg_names:
                var = b._find_var_recursive(n)
                if var is not None:
                    var.op = op
    prog._version = 0
    return prog
