"""The validator of a ``program/v1`` document, run before any Block is built.

Plays the part of the checks Paddle makes when it parses a ``ProgramDesc``
protobuf and builds ``OpDesc`` / ``VarDesc`` objects from it
(``paddle/fluid/framework/program_desc.cc``, ``op_desc.cc``: a block index
in range, attrs of the type the ``OpProto`` declares, known var types and
dtypes). A protobuf schema makes most of those checks for Paddle; JSON has
none, so :func:`validate_program` does them in one pass over the document:

- the layout: an object with ``blocks``, each block's ``idx`` in order and
  ``parent_idx`` an earlier block (or -1), nested at most
  :data:`MAX_BLOCK_DEPTH` deep;
- vars: a name, a known type, a dtype, a shape of ints (``-1`` for an unknown
  dim; a boolean is not a dim) of at most :data:`MAX_ELEMENTS` elements;
- ops: a registered type (else NotFound), slots mapping names to lists of
  names, the op's required input slots filled (Paddle's ``OpProto`` marks
  the others dispensable), and each attr of the type its definition in
  ``refimpl.ops`` declares (int, float, bool, str, a flat list of one of
  those, a dtype enum, a block reference); a few ops have consistency checks
  of their own (a reader's shapes, a ``conditional_block``'s condition);
- block references (``{"block": k}``, ``{"blocks": [...]}``): ints in range
  (``-1`` is not the last block), never a cycle.

Every failure is a typed error naming the path (``blocks[0].ops[3]
(mul).attrs.x_num_col_dims``): InvalidArgument, NotFound for an unknown op
type, ResourceExhausted for a tensor too large to allocate. The checks never
recurse into values, so deeply nested JSON gives an error, not a
RecursionError. Unlike Paddle, attrs an op does not declare are kept when
they are attribute-shaped (a scalar, a flat list of scalars, a block
reference).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Dict, List, NoReturn, Optional

import numpy as np

from refimpl.core.dtypes import VARTYPE, VARTYPE_TO_NAME, convert_dtype
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound, ResourceExhausted
from refimpl.ops.registry import OpDef, get_op_def, has_op

from .variable import VAR_TYPES

FORMAT = "program/v1"
MAX_ELEMENTS = 2 ** 31          # elements one tensor may declare (an 8 GiB float32 tensor)
MAX_BLOCK_DEPTH = 64            # nesting of sub-blocks, by parent and by reference
_INT64 = (-2 ** 63, 2 ** 63 - 1)

# attrs every op may carry (Paddle's OpProtoAndCheckerMaker adds them to every proto)
COMMON_ATTRS = {"op_role": "int", "op_role_var": "list:str", "op_namescope": "str", "op_device": "str",
                "op_callstack": "list:str", "with_quant_attr": "bool", "is_test": "bool"}
# attrs whose registered default (None, or an empty list) does not tell their type
_DECLARED = {("conditional_block", "sub_block"): "block", ("coalesce_tensor", "dtype"): "dtype?",
             ("c_allgather", "nranks"): "int?", ("create_py_reader", "dtypes"): "list:dtype"}
_STR_LISTS = {"param_names"}    # empty-default lists of names; every other empty-default list holds ints
# output slots whose first name a prepare hook (refimpl/ops/control_flow_ops.py, reader_ops.py) writes;
# a kernel op's empty output slot is simply not written
_HOOK_OUTPUTS = {("feed", "Out"), ("create_py_reader", "Out"), ("create_double_buffer_reader", "Out")}
_DTYPE_ATTRS = {"dtype", "in_dtype", "out_dtype"}
_SHAPE_ATTRS = {"shape", "out_shape"}


def fail(where: str, what: str) -> NoReturn:
    raise InvalidArgument(f"malformed {FORMAT} program at {where}: {what}")


def need(cond: Any, where: str, what: str) -> None:
    """``fail`` unless ``cond`` (hot paths test first and build the message only on failure)."""
    if not cond:
        fail(where, what)


def short(v: Any) -> str:
    """A value for a message, cut to 60 characters; never walks a deep value."""
    if isinstance(v, (list, dict)):
        r = f"{type(v).__name__} of {len(v)}"
        if isinstance(v, list) and all(is_scalar(x) for x in v[:8]):
            r = repr(v[:8])[:-1] + (", ...]" if len(v) > 8 else "]")
        elif isinstance(v, dict):
            r = "{" + ", ".join(repr(k) for k in list(v)[:4]) + (", ...}" if len(v) > 4 else "}")
    else:
        r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def is_int(v: Any) -> bool:
    """An integer that is not a boolean (a boolean is not a dim, an index or a count)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def is_scalar(v: Any) -> bool:
    return isinstance(v, (str, numbers.Real))


PLAIN_KINDS = {bool: "bool", int: "int", float: "float", str: "str"}


def scalar_kind(v: Any) -> Optional[str]:
    """bool, int, float, str, or None for anything else."""
    kind = PLAIN_KINDS.get(type(v))  # the common case, without the slower ABC checks below
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
    return None


# ---- attr kinds ----------------------------------------------------------------

_KINDS: Dict[str, Dict[str, str]] = {}   # op type -> {attr: kind}, built once per op type


def _declared_kind(opdef: OpDef, name: str, default: Any) -> str:
    """The kind of an attr from its registered default: bool, int, float, str, dtype, list:K, any
    (undeclared: any attribute-shaped value); a trailing ``?`` lets it be null, as its default is."""
    fixed = _DECLARED.get((opdef.type, name))
    if fixed is not None:
        return fixed
    if default is None:
        return "any?"
    if isinstance(default, (list, tuple)):
        if not default:
            return "list:str" if name in _STR_LISTS else "list:int"
        kinds = {scalar_kind(x) for x in default}
        return "list:float" if kinds == {"int", "float"} else f"list:{kinds.pop()}"
    kind = scalar_kind(default) or "any"
    return "dtype" if kind == "int" and name in _DTYPE_ATTRS else kind


def attr_kinds(opdef: OpDef) -> Dict[str, str]:
    kinds = _KINDS.get(opdef.type)
    if kinds is None:
        kinds = dict(COMMON_ATTRS)
        kinds.update({n: _declared_kind(opdef, n, d) for n, d in {**opdef.extra_attrs, **opdef.attrs}.items()})
        _KINDS[opdef.type] = kinds
    return kinds


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _scalar_fits(kind: str, v: Any) -> bool:
    got = scalar_kind(v)
    if kind == "float":  # stored as float32, as Paddle does: a larger finite value would become inf
        return got in ("int", "float") and not (math.isfinite(v) and abs(v) > _FLOAT32_MAX)
    if kind == "int":
        return got == "int" and _INT64[0] <= v <= _INT64[1]
    if kind == "dtype":
        return got == "int" and (v == -1 or int(v) in VARTYPE_TO_NAME)
    return got == kind


def _value_kind(v: Any) -> str:
    """How a value looks, for messages: bool, int, float, str, list, block, blocks, dict, null ..."""
    if v is None:
        return "null"
    k = scalar_kind(v)
    if k is not None:
        return k
    if isinstance(v, dict):
        return {frozenset({"block"}): "block", frozenset({"blocks"}): "blocks"}.get(frozenset(v), "dict")
    if isinstance(v, (list, tuple)):
        return "list"
    return type(v).__name__


def check_attr(opdef: OpDef, name: str, value: Any, op_where: str, n_blocks: int, refs: List[int]) -> None:
    """One attr of the op at ``op_where`` against its declared kind; its block references go to ``refs``."""
    kind = attr_kinds(opdef).get(name, "any")
    if PLAIN_KINDS.get(type(value)) == kind and _scalar_fits(kind, value):
        return  # the common case: a plain scalar of the declared kind
    if type(value) is list and kind.startswith("list:") and all(_scalar_fits(kind[5:], x) for x in value):
        if name in _SHAPE_ATTRS:
            check_numel([x for x in value if x > 0], f"{op_where}.attrs.{name}", f"attr {name!r} of op {opdef.type!r}")
        return
    where, what = f"{op_where}.attrs.{name}", f"attr {name!r} of op {opdef.type!r}"
    if kind.endswith("?"):
        if value is None:
            return
        kind = kind[:-1]
    got = _value_kind(value)
    if kind in ("block", "blocks") or got in ("block", "blocks"):
        _check_block_ref(kind, got, value, what, where, n_blocks, refs)
        return
    if kind == "any":
        if got == "list":
            need(all(scalar_kind(x) for x in value), where,
                 f"{what} has a value that no attribute can hold ({short(value)}): a list may hold only scalars")
            kinds = {scalar_kind(x) for x in value}
            need(kinds <= {"int", "float"} or len(kinds) == 1, where, f"{what} mixes kinds in a list ({short(value)})")
        else:
            need(scalar_kind(value), where,
                 f"{what} has a value of type {got} that no attribute can hold ({short(value)})")
        return
    if kind.startswith("list:"):
        if not isinstance(value, (list, tuple)):
            fail(where, f"{what} is declared list but got {got} ({short(value)})")
        _check_list(kind[5:], name, value, what, where)
        return
    if not _scalar_fits(kind, value):
        if kind == "dtype" and got == "int":
            fail(where, f"{what} is a dtype but {value!r} is no VarType (known: {sorted(VARTYPE_TO_NAME)})")
        if kind == "int" and got == "int":
            fail(where, f"{what} is declared int but {short(value)} is out of the int64 range")
        if kind == "float" and got in ("int", "float"):
            fail(where, f"{what} is a float32 attr but {short(value)} is beyond its range")
        fail(where, f"{what} is declared {'int' if kind == 'dtype' else kind} but got {got} ({short(value)})")


def _check_list(elem: str, name: str, value: Any, what: str, where: str) -> None:
    for j, x in enumerate(value):
        if not _scalar_fits(elem, x):
            fail(f"{where}[{j}]", f"{what} is declared a list of {elem} but element {j} is {_value_kind(x)} "
                                  f"({short(x)})")
    if name in _SHAPE_ATTRS:
        check_numel([x for x in value if x > 0], where, what)


def _check_block_ref(kind, got, value, what, where, n_blocks, refs):
    """A ``{"block": k}`` / ``{"blocks": [...]}`` value where one is declared (or the attr is undeclared)."""
    if kind == "block":
        need(got == "block", where, f"{what} must be a block reference {{'block': idx}}, got {got} ({short(value)})")
    need(kind in (got, "any"), where, f"{what} is declared {kind} but got {got} ({short(value)})")
    idx = [value["block"]] if got == "block" else value["blocks"]
    need(isinstance(idx, list), where, f"{what}: 'blocks' must be a list of block indices, got {short(idx)}")
    for k in idx:
        need(is_int(k), where, f"{what}: a block index must be an int, got {_value_kind(k)} ({short(k)})")
        need(0 <= k < n_blocks, where, f"{what}: no block {k!r} (the program has blocks 0..{n_blocks - 1}; "
                                       f"-1 is not the last block)")
        refs.append(int(k))


def check_numel(dims: List[int], where: str, what: str) -> None:
    """ResourceExhausted when the fixed dims hold more than MAX_ELEMENTS elements (checked before any allocation)."""
    numel = 1
    for d in dims:
        numel *= int(d)
        if numel > MAX_ELEMENTS:
            raise ResourceExhausted(f"{where}: {what} has shape {short(list(dims))}, more than "
                                    f"{MAX_ELEMENTS} elements")


# ---- vars, ops, blocks ------------------------------------------------------------

def check_var(d: Any, where: str) -> None:
    if not isinstance(d, dict):
        fail(where, f"a var must be an object, got {_value_kind(d)}")
    name = d.get("name")
    if not (isinstance(name, str) and name):
        fail(where, "var needs a non-empty string 'name'")
    vtype = d.get("type", "DENSE_TENSOR")
    if not (isinstance(vtype, str) and vtype in VAR_TYPES):
        fail(f"{where} ({name})", f"unknown var type {short(vtype)}")
    shape = d.get("shape")
    if shape is not None:
        if not (isinstance(shape, list) and all(is_int(x) for x in shape)):
            fail(f"{where} ({name})", f"shape must be a list of ints, got {short(shape)}")
        if not all(x >= -1 for x in shape):
            fail(f"{where} ({name})", f"shape dims must be -1 (unknown) or >= 0, got {short(shape)}")
        check_numel([x for x in shape if x > 0], f"{where} ({name})", f"var {name!r}")
    dtype = d.get("dtype")
    if dtype is not None and not (type(dtype) is str and dtype in VARTYPE):
        if not (isinstance(dtype, (str, int)) and not isinstance(dtype, bool)):
            fail(f"{where} ({name})", f"unknown dtype {short(dtype)}")
        try:
            convert_dtype(dtype)
        except EnforceNotMet:
            fail(f"{where} ({name})", f"unknown dtype {short(dtype)}")
    for k in ("persistable", "stop_gradient", "is_data", "is_parameter"):
        if type(d.get(k, False)) is not bool:
            fail(f"{where} ({name})", f"{k} must be a boolean, got {short(d.get(k))}")


def _check_slots(opdef: OpDef, d: dict, where: str) -> None:
    """Slots map names to lists of names; required input slots (and outputs a hook writes) hold one name."""
    t = opdef.type
    for key, declared in (("inputs", opdef.inputs), ("outputs", opdef.outputs)):
        s = d.get(key, {})
        if not isinstance(s, dict):
            fail(f"{where}.{key}", f"must map slot names to name lists, got {_value_kind(s)}")
        for slot, names in s.items():
            if not (type(names) is list and all(type(n) is str and n for n in names)):
                fail(f"{where}.{key}.{slot}", f"must be a list of variable names, got {short(names)}")
        for slot in declared:
            if slot.dispensable or slot.duplicable or key == "outputs" and (t, slot.name) not in _HOOK_OUTPUTS:
                continue
            names = s.get(slot.name)
            if not names or len(names) != 1:
                fail(f"{where}.{key}.{slot.name}", f"op {t!r} needs one variable in {key[:-1]} slot "
                                                   f"{slot.name!r}, got {short(names)}")


def check_op(d: Any, where: str, n_blocks: int, refs: List[int]) -> None:
    need(isinstance(d, dict), where, f"an op must be an object, got {_value_kind(d)}")
    t = d.get("type")
    need(isinstance(t, str), where, f"op needs a string 'type', got {short(t)}")
    if not has_op(t):
        raise NotFound(f"{where}: operator {t!r} is not registered")
    opdef = get_op_def(t)
    where = f"{where} ({t})"
    attrs = d.get("attrs", {})
    need(isinstance(attrs, dict), f"{where}.attrs", f"must be an object, got {_value_kind(attrs)}")
    for name, value in attrs.items():
        check_attr(opdef, name, value, where, n_blocks, refs)
    _check_slots(opdef, d, where)
    check = _OP_CHECKS.get(t)
    if check is not None:
        check(d, attrs, where)


def _check_conditional_block(d, attrs, where):
    need(attrs.get("sub_block") is not None, f"{where}.attrs.sub_block", "conditional_block needs a sub_block")
    if attrs.get("is_scalar_condition", False):
        conds = d.get("inputs", {}).get("Cond") or []
        need(len(conds) == 1, f"{where}.inputs.Cond",
             f"is_scalar_condition needs exactly one Cond variable, got {short(conds)}")


def _check_reader(d, attrs, where):
    ranks, concat = attrs.get("ranks", []), attrs.get("shape_concat", [])
    need(all(r >= 0 for r in ranks) and sum(ranks) == len(concat), f"{where}.attrs.ranks",
         f"ranks {short(ranks)} must add up to the length of shape_concat ({len(concat)})")
    for other in ("dtypes", "lod_levels"):
        need(len(attrs.get(other, [])) == len(ranks), f"{where}.attrs.{other}",
             f"{other} must have one entry per fed variable ({len(ranks)}), got {short(attrs.get(other))}")
    checks = attrs.get("need_check_feed", [])
    need(len(checks) in (0, len(ranks)), f"{where}.attrs.need_check_feed",
         f"need_check_feed must be empty or have {len(ranks)} entries, got {short(checks)}")


def _check_random_range(d, attrs, where):
    lo, hi = attrs.get("min", -1.0), attrs.get("max", 1.0)
    need(lo <= hi and math.isfinite(float(hi) - float(lo)), f"{where}.attrs",
         f"min {lo!r} and max {hi!r} must be a finite range with min <= max")
    for name in ("diag_num", "diag_step"):  # the diagonal init makes an index array of diag_num entries
        v = attrs.get(name, 0)
        need(0 <= v <= MAX_ELEMENTS, f"{where}.attrs.{name}", f"must be in 0..{MAX_ELEMENTS}, got {v!r}")


def _check_column(d, attrs, where):
    need(attrs.get("col", 0) >= 0, f"{where}.attrs.col", f"col must be >= 0, got {attrs.get('col')!r}")


_OP_CHECKS = {"conditional_block": _check_conditional_block, "create_py_reader": _check_reader,
              "uniform_random": _check_random_range, "feed": _check_column, "fetch": _check_column,
              "fetch_v2": _check_column}


def _check_header(bd: Any, i: int, depth: List[int]) -> None:
    where = f"blocks[{i}]"
    need(isinstance(bd, dict), where, f"a block must be an object, got {_value_kind(bd)}")
    idx = bd.get("idx", i)
    need(is_int(idx) and idx == i, f"{where}.idx", f"blocks must be listed in idx order, got {short(idx)}")
    parent = bd.get("parent_idx", -1)
    need(is_int(parent) and -1 <= parent < i, f"{where}.parent_idx",
         f"must be -1 or an earlier block, got {short(parent)}")
    depth.append(0 if parent == -1 else depth[parent] + 1)
    need(depth[i] <= MAX_BLOCK_DEPTH, f"{where}.parent_idx", f"blocks nest more than {MAX_BLOCK_DEPTH} deep")
    for key in ("vars", "ops"):
        need(isinstance(bd.get(key, []), list), f"{where}.{key}", f"expected a list, got {_value_kind(bd.get(key))}")


def _check_references(refs: List[List[int]], where_of: Dict[tuple, str]) -> None:
    """No block reaches itself through sub-block references, and none is nested too deep (iterative DFS)."""
    state = [0] * len(refs)  # 0 new, 1 on the path, 2 done
    for root in range(len(refs)):
        if state[root]:
            continue
        path, stack = [root], [iter(refs[root])]
        state[root] = 1
        while stack:
            k = next(stack[-1], None)
            if k is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            src = path[-1]
            if state[k] == 1:
                cycle = " -> ".join(map(str, path[path.index(k):] + [k]))
                fail(where_of[(src, k)], f"sub-block references form a cycle ({cycle})")
            if state[k] == 0:
                need(len(path) <= MAX_BLOCK_DEPTH, where_of[(src, k)],
                     f"sub-blocks nest more than {MAX_BLOCK_DEPTH} deep")
                state[k] = 1
                path.append(k)
                stack.append(iter(refs[k]))


def validate_program(doc: Any) -> None:
    """Check a ``program/v1`` document; raise a typed error naming the first bad path."""
    need(isinstance(doc, dict), "<root>", f"expected an object, got {_value_kind(doc)}")
    need(doc.get("format", FORMAT) == FORMAT, "format", f"expected {FORMAT!r}, got {short(doc.get('format'))}")
    blocks = doc.get("blocks")
    need(isinstance(blocks, list) and blocks, "blocks", f"expected a non-empty list, got {short(blocks)}")
    depth: List[int] = []
    for i, bd in enumerate(blocks):
        _check_header(bd, i, depth)
    refs: List[List[int]] = [[] for _ in blocks]
    where_of: Dict[tuple, str] = {}
    for i, bd in enumerate(blocks):
        for j, vd in enumerate(bd.get("vars", [])):
            check_var(vd, f"blocks[{i}].vars[{j}]")
        for j, od in enumerate(bd.get("ops", [])):
            before = len(refs[i])
            check_op(od, f"blocks[{i}].ops[{j}]", len(blocks), refs[i])
            for k in refs[i][before:]:
                where_of.setdefault((i, k), f"blocks[{i}].ops[{j}] ({od['type']})")
    _check_references(refs, where_of)

