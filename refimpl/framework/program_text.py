"""The text Paddle prints for programs, blocks, ops and variables.

Mirrors the ``_to_readable_code`` methods of ``Variable``, ``Operator``,
``Block`` and ``Program`` in ``python/paddle/base/framework.py`` (Paddle
3.3.1, legacy IR) — what ``print(program)`` shows — and, for
``Variable.to_string`` / ``Block.to_string(.., with_details=True)``, the
protobuf text of a ``VarDesc`` (``framework.proto``).

Readable text, as Paddle writes it:

- a block opens with ``{ // block_idx:0  parent_idx:-1  forward_idx:-1
  backward_idx:-1``, lists its vars, a blank line, its ops, and ``}``; a
  program is its blocks, each followed by a newline;
- a var is ``[persist ][trainable ]param|var NAME : TYPE.shape(..)
  .dtype(..).stop_gradient(..)``, its shape a Python tuple (``(3,)``); a var
  that is not a tensor shows only its type (``STEP_SCOPES)``, closing
  parenthesis included, as Paddle prints it);
- an op is ``{Out=['y']} = type(inputs={X=['x']}, a = v, ...)``: slots
  sorted by name (the C++ ``OpDesc`` keeps them in a ``std::map``), attrs
  sorted by name with ``op_callstack`` left out, each value as Python's
  ``str`` of what ``OpDesc.attr`` returns (strings unquoted, FLOAT attrs as
  float32 widened to a Python float, ``block[1]`` for a block). Every op of
  Paddle carries the common attrs of ``OpProtoAndCheckerMaker``
  (``op_device``, ``op_namescope``, ``op_role``, ``op_role_var``,
  ``with_quant_attr``); an op here that lacks one prints its default.

Differences, all in the protobuf text (``to_string``), which prints
Paddle's C++ desc state: an op lists only the attrs refimpl keeps, without
Paddle's extra attrs (``use_mkldnn`` ...) and with an empty
``op_callstack``, and an empty list attr shows as ``STRINGS`` (refimpl keeps
no attr types); a program has no ``op_version_map``; a var's
``legacy_lod_level`` (set in Paddle by each op's C++ infer-shape) is printed
for data vars and for non-persistable temporaries of rank >= 1, and a grad
var shows ``persistable: false`` where Paddle's C++-made one shows nothing.
Data vars, parameters and persistable vars print exactly as Paddle's.
"""
from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Tuple, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .block import Block
    from .operator import Operator
    from .program import Program
    from .variable import Variable

__all__ = ["attr_value_text", "var_to_readable", "op_to_readable", "block_to_readable", "program_to_readable",
           "var_to_proto_text", "op_to_proto_text", "proto_float_text", "block_to_proto_text",
           "program_to_proto_text"]

TENSOR_TYPES = ("DENSE_TENSOR", "SELECTED_ROWS")
COMMON_ATTR_DEFAULTS = {"op_device": "", "op_namescope": "", "op_role": 0, "op_role_var": [],
                        "with_quant_attr": False}
# framework.proto's VarType names of the dtypes
PROTO_DTYPES = {"bool": "BOOL", "int8": "INT8", "uint8": "UINT8", "int16": "INT16", "int32": "INT32",
                "int64": "INT64", "float16": "FP16", "bfloat16": "BF16", "float32": "FP32",
                "float64": "FP64", "complex64": "COMPLEX64", "complex128": "COMPLEX128"}


# ---- readable text ------------------------------------------------------
def var_to_readable(v: Variable) -> str:
    if v.type in TENSOR_TYPES:
        shape = tuple(v.shape) if v.shape is not None else ()
        body = f"{v.name} : {v.type}.shape{shape}.dtype({v.dtype}).stop_gradient({v.stop_gradient})"
    else:
        body = f"{v.name} : {v.type})"
    if v.is_parameter:
        body = ("trainable param " if v.trainable else "param ") + body
    else:
        body = "var " + body
    return "persist " + body if v.persistable else body


def attr_value_text(value: Any) -> str:
    """``str`` of an attr value as Paddle's ``OpDesc.attr`` hands it back."""
    from .block import Block
    if isinstance(value, Block):
        return f"block[{value.idx}]"
    if isinstance(value, (list, tuple)) and value and all(isinstance(b, Block) for b in value):
        return f"blocks{[b.idx for b in value]}"
    return str(_python_value(value))


def _python_value(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return float(np.float32(value)) if np.isfinite(value) and abs(value) < 3.4e38 else value
    if isinstance(value, (list, tuple)):
        return [_python_value(x) for x in value]
    return value


def _slots_text(slots: Dict[str, List[str]]) -> str:
    return "{" + ", ".join(f"{k}={list(slots[k])}" for k in sorted(slots)) + "}"


def _printed_attrs(op: Operator, skip_op_callstack: bool = True) -> List[Tuple[str, Any]]:
    attrs: Dict[str, Any] = dict(COMMON_ATTR_DEFAULTS, op_callstack=[])
    attrs.update(op.all_attrs())
    return [(k, attrs[k]) for k in sorted(attrs) if not (skip_op_callstack and k == "op_callstack")]


def op_to_readable(op: Operator, skip_op_callstack: bool = True) -> str:
    attrs = ", ".join(f"{k} = {attr_value_text(v)}" for k, v in _printed_attrs(op, skip_op_callstack))
    call = f"{op.type}(inputs={_slots_text(op.inputs)}, {attrs})"
    outputs = _slots_text(op.outputs)
    return call if outputs == "{}" else f"{outputs} = {call}"


def block_to_readable(block: Block, skip_op_callstack: bool = True) -> str:
    lines = [f"{{ // block_idx:{block.idx}  parent_idx:{block.parent_idx}  "
             f"forward_idx:{block.forward_block_idx}  backward_idx:{block.backward_block_idx}"]
    lines += ["    " + var_to_readable(v) for v in block.vars.values()]
    lines.append("")
    lines += ["    " + op_to_readable(op, skip_op_callstack) for op in block.ops]
    return "\n".join(lines) + "\n}"


def program_to_readable(program: Program, skip_op_callstack: bool = True) -> str:
    return "".join(block_to_readable(b, skip_op_callstack) + "\n" for b in program.blocks)


# ---- protobuf text --------------------------------------------------------
def _bool(b: bool) -> str:
    return "true" if b else "false"


def _has_lod_level(v: Variable) -> bool:
    if v.is_parameter or v.type != "DENSE_TENSOR":
        return False
    return v.is_data or (not v.persistable and bool(v.shape))


def var_to_proto_text(v: Variable, with_details: bool = False) -> str:
    lines = [f'name: "{v.name}"', "type {", f"  type: {v.type}"]
    if v.type in ("DENSE_TENSOR", "SELECTED_ROWS", "DENSE_TENSOR_ARRAY"):
        field = {"DENSE_TENSOR": "dense_tensor", "SELECTED_ROWS": "selected_rows",
                 "DENSE_TENSOR_ARRAY": "tensor_array"}[v.type]
        tensor = ["tensor {", f"  data_type: {PROTO_DTYPES.get(str(v.dtype), str(v.dtype).upper())}"]
        tensor += [f"  dims: {d}" for d in (v.shape or ())] + ["}"]
        if v.type == "SELECTED_ROWS":
            inner = tensor
        else:
            inner = tensor + ([f"legacy_lod_level: {v.lod_level}"] if _has_lod_level(v) else [])
        lines += [f"  {field} {{"] + ["    " + s for s in inner] + ["  }"]
    lines.append("}")
    lines.append(f"persistable: {_bool(v.persistable)}")
    if v.need_check_feed:
        lines.append("need_check_feed: true")
    if v.is_parameter:
        lines.append("is_parameter: true")
    lines.append(f"stop_gradient: {_bool(v.stop_gradient)}")
    text = "\n".join(lines) + "\n"
    if with_details:
        text += "error_clip: None\n"
        if v.is_parameter:
            text += "".join(f"{k}: {getattr(v, k)}\n" for k in
                            ("trainable", "optimize_attr", "regularizer", "do_model_average", "need_clip"))
    return text


def proto_float_text(value: float) -> str:
    """A float attr as protobuf's text format prints it (``SimpleFtoa``): the 6 significant digits of
    ``%g`` when they read back as the same float32, else 9 (always enough); ``inf``, ``-inf``, ``nan``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    short = f"{value:.6g}"
    return short if np.float32(float(short)) == np.float32(value) else f"{value:.9g}"


def _proto_attr(name: str, value: Any) -> str:
    from .block import Block
    value = _python_value(value)
    if isinstance(value, Block):
        body = f"type: BLOCK\n  block_idx: {value.idx}"
    elif isinstance(value, bool):
        body = f"type: BOOLEAN\n  b: {_bool(value)}"
    elif isinstance(value, int):
        body = f"type: INT\n  i: {value}"
    elif isinstance(value, float):
        body = f"type: FLOAT\n  f: {proto_float_text(value)}"
    elif isinstance(value, str):
        body = f'type: STRING\n  s: "{value}"'
    elif isinstance(value, list) and value and all(isinstance(x, bool) for x in value):
        body = "type: BOOLEANS" + "".join(f"\n  bools: {_bool(x)}" for x in value)
    elif isinstance(value, list) and value and all(isinstance(x, int) for x in value):
        body = "type: INTS" + "".join(f"\n  ints: {x}" for x in value)
    elif isinstance(value, list) and value and all(isinstance(x, float) for x in value):
        body = "type: FLOATS" + "".join(f"\n  floats: {proto_float_text(x)}" for x in value)
    elif isinstance(value, list) and value and all(isinstance(x, Block) for x in value):
        body = "type: BLOCKS" + "".join(f"\n  blocks_idx: {b.idx}" for b in value)
    else:
        body = "type: STRINGS" + "".join(f'\n  strings: "{x}"' for x in (value or []))
    return f'attrs {{\n  name: "{name}"\n  {body}\n}}'


def op_to_proto_text(op: Operator) -> str:
    parts = []
    for kind, slots in (("inputs", op.inputs), ("outputs", op.outputs)):
        for slot in sorted(slots):
            args = "".join(f'\n  arguments: "{n}"' for n in slots[slot])
            parts.append(f'{kind} {{\n  parameter: "{slot}"{args}\n}}')
    parts.append(f'type: "{op.type}"')
    parts += [_proto_attr(k, v) for k, v in _printed_attrs(op, skip_op_callstack=False)]
    return "\n".join(parts) + "\n"


_INDENT = re.compile(r"\n(.)")
PADDLE_VERSION = 3003001  # ProgramDesc.version that Paddle 3.3.1 writes


def _indent(text: str, by: str = "  ") -> str:
    return "".join(by + line if line else line for line in text.splitlines(True))


def _desc_block_text(block: Block) -> str:
    """The ``BlockDesc`` text: vars in the desc's order (by name), then the ops."""
    text = f"idx: {block.idx}\nparent_idx: {block.parent_idx}\n"
    text += "".join("vars {\n" + _indent(var_to_proto_text(v)) + "}\n" for _, v in sorted(block.vars.items()))
    text += "".join("ops {\n" + _indent(op_to_proto_text(op)) + "}\n" for op in block.ops)
    if block.forward_block_idx != -1:
        text += f"forward_block_idx: {block.forward_block_idx}\n"
    return text


def _details_block_text(block: Block) -> str:
    """``Block.to_string(.., with_details=True)``: the Python vars in block order, with their details."""
    def nested(tag, body):
        return f"\n  {tag} {{\n    " + _INDENT.sub(r"\n    \1", body) + "  }"
    text = f"blocks {{\n  idx: {block.idx}\n  parent_idx: {block.parent_idx}"
    text += "".join(nested("vars", var_to_proto_text(v, True)) for v in block.vars.values())
    text += "".join(nested("ops", op_to_proto_text(op)) for op in block.ops)
    return text + "\n}"


def block_to_proto_text(block: Block, with_details: bool = False) -> str:
    return _details_block_text(block) if with_details else _desc_block_text(block)


def program_to_proto_text(program: Program, with_details: bool = False) -> str:
    """``Program.to_string``: the ``ProgramDesc`` text (without Paddle's ``op_version_map``)."""
    if with_details:
        return "".join(_details_block_text(b) for b in program.blocks) + \
            f"version {{\n    version: {PADDLE_VERSION}\n}}\n"
    text = "".join("blocks {\n" + _indent(_desc_block_text(b)) + "}\n" for b in program.blocks)
    return text + f"version {{\n  version: {PADDLE_VERSION}\n}}\n"
