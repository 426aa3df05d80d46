"""Operator: one op in a Block (type, input/output slots, attrs).

Mirrors ``paddle.base.framework.Operator`` over an ``OpDesc``. Slots map a
slot name to a list of variable names. As in Paddle, when an op is built from
Python with an ``inputs`` dict, every input slot of the op's proto is
present (unused optional ones as ``[]``); output slots are the given ones;
proto attrs are filled with their defaults, plus the common attrs
``op_role``, ``op_role_var``, ``op_namescope`` and ``op_device``.

``op.desc`` is the :class:`OpDesc` view scripts read Paddle's C++ ``OpDesc``
through (``op.desc.type()``, ``op.desc.attr("op_namescope")``): methods, as in
Paddle, over the same slots and attrs (there is no separate desc to sync).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, TYPE_CHECKING

import numpy as np

from refimpl.core.errors import InvalidArgument, NotFound
from refimpl.ops.registry import get_op_def

from .op_role import OP_ROLE_ATTR

if TYPE_CHECKING:
    from .block import Block


__all__ = ["Operator", "OpDesc"]


def _names(value):
    """A slot value given as a Variable, a name, or a list of them -> list of names."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        value = [value]
    out = []
    for v in value:
        name = v if isinstance(v, str) else getattr(v, "name", None)
        if not isinstance(name, str):
            raise InvalidArgument(f"an op slot must hold Variables or names, got {type(v).__name__}")
        out.append(name)
    return out


class Operator:
    def __init__(self, block: Block, type: str, inputs: Optional[Dict[str, Any]] = None,
                 outputs: Optional[Dict[str, Any]] = None, attrs: Optional[Dict[str, Any]] = None,
                 fill_proto: bool = True) -> None:
        self.block = block
        self.type = type
        opdef = get_op_def(type)  # NotFound for unknown op types
        self._inputs = {}
        self._outputs = {}
        if inputs is not None:
            given = {k: _names(v) for k, v in inputs.items()}
            if fill_proto:
                for slot in opdef.inputs:
                    if slot.name not in given and not slot.dispensable:
                        raise InvalidArgument(f"op {type!r}: input slot {slot.name!r} is required")
                    self._inputs[slot.name] = given.pop(slot.name, [])
            self._inputs.update(given)
        if outputs is not None:
            self._outputs = {k: _names(v) for k, v in outputs.items()}
        self._attrs = {}
        if fill_proto:
            self._attrs.update(opdef.attrs)
        for k, v in (attrs or {}).items():
            self._attrs[k] = _typed(opdef, k, v)

    # ---- slots --------------------------------------------------------
    def input(self, slot: str) -> List[str]:
        return list(self._inputs.get(slot, []))

    def output(self, slot: str) -> List[str]:
        return list(self._outputs.get(slot, []))

    @property
    def input_names(self) -> List[str]:
        return list(self._inputs)

    @property
    def output_names(self) -> List[str]:
        return list(self._outputs)

    @property
    def input_arg_names(self) -> List[str]:
        return [n for names in self._inputs.values() for n in names]

    @property
    def output_arg_names(self) -> List[str]:
        return [n for names in self._outputs.values() for n in names]

    @property
    def inputs(self) -> Dict[str, List[str]]:
        return self._inputs

    @property
    def outputs(self) -> Dict[str, List[str]]:
        return self._outputs

    def _rename_input(self, old, new):
        for names in self._inputs.values():
            names[:] = [new if n == old else n for n in names]
        self._changed()

    def _rename_output(self, old, new):
        for names in self._outputs.values():
            names[:] = [new if n == old else n for n in names]
        self._changed()

    def desc_set_input(self, slot: str, names: Iterable[str]) -> None:
        self._inputs[slot] = list(names)
        self._changed()

    def desc_set_output(self, slot: str, names: Iterable[str]) -> None:
        self._outputs[slot] = list(names)
        self._changed()

    def remove_output(self, slot: str) -> None:
        """Drop output slot ``slot`` (Paddle's ``OpDesc.remove_output``); a missing slot is no error."""
        if self._outputs.pop(slot, None) is not None:
            self._changed()

    # ---- attrs --------------------------------------------------------
    def attr(self, name: str) -> Any:
        if name not in self._attrs:
            raise NotFound(f"op {self.type!r} has no attr {name!r}")
        return self._attrs[name]

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def _set_attr(self, name, value):
        self._attrs[name] = _typed(get_op_def(self.type), name, value)
        self._changed()

    def _remove_attr(self, name):
        self._attrs.pop(name, None)
        self._changed()

    @property
    def attr_names(self) -> List[str]:
        return list(self._attrs)

    def all_attrs(self) -> Dict[str, Any]:
        return dict(self._attrs)

    def _block_attr_id(self, name):
        return self._attrs[name].idx

    def _changed(self):
        if self.block is not None:
            self.block.program._bump()

    @property
    def idx(self) -> int:
        for i, op in enumerate(self.block.ops):
            if op is self:
                return i
        raise NotFound(f"op {self.type!r} is not in its block")

    def __str__(self):
        from .program_text import op_to_readable
        return op_to_readable(self)

    def _to_readable_code(self, skip_op_callstack: bool = True) -> str:
        from .program_text import op_to_readable
        return op_to_readable(self, skip_op_callstack)

    def to_string(self, throw_on_error: bool) -> str:
        """The ``OpDesc`` protobuf text (refimpl's attrs only; see ``program_text.py``)."""
        from .program_text import op_to_proto_text
        return op_to_proto_text(self)

    __repr__ = __str__

    def role(self) -> int:
        return self._attrs.get(OP_ROLE_ATTR, 0)

    @property
    def desc(self) -> "OpDesc":
        """Paddle's ``Operator.desc``: the op seen as a C++ ``OpDesc`` (methods instead of properties)."""
        return OpDesc(self)


class OpDesc:
    """The methods of Paddle's ``core.OpDesc`` that scripts call, over one :class:`Operator`."""

    def __init__(self, op: Operator) -> None:
        self._op = op

    def type(self) -> str:
        return self._op.type

    def input(self, slot: str) -> List[str]:
        return self._op.input(slot)

    def output(self, slot: str) -> List[str]:
        return self._op.output(slot)

    def input_names(self) -> List[str]:
        return self._op.input_names

    def output_names(self) -> List[str]:
        return self._op.output_names

    def input_arg_names(self) -> List[str]:
        return self._op.input_arg_names

    def output_arg_names(self) -> List[str]:
        return self._op.output_arg_names

    def attr(self, name: str) -> Any:
        return self._op.attr(name)

    def has_attr(self, name: str) -> bool:
        return self._op.has_attr(name)

    def attr_names(self) -> List[str]:
        return self._op.attr_names

    def _set_attr(self, name: str, value: Any) -> None:
        self._op._set_attr(name, value)

    set_attr = _set_attr

    def set_input(self, slot: str, names: Iterable[str]) -> None:
        self._op.desc_set_input(slot, names)

    def set_output(self, slot: str, names: Iterable[str]) -> None:
        self._op.desc_set_output(slot, names)

    def remove_output(self, slot: str) -> None:
        self._op.remove_output(slot)


def _typed(opdef, name, value):
    """Store a FLOAT attr as Paddle does: rounded to float32 (0.1 -> 0.10000000149011612)."""
    default = opdef.attrs.get(name, opdef.extra_attrs.get(name))
    if isinstance(default, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(np.float32(value))
    return value
