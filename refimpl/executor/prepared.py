"""PreparedBlock: a block turned into a list of ready-to-call steps.

Mirrors Paddle's ``ExecutorPrepareContext`` (``Executor::Prepare`` in
``paddle/fluid/framework/executor.cc``): done once per (program, scope), it
resolves every op's kernel, the scope variables it reads and writes, its
attrs, and the tensors to free after it (from
``gc_plan.block_eager_deletion_vars``). Running the block is then a loop of plain
calls: each :class:`Step` holds the op's runner (read inputs, call the
kernel, write outputs, count the bytes; ``op_runner.py``) and the
collector's ``release`` call for the tensors that die after it. Control-flow and communication ops
(``conditional_block``, ``feed``, ``c_allreduce_sum`` ...) provide a
``prepare(ctx, op)`` hook instead of a kernel and get this object as ``ctx``;
a hook that needs a sub-block asks ``ctx.prepare_sub_block`` for it, and the
nested blocks are prepared each once, with an explicit stack
(``nesting.py``). Only the kernels depend on the backend.

A failing op is named: a Paddle-typed error (``EnforceNotMet`` and its
kinds) gets ``block B op I (type)`` in front of its message; NumPy's
``ValueError`` (inputs that do not fit together) becomes ``InvalidArgument``
chained to it; any other exception (a kernel bug, ``MemoryError``) keeps its
type and gets a note with the op's location and its inputs' shapes.
"""
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from refimpl import flags
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound, PreconditionNotMet
from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.core.scope import Scope
from refimpl.core.tensor import DenseTensor
from refimpl.framework.operator import Operator
from refimpl.framework.program import Program
from refimpl.ops import low_precision
from refimpl.ops.registry import get_op_def

from . import nan_inf, op_runner
from .backend import collector_class, ensure, fused_writer
from .garbage_collector import Memory
from .gc_plan import block_eager_deletion_vars, no_need_buffer_inputs
from .nesting import Nesting, make_room_to_run, prepare_nested
from .trace import Trace


def prepare_flags() -> Tuple[Any, ...]:
    """The flags a block reads when it is prepared (its collector, its NaN/Inf checks): every cache of
    prepared programs keys on them, so setting one takes effect at the next run."""
    return flags.flag("FLAGS_fast_eager_deletion_mode"), flags.flag("FLAGS_check_nan_inf")


class Step(NamedTuple):
    """One op of a prepared block."""

    run: Callable[[], None]                  # the op: inputs -> kernel -> outputs (raises a located error)
    release: Optional[Callable[[], None]]    # frees the tensors dead after it (None: nothing to free)
    op_index: int                            # the op's index in its block
    op: Operator
    dead: tuple                              # (name, DenseTensor) pairs the plan frees after it


class PreparedBlock:
    """One block of a program, prepared for one scope: a list of :class:`Step`.

    ``prologue``, if given, is called once the block can resolve variables
    (``tensor(name)``) and returns {op index: hook}: each hook runs just
    before that op (the executor checks in-place updates that way).
    """

    @paused_cyclic_gc
    def __init__(self, program: Program, block_idx: int, scope: Scope, persist_scope: Scope,
                 backend: str = "numpy", skip_vars: Iterable[str] = (), gc_threshold: int = 0,
                 memory: Optional[Memory] = None, run_ctx: Optional[dict] = None,
                 keep_meta: Iterable[str] = (),
                 prologue: Optional[Callable[["PreparedBlock"], Mapping[int, Callable[[], None]]]] = None):
        self._setup(program, block_idx, scope, persist_scope, backend, gc_threshold, memory, run_ctx, Nesting(),
                    low_precision.program_has_low_precision(program))
        # this block, then the sub-blocks its ops ask for, each once, with an explicit stack (nesting.py)
        self.nesting_depth = prepare_nested(self, (skip_vars, keep_meta, prologue))
        make_room_to_run(self.nesting_depth)

    def _setup(self, program: Program, block_idx: int, scope: Scope, persist_scope: Scope, backend: str,
               gc_threshold: int, memory: Optional[Memory], run_ctx: Optional[dict], nesting: Nesting,
               has_low_precision: bool) -> None:
        """What a block needs before its ops are prepared (a sub-block gets this when it is asked for)."""
        self.program = program
        self.has_low_precision = has_low_precision  # any float16/bfloat16 var in the program
        self.block = program.block(block_idx)
        self.scope = scope                  # where this block's temporaries live
        self.persist_scope = persist_scope  # where missing persistables are created
        self.backend = ensure(backend)
        self.memory = memory or Memory()
        self.memory.learn(program)  # the memory category of each var (memory_categories)
        self.run_ctx = run_ctx if run_ctx is not None else {}  # feed/fetch lists, trace, reader device
        self.tensors: Dict[str, DenseTensor] = {}  # name -> DenseTensor, every var this block touches
        self.gc_threshold = gc_threshold
        self.nesting_depth = 0
        self._nesting = nesting
        self._subs: Dict[Tuple[int, Tuple[str, ...]], "PreparedBlock"] = {}  # sub-blocks by (idx, skip vars)
        self._requested: Optional[List[Tuple["PreparedBlock", tuple]]] = None  # asked for while building
        self._op_index = -1  # the op being prepared (named by a nesting error)
        self._parent: Optional["PreparedBlock"] = None  # the block that asked for this one, while preparing
        self._found: Dict[str, DenseTensor] = {}  # names its sub-blocks resolved through it (_find_above)

    def _build(self, skip_vars: Iterable[str], keep_meta: Iterable[str],
               prologue: Optional[Callable[["PreparedBlock"], Mapping[int, Callable[[], None]]]]) -> None:
        """Prepare every op of the block: its GC plan, collector and steps."""
        plan = block_eager_deletion_vars(self.block, skip_vars) if self.gc_threshold >= 0 else None
        # vars some op reads as no-need-buffer keep their shape when freed (``keep_meta``
        # adds those that ops of other programs read, e.g. later jobs of a plan)
        self.keep_meta = {n for op in self.block.ops for n in no_need_buffer_inputs(op)} | set(keep_meta)
        # the backend picks the collector class (CPU: GarbageCollector; cuda: a GPU collector
        # that differs only in when device memory is released, see cuda_backend.garbage_collector)
        self.gc = (collector_class(self.backend)(self.memory, self.gc_threshold, self.keep_meta)
                   if plan is not None else None)
        hooks = prologue(self) if prologue is not None else {}
        # the vars a coalesce_tensor of this block puts in a fused buffer keep their memory when a later
        # op writes them (op_runner.keeping_fused_memory): Paddle's views of the buffer stay views
        fused = {n for op in self.block.ops if op.type == "coalesce_tensor" for n in op.output_arg_names}
        write_back, detach = fused_writer(self.backend) if fused else (None, None)
        check_outputs = flags.flag("FLAGS_check_nan_inf")  # read here: when off, the run loop has no check
        self.steps: List[Step] = []
        for i, op in enumerate(self.block.ops):
            self._op_index = i
            dead = tuple((n, self.tensor(n)) for n in plan[i]) if plan else ()
            run = self._prepare_op(i, op)
            if check_outputs and nan_inf.is_checked(op):
                run = nan_inf.checked(run, self, i, op)
            if fused and op.type != "coalesce_tensor":
                run = self._fused_memory(op, run, fused, write_back, detach)
            if i in hooks:
                run = op_runner.before(hooks[i], run)
            release = self.gc.releaser(dead) if self.gc is not None else None
            self.steps.append(Step(run, release, i, op, dead))
        # the plain run loop: every op's runner, each followed by its release call if it has one
        self._calls = [f for s in self.steps for f in ((s.run, s.release) if s.release else (s.run,))]

    def _fused_memory(self, op: Operator, run: Callable[[], None], fused: set, write_back: Any,
                      detach: Any) -> Callable[[], None]:
        """``run`` of an op near a ``coalesce_tensor`` buffer: the buffer's vars it writes keep their memory
        there; its other outputs, when it reads a buffer's var, hold no view into the buffer."""
        outs = list(dict.fromkeys(op.output_arg_names))
        members = [n for n in outs if n in fused]
        if members:
            run = op_runner.keeping_fused_memory(run, [self.tensor(n) for n in members], members, write_back)
        others = [n for n in outs if n not in fused]
        if others and not fused.isdisjoint(op.input_arg_names):
            run = op_runner.detaching_fused_views(run, [self.tensor(n) for n in others], detach)
        return run

    # ---- scope resolution --------------------------------------------------
    def tensor(self, name: str) -> DenseTensor:
        """The DenseTensor behind ``name`` for this block (looked up once).

        Non-persistable vars declared in this block live in this block's
        scope; anything else is found up the scope tree, and a persistable
        var that is nowhere yet is created in ``persist_scope``.
        """
        t = self.tensors.get(name)
        if t is None:
            local = self.block.vars.get(name)
            if local is not None and not local.persistable:
                t = self.scope.var(name).tensor
            else:
                t = self._find_above(name)
                if t is None:
                    var = self.block._find_var_recursive(name)
                    home = self.persist_scope if var is not None and var.persistable else self.scope
                    t = home.var(name).tensor
            self.tensors[name] = t
        return t

    def _find_above(self, name: str) -> Optional[DenseTensor]:
        """The tensor ``self.scope.find_var(name)`` holds (None: no scope has it), through the enclosing blocks.

        A sub-block's scope is a fresh kid of the scope of the block that
        asked for it and holds only what the sub-block created (its
        ``tensors``); so a name it has not resolved is whatever the enclosing
        block resolves it to, and only the outermost block asks its scope. A
        temporary declared by an enclosing block is that block's, created in
        its scope if need be (as Paddle creates a block's variables before it
        runs), so that a sub-block reading a feed or a value of its parent
        sees the parent's tensor even when no op of the parent touched it.
        Each block remembers what it found for its sub-blocks (``_found``), so
        preparing nested blocks does not walk the whole scope chain per name.
        """
        missed = []
        block, t = self, None
        while block._parent is not None:
            block = block._parent
            t = block.tensors.get(name)
            if t is None:
                t = block._found.get(name)
            declared = block.block.vars.get(name)
            if t is None and declared is not None and not declared.persistable:
                t = block.tensor(name)  # a temporary of that block lives in its scope, even if unused there yet
            if t is not None:
                break
            missed.append(block)
        if t is None:
            holder = block.scope.find_var(name)  # the outermost block's scope and its ancestors
            if holder is None:
                return None
            t = holder.tensor
        for b in missed:
            b._found[name] = t
        return t

    # ---- ops ------------------------------------------------------------
    def _prepare_op(self, i: int, op: Operator) -> Callable[[], None]:
        """One op as a closure: read inputs, call the kernel, write outputs (see ``op_runner.kernel_runner``)."""
        try:
            opdef = get_op_def(op.type)
        except NotFound:
            raise NotFound(f"block {self.block.idx} op {i}: operator {op.type!r} is not registered") from None

        def fail(exc):
            self._raise_op_error(i, op, exc)
        if opdef.prepare is not None:
            return op_runner.guarded(opdef.prepare(self, op), fail)
        fn, attr_names, wants_need = opdef.kernel(self.backend)
        attrs = op.all_attrs()
        kw = {a: attrs[a] if a in attrs else opdef.default(a) for a in attr_names}
        # an op with float16/bfloat16 vars computes in float32 and rounds its outputs (ops/low_precision.py)
        if self.has_low_precision:
            fn, kw = low_precision.wrap(fn, kw, op, opdef, self.block, self.backend)
        nnb = no_need_buffer_inputs(op)
        ins: List[Any] = []
        plain = True
        for slot in opdef.inputs:
            names = op.inputs.get(slot.name) or []
            if slot.duplicable:
                ins.append([self.tensor(n) for n in names])
                plain = False
            elif names:
                ins.append(self.tensor(names[0]))
                plain = plain and names[0] not in nnb
            else:
                ins.append(op_runner.NO_TENSOR)
        readers = None if plain else [
            op_runner.reader(t, any(n in nnb for n in (op.inputs.get(s.name) or [])))
            for t, s in zip(ins, opdef.inputs)]
        outs: List[Any] = []
        cats: List[Any] = []  # each output's counted memory category (memory_categories)
        tracked = self.memory.tracked
        for slot in opdef.outputs:
            names = op.outputs.get(slot.name) or []
            if slot.duplicable:
                outs.append([self.tensor(n) for n in names] or None)
                cats.append([tracked(n) for n in names])
            else:
                outs.append(self.tensor(names[0]) if names else None)
                cats.append(tracked(names[0]) if names else None)
        if wants_need:
            kw["need"] = tuple(o is not None for o in outs)
        write = op_runner.writer(outs, len(opdef.outputs) == 1, self.memory, cats)
        return op_runner.kernel_runner(fn, ins, readers, kw, write, fail)

    def _raise_op_error(self, i: int, op: Operator, exc: Exception) -> None:
        """Raise the error for op ``i`` failing with ``exc`` (see the module docstring)."""
        where = f"block {self.block.idx} op {i} ({op.type})"
        if isinstance(exc, EnforceNotMet):
            msg = exc.args[0] if exc.args else ""
            if isinstance(msg, str) and msg.startswith("block "):
                raise exc  # already located (an op of a sub-block)
            raise type(exc)(f"{where}: {msg}") from exc
        empty = self._empty_inputs(op)
        if empty:  # the kernel tripped over a missing value (a sub-block reading what nobody wrote)
            raise PreconditionNotMet(f"{where} reads {empty[0]!r}, which holds no value: no earlier op "
                                     f"produces it and the scope does not hold it") from exc
        if isinstance(exc, ValueError):  # NumPy: operands that do not fit together
            raise InvalidArgument(f"{where}: {type(exc).__name__}: {exc}") from exc
        notes = getattr(exc, "__notes__", ())
        if hasattr(exc, "add_note") and not any(n.startswith("refimpl: in ") for n in notes):
            exc.add_note(f"refimpl: in {where}; inputs: {self._input_shapes(op)}")
        raise exc

    def _empty_inputs(self, op: Operator) -> List[str]:
        """The inputs of ``op`` that hold no value (asked only after a failure: a kernel may need even
        the shape of a no-need-buffer input)."""
        return [n for n in op.input_arg_names if n not in self.tensors or self.tensors[n]._array is None]

    def _input_shapes(self, op: Operator) -> str:
        parts = []
        for slot, names in op.inputs.items():
            for n in names:
                a = self.tensors[n]._array if n in self.tensors else None
                desc = "no value" if a is None else f"{list(getattr(a, 'shape', ()))} {getattr(a, 'dtype', '')}"
                parts.append(f"{slot}={n!r} {desc}".rstrip())
        return ", ".join(parts) or "none"

    # ---- running --------------------------------------------------------
    def live_bytes(self) -> int:
        """Bytes held now by the variables this block touches."""
        return sum([a.nbytes for a in [t._array for t in self.tensors.values()] if a is not None])

    def run(self, trace: Optional[Trace] = None, rank: Optional[int] = None, job: Optional[str] = None) -> None:
        """Run every op once; free dead tensors as the plan says."""
        if trace is not None:
            self.run_steps(range(len(self.steps)), trace, rank, job)
            self.flush(trace, rank, job)
            return
        for call in self._calls:
            call()
        if self.gc is not None:
            self.gc.flush()  # batched frees still queued; a stream collector also reaps here

    def run_steps(self, indices: Sequence[int], trace: Optional[Trace] = None, rank: Optional[int] = None,
                  job: Optional[str] = None) -> None:
        """Run only the ops at ``indices`` (in that order), each followed by its frees.

        With a trace, every op, every allocation it made and every free is recorded.
        """
        if trace is None:
            for i in indices:
                step = self.steps[i]
                step.run()
                if step.release is not None:
                    step.release()
            return
        blk = self.block.idx
        for i in indices:
            step = self.steps[i]
            before = {n: self.tensors[n]._array for n in step.op.output_arg_names if n in self.tensors}
            trace.add("op", block=blk, op=i, op_type=step.op.type, rank=rank, job=job)
            step.run()
            for n in step.op.output_arg_names:
                t = self.tensors.get(n)
                if t is not None and t._array is not None and t._array is not before.get(n):
                    old = before.get(n)
                    delta = t._array.nbytes - (old.nbytes if old is not None else 0)
                    trace.add("alloc", block=blk, op=i, op_type=step.op.type, var=n, nbytes=delta,
                              rank=rank, job=job)
            if step.dead and self.gc is not None:
                with self._tracing_frees(trace, i, rank, job):
                    self.gc.add(step.dead)

    def flush(self, trace: Optional[Trace] = None, rank: Optional[int] = None, job: Optional[str] = None) -> None:
        """Free what the collector still queues (batched GC), recording the frees when tracing."""
        if self.gc is None:
            return
        if trace is None:
            self.gc.flush()
            return
        with self._tracing_frees(trace, len(self.steps) - 1, rank, job):
            self.gc.flush()

    def _tracing_frees(self, trace, op_index, rank, job):
        return _OnFree(self.gc, lambda name, nbytes: trace.add(
            "free", block=self.block.idx, op=op_index, op_type=None, var=name, nbytes=nbytes,
            rank=rank, job=job))

    def free(self, names: Iterable[str]) -> None:
        """Free these variables now (through the collector, if there is one)."""
        if self.gc is not None:
            self.gc.add([(n, self.tensor(n)) for n in names])

    def prepare_sub_block(self, block_idx: int, skip_vars: Iterable[str] = ()) -> "PreparedBlock":
        """A PreparedBlock for a sub-block, in a kid of this block's scope.

        Asked for by an op's prepare hook while this block is prepared, it
        comes back with its steps still to be filled in: ``prepare_nested``
        builds it right after this block (the hook keeps it, to run it
        later). This block asking twice for the same block and skip vars gets
        the same one. A sub-block that is this block or encloses it is an
        ``InvalidArgument`` naming the op.
        """
        key = (block_idx, tuple(skip_vars))
        sub = self._subs.get(key)
        if sub is not None:
            return sub
        if self._requested is None:  # asked for after this block was prepared: prepared now, on its own
            sub = PreparedBlock(self.program, block_idx, self.scope.new_scope(), self.persist_scope,
                                self.backend, key[1], self.gc_threshold, self.memory, self.run_ctx)
        else:
            self._nesting.check_not_enclosing(self, self._op_index, block_idx)
            sub = PreparedBlock.__new__(PreparedBlock)
            sub._setup(self.program, block_idx, self.scope.new_scope(), self.persist_scope, self.backend,
                       self.gc_threshold, self.memory, self.run_ctx, self._nesting, self.has_low_precision)
            sub._parent = self
            self._requested.append((sub, (key[1], (), None)))
        self._subs[key] = sub
        return sub


class _OnFree:
    """Sets the collector's ``on_free`` callback for a ``with`` block."""

    def __init__(self, gc, callback):
        self.gc, self.callback, self.old = gc, callback, None

    def __enter__(self):
        self.old, self.gc.on_free = self.gc.on_free, self.callback

    def __exit__(self, *exc):
        self.gc.on_free = self.old
