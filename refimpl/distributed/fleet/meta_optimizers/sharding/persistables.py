"""Saving and loading a ZeRO-sharded model: each rank writes and reads what it owns.

Mirrors ``save_persistables`` of ``paddle/distributed/fleet/meta_optimizers/sharding/utils.py``
and ``save_persistables`` / ``load_persistables`` / ``is_persistable`` of
``paddle/distributed/io.py`` (Paddle 3.3.1). Under sharding a rank's pruned program holds as
persistables its own parameters and optimizer state plus the state every rank has alike
(learning rate, loss scaling, step counters). So all ranks save into one directory, one file per
variable:

* rank 0 saves every persistable of its program (the shared state with its own shard);
  under sharding x pp (a section program ``ShardingOptimizer`` marked) that rule is generalized, refimpl's
  addition: the first rank of each stage's sharding group (sharding rank 0, mp rank 0, dp rank 0 of
  the stage) saves every persistable of its stage's section program, since each stage holds other
  shared state (its own merge buffers, counters) that only its ranks have;
* every other rank saves only its trainable parameters, optimizer state (names ending
  ``_moment1_0``, ``_moment2_0``, ``_beta1_pow_acc_0``, ``_beta2_pow_acc_0``, ``_velocity_0``,
  ``_ema_0``, ``@offload_0``, ``.cast_fp16``) and gradient-merge buffers (``@GradientMerge``, and the
  pipeline's ``@GRAD@MERGED``, refimpl's addition: see ``GRADIENT_MERGE_SUFFIXES``);

and each rank loads back the persistables of its own program (``load_persistables``) — the files
its owner wrote and the shared ones rank 0 wrote. A pipeline program is read through its
``section_program``, as in Paddle.

Under ``optimize_offload`` the fp32 parameters are plain variables (the sharding optimizer recreates
them so, as Paddle's does): their persistable ``@offload_0`` copies are what is saved and loaded.

Tensor parallelism inside sharding (``sharding_configs['mp_degree'] > 1``), refimpl's addition: there
each mp rank holds a different shard of every ``paddle.distributed.split`` parameter under the same
name, and so do their accumulators -- in Paddle 3.3.1 the mp ranks write one file per name and
overwrite each other's (a silently wrong checkpoint). refimpl puts the values that differ per mp rank
(the ``is_distributed`` variables and every persistable derived from one: its name followed by ``_``,
``@`` or ``.``, as ``linear_0.w_0_moment1_0``, ``linear_0.w_0@GRAD@MERGED``, ``linear_0.w_0.cast_fp16``)
under ``dirname/mp_rank_{k:02d}/`` (``k``: the rank's mp rank), saved by the ranks that save them
without mp; everything else stays in ``dirname`` and is written only by mp rank 0 of those ranks (the
other mp ranks hold the same values, the ShardingOptimizer keeps them so), so no two mp ranks write
one file. ``load_persistables`` reads the same layout back. The rank's mp rank and degree come from
the ShardingOptimizer's groups: ``fleet.save_persistables`` / ``load_persistables`` pass them in (from
the ``ShardingGroups`` of the optimizer that minimized on this rank); the module functions (and so
``paddle.distributed.io.load_persistables``) read ``MP_LAYOUT_ATTR`` off the program, set with
``mark_mp_layout``. A program without the mark is read as one without mp: on an mp rank its shards'
files (only in the ``mp_rank_*`` directories) are then not found (``NotFound``), never read wrong.
Without mp nothing changes.

How it differs: Paddle takes the rank from ``PADDLE_TRAINER_ID``; refimpl takes it from the calling
rank's context when that is an in-process rank (threads share one environment) and from
``PADDLE_TRAINER_ID`` otherwise. The files are refimpl's ``.npz`` archives (``static.save_vars``).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Set, Tuple

from refimpl.framework.variable import Parameter

__all__ = ["save_persistables", "load_persistables", "is_persistable", "sharding_predicate", "trainer_id",
           "saves_shared_state", "ShardedPersistablesAPI", "SAVES_SHARED_STATE_ATTR", "MP_LAYOUT_ATTR",
           "mark_mp_layout", "mp_layout", "mp_dirname", "per_mp_rank_names"]

#: Paddle's list: the optimizer accumulators and offload / optimize_cast copies a rank owns
OPT_VAR_SUFFIXES = ("_moment1_0", "_moment2_0", "_beta1_pow_acc_0", "_beta2_pow_acc_0", "_velocity_0",
                    "_ema_0", "@offload_0", ".cast_fp16")
#: gradient-merge buffers: sharding's own, and (refimpl's addition) the legacy pipeline's ``@GRAD@MERGED``,
#: which under sharding x pp only the parameter's owner has -- Paddle's predicate leaves them out, so
#: its ``load_persistables`` finds no file for the owners that are not the stage's first rank
GRADIENT_MERGE_SUFFIXES = ("@GradientMerge", "@GRAD@MERGED")


def trainer_id() -> int:
    """This rank: the in-process rank's context if the calling thread is one, else ``PADDLE_TRAINER_ID``."""
    from refimpl.distributed.communication import context
    if context.has_thread_context():
        return int(context.current().rank)
    return int(os.environ.get("PADDLE_TRAINER_ID", 0))


def is_persistable(var: Any) -> bool:
    """Paddle's ``paddle.distributed.io.is_persistable`` (feed / fetch / reader holders are not)."""
    from refimpl.static.io_vars import is_persistable as _static_is_persistable
    return _static_is_persistable(var)


def _is_opt_var(var: Any) -> bool:
    return bool(var.persistable) and var.name.endswith(OPT_VAR_SUFFIXES)


def _is_trainable(var: Any) -> bool:
    return isinstance(var, Parameter) and bool(getattr(var, "trainable", True))


def sharding_predicate(var: Any) -> bool:
    """What a rank other than 0 saves: its parameters, optimizer state and gradient-merge buffers."""
    return _is_trainable(var) or _is_opt_var(var) or var.name.endswith(GRADIENT_MERGE_SUFFIXES)


def _section(main_program: Any) -> Any:
    from refimpl.framework.program import default_main_program
    program = main_program if main_program is not None else default_main_program()
    pipeline_opt = getattr(program, "_pipeline_opt", None)
    return pipeline_opt["section_program"] if pipeline_opt else program


#: set by ShardingOptimizer on a sharding x pp section program: does this rank save its stage's shared state
SAVES_SHARED_STATE_ATTR = "_sharding_saves_shared_state"


def saves_shared_state(main_program: Any = None) -> bool:
    """Does this rank save every persistable? Rank 0; with a pipeline, the first rank of each stage.

    ``ShardingOptimizer`` marks the section program of a sharding x pp rank (sharding, mp and dp rank 0
    of its stage: ``SAVES_SHARED_STATE_ATTR``); a program without the mark is Paddle's rule, rank 0.
    """
    mark = getattr(_section(main_program), SAVES_SHARED_STATE_ATTR, None)
    if mark is None:
        return trainer_id() == 0
    return bool(mark)


#: set on a sharded rank's (section) program when ``mp_degree > 1``: ``(its mp rank, the mp degree)``
MP_LAYOUT_ATTR = "_sharding_mp_layout"

#: ``(mp rank, mp degree)`` of a rank; ``(0, 1)``: no tensor parallelism
MpLayout = Tuple[int, int]


def mark_mp_layout(program: Any, mp_rank: int, mp_degree: int) -> None:
    """Mark ``program`` (a rank's program, or its section program) with the rank's mp rank and degree
    (``ShardingGroups.mp_rank`` / ``mp_degree``), for ``save_persistables`` / ``load_persistables``."""
    from refimpl.core.errors import InvalidArgument
    if mp_degree < 1 or not 0 <= mp_rank < mp_degree:
        raise InvalidArgument(f"mark_mp_layout: mp rank {mp_rank} is not a rank of mp degree {mp_degree}")
    setattr(_section(program), MP_LAYOUT_ATTR, (int(mp_rank), int(mp_degree)))


def mp_layout(main_program: Any = None) -> MpLayout:
    """The ``(mp rank, mp degree)`` the program was marked with (``mark_mp_layout``); ``(0, 1)`` if none."""
    mark = getattr(_section(main_program), MP_LAYOUT_ATTR, None)
    return (0, 1) if mark is None else (int(mark[0]), int(mark[1]))


def mp_dirname(dirname: str, mp_rank: int) -> str:
    """Where the values of mp rank ``mp_rank`` that differ per mp rank go: ``dirname/mp_rank_{k:02d}``."""
    return os.path.join(dirname, f"mp_rank_{mp_rank:02d}")


def per_mp_rank_names(program: Any) -> Set[str]:
    """The persistables of ``program`` whose values differ per mp rank: the ``is_distributed`` ones (split's
    shards) and those derived from one (its name then ``_``, ``@`` or ``.``: accumulators, merge buffers,
    offload / cast copies). The shard itself may be a plain variable (``optimize_offload`` keeps its
    persistable ``@offload_0`` copy): the names it leads come from every variable of the program."""
    variables = [v for v in program.list_vars() if is_persistable(v)]
    bases = {v.name for v in program.list_vars() if getattr(v, "is_distributed", False)}
    prefixes = tuple(b + sep for b in sorted(bases) for sep in ("_", "@", "."))
    return {v.name for v in variables if v.name in bases or v.name.startswith(prefixes)}


def save_persistables(exe: Any, dirname: str, main_program: Any = None, filename: Optional[str] = None,
                      mp: Optional[MpLayout] = None) -> None:
    """Paddle's sharding ``save_persistables``: rank 0 (with a pipeline: the first rank of each stage)
    all its persistables (into ``filename`` if given), the other ranks their own shard, one file per
    variable, all into ``dirname``. ``mp``: this rank's ``(mp rank, mp degree)`` (default: the
    program's mark); with a degree > 1 the per-mp-rank values go under ``mp_dirname(dirname, mp rank)``
    and the rest is written by mp rank 0 only."""
    from refimpl.static.io_vars import save_vars
    program = _section(main_program)
    mp_rank, mp_degree = mp if mp is not None else mp_layout(main_program)
    shared = saves_shared_state(main_program)   # (what this rank saves without mp: Paddle's rule)
    chosen: Callable[[Any], bool] = is_persistable if shared else sharding_predicate
    file = filename if shared else None
    if mp_degree == 1:
        save_vars(exe, dirname, main_program=program, predicate=chosen, filename=file)
        return
    per_mp = per_mp_rank_names(program)
    mine = [v for v in program.list_vars() if chosen(v)]
    parts = [(mp_dirname(dirname, mp_rank), [v for v in mine if v.name in per_mp])]
    if mp_rank == 0:
        parts.append((dirname, [v for v in mine if v.name not in per_mp]))
    for where, variables in parts:
        if variables:   # (an mp rank may hold no split shard of its own: nothing to write there)
            save_vars(exe, where, main_program=program, vars=variables, filename=file)


def load_persistables(exe: Any, dirname: str, main_program: Any = None, filename: Optional[str] = None,
                      mp: Optional[MpLayout] = None) -> None:
    """Paddle's ``paddle.distributed.io.load_persistables`` on this rank's (sharded) program: every
    persistable it holds, from ``dirname`` (one file per variable, or ``filename``); all or nothing.
    ``mp`` as in ``save_persistables``: the per-mp-rank values from ``mp_dirname(dirname, mp rank)``."""
    from refimpl.static.io_vars import load_vars
    program = _section(main_program)
    mp_rank, mp_degree = mp if mp is not None else mp_layout(main_program)
    if mp_degree == 1:
        load_vars(exe, dirname, main_program=program, predicate=is_persistable, filename=filename)
        return
    _load_from(program, dirname, mp_dirname(dirname, mp_rank), per_mp_rank_names(program), filename)


def _load_from(program: Any, dirname: str, mp_dir: str, per_mp: Set[str], filename: Optional[str]) -> None:
    """Every persistable of ``program``: those in ``per_mp`` from ``mp_dir``, the rest from ``dirname``;
    every file is opened and checked against its variable before any value is set (all or nothing)."""
    from refimpl.core.scope import global_scope
    from refimpl.static.io_vars import _read_archives   # load_vars' reader, which takes several directories
    variables = [v for v in program.list_vars() if is_persistable(v) and v.type != "RAW"]
    sources: dict = {}
    for v in variables:
        where = os.path.normpath(mp_dir if v.name in per_mp else dirname)
        path = os.path.join(where, filename) if filename else os.path.join(where, v.name)
        sources.setdefault(path, []).append(v)
    values = _read_archives("load_persistables", sources)
    scope = global_scope()
    for name, value in values.items():
        scope.var(name).get_tensor().set(value)


class ShardedPersistablesAPI:
    """``fleet.save_persistables`` / ``fleet.load_persistables`` of a sharded collective job.

    A mixin of ``Fleet`` placed before its parameter-server methods: when this rank's program was
    minimized with ``ShardingOptimizer``, ``save_persistables`` saves this rank's shard as
    Paddle's sharding ``save_persistables`` does and ``load_persistables`` reads it back; anything
    else goes on to the next class (Paddle 3.3.1's collective runtime saves nothing there). The
    class using it provides ``_is_collective`` and ``_distributed_optimizer``.
    ``load_persistables`` is refimpl's: Paddle's ``Fleet`` has none (its users call
    ``paddle.distributed.io.load_persistables`` on each rank, which this is).
    """

    def _sharded(self) -> bool:
        opt = getattr(self, "_distributed_optimizer", None)
        if not getattr(self, "_is_collective", False) or opt is None:
            return False
        return "ShardingOptimizer" in opt._get_applied_meta_list()

    def _mp_layout(self) -> MpLayout:
        """This rank's ``(mp rank, mp degree)``: the ``ShardingGroups`` of the ShardingOptimizer that
        minimized on this rank."""
        chain = getattr(self, "_distributed_optimizer").strategy_compiler._get_applied_meta_optimizer()
        groups = next(o._groups for o in chain if type(o).__name__ == "ShardingOptimizer")
        return max(groups.mp_rank, 0), groups.mp_degree

    def save_persistables(self, executor: Any, dirname: str, main_program: Any = None, mode: int = 0) -> Any:
        """Sharded: this rank's shard (and, on rank 0, the shared state) into ``dirname``."""
        if self._sharded():
            return save_persistables(executor, dirname, main_program, mp=self._mp_layout())
        next_api: Any = super()  # the class after this mixin in Fleet's MRO (its parameter-server API)
        return next_api.save_persistables(executor, dirname, main_program, mode)

    def load_persistables(self, executor: Any, dirname: str, main_program: Any = None) -> None:
        """Collective: every persistable of this rank's program from ``dirname`` (what the ranks saved)."""
        from refimpl.core.errors import PreconditionNotMet
        if not getattr(self, "_is_collective", False):
            raise PreconditionNotMet("fleet.load_persistables is for collective jobs; a parameter-server job "
                                     "loads with fleet.load_model / init_server(dirname)")
        load_persistables(executor, dirname, main_program, mp=self._mp_layout() if self._sharded() else None)
