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
the feeds (``feed_fetch.check_feed``) and gets the cached :class:`PreparedProgram`
(``prepared_program.py``), whose ``run`` binds the feeds and calls ``PreparedBlock.run``
(``prepared.py``): a loop over each op's runner, which calls the op's kernel
(``refimpl/ops``) and stores its outputs, followed by the garbage
collector's ``release`` for the tensors that die after that op
(``garbage_collector.py``, planned by ``gc_plan.py``).

A program with a ``_pipeline_opt`` runs as this rank's pipeline: refimpl's Plan
(a ``PipelineRun``, fleet's pipeline meta-optimizer, its own ``run``) or, for
Paddle's legacy dict, this rank's ``section_program`` (``pipeline_trainer.py``);
a startup whose ``_pipeline_opt`` names a ``startup_program`` runs that
program, as in Paddle 2.6.2.
"""
import weakref
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import numpy as np

from refimpl.core.bfloat16 import as_paddle_host
from refimpl.core.errors import InvalidArgument
from refimpl.core.place import Place
from refimpl.core.scope import Scope, global_scope
from refimpl.core.tensor import DenseTensor
from refimpl.framework.program import Program, default_main_program
from refimpl.framework.variable import Variable

from .backend import default_place, to_host
from .feed_fetch import check_feed, fetch_names, without_feed_fetch_ops
from .garbage_collector import Memory, gc_threshold_bytes
from .prepared import prepare_flags
from .pipeline_trainer import PipelineTrainer
from .prepared_program import PreparedProgram
from .trace import Trace


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
        if isinstance(pipeline, Mapping):  # Paddle's legacy pipeline: its split startup, or this rank's section
            if "startup_program" in pipeline:
                program, pipeline = pipeline["startup_program"], None
            elif "section_program" in pipeline:
                self._last = self._pipeline_trainer(program, pipeline)
                _push_learning_rate(program, scope)
                out = self._last.run(self, program, feed, fetch_list, scope, trace)  # None: another stage's var
                return [None if v is None else host_results([v], return_numpy, self.place)[0] for v in out]
            else:
                raise InvalidArgument("program._pipeline_opt holds no section_program to run (a "
                                      "PipelineOptimizer's configs, set before its minimize?)")
        if pipeline is not None:  # fleet turned this program into this rank's pipeline Plan
            self._last = pipeline  # memory_stats reads its plan executor's counters
            _push_learning_rate(program, scope)
            return pipeline.run(self, feed, fetch_list, scope, return_numpy, trace)
        program, fetch_list = self._own_feed_fetch(program, fetch_list)
        feed = check_feed(program, feed)
        names = fetch_names(program, fetch_list)
        prepared = self._prepared(program, scope, tuple(feed), tuple(names), use_program_cache)
        self._last = prepared
        _push_learning_rate(program, scope)
        return host_results(prepared.run(feed, trace), return_numpy, self.place)

    def _pipeline_trainer(self, program, pipeline_opt):
        """The PipelineTrainer of ``program``'s legacy pipeline dict (kept while program and dict stay)."""
        hit = self._cache.get(("pipeline_trainer", id(program)))
        if hit is None or hit[0] is not program or hit[1] is not pipeline_opt:
            hit = (program, pipeline_opt, PipelineTrainer(pipeline_opt))
            self._cache[("pipeline_trainer", id(program))] = hit
        return hit[2]

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


def _push_learning_rate(program: Program, scope: Scope) -> None:
    """As Paddle (and its 2.6.2 ``_run_pipeline``): an LR scheduler's current value goes in before each run."""
    scheduler = getattr(program, "lr_scheduler", None)
    if scheduler is not None:
        scope.var(program.lr_var.name).get_tensor().set(np.array(scheduler(), dtype="float32"))


def host_results(values: Sequence, return_numpy: bool, place: Place) -> list:
    """Fetched values as the user gets them: fresh host arrays, or DenseTensors holding them."""
    if return_numpy:  # a bfloat16 value is fetched as its uint16 bit patterns, as in Paddle
        return [as_paddle_host(to_host(v)) for v in values]
    return [DenseTensor(to_host(v), place) for v in values]
