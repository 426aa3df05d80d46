"""The ``program/v1`` JSON format: Program <-> plain dict.

The format is the one the oracle files use (``shared/oracle/README.md``):
blocks with ``idx``, ``parent_idx``, ``vars`` (sorted by name) and ``ops``
(type, slot -> names, attrs; a block attr is ``{"block": idx}``). It plays
the role of Paddle's ``ProgramDesc`` protobuf. ``program_from_dict`` first
checks the whole document with ``program_schema.validate_program`` (typed
errors naming the bad path: InvalidArgument, NotFound for an op type that is
not registered, ResourceExhausted for a tensor too large), then builds the
blocks; it never evaluates content.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Sequence, TYPE_CHECKING

from .block import Block
from .operator import Operator
from .program_schema import FORMAT, PLAIN_KINDS, validate_program
from .variable import Parameter, Variable

if TYPE_CHECKING:
    from .program import Program


def _attr_to_json(v):
    if type(v) in PLAIN_KINDS:  # attr values kept as they are
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


def _var_from_dict(block: Block, d: Dict[str, Any]) -> None:
    name, shape, dtype = d["name"], d.get("shape"), d.get("dtype")
    flags = {k: d.get(k, False) for k in ("persistable", "stop_gradient", "is_data")}
    if d.get("is_parameter"):
        block.vars[name] = Parameter(block, name, shape or [], dtype, trainable=not flags["stop_gradient"], **flags)
    else:
        block.vars[name] = Variable(block, name, shape=shape, dtype=dtype, type=d.get("type", "DENSE_TENSOR"),
                                    **flags)


def _resolve_blocks(value: Any, blocks: Sequence[Block]) -> Any:
    """A block reference ``{"block": k}`` / ``{"blocks": [...]}`` as Block objects (already checked in range)."""
    if isinstance(value, dict) and set(value) == {"block"}:
        return blocks[value["block"]]
    if isinstance(value, dict) and set(value) == {"blocks"}:
        return [blocks[k] for k in value["blocks"]]
    return value


def program_from_dict(d: Any, validate: bool = True) -> Program:
    """Build a Program from a ``program/v1`` document, after :func:`program_schema.validate_program`.

    ``validate=False`` is for documents refimpl has just written itself from a Program
    (``Program.clone``, ``prune_program``): they need no second check.
    """
    from .program import Program
    if validate:
        validate_program(d)
    prog = Program()
    prog.blocks = [Block(prog, i, bd.get("parent_idx", -1)) for i, bd in enumerate(d["blocks"])]
    for bd, b in zip(d["blocks"], prog.blocks):
        for vd in bd.get("vars", []):
            _var_from_dict(b, vd)
        for od in bd.get("ops", []):
            attrs = {k: _resolve_blocks(v, prog.blocks) if type(v) is dict else v
                     for k, v in od.get("attrs", {}).items()}
            op = Operator(b, od["type"], od.get("inputs", {}), od.get("outputs", {}), attrs, fill_proto=False)
            b.ops.append(op)
    for b in prog.blocks:
        for op in b.ops:
            for n in op.output_arg_names:
                var = b._find_var_recursive(n)
                if var is not None:
                    var.op = op
    prog._version = 0
    return prog
