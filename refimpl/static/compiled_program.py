"""CompiledProgram: one training program run data-parallel over places and trainers.

Mirrors ``paddle.static.CompiledProgram`` (``paddle/base/compiler.py``) and
the C++ class behind it (``paddle/fluid/framework/compiled_program.cc``), whose
constructor does, in order: check the places, fall back from Reduce to
AllReduce when there is one rank, create the local scopes, check async mode,
prepare the communicators (with the hierarchical-allreduce checks), broadcast
the persistable variables from place 0, apply the build strategy's passes,
then the eager-deletion pass. Here that happens on the first
``Executor.run(compiled, ...)`` (as ``_compile``, like Paddle's Python side),
and then:

* **places**: ``places=[CPUPlace()] * N`` makes N "devices", run as N
  in-process ranks (one thread each) inside every ``exe.run``. With
  ``build_strategy.num_trainers = T > 1`` the job runs under ``mpiexec -n T``
  and each process is trainer ``trainer_id`` holding its N places as thread
  ranks (``communication.HybridWorld``): ``nranks = T * N``, global rank
  ``trainer_id * N + place``.
* **feeds and fetches**: a feed dict is split along dim 0 into one slice per
  place (Paddle's ``SplitLoDTensor``: slices of ``ceil(B / N)`` rows); a
  list of dicts gives each place its own. Fetched values come back merged
  as Paddle's ``return_merged``: concatenated along dim 0, a 0-D value
  stacked (so a scalar loss gives N values); ``return_merged=False`` gives
  ``[fetch][place]``.
* **local scopes**: scope 0 is the run's scope, the others are its kids,
  deleted by :meth:`close` only when this object made them; given local
  scopes must match the places (``compiled_program.cc``'s message otherwise).
* **broadcast**: with several places (own scopes) or trainers, persistable
  variables go from place 0 to the others: copied, or shared (the same
  scope variable) on CPU in Reduce mode, exactly when ``compiled_program.cc`` shares
  memory; across trainers they are broadcast from rank 0 over the
  communicator (Paddle's NCCL branch; its CPU branch relies on identical
  initialisation).
* **rewrite**: ``distributed/passes/data_parallel.py`` (one program per rank
  when the rewrite depends on the rank); ``async_mode`` (CPU only) and
  ``ReduceStrategy._NoReduce`` run the plain program on every place with no
  communication, so each place trains on its own slice.
* **GC**: each place's program is prepared by the executor's machinery, so
  eager deletion and ``FLAGS_eager_delete_tensor_gb`` work as in a plain run.

Differences: the hierarchical-allreduce checks count ranks (trainers x
places) where ``compiled_program.cc`` counts trainers, since Paddle's hierarchical
allreduce assumes one device per trainer; ``nccl_comm_num`` and the fusion
switches are accepted but change nothing.
"""
from __future__ import annotations

import logging
import os
from typing import Any, List, Optional, Sequence, TYPE_CHECKING

import numpy as np

from refimpl.core import random
from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unavailable, Unimplemented
from refimpl.core.place import CPUPlace, CUDAPlace
from refimpl.core.scope import global_scope
from refimpl.core.tensor import DenseTensor
from refimpl.distributed.communication import DEFAULT_TIMEOUT, InProcessWorld, RankFailed, context
from refimpl.distributed.communication.communicator import exit_code_of
from refimpl.distributed.communication.inprocess import run_threads
from refimpl.distributed.passes.data_parallel import apply_data_parallel, hierarchical_rings
from refimpl.executor.backend import to_host
from refimpl.executor.executor import PreparedProgram
from refimpl.executor.feed_fetch import check_feed, fetch_names, without_feed_fetch_ops
from refimpl.executor.garbage_collector import gc_threshold_bytes
from refimpl.executor.prepared import prepare_flags
from refimpl.executor.trace import Trace
from refimpl.framework.program import Program
from refimpl.io.blocking_queue import EOFException, set_reader_device_count

from .build_strategy import BuildStrategy, ReduceStrategy

if TYPE_CHECKING:
    from refimpl.core.scope import Scope
    from refimpl.core.place import Place

logger = logging.getLogger("refimpl")

REDUCE_FALLBACK = ("If you set build_strategy.reduce with 'Reduce',"
                   "the number of places should be greater than 1.")
LR_DECAY_COUNTER = "@LR_DECAY_COUNTER@"  # compiled_program.cc's hot fix: never shared


def cpu_places(device_count: Optional[int] = None) -> List[CPUPlace]:
    """``device_count`` CPU places (default: the ``CPU_NUM`` environment variable, else 1)."""
    n = int(os.environ.get("CPU_NUM", 1)) if device_count is None else int(device_count)
    return [CPUPlace() for _ in range(n)]


class CompiledProgram:
    """A Program compiled for data parallelism (see the module docstring)."""

    def __init__(self, program_or_graph: Program, build_strategy: Optional[BuildStrategy] = None,
                 places: Optional[Sequence[Place]] = None, local_scopes: Optional[Sequence[Scope]] = None,
                 share_vars_from: Optional[CompiledProgram] = None) -> None:
        if not isinstance(program_or_graph, Program):
            raise InvalidArgument(f"The type of program_to_graph parameter is wrong, expected Graph or Program, "
                                  f"but received {type(program_or_graph)}")
        if build_strategy is not None and not isinstance(build_strategy, BuildStrategy):
            raise InvalidArgument(f"build_strategy must be a BuildStrategy, got {type(build_strategy).__name__}")
        bare = without_feed_fetch_ops(program_or_graph)  # its own feed/fetch ops: run as Executor.run does
        self._given = program_or_graph
        self._program, self._fetch_targets = bare if bare is not None else (program_or_graph, None)
        self._build_strategy = build_strategy
        self._places_arg = list(places) if places is not None else None
        self._local_scopes_arg = list(local_scopes) if local_scopes is not None else None
        self._share_vars_from = share_vars_from
        self._compiled = False
        self._scope = self._place = None
        self._timeout = DEFAULT_TIMEOUT
        self._cache = {}

    @property
    def program(self) -> Program:
        """The program this compiles (read-only)."""
        return self._given

    def with_data_parallel(self, loss_name: Optional[str] = None,
                           build_strategy: Optional[BuildStrategy] = None, exec_strategy: Any = None,
                           share_vars_from: Optional[CompiledProgram] = None,
                           places: Optional[Sequence[Place]] = None) -> CompiledProgram:
        """Paddle 2.x's spelling of the same settings; returns self."""
        if build_strategy is not None:
            self._build_strategy = build_strategy
        if places is not None:
            self._places_arg = list(places)
        if share_vars_from is not None:
            self._share_vars_from = share_vars_from
        return self

    # ---- compile (compiled_program.cc's constructor) ------------------------------------------
    def _compile(self, scope, place):
        if self._compiled:
            if scope is not None and scope is not self._scope:
                raise InvalidArgument("Cannot compile program with different scope.")
            if place is not None and place != self._place:
                raise InvalidArgument("Cannot compile program with different place.")
            return self
        self._scope, self._place = scope, place
        given = self._given_local_scopes()
        self._places = self._get_places(place)
        if not self._places:
            raise Unavailable("NPU is not supported in CompiledProgram.")
        self._init_member_info(len(self._places))
        self._create_local_scopes(scope, given)
        try:
            self._check_async()
            self._rings, self._hybrid = {}, None
            self._prepare_communicator()
            self._bcast_vars = self._persistable_vars()
            self._bcast_pending = False
            if self._strategy.num_trainers > 1 or (len(self._local_scopes) != 1 and not given):
                self._bcast_params_to_devices()
                self._bcast_pending = self._strategy.num_trainers > 1  # done in the first run's threads
            self._programs = self._compile_graphs()
            # compiled_program.cc's InitReaderQueueDeviceCount: each place reads its own batches (refimpl/io)
            set_reader_device_count(self._program, len(self._places))
        except Exception:
            self._delete_local_scopes()  # a failed compile leaves no kid scopes behind
            raise
        self._compiled = True
        return self

    def _given_local_scopes(self):
        if self._share_vars_from is None:
            return self._local_scopes_arg or []
        if not getattr(self._share_vars_from, "_compiled", False):
            raise InvalidArgument("The shared Program is not compiled and executed, so there is no "
                                  "variables to share.")
        return list(self._share_vars_from._local_scopes)

    def _get_places(self, place):
        places = self._places_arg if self._places_arg is not None else [place]
        for p in places:
            if type(p) is not type(place):
                raise InvalidArgument("Place type not match. You may set wrong type of places.")
        return places

    def _init_member_info(self, device_count):
        self._strategy = (self._build_strategy or BuildStrategy())._copy()
        self._use_all_reduce = self._strategy.reduce_strategy == ReduceStrategy.AllReduce
        self._nranks = self._strategy.num_trainers * device_count
        if not self._use_all_reduce and self._nranks == 1:
            logger.info(REDUCE_FALLBACK)
            self._strategy.reduce_strategy = ReduceStrategy.AllReduce
            self._use_all_reduce = True
        self._use_cuda = isinstance(self._places[0], CUDAPlace)

    def _create_local_scopes(self, global_scope_, given, create_new=True):
        if not given:
            self._own_local_scopes = True
            self._local_scopes = [global_scope_] + [global_scope_.new_scope() for _ in self._places[1:]]
            return
        self._own_local_scopes = False
        if len(self._places) != len(given):
            raise PreconditionNotMet(f"member_->places_.size() = {len(self._places)} is not equal to "
                                     f"local_scopes.size() = {len(given)}")
        self._local_scopes = [s.new_scope() if create_new else s for s in given]

    def _check_async(self):
        if self._strategy.async_mode and self._use_cuda:
            raise Unavailable("gpu mode does not support async_mode_ now!")

    def _prepare_communicator(self):
        bs = self._strategy
        if bs.reduce_strategy == ReduceStrategy._NoReduce:
            return
        if bs.use_hierarchical_allreduce:
            n, inter = self._nranks, bs.hierarchical_allreduce_inter_nranks
            if not n > 1:
                raise PreconditionNotMet(f"The num_trainers should be greater than 1, but received {n}.")
            if not inter > 1:
                raise PreconditionNotMet(f"The inter_nranks should be greater than 1, but received {inter}.")
            if n % inter:
                raise PreconditionNotMet(f"num_trainers:{n} mod inter_nranks:{inter} != 0")
            bs.hierarchical_allreduce_exter_nranks = n // inter
            self._rings = hierarchical_rings(n, inter)
        if bs.num_trainers > 1:
            self._hybrid = self._join_trainers()

    def _join_trainers(self):
        """The MPI job's processes are the trainers; this one is ``trainer_id``."""
        from refimpl.distributed.communication import HybridWorld, init_mpi
        bs = self._strategy
        try:
            mpi = init_mpi().world
        except ImportError as exc:
            raise Unavailable(f"num_trainers={bs.num_trainers} needs MPI (mpi4py, run under mpiexec): {exc}")
        if mpi.nranks != bs.num_trainers or mpi.rank != bs.trainer_id:
            raise PreconditionNotMet(f"build_strategy says trainer {bs.trainer_id} of {bs.num_trainers}, but this "
                                     f"process is MPI rank {mpi.rank} of {mpi.nranks} (mpiexec -n num_trainers)")
        return HybridWorld(len(self._places), mpi, self._timeout)

    def _persistable_vars(self):
        """Sorted names of the persistable, non-distributed variables (compiler.py's list)."""
        return sorted({v.name for v in self._program.list_vars() if v.persistable and v.type != "RAW"
                       and not getattr(v, "is_distributed", False)})

    def _shares(self, name):
        """Whether places > 0 share place 0's variable (compiled_program.cc's CPU rule) instead of copying it."""
        return not (self._use_all_reduce or self._use_cuda or name == LR_DECAY_COUNTER)

    def _bcast_params_to_devices(self):
        """From place 0 to the other places of this process (trainers: see ``_bcast_across_trainers``)."""
        main = self._local_scopes[0]
        for name in self._bcast_vars:
            var = main.find_var(name)
            if var is None or var.tensor._array is None:
                continue
            for local in self._local_scopes[1:]:
                if self._shares(name):
                    _share_var(local, var)
                else:
                    local.var(name).tensor.set(var.tensor._array)

    def _compile_graphs(self):
        """One program per place: the data-parallel rewrite, or the plain program (async, one rank)."""
        bs, n = self._strategy, len(self._places)
        if bs.async_mode or self._nranks == 1 or bs.reduce_strategy == ReduceStrategy._NoReduce:
            return [self._program] * n
        per_rank = bs.reduce_strategy == ReduceStrategy.Reduce or bs.use_hierarchical_allreduce
        programs = []
        for i in range(n):
            if per_rank or not programs:
                programs.append(apply_data_parallel(self._clone(), self._nranks, bs.trainer_id * n + i, bs))
            else:
                programs.append(programs[0])
        return programs

    def _clone(self):
        p = self._program.clone()
        for attr in ("lr_scheduler", "lr_var"):
            if hasattr(self._program, attr):
                setattr(p, attr, getattr(self._program, attr))
        return p

    # ---- run -----------------------------------------------------------------
    def _run_with_executor(self, exe, feed, fetch_list, scope, return_numpy, trace, return_merged=True):
        self._compile(scope if scope is not None else global_scope(), exe.place)
        feeds = self._split_feed(feed)
        names = fetch_names(self._program, self._fetch_targets if fetch_list is None else fetch_list)
        preps = self._prepared(tuple(feeds[0]), tuple(names), exe.place.backend)
        self._set_lr(preps)
        traces = [Trace() for _ in preps] if trace is not None else [None] * len(preps)
        results = self._run_places(preps, feeds, traces)
        for i, t in enumerate(traces):
            if t is not None:
                rank = self._strategy.trainer_id * len(preps) + i
                trace.events.extend(e._replace(rank=rank) if e.rank is None else e for e in t.events)
        return _merge(results, return_numpy, return_merged, exe.place)

    def _split_feed(self, feed):
        n = len(self._places)
        if feed is None or isinstance(feed, dict):
            checked = check_feed(self._program, feed)
            per_place = [{} for _ in range(n)]
            for name, arr in checked.items():
                var = self._program.global_block().vars.get(name)
                parts = [arr] * n if var is not None and var.persistable else self._split(name, arr)
                for d, part in zip(per_place, parts):
                    d[name] = part
            return per_place
        if not isinstance(feed, (list, tuple)):
            raise InvalidArgument(f"feed must be a dict or a list of dicts (one per place), got {type(feed).__name__}")
        if len(feed) != n:
            raise Unimplemented(f"The feed data number {len(feed)} does not match the device number {n}.")
        if not all(isinstance(f, dict) for f in feed):
            raise InvalidArgument("Each element of feed list should be a dict")
        per_place = [check_feed(self._program, f) for f in feed]
        if any(list(f) != list(per_place[0]) for f in per_place):
            raise InvalidArgument(f"every place must be fed the same variables, got {[list(f) for f in per_place]}")
        return per_place

    def _split(self, name, arr):
        """Paddle's ``SplitLoDTensor``: ``ceil(B / N)`` rows per place; fewer pieces than places is an error."""
        n = len(self._places)
        if arr.ndim == 0 or arr.shape[0] == 0:
            return [arr] * n
        step = -(-arr.shape[0] // n)
        pieces = -(-arr.shape[0] // step)
        if pieces != n:
            kind = "GPU" if self._use_cuda else "CPU"
            hint = "" if self._use_cuda else (" You should set the environment variable CPU_NUM in the system "
                                              "to determine the number of devices you need.")
            raise PreconditionNotMet(f"The number({pieces}) of samples[{name}] of current batch is less than the "
                                     f"count({n}) of devices({kind}), currently, it is not allowed.{hint}")
        return [arr[i * step:(i + 1) * step] for i in range(n)]

    def _prepared(self, feed_names, fetch_names, backend):
        threshold = gc_threshold_bytes()
        key = (feed_names, fetch_names, threshold, backend, prepare_flags())
        preps = self._cache.get(key)
        if preps is None:  # each place's `read` ops pop that place's batches (reader_device)
            preps = self._cache[key] = [
                PreparedProgram(prog, scope, feed_names, fetch_names, backend, threshold, reader_device=i)
                for i, (prog, scope) in enumerate(zip(self._programs, self._local_scopes))]
        return preps

    def _set_lr(self, preps):
        scheduler = getattr(self._program, "lr_scheduler", None)
        if scheduler is not None:  # as the executor: the scheduler's value goes in before each run
            value = np.array(scheduler(), dtype="float32")
            for prep in preps:
                prep.set_value(self._program.lr_var.name, value)

    def _run_places(self, preps, feeds, traces):
        n = len(preps)
        if n == 1 and self._hybrid is None:
            return [preps[0].run(feeds[0], traces[0])]
        if self._hybrid is not None:
            world = self._hybrid
            world.reset()  # the world lives as long as this object: its MPI rings are made once
            ranks = world.local_ranks()
        else:
            world, ranks = InProcessWorld(n, self._timeout), range(n)
        try:
            states = random.device_states(len(preps))  # every place draws what a device seeded alike would
            results = run_threads(world, ranks, self._place_body, (preps, feeds, traces, states), {},
                                  self._timeout)
        except RankFailed as exc:
            if isinstance(exc.error, EOFException) and self._hybrid is None:
                raise exc.error from None  # a DataLoader's epoch ended on every place: Paddle's EOF
            if not isinstance(exc.error, Exception) and self._hybrid is None:
                raise exc.error  # Ctrl-C or sys.exit in a place's reader reaches the caller as itself
            if self._hybrid is not None:  # as run_hybrid: a failing rank ends the MPI job
                self._hybrid.mpi.abort(str(exc), exit_code_of(exc))
            raise
        self._bcast_pending = False
        return results

    def _place_body(self, preps, feeds, traces, states):
        """What each place's thread runs (its rank context is already set)."""
        ctx = context.current()
        i = ctx.rank - self._strategy.trainer_id * len(preps)
        random.set_state(states[i])
        for ring_id, ranks in self._rings.items():
            ctx.add_group(ring_id, ranks)
        if self._bcast_pending:
            self._bcast_across_trainers(i, ctx.comm(0))
        return preps[i].run(feeds[i], traces[i])

    def _bcast_across_trainers(self, i, comm):
        """Every rank takes rank 0's value of each persistable (compiled_program.cc's NCCL broadcast)."""
        main = self._local_scopes[0]
        for name in self._bcast_vars:
            var = main.find_var(name)
            if var is None or var.tensor._array is None:
                continue
            value = comm.broadcast(var.tensor._array, root=0)  # every place reads before any writes
            mine = self._local_scopes[i].find_var(name)
            if i == 0 or mine is not var:
                mine.tensor._array = value

    # ---- scopes ---------------------------------------------------------------
    def local_scopes(self) -> List[Scope]:
        """The scope of each place (scope 0 is the run's scope unless local scopes were given)."""
        return list(getattr(self, "_local_scopes", []))

    def close(self) -> None:
        """Delete the local scopes this object created (not given ones) and forget prepared programs."""
        if self._compiled:
            self._delete_local_scopes()
        self._cache.clear()

    def _delete_local_scopes(self):
        if self._own_local_scopes:  # skip scope 0: it is the run's scope
            for s in self._local_scopes[1:]:
                if self._scope.has_kid(s):
                    _delete_kid(self._scope, s)


def _share_var(scope, var):
    """Make ``scope`` hold the very same variable as place 0 (compiled_program.cc's ``ShareDataWith``)."""
    scope.share_var(var)


def _delete_kid(scope, kid):
    """compiled_program.cc's ``DeleteScope``: forget the kid scope."""
    scope.delete_scope(kid)


def _merge(results, return_numpy, return_merged, place):
    """Per-place fetch values -> Paddle's merged (dim 0) or unmerged ([fetch][place]) results."""
    nfetch = len(results[0]) if results else 0
    per_fetch = [[to_host(r[j]) for r in results] for j in range(nfetch)]  # as Executor.run fetches
    if not return_merged:
        return per_fetch if return_numpy else [[DenseTensor(v, place) for v in vs] for vs in per_fetch]
    merged = [vs[0] if len(vs) == 1 else (np.stack(vs) if vs[0].ndim == 0 else np.concatenate(vs))
              for vs in per_fetch]
    return merged if return_numpy else [DenseTensor(v, place) for v in merged]
