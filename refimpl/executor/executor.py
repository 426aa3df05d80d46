"""Executor: run a Program in a Scope, with feeds, fetches and eager deletion.

Mirrors ``paddle.static.Executor.run``: feeds are checked against the
program's data variables (name, dtype, rank and fixed dims), the program is
prepared once per (program, scope, feeds, fetches, GC setting) and cached,
persistables live in the given scope and temporaries in a kid scope the
cache owns, and fetched values come back as NumPy copies. Differences from
Paddle: no feed/fetch ops are inserted (the executor writes and reads the
variables directly, and programs that already contain ``feed``/``fetch``
ops are honoured); a feed array is used without a copy unless the run could
write into it (a fed persistable, which lives on in the scope, or a variable
some op updates in place: see ``PreparedProgram._feeds_to_copy``), so a run
never changes the caller's arrays. A feed must be numbers or booleans
(ragged lists, strings and objects are ``InvalidArgument``), and every
persistable the program reads must hold its declared shape and dtype when
the program is prepared. A run that fails midway puts back the arrays of the
persistables it replaced (see ``PreparedProgram._persistable_outputs``).
With ``FLAGS_check_nan_inf`` set, the first op producing NaN or Inf fails
the run (``nan_inf.py``).

The path of one run, as a reader would follow it: ``Executor.run`` checks
the feeds (``feed_fetch.check_feed``) and gets the cached :class:`PreparedProgram`,
whose ``run`` binds the feeds and calls ``PreparedBlock.run``
(``prepared.py``): a loop over each op's runner, which calls the op's kernel
(``refimpl/ops``) and stores its outputs, followed by the garbage
collector's ``release`` for the tensors that die after that op
(``garbage_collector.py``, planned by ``gc_plan.py``).
"""
import weakref
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

import numpy as np

from refimpl.core.bfloat16 import BFLOAT16, as_paddle_host
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound, PreconditionNotMet
from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.core.place import Place
from refimpl.core.scope import Scope, global_scope
from refimpl.core.tensor import DenseTensor
from refimpl.framework.block import last_writers
from refimpl.framework.operator import Operator
from refimpl.framework.program import Program, default_main_program
from refimpl.framework.variable import Variable
from refimpl.ops.registry import get_op_def

from .backend import default_place, to_device, to_host
from .feed_fetch import check_feed, fetch_names, without_feed_fetch_ops
from .garbage_collector import Memory, gc_threshold_bytes
from .gc_plan import no_need_buffer_inputs
from .prepared import PreparedBlock, prepare_flags
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
        self.run_ctx = {"reader_device": reader_device}
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


class Executor:
    """Runs programs on one place: ``CPUPlace`` the NumPy kernels, ``CUDAPlace`` the CUDA ones.

    Without a place, the default backend's (``refimpl.set_backend`` / ``REFIMPL_BACKEND``; NumPy
    unless set), as Paddle's ``Executor()`` takes the expected place.
    """

    def __init__(self, place: Optional[Place] = None) -> None:
        self.place = place if place is not None else default_place()
        self._cache = {}
        self._bare: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._last = None

    def run(self, program: Any = None, feed: Optional[Dict[str, Any]] = None,
            fetch_list: Optional[Sequence[Union[Variable, str]]] = None, feed_var_name: str = "feed",
            fetch_var_name: str = "fetch", scope: Optional[Scope] = None, return_numpy: bool = True,
            use_program_cache: bool = True, trace: Optional[Trace] = None, return_merged: bool = True) -> list:
        """Run ``program`` (default: the default main program) once; return the fetched values."""
        if program is None:
            program = default_main_program()
        if hasattr(program, "_run_with_executor"):  # CompiledProgram and friends
            return program._run_with_executor(self, feed, fetch_list, scope, return_numpy, trace,
                                              return_merged=return_merged)
        if not isinstance(program, Program):
            raise InvalidArgument(f"Executor.run expects a Program, got {type(program).__name__}")
        scope = scope if scope is not None else global_scope()
        pipeline = getattr(program, "_pipeline_opt", None) or None  # Paddle tests its truth
        if isinstance(pipeline, Mapping) and "startup_program" in pipeline:
            program, pipeline = pipeline["startup_program"], None  # Paddle's legacy pipeline split the startup
        if pipeline is not None and not hasattr(pipeline, "run"):
            raise InvalidArgument("program._pipeline_opt holds no pipeline to run (a PipelineOptimizer's "
                                  "configs, set before its minimize?)")
        if pipeline is not None:  # this rank's pipeline: refimpl's Plan, or the legacy pipeline's section
            self._last = pipeline  # memory_stats reads its plan executor's counters
            return pipeline.run(self, feed, fetch_list, scope, return_numpy, trace)
        program, fetch_list = self._own_feed_fetch(program, fetch_list)
        feed = check_feed(program, feed)
        names = fetch_names(program, fetch_list)
        prepared = self._prepared(program, scope, tuple(feed), tuple(names), use_program_cache)
        self._last = prepared
        scheduler = getattr(program, "lr_scheduler", None)
        if scheduler is not None:  # as Paddle: the scheduler's current value goes in before each run
            scope.var(program.lr_var.name).get_tensor().set(np.array(scheduler(), dtype="float32"))
        return host_results(prepared.run(feed, trace), return_numpy, self.place)

    def _own_feed_fetch(self, program, fetch_list):
        """A program with feed/fetch ops runs as its copy without them (cached per program version)."""
        hit = self._bare.get(program)  # weak keys: a program no longer used is not kept alive here
        if hit is None or hit[0] != program._version:
            hit = self._bare[program] = (program._version, without_feed_fetch_ops(program))
        if hit[1] is None:
            return program, fetch_list
        bare, targets = hit[1]
        return bare, (targets if fetch_list is None else fetch_list)

    def _prepared(self, program, scope, feed_names, fetch_names, use_cache):
        backend = self.place.backend
        threshold = gc_threshold_bytes()
        key = (id(program), id(scope), feed_names, fetch_names, threshold, backend, prepare_flags())
        hit = self._cache.get(key)
        if hit is not None and hit[0] is program and hit[1] == program._version and hit[2] is scope:
            return hit[3]
        prepared = PreparedProgram(program, scope, feed_names, fetch_names, backend, threshold)
        if use_cache:
            self._cache[key] = (program, program._version, scope, prepared)
        return prepared

    def train_from_dataset(self, program: Any = None, dataset: Any = None, scope: Optional[Scope] = None,
                           thread: int = 0, debug: bool = False, fetch_list: Optional[Sequence[Any]] = None,
                           fetch_info: Optional[Sequence[str]] = None, print_period: int = 100,
                           fetch_handler: Any = None) -> None:
        """Run ``program`` on every batch of ``dataset`` (an InMemoryDataset / QueueDataset): see
        ``dataset_runner.py``."""
        from .dataset_runner import run_from_dataset  # dataset_runner imports this module
        return run_from_dataset(self, program, dataset, scope, thread, fetch_list, fetch_info, print_period,
                                fetch_handler, "train_from_dataset")

    def infer_from_dataset(self, program: Any = None, dataset: Any = None, scope: Optional[Scope] = None,
                           thread: int = 0, debug: bool = False, fetch_list: Optional[Sequence[Any]] = None,
                           fetch_info: Optional[Sequence[str]] = None, print_period: int = 100,
                           fetch_handler: Any = None) -> None:
        """As :meth:`train_from_dataset` (Paddle's infer mode runs the same ops on one process)."""
        from .dataset_runner import run_from_dataset
        return run_from_dataset(self, program, dataset, scope, thread, fetch_list, fetch_info, print_period,
                                fetch_handler, "infer_from_dataset")

    def memory_stats(self) -> Dict[str, Any]:
        """The bytes held by the variables of the last run (each rank's executor counts its own).

        * ``live_bytes``: held at the end of the run; ``peak_bytes``: the most held at once;
        * ``live_by_category``: ``live_bytes`` split into ``parameters``, ``gradients``,
          ``optimizer_state``, ``activations``, ``communication`` and ``other`` (feeds, the
          learning rate, counters; see ``refimpl.executor.memory_categories``) -- they add up to
          ``live_bytes``;
        * ``peak_by_category``: the same split at the moment of the peak -- they add up to
          ``peak_bytes``;
        * ``max_by_category``: each category's own high-water mark in the run (``other``: None,
          it is not counted on its own).
        """
        if self._last is None:
            return Memory().stats()
        if hasattr(self._last, "memory_stats"):  # a pipelined run (PipelineRun)
            return self._last.memory_stats()
        return self._last.block.memory.stats()

    def close(self) -> None:
        self._cache.clear()


def host_results(values: Sequence, return_numpy: bool, place: Place) -> list:
    """Fetched values as the user gets them: fresh host arrays, or DenseTensors holding them."""
    if return_numpy:  # a bfloat16 value is fetched as its uint16 bit patterns, as in Paddle
        return [as_paddle_host(to_host(v)) for v in values]
    return [DenseTensor(to_host(v), place) for v in values]


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
