"""Program: a list of Blocks, and the guards that say where ops go.

Mirrors ``paddle.static.Program`` (legacy ProgramDesc IR):
``global_block()``, ``block(i)``, ``clone(for_test)``, ``list_vars()``,
``all_parameters()``, ``global_seed``, ``state_dict`` / ``set_state_dict``,
``print(program)`` / ``to_string`` (the text is in ``program_text.py``), plus
the role guards Paddle's optimizer and backward use (``_optimized_guard``,
``_backward_role_guard``, ``_lr_schedule_guard``), ``program_guard`` and the
default main / startup programs. ``to_dict`` / ``from_dict`` speak the
``program/v1`` JSON format (see ``serialize.py``). Unlike Paddle there is no
C++ desc behind it: the Python objects are the program.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Dict, Iterator, List, Optional, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument, OutOfRange
from refimpl.core.gc_pause import paused_cyclic_gc

from . import unique_name
from .block import Block
from .op_role import OpRole, OP_ROLE_ATTR
from .variable import BadValue, VariableNotFound

if TYPE_CHECKING:
    from .operator import Operator
    from .variable import Parameter, Variable


__all__ = ["Program", "default_main_program", "default_startup_program", "switch_main_program",
           "switch_startup_program", "program_guard", "name_scope", "current_device", "device_guard",
           "op_role_of"]

# Paddle's ``framework.global_prog_seed``: the seed a new Program starts with (``Program.global_seed`` sets it)
_global_prog_seed = 0

_NOT_STATE = ("FEED_MINIBATCH", "FETCH_LIST", "READER")


class Program:
    # set on a main program by fleet's pipeline meta optimizer; Executor.run then runs its Plan
    _pipeline_opt: Any

    def __init__(self):
        self.blocks = [Block(self, 0)]
        self.current_block_idx = 0
        self.random_seed = _global_prog_seed
        self._version = 0
        self._op_role = OpRole.Forward
        self._op_role_var = []
        self._name_scopes = []
        self._name_scope_counts = {}
        # Paddle 3.3.1's ``Program._name_generator``: the counters LayerHelper names its helpers,
        # temporaries and parameters from (``nn.Layer`` full names use unique_name's global ones)
        self.name_generator = unique_name.UniqueNameGenerator()

    # ---- structure ----------------------------------------------------
    def _bump(self):
        self._version += 1

    def global_block(self) -> Block:
        return self.blocks[0]

    def block(self, index: int) -> Block:
        if not 0 <= index < len(self.blocks):
            raise OutOfRange(f"program has {len(self.blocks)} blocks; block {index} does not exist")
        return self.blocks[index]

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def fresh_name(self, key: str, block: Optional[Block] = None) -> str:
        """The next ``{key}_k`` of :attr:`name_generator` that neither ``block`` (default: the current
        one) nor the global block holds yet (a program read from a file starts counting afresh)."""
        block = self.current_block() if block is None else block
        glob = self.global_block()
        name = self.name_generator(key)
        while block.has_var(name) or glob.has_var(name):
            name = self.name_generator(key)
        return name

    def current_block(self) -> Block:
        return self.blocks[self.current_block_idx]

    def _create_block(self, parent_idx=None):
        parent = self.current_block_idx if parent_idx is None else parent_idx
        b = Block(self, len(self.blocks), parent)
        self.blocks.append(b)
        self.current_block_idx = b.idx
        self._bump()
        return b

    def _rollback(self):
        self.current_block_idx = self.current_block().parent_idx

    def list_vars(self) -> Iterator[Variable]:
        for b in self.blocks:
            yield from b.vars.values()

    def all_parameters(self) -> List[Parameter]:
        return self.global_block().all_parameters()

    def global_seed(self, seed: int = 0) -> None:
        """Set this program's ``random_seed`` and the seed every later new Program starts with."""
        global _global_prog_seed
        _global_prog_seed = seed
        self.random_seed = seed

    # ---- state --------------------------------------------------------
    def _state_vars(self, mode: str) -> List[Variable]:
        if not isinstance(mode, str) or mode not in ("param", "opt", "all"):
            raise BadValue(f"`mode` string should be 'param', 'opt' or 'all', but received {mode}.")

        def of_optimizer(v):
            return not v.is_parameter and not v.need_check_feed and v.persistable and v.type not in _NOT_STATE

        wanted = {"param": lambda v: v.is_parameter, "opt": of_optimizer,
                  "all": lambda v: v.is_parameter or of_optimizer(v)}[mode]
        return [v for v in self.list_vars() if wanted(v)]

    def state_dict(self, mode: str = "all", scope: Any = None) -> Dict[str, Any]:
        """{name: DenseTensor in ``scope``} of the parameters ('param'), optimizer states ('opt') or both."""
        from refimpl.core.scope import Scope, global_scope
        if scope is not None and not isinstance(scope, Scope):
            raise InvalidArgument(f"Program.state_dict: scope must be None or a Scope, got {type(scope).__name__}")
        scope = scope if scope is not None else global_scope()
        out = {}
        for v in self._state_vars(mode):
            holder = scope.find_var(v.name)
            if holder is None:
                raise VariableNotFound(f"Can not find Variable '{v.name}' in the scope. Make sure it is initialized")
            out[v.name] = holder.get_tensor()
        return out

    def set_state_dict(self, state_dict: Dict[str, Any], scope: Any = None) -> None:
        """Write each value into the program's variable of that name in ``scope``; others are warned about."""
        if not isinstance(state_dict, dict):
            raise InvalidArgument(f"Program.set_state_dict: state_dict must be a dict, got {type(state_dict).__name__}")
        by_name = {v.name: v for v in self.list_vars()}
        renames = state_dict.get("StructuredToParameterName@@", {})
        for name, value in state_dict.items():
            if name == "StructuredToParameterName@@":
                continue
            name = renames.get(name, name)
            if name not in by_name:
                warnings.warn(f"Skip loading for '{name}'. Because '{name}' not in the program.")
                continue
            try:
                by_name[name].set_value(value, scope)
            except (ValueError, TypeError) as err:
                warnings.warn(f"Skip loading for '{name}'. " + str(err))

    # ---- guards -------------------------------------------------------
    @contextlib.contextmanager
    def _role_guard(self, role, role_var=None):
        old = self._op_role, self._op_role_var
        self._op_role, self._op_role_var = role, list(role_var or [])
        try:
            yield
        finally:
            self._op_role, self._op_role_var = old

    def _optimized_guard(self, param_and_grads):
        names = [v if isinstance(v, str) else v.name for v in param_and_grads if v is not None]
        return self._role_guard(OpRole.Optimize, names)

    def _backward_role_guard(self):
        return self._role_guard(OpRole.Backward)

    def _lr_schedule_guard(self):
        return self._role_guard(OpRole.LRSched)

    @contextlib.contextmanager
    def _name_scope(self, prefix):
        n = self._name_scope_counts.get(prefix, 0)
        self._name_scope_counts[prefix] = n + 1
        self._name_scopes.append(prefix if n == 0 else f"{prefix}_{n}")
        try:
            yield
        finally:
            self._name_scopes.pop()

    def _name_scope_path(self):
        return "/" + "".join(s + "/" for s in self._name_scopes)

    # ---- copies and text ----------------------------------------------
    @paused_cyclic_gc
    def clone(self, for_test: bool = False) -> Program:
        """A deep copy; with ``for_test`` backward/optimize ops are dropped and is_test set."""
        p = Program.from_dict(self.to_dict(), validate=False)  # our own document: nothing to check
        p.random_seed = self.random_seed
        p.name_generator.ids = dict(self.name_generator.ids)  # a clone goes on counting, as Paddle's does
        if for_test:
            _prune_backward(p)
        for b in p.blocks:  # read back from the C++ desc in Paddle: its vars come sorted by name
            b.vars = dict(sorted(b.vars.items()))
        return p

    def to_dict(self) -> Dict[str, Any]:
        from .serialize import program_to_dict
        return program_to_dict(self)

    @staticmethod
    def from_dict(d: Any, validate: bool = True) -> Program:
        """A Program from a ``program/v1`` document, checked first unless ``validate`` is False."""
        from .serialize import program_from_dict
        return program_from_dict(d, validate)

    def to_string(self, throw_on_error: bool, with_details: bool = False) -> str:
        """The protobuf text of the program (see ``program_text.py`` for how it differs from Paddle's)."""
        from .program_text import program_to_proto_text
        for name, flag in (("throw_on_error", throw_on_error), ("with_details", with_details)):
            if not isinstance(flag, bool):
                raise InvalidArgument(f"Program.to_string: {name} must be a bool, got {flag!r}")
        return program_to_proto_text(self, with_details)

    def _to_readable_code(self, skip_op_callstack: bool = True) -> str:
        from .program_text import program_to_readable
        return program_to_readable(self, skip_op_callstack)

    def __str__(self):
        return self._to_readable_code()

    __repr__ = __str__  # as Paddle's: the whole program text

    def __deepcopy__(self, memo):
        return self.clone()


def _prune_backward(p: Program) -> None:
    """Paddle's ``core.prune_backward`` + ``_inference_optimize`` on a copy: drop the backward and
    optimizer ops and the vars no remaining op uses, set every ``is_test`` to True and take
    ``ReserveSpace`` off ``batch_norm``."""
    for b in p.blocks:
        b.ops = [op for op in b.ops if not op.role() & (OpRole.Backward | OpRole.Optimize)]
        for op in b.ops:
            if op.has_attr("is_test"):
                op._set_attr("is_test", True)
            if op.type == "batch_norm":
                op.remove_output("ReserveSpace")
    used = {n for b in p.blocks for op in b.ops for n in op.input_arg_names + op.output_arg_names}
    for b in p.blocks:
        b.vars = {k: v for k, v in b.vars.items() if k in used}


_local = threading.local()  # defaults per thread: in-process ranks build their programs side by side


def _defaults():
    d = getattr(_local, "defaults", None)
    if d is None:
        d = _local.defaults = {"main": Program(), "startup": Program(), "device": ""}
    return d


def default_main_program() -> Program:
    return _defaults()["main"]


def default_startup_program() -> Program:
    return _defaults()["startup"]


def switch_main_program(program: Program) -> Program:
    d = _defaults()
    old, d["main"] = d["main"], program
    return old


def switch_startup_program(program: Program) -> Program:
    d = _defaults()
    old, d["startup"] = d["startup"], program
    return old


@contextlib.contextmanager
def program_guard(main_program: Program, startup_program: Optional[Program] = None) -> Iterator[None]:
    """Build into ``main_program`` (and ``startup_program``) inside the block."""
    if not isinstance(main_program, Program):
        raise InvalidArgument(f"program_guard: main_program must be a Program, got {type(main_program).__name__}")
    if startup_program is not None and not isinstance(startup_program, Program):
        raise InvalidArgument(f"program_guard: startup_program must be a Program, got {type(startup_program).__name__}")
    old_main = switch_main_program(main_program)
    old_start = switch_startup_program(startup_program) if startup_program is not None else None
    try:
        yield
    finally:
        switch_main_program(old_main)
        if old_start is not None:
            switch_startup_program(old_start)


@contextlib.contextmanager
def name_scope(prefix: str) -> Iterator[None]:
    with default_main_program()._name_scope(prefix):
        yield


def current_device() -> str:
    """The device set by the innermost ``device_guard`` ("" when none)."""
    return _defaults()["device"]


@contextlib.contextmanager
def device_guard(device: Optional[str] = None) -> Iterator[None]:
    """Ops appended inside get ``op_device = device`` (any program, as in Paddle)."""
    d = _defaults()
    old, d["device"] = d["device"], device or ""
    try:
        yield
    finally:
        d["device"] = old


def op_role_of(op: Operator) -> int:
    return op.attr(OP_ROLE_ATTR) if op.has_attr(OP_ROLE_ATTR) else 0
