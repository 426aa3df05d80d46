"""Block: an ordered list of ops plus the variables they declare.

Mirrors ``paddle.base.framework.Block``. Block 0 is the global block; a
sub-block (the body of a ``conditional_block``) has a ``parent_idx`` and
finds its parent's variables through ``_find_var_recursive``.
``append_op`` sets the op's role, role var, name scope and device from the
program's current guards and, as Paddle does, marks every output
``stop_gradient`` when no input needs a gradient. ``var`` raises what
Paddle raises (``TypeError`` for a name that is no string, ``ValueError``
for a missing var, here as typed errors that are also those). A parameter
created again under a name the global block has is that parameter again,
initialised only once, as Paddle's ``Block.create_parameter`` does for the
train/test programs built against one startup program.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, TYPE_CHECKING, TypeVar

from refimpl.core.dtypes import convert_dtype
from refimpl.core.errors import AlreadyExists, EnforceNotMet, InvalidArgument

from .op_role import OP_DEVICE_ATTR, OP_NAMESCOPE_ATTR, OP_ROLE_ATTR, OP_ROLE_VAR_ATTR
from .operator import Operator
from .variable import BadValue, PaddleText, Parameter, Variable, VariableNotFound

if TYPE_CHECKING:
    from .program import Program

__all__ = ["Block", "VarNameTypeError", "splice_before", "last_writers"]

# control-flow ops do not pass stop_gradient from inputs to outputs
_NO_STOP_GRADIENT_PASS = {"conditional_block", "conditional_block_grad", "while", "while_grad"}


T = TypeVar("T")


class VarNameTypeError(PaddleText, InvalidArgument, TypeError):
    """``Block.var`` given a name that is not a string: Paddle raises ``TypeError`` there."""


def splice_before(items: Sequence[T], groups: Dict[int, Sequence[T]]) -> List[T]:
    """``items`` with each ``groups[i]`` placed before ``items[i]`` (``i == len(items)``: at the end).

    One pass, where an ``insert`` per new item would move everything after it each time.
    """
    out: List[T] = []
    for i, item in enumerate(items):
        out.extend(groups.get(i, ()))
        out.append(item)
    out.extend(groups.get(len(items), ()))
    return out


def last_writers(ops: Sequence[Operator], names: Optional[Iterable[str]] = None,
                 skip: Optional[Callable[[Operator], bool]] = None) -> Dict[str, int]:
    """{name: index of the last op of ``ops`` that writes it}, for ``names`` (default: every name),
    passing over the ops ``skip`` holds for; one pass over the ops."""
    wanted = None if names is None else set(names)
    writers: Dict[str, int] = {}
    for i, op in enumerate(ops):
        if skip is not None and skip(op):
            continue
        for n in op.output_arg_names:
            if wanted is None or n in wanted:
                writers[n] = i
    return writers


def _flatten_vars(slots):
    for v in (slots or {}).values():
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            yield x


class Block:
    def __init__(self, program: Program, idx: int, parent_idx: int = -1) -> None:
        self.program = program
        self.idx = idx
        self.parent_idx = parent_idx
        self.vars = {}
        self.ops = []
        self.forward_block_idx = -1

    # ---- variables ----------------------------------------------------
    def var(self, name: str) -> Variable:
        if not isinstance(name, str):
            raise VarNameTypeError(f"var require string as parameter, but get {type(name)} instead.")
        v = self.vars.get(name)
        if v is None:
            raise VariableNotFound(f"var {name} not in this block")
        return v

    @property
    def backward_block_idx(self) -> int:
        """The block whose ``forward_block_idx`` is this one (-1 when none)."""
        for b in self.program.blocks:
            if b.forward_block_idx == self.idx:
                return b.idx
        return -1

    def has_var(self, name: str) -> bool:
        return name in self.vars

    def create_var(self, name: Optional[str] = None, **kwargs: Any) -> Variable:
        """Create (or return the existing) variable ``name`` in this block."""
        if name is None:  # Paddle 3.3.1 counts these per program (Program._name_generator)
            name = self.program.fresh_name("_generated_var", self)
        if name in self.vars:
            return _check_recreated(self.vars[name], kwargs.get("shape"), kwargs.get("dtype"))
        v = Variable(self, name, **kwargs)
        self.vars[name] = v
        self.program._bump()
        return v

    def create_parameter(self, name: str, shape: Sequence[int], dtype: Any, **kwargs: Any) -> Parameter:
        """Create a Parameter in the global block; run its initializer into this block."""
        glob = self.program.global_block()
        for d in shape:
            if int(d) < 0:
                raise InvalidArgument(f"parameter {name!r}: every dim must be >= 0, got shape {list(shape)}")
        initializer = kwargs.pop("initializer", None)
        old = glob.vars.get(name)
        if old is not None:
            if not old.is_parameter:
                raise AlreadyExists(f"create_parameter: {name!r} is already a variable (not a parameter) "
                                    f"of the global block")
            if old.shape is not None and list(old.shape) != [int(d) for d in shape]:
                raise InvalidArgument(f"Variable '{name}' has been created before. The previous shape is "
                                      f"{tuple(old.shape)}, the new shape is {tuple(int(d) for d in shape)}. "
                                      f"They are not matched.")
            if old.dtype != convert_dtype(dtype):
                raise BadValue(f"Variable '{name}' has been created before. The previous data type is "
                               f"paddle.{old.dtype}, the new data type is paddle.{convert_dtype(dtype)}. "
                               f"They are not matched.")
            param = old
        else:
            param = Parameter(glob, name, shape, dtype, **kwargs)
            glob.vars[name] = param
            self.program._bump()
        # (a new name has no initialiser yet; only a parameter created again is looked for in the ops)
        if initializer is not None and (old is None or not self._init_ops_of(name)):
            stop_gradient = param.stop_gradient
            initializer(param, self)
            param.stop_gradient = stop_gradient
        return param

    def _init_ops_of(self, name: str) -> List[Operator]:
        """The ops of the global block that write ``name`` (its initialisers, for a startup program)."""
        skip = ("broadcast", "c_sync_comm_stream", "coalesce_tensor")
        return [op for op in self.program.global_block().ops
                if op.type not in skip and name in op.output_arg_names]

    def _remove_var(self, name):
        self.vars.pop(name, None)
        self.program._bump()

    def _rename_var(self, old, new):
        v = self.var(old)
        del self.vars[old]
        v.name = new
        self.vars[new] = v
        for op in self.ops:
            op._rename_input(old, new)
            op._rename_output(old, new)
        return v

    def _find_var_recursive(self, name):
        b = self
        while True:
            v = b.vars.get(name)
            if v is not None:
                return v
            if b.parent_idx < 0:
                return None
            b = self.program.block(b.parent_idx)

    def _var_recursive(self, name):
        v = self._find_var_recursive(name)
        if v is None:
            raise VariableNotFound(f"Var {name} is not found recursively")
        return v

    def iter_parameters(self) -> Iterator[Parameter]:
        return (v for v in self.vars.values() if v.is_parameter)

    def all_parameters(self) -> List[Parameter]:
        return list(self.iter_parameters())

    # ---- ops ----------------------------------------------------------
    def _make_op(self, type, inputs, outputs, attrs, fill_proto=True):
        from .program import current_device
        prog = self.program
        attrs = dict(attrs or {})
        op = Operator(self, type, inputs, outputs, attrs, fill_proto=fill_proto)
        common = {OP_ROLE_ATTR: prog._op_role, OP_ROLE_VAR_ATTR: list(prog._op_role_var),
                  OP_NAMESCOPE_ATTR: prog._name_scope_path(), OP_DEVICE_ATTR: current_device()}
        for k, v in common.items():
            if k not in attrs:
                op._attrs[k] = v
        for v in _flatten_vars(outputs):
            if isinstance(v, Variable):
                v.op = op
        self._infer_shape(op)
        return op

    def _infer_shape(self, op):
        """Set output var shapes/dtypes from the op's infer_shape (Paddle's compile-time InferShape)."""
        from refimpl.ops.registry import get_op_def
        infer = get_op_def(op.type).infer_shape
        if infer is None:
            return
        ins = {}
        for slot, names in op.inputs.items():
            vs = [self._find_var_recursive(n) for n in names]
            if any(v is None or v.shape is None for v in vs):
                return  # not enough static information; leave shapes as they are
            ins[slot] = [(v.shape, v.dtype) for v in vs]
        try:
            result = infer(ins, op._attrs)
        except EnforceNotMet:
            raise  # a typed error of the op's own checks already names the op and the value
        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise InvalidArgument(f"op {op.type!r}: cannot infer output shapes from inputs "
                                  f"{ {k: [s for s, _ in v] for k, v in ins.items()} }: {exc}") from None
        for slot, value in result.items():
            names = op.outputs.get(slot, [])
            pairs = value if isinstance(value, list) else [value] * len(names)
            for n, (shape, dtype) in zip(names, pairs):
                v = self._find_var_recursive(n)
                if v is not None:
                    v.shape = tuple(int(d) for d in shape)
                    if dtype is not None:
                        v.dtype = dtype

    def append_op(self, type: str, inputs: Optional[Dict[str, Any]] = None,
                  outputs: Optional[Dict[str, Any]] = None, attrs: Optional[Dict[str, Any]] = None,
                  **_ignored: Any) -> Operator:
        """Append an op built from Python (proto slots and attr defaults filled)."""
        if type not in _NO_STOP_GRADIENT_PASS:
            ins = list(_flatten_vars(inputs))
            if not any(getattr(v, "stop_gradient", None) is False for v in ins):
                for v in _flatten_vars(outputs):
                    if isinstance(v, Variable):
                        v.stop_gradient = True
        op = self._make_op(type, inputs, outputs, attrs)
        self.ops.append(op)
        self.program._bump()
        return op

    def _insert_op(self, index, type, inputs=None, outputs=None, attrs=None, **_ignored):
        op = self._make_op(type, inputs, outputs, attrs)
        self.ops.insert(index, op)
        self.program._bump()
        return op

    def _insert_ops(self, groups: Dict[int, Sequence[Operator]]) -> None:
        """Splice in ops made by ``_make_op``: ``groups`` maps an index to the ops that go before ``ops[index]``.

        One pass over the block, where an ``_insert_op`` per op would move
        the ops after it each time; ``len(ops)`` as an index appends.
        """
        if not groups:
            return
        self.ops[:] = splice_before(self.ops, groups)
        self.program._bump()

    def _prepend_op(self, type, inputs=None, outputs=None, attrs=None, **_ignored):
        return self._insert_op(0, type, inputs, outputs, attrs)

    def _append_desc_op(self, type, inputs, outputs, attrs, index=None):
        """Append (or insert) an op exactly as described: no proto filling, no guards.

        This is how backward and passes add ops in Paddle (through the C++
        ``OpDesc``): the slots are the given ones, attrs get proto defaults.
        """
        op = Operator(self, type, inputs, outputs, None, fill_proto=False)
        from refimpl.ops.registry import get_op_def
        op._attrs.update(get_op_def(type).attrs)
        op._attrs.update(attrs or {})
        if index is None:
            self.ops.append(op)
        else:
            self.ops.insert(index, op)
        self.program._bump()
        return op

    def _remove_op(self, index, sync=True):
        del self.ops[index]
        self.program._bump()

    # ---- text -----------------------------------------------------------
    def to_string(self, throw_on_error: bool, with_details: bool = False) -> str:
        """The protobuf text of the block (see ``program_text.py`` for how it differs from Paddle's)."""
        from .program_text import block_to_proto_text
        return block_to_proto_text(self, with_details)

    def _to_readable_code(self, skip_op_callstack: bool = True) -> str:
        from .program_text import block_to_readable
        return block_to_readable(self, skip_op_callstack)

    def __str__(self):
        return self._to_readable_code()

    __repr__ = __str__


def _check_recreated(old: Variable, shape: Any, dtype: Any) -> Variable:
    """An existing var asked for again: Paddle's ``Variable.__init__`` refuses another shape or dtype."""
    if shape is not None and old.shape is not None:
        new = tuple(-1 if d is None else int(d) for d in shape)
        if new != tuple(old.shape):
            raise InvalidArgument(f"Variable '{old.name}' has been created before. The previous shape is "
                                  f"{tuple(old.shape)}, the new shape is {new}. They are not matched.")
    if dtype is not None and old.dtype is not None and convert_dtype(dtype) != old.dtype:
        raise InvalidArgument(f"Variable '{old.name}' has been created before. The previous data type is "
                              f"{old.dtype}, the new data type is {convert_dtype(dtype)}. They are not matched.")
    return old
