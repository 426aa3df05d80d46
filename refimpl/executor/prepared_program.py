"""PreparedProgram: one program prepared to run in one scope, with its run-time checks.

The cached unit ``Executor.run`` keeps per (program, scope, feeds, fetches, GC setting), as Paddle's
``paddle/fluid/framework/executor_cache.cc`` keeps a program's prepared context: its block of op runners
(``prepared.py``), the feeds it must copy, the in-place update checks, the persistable shape / dtype
checks and the put-back of the persistables a failed run replaced (see ``executor.py``'s docstring for
the path of one run).
"""
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np

from refimpl.core.bfloat16 import BFLOAT16
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound, PreconditionNotMet
from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.core.scope import Scope
from refimpl.framework.block import last_writers
from refimpl.framework.operator import Operator
from refimpl.framework.program import Program
from refimpl.ops.registry import get_op_def

from .backend import to_device
from .gc_plan import no_need_buffer_inputs
from .prepared import PreparedBlock
from .trace import Trace


def _updates_in_place(op: Operator, backend: str) -> bool:
    """Whether ``op``'s kernel may write into an input array (declared by ``writes_inputs`` on the op;
    the device backends' kernels may reuse any input buffer)."""
    try:
        opdef = get_op_def(op.type)
    except EnforceNotMet:
        return True  # unknown: assume the worst
    return opdef.prepare is None and (opdef.writes_inputs or backend != "numpy")


class PreparedProgram:
    """Block 0 of a program prepared for one scope, feed set and fetch list.

    ``reader_device`` is which device's batches the program's ``read`` ops
    take (``CompiledProgram`` gives each place its own).
    """

    @paused_cyclic_gc
    def __init__(self, program: Program, scope: Scope, feed_names: Sequence[str], fetch_names: Sequence[str],
                 backend: str, gc_threshold: int, reader_device: int = 0) -> None:
        self.program = program
        self.local_scope = scope.new_scope()
        self.run_ctx: Dict[str, Any] = {"reader_device": reader_device}
        self.block = PreparedBlock(program, 0, self.local_scope, scope, backend, fetch_names,
                                   gc_threshold, run_ctx=self.run_ctx, prologue=self._in_place_guard)
        in_place = self._updated_in_place()
        copied = self._feeds_to_copy(feed_names, in_place)
        self.feed_tensors = [(n, self.block.tensor(n), n in copied) for n in feed_names]
        self.fetch_tensors = [(n, self.block.tensor(n)) for n in fetch_names]
        self._check_inputs(set(feed_names))
        self._check_persistables()
        self.journal = self._persistable_outputs(in_place)
        self._holders = self.block.memory.holders(self.block.tensors)  # what a run's start counts

    def set_value(self, name: str, value: np.ndarray) -> None:
        """Set variable ``name`` as this prepared program sees it (e.g. the learning rate before a run)."""
        self.block.tensor(name).set(value)

    def _in_place_guard(self, block: PreparedBlock) -> Dict[int, Callable[[], None]]:
        """Check every in-place persistable update of a run before the first one writes.

        Optimizer kernels update parameters and accumulators in place; undoing
        them after a failure would need a copy of each on every run. Instead
        each such op's ``check`` (what its kernel would refuse: missing inputs,
        shape mismatches) runs for all of them just before the first one, so
        a bad input fails the run while every persistable still holds its old
        value. (A failure no check foresees, such as running out of memory,
        can still leave earlier updates applied.)
        """
        gblock = self.program.global_block()
        checks, first = [], None
        # written between updates by other ops (a memcpy fetching an offloaded param or moment): the
        # run makes them after the check, so they are left to the update itself
        produced = set()
        for i, op in enumerate(gblock.ops):
            if self._is_checked_update(gblock, op):
                first = i if first is None else first
                checks.append(self._update_requirements(block, i, op, produced))
            elif first is not None:
                produced.update(op.output_arg_names)
        if first is None:
            return {}

        # one flat pass over the tensors of all updates (the learning rate they share is checked once);
        # on a failure, each update explains itself in op order and the first that fails raises
        required = tuple(dict.fromkeys(t for c in checks for t in c[0]))
        shaped = tuple((c[1][0], c[1][1:]) for c in checks if c[1])
        ones = tuple(dict.fromkeys(t for c in checks for t in c[2]))

        def explain_all():
            for c in checks:
                c[3]()
            raise PreconditionNotMet("an optimizer update's inputs failed their check; none was applied")

        def check_all():
            for t in required:
                if t._array is None:
                    explain_all()
            for head, rest in shaped:
                shape = head._array.shape
                for t in rest:
                    a = t._array
                    if a is None or a.shape != shape:
                        explain_all()
            for t in ones:
                if t._array.size != 1:
                    explain_all()
        return {first: check_all}

    @staticmethod
    def _is_checked_update(gblock: Any, op: Any) -> bool:
        """An optimizer update (it declares a check) writing a persistable it reads, in place."""
        if get_op_def(op.type).check is None:
            return False
        ins = set(op.input_arg_names)
        return any(n in ins and gblock.vars.get(n) is not None and gblock.vars[n].persistable
                   for n in op.output_arg_names)

    def _update_requirements(self, block, i, op, produced=()):
        """What one in-place update needs of its inputs: (tensors that must hold a value, tensors of one
        shape, tensors of one value, the slow path that explains a failure); inputs in ``produced``
        are not checked."""
        opdef = get_op_def(op.type)
        spec = opdef.check or {}
        dispensable = {s.name for s in opdef.inputs if s.dispensable}
        names = {s: ns[0] for s, ns in op.inputs.items() if ns and ns[0] not in produced}
        required = tuple(block.tensor(n) for s, n in names.items() if s not in dispensable)
        shaped = tuple(block.tensor(names[s]) for s in spec.get("same_shape", ()) if s in names)
        ones = tuple(block.tensor(names[s]) for s in spec.get("one_value", ()) if s in names)
        where = f"block 0 op {i} ({op.type})"

        def explain():
            """Raise the error this update's inputs call for (nothing when they are fine)."""
            for s, n in names.items():
                if s not in dispensable and block.tensor(n)._array is None:
                    raise PreconditionNotMet(f"{where}: input {n!r} holds no value; no optimizer update "
                                             f"of this run was applied")
            arrays = {s: block.tensor(names[s])._array for s in spec.get("same_shape", ()) if s in names}
            shapes = {s: list(a.shape) for s, a in arrays.items() if a is not None}
            if (any(a is None for a in arrays.values()) or len({tuple(v) for v in shapes.values()}) > 1
                    or any(t._array.size != 1 for t in ones)):
                raise InvalidArgument(f"{where}: Param, Grad and accumulator shapes differ ({shapes}) or a "
                                      f"{list(spec.get('one_value', ()))} input holds more than one value; no "
                                      f"optimizer update of this run was applied")
        return required, shaped, ones, explain

    def _updated_in_place(self):
        """Names some op of the program both reads and writes in its own array (``sgd``'s Param/ParamOut)."""
        return {n for b in self.program.blocks for op in b.ops if _updates_in_place(op, self.block.backend)
                for n in set(op.input_arg_names).intersection(op.output_arg_names)}

    def _persistable_outputs(self, in_place):
        """The tensors of persistables some op writes, as (out of place, in place).

        A failed run puts back the arrays the out-of-place ones held before
        it (kernels never write into their inputs, so the old array is the
        old value: no copy needed). An op that lists a persistable as both
        input and output (``sgd``'s Param/ParamOut, ``adam``'s moments) may
        update its array in place; undoing that would need a copy of every
        such array on every run (measured: +20% on the tiny MLP step), so
        those are not restored: instead their checks all run before the
        first of them writes (see ``_in_place_guard``).
        """
        gblock = self.program.global_block()
        written = {}
        for b in self.program.blocks:
            for op in b.ops:
                for n in op.output_arg_names:
                    var = gblock.vars.get(n)
                    if var is not None and var.persistable and var.type == "DENSE_TENSOR":
                        written[n] = self.block.tensor(n)
        return (tuple(t for n, t in written.items() if n not in in_place),
                tuple(t for n, t in written.items() if n in in_place))

    def _restore(self, refs):
        """Undo a failed run: every persistable written out of place holds its old value again."""
        for t, a in zip(self.journal[0], refs):
            t._array = a

    def _check_inputs(self, fed):
        """Every op input must be fed, produced by an earlier op, or held by the scope."""
        block = self.program.global_block()
        last_write = last_writers(block.ops)
        available = set(fed)
        for i, op in enumerate(block.ops):
            for name in op.input_arg_names:
                if name in available or self.block.tensor(name)._array is not None:
                    continue
                var = block._find_var_recursive(name)
                where = f"op {op.type!r} (block 0, op {i})"
                if var is None:
                    raise NotFound(f"{where} reads {name!r}, which is not a variable of the program")
                if var.is_data:
                    raise InvalidArgument(f"feed {name!r} is missing: {where} reads it")
                if name in no_need_buffer_inputs(op) and last_write.get(name, -1) >= i:
                    continue
                raise PreconditionNotMet(f"{where} reads {name!r}, which no earlier op produces and the "
                                         f"scope does not hold (did you run the startup program?)")
            available.update(op.output_arg_names)

    def _feeds_to_copy(self, feed_names, in_place):
        """The feeds a run must copy so that it never writes into the caller's array.

        As Paddle's feed copies into the scope's tensor: a fed persistable
        lives on in the scope (and in-place updates such as ``sgd`` write into
        it), and so does any fed variable an op updates in place. Other feeds
        are only read by the kernels, so their arrays are used as they are.
        (With a device backend the transfer to the device is the copy.)
        """
        gblock = self.program.global_block()
        return {n for n in feed_names
                if n in in_place or (gblock.vars.get(n) is not None and gblock.vars[n].persistable)}

    def _check_persistables(self):
        """A persistable whose value does not fit its declared shape and dtype is named before anything runs.

        A persistable the program writes before it reads it (a startup program's initialiser) is not
        checked: its old value is never used, as in Paddle, where a rerun startup replaces it."""
        overwritten = _written_before_read(self.program.global_block().ops)
        for name, t in self.block.tensors.items():
            var = self.program.global_block().vars.get(name)
            if var is None or not var.persistable or t._array is None or name in overwritten:
                continue
            kind = "parameter" if var.is_parameter else "persistable variable"
            got = t._array.shape
            if var.shape is not None and (len(got) != len(var.shape) or
                                          any(d >= 0 and d != g for d, g in zip(var.shape, got))):
                raise InvalidArgument(f"{kind} {name!r} holds a value of shape {list(got)} but the program "
                                      f"declares {list(var.shape)}")
            held = getattr(t._array, "dtype", None)
            if var.type == "DENSE_TENSOR" and var.dtype is not None and held is not None and \
                    not _holds_dtype(np.dtype(held), var.dtype):
                raise InvalidArgument(f"{kind} {name!r} holds a value of dtype {np.dtype(held).name} but the "
                                      f"program declares {var.dtype}{_read_by(self.program, name)}")

    def run(self, feed: Dict[str, np.ndarray], trace: Optional[Trace] = None) -> list:
        """Run once on ``feed``; return the fetched values as the backend holds them."""
        mem = self.block.memory
        backend = self.block.backend
        for name, t, copy in self.feed_tensors:
            if backend != "numpy":
                t._array = to_device(feed[name], backend)
            else:
                t._array = feed[name].copy() if copy else feed[name]
        self.run_ctx["trace"] = trace
        if self._holders.count != len(self.block.tensors):  # the block resolved more names since
            self._holders = mem.holders(self.block.tensors)
        mem.reset_from(self._holders)
        refs = [t._array for t in self.journal[0]]
        try:
            self.block.run(trace)
        except BaseException:
            self._restore(refs)
            raise
        out = []
        for name, t in self.fetch_tensors:
            if t._array is None:
                raise PreconditionNotMet(f"fetch {name!r}: the variable holds no value after the run")
            out.append(t._array)
        return out


def _holds_dtype(held: np.dtype, declared: str) -> bool:
    """Whether an array of dtype ``held`` is a value of a var declared ``declared``: bfloat16 is held as
    ``ml_dtypes.bfloat16`` on the host and as its uint16 patterns on a device (``cuda_backend/device.py``)."""
    if declared == "bfloat16":
        return held == BFLOAT16 or held == np.uint16
    return held == np.dtype(declared)


def _read_by(program: Any, name: str) -> str:
    """", read by op i (type)" for the first op of block 0 reading ``name`` (Paddle names that op)."""
    for i, op in enumerate(program.global_block().ops):
        if name in op.input_arg_names:
            return f", read by block 0 op {i} ({op.type})"
    return ""


def _written_before_read(ops: Sequence[Any]) -> set:
    """Names whose first use in ``ops`` is as an output."""
    seen, written = set(), set()
    for op in ops:
        seen.update(op.input_arg_names)
        for n in op.output_arg_names:
            if n not in seen:
                written.add(n)
            seen.add(n)
    return written
