"""PreparedBlock: a block turned into a list of ready-to-call steps.

Mirrors Paddle's ``ExecutorPrepareContext`` (``Executor::Prepare``): done
once per (program, scope), it resolves every op's kernel, the scope
variables it reads and writes, its attrs, and the tensors to free after it
(from ``gc_plan.eager_deletion_vars``). Running the block is then a loop of
plain calls. Control-flow ops (``conditional_block``) and ``feed``/``fetch``
provide a ``prepare(ctx, op)`` hook instead of a kernel and get this object
as ``ctx``. Only the kernels depend on the backend.
"""
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound
from refimpl.ops.registry import get_op_def

from refimpl.core.tensor import DenseTensor, TensorMeta

from .backend import collector_class as _collector_class
from .backend import ensure as _ensure_backend
from .garbage_collector import GarbageCollector, Memory
from .gc_plan import eager_deletion_vars, no_need_buffer_inputs


def _read_plain(t):
    return lambda: t._array


def _read_nnb(t):
    return lambda: t._array if t._array is not None else t._meta


def _read_list(ts):
    return lambda: [t._array for t in ts]


def _read_list_nnb(ts):
    return lambda: [t._array if t._array is not None else t._meta for t in ts]


_NO_TENSOR = DenseTensor()  # stands for an empty optional slot: its _array is always None


def _free(mem, plain, meta):
    live = mem.live
    for t in plain:
        a = t._array
        if a is not None:
            live -= a.nbytes
            t._array = None
    for t in meta:
        a = t._array
        if a is not None:
            live -= a.nbytes
            t._clear()
    mem.live = live


def _runner(fn, ins, simple, outs, kw, single, mem, plain, meta):
    """The closure the run loop calls for one op (see the module docstring)."""
    out_list = tuple((o, isinstance(o, list)) for o in outs)
    ins = tuple(ins)

    def run():
        if simple:
            res = fn(*[t._array for t in ins], **kw)
        else:
            res = fn(*[r() for r in ins], **kw)
        if single:
            res = (res,)
        live = mem.live
        for (o, many), r in zip(out_list, res):
            if o is None or r is None:
                continue
            for t, a in (zip(o, r) if many else ((o, r),)):
                old = t._array
                t._array = a
                live += a.nbytes - (old.nbytes if old is not None else 0)
        if live > mem.peak:
            mem.peak = live
        if plain:
            try:  # the common case: every dead tensor holds a value
                for t in plain:
                    live -= t._array.nbytes
                    t._array = None
            except AttributeError:  # some held nothing (e.g. written in a branch not taken)
                mem.live = live
                _free(mem, plain, ())
                live = mem.live
        for t in meta:  # read later as no-need-buffer: keep shape and dtype
            a = t._array
            if a is not None:
                live -= a.nbytes
                m = t._meta
                if m is None or m.shape != a.shape or m.dtype is not a.dtype:
                    t._meta = TensorMeta(a.shape, a.dtype)
                t._array = None
        mem.live = live
    return run


class PreparedBlock:
    def __init__(self, program, block_idx, scope, persist_scope, backend="numpy", skip_vars=(),
                 gc_threshold=0, memory=None, run_ctx=None, keep_meta=()):
        self.program = program
        self.block = program.block(block_idx)
        self.scope = scope                  # where this block's temporaries live
        self.persist_scope = persist_scope  # where missing persistables are created
        self.backend = _ensure_backend(backend)
        self.memory = memory or Memory()
        self.run_ctx = run_ctx if run_ctx is not None else {}  # feed/fetch lists etc.
        self.tensors = {}  # name -> DenseTensor, every var this block touches
        plan = eager_deletion_vars(program, skip_vars)[block_idx] if gc_threshold >= 0 else None
        self.gc_threshold = gc_threshold
        # vars some op reads as no-need-buffer keep their shape when freed (``keep_meta``
        # adds those that ops of other programs read, e.g. later jobs of a plan)
        self.keep_meta = {n for op in self.block.ops for n in no_need_buffer_inputs(op)} | set(keep_meta)
        # the backend picks the collector class (CPU: GarbageCollector; cuda: a GPU collector
        # that differs only in when device memory is released, see cuda_backend.garbage_collector)
        gc_cls = GarbageCollector if self.backend == "numpy" else _collector_class(self.backend)
        self.gc = gc_cls(self.memory, gc_threshold, self.keep_meta) if plan is not None else None
        self.steps = []
        for i, op in enumerate(self.block.ops):
            frees = [(n, self.tensor(n)) for n in plan[i]] if plan else []
            self.steps.append((self._prepare_op(i, op), frees, i, op))
        # with GC "free at once", each op's frees are fused into its runner (CPU collector only:
        # a GPU collector must see every free to decide when the device memory goes back)
        self.fused = None
        if self.gc is not None and gc_threshold <= 0 and getattr(gc_cls, "FUSABLE", True):
            self.fused = [self._prepare_op(i, op, frees) for _, frees, i, op in self.steps]

    # ---- scope resolution --------------------------------------------------
    def tensor(self, name):
        """The DenseTensor behind ``name`` for this block (looked up once).

        Non-persistable vars declared in this block live in this block's
        scope; anything else is found up the scope tree, and a persistable
        var that is nowhere yet is created in ``persist_scope``.
        """
        t = self.tensors.get(name)
        if t is None:
            local = self.block.vars.get(name)
            if local is not None and not local.persistable:
                holder = self.scope.var(name)
            else:
                holder = self.scope.find_var(name)
                if holder is None:
                    var = self.block._find_var_recursive(name)
                    home = self.persist_scope if var is not None and var.persistable else self.scope
                    holder = home.var(name)
            t = self.tensors[name] = holder.tensor
        return t

    # ---- ops ------------------------------------------------------------
    def _prepare_op(self, i, op, frees=()):
        """One op as a closure: read inputs, call the kernel, write outputs, free dead tensors."""
        try:
            opdef = get_op_def(op.type)
        except NotFound:
            raise NotFound(f"block {self.block.idx} op {i}: operator {op.type!r} is not registered") from None
        if opdef.prepare is not None:
            return self._fuse(opdef.prepare(self, op), frees)
        fn, attr_names, wants_need = opdef.kernel(self.backend)
        attrs = op.all_attrs()
        kw = {a: attrs[a] if a in attrs else opdef.attrs[a] for a in attr_names}
        nnb = no_need_buffer_inputs(op)
        ins, simple = [], True
        for slot in opdef.inputs:
            names = op.inputs.get(slot.name) or []
            if slot.duplicable:
                read = _read_list_nnb if any(n in nnb for n in names) else _read_list
                ins.append(read([self.tensor(n) for n in names]))
                simple = False
            elif not names:
                ins.append(_NO_TENSOR)
            elif names[0] in nnb:
                ins.append(_read_nnb(self.tensor(names[0])))
                simple = False
            else:
                ins.append(self.tensor(names[0]))
        if not simple:
            ins = [r if callable(r) else _read_plain(r) for r in ins]
        outs = []
        for slot in opdef.outputs:
            names = op.outputs.get(slot.name) or []
            if slot.duplicable:
                outs.append([self.tensor(n) for n in names] or None)
            else:
                outs.append(self.tensor(names[0]) if names else None)
        if wants_need:
            kw["need"] = tuple(o is not None for o in outs)
        plain = tuple(t for n, t in frees if n not in self.keep_meta)
        meta = tuple(t for n, t in frees if n in self.keep_meta)
        return _runner(fn, ins, simple, outs, kw, len(opdef.outputs) == 1, self.memory, plain, meta)

    def _fuse(self, run, frees):
        """Wrap a prepared control-flow runner with its frees."""
        if not frees:
            return run
        plain = tuple(t for n, t in frees if n not in self.keep_meta)
        meta = tuple(t for n, t in frees if n in self.keep_meta)
        mem = self.memory

        def run_and_free():
            run()
            _free(mem, plain, meta)
        return run_and_free

    # ---- running --------------------------------------------------------
    def live_bytes(self):
        return sum(t._array.nbytes for t in self.tensors.values() if t._array is not None)

    def run(self, trace=None, rank=None, job=None):
        """Run every op once; free dead tensors as the plan says."""
        if trace is not None:
            return self._run_traced(trace, rank, job)
        gc = self.gc
        step = None
        try:
            if gc is None:
                for step in self.steps:
                    step[0]()
            elif self.fused is not None:
                for i, run in enumerate(self.fused):
                    run()
            else:
                add = gc.free if gc.threshold <= 0 else gc.add
                for step in self.steps:
                    step[0]()
                    if step[1]:
                        add(step[1])
                gc.flush()
        except Exception as exc:
            if self.fused is not None and step is None:
                step = self.steps[i]
            raise self._op_error(step, exc) from exc

    def _op_error(self, step, exc):
        """The error to raise when the op of ``step`` failed: same kind, op named."""
        where = f"block {self.block.idx} op {step[2]} ({step[3].type})" if step else f"block {self.block.idx}"
        if isinstance(exc, EnforceNotMet):
            msg = exc.args[0] if exc.args else ""
            if msg.startswith("block "):
                return exc
            return type(exc)(f"{where}: {msg}")
        return InvalidArgument(f"{where}: {type(exc).__name__}: {exc}")

    def _run_traced(self, trace, rank, job):
        blk = self.block.idx
        old_cb = None
        if self.gc is not None:
            old_cb = self.gc.on_free
            cur = {"op": None}
            self.gc.on_free = lambda name, nbytes: trace.add(
                "free", block=blk, op=cur["op"], op_type=None, var=name, nbytes=nbytes, rank=rank, job=job)
        try:
            for run, frees, i, op in self.steps:
                before = {n: t._array for n, t in self.tensors.items()}
                trace.add("op", block=blk, op=i, op_type=op.type, rank=rank, job=job)
                try:
                    run()
                except Exception as exc:
                    raise self._op_error((run, frees, i, op), exc) from exc
                for n in op.output_arg_names:
                    t = self.tensors.get(n)
                    if t is not None and t._array is not None and t._array is not before.get(n):
                        old = before.get(n)
                        delta = t._array.nbytes - (old.nbytes if old is not None else 0)
                        trace.add("alloc", block=blk, op=i, op_type=op.type, var=n, nbytes=delta, rank=rank, job=job)
                if frees and self.gc is not None:
                    cur["op"] = i
                    self.gc.add(frees)
            if self.gc is not None:
                cur["op"] = len(self.steps) - 1
                self.gc.flush()
        finally:
            if self.gc is not None:
                self.gc.on_free = old_cb

    def run_steps(self, indices, trace=None, rank=None, job=None):
        """Run only the ops at ``indices`` (in that order), each followed by its frees."""
        gc = self.gc
        step = None
        try:
            for i in indices:
                step = self.steps[i]
                if trace is not None:
                    trace.add("op", block=self.block.idx, op=i, op_type=step[3].type, rank=rank, job=job)
                step[0]()
                if gc is not None and step[1]:
                    gc.add(step[1])
        except Exception as exc:
            raise self._op_error(step, exc) from exc

    def free(self, names):
        """Free these variables now (through the collector, if there is one)."""
        if self.gc is not None:
            self.gc.add([(n, self.tensor(n)) for n in names])

    def prepare_sub_block(self, block_idx, skip_vars=()):
        """A PreparedBlock for a sub-block, in a kid of this block's scope."""
        return PreparedBlock(self.program, block_idx, self.scope.new_scope(), self.persist_scope,
                             self.backend, skip_vars, self.gc_threshold, self.memory, self.run_ctx)
