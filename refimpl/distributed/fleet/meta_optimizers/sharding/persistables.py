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

How it differs: Paddle takes the rank from ``PADDLE_TRAINER_ID``; refimpl takes it from the calling
rank's context when that is an in-process rank (threads share one environment) and from
``PADDLE_TRAINER_ID`` otherwise. The files are refimpl's ``.npz`` archives (``static.save_vars``).
"""
from __future__ import annotations

import os
from typing import Any, Optional

from refimpl.framework.variable import Parameter

__all__ = ["save_persistables", "load_persistables", "is_persistable", "sharding_predicate", "trainer_id",
           "saves_shared_state", "ShardedPersistablesAPI", "SAVES_SHARED_STATE_ATTR"]

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


def save_persistables(exe: Any, dirname: str, main_program: Any = None, filename: Optional[str] = None) -> None:
    """Paddle's sharding ``save_persistables``: rank 0 (with a pipeline: the first rank of each stage)
    all its persistables (into ``filename`` if given), the other ranks their own shard, one file per
    variable, all into ``dirname``."""
    from refimpl.static.io_vars import save_vars
    program = _section(main_program)
    if saves_shared_state(main_program):
        save_vars(exe, dirname, main_program=program, predicate=is_persistable, filename=filename)
    else:
        save_vars(exe, dirname, main_program=program, predicate=sharding_predicate, filename=None)


def load_persistables(exe: Any, dirname: str, main_program: Any = None, filename: Optional[str] = None) -> None:
    """Paddle's ``paddle.distributed.io.load_persistables`` on this rank's (sharded) program: every
    persistable it holds, from ``dirname`` (one file per variable, or ``filename``); all or nothing."""
    from refimpl.static.io_vars import load_vars
    load_vars(exe, dirname, main_program=_section(main_program), predicate=is_persistable, filename=filename)


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

    def save_persistables(self, executor: Any, dirname: str, main_program: Any = None, mode: int = 0) -> Any:
        """Sharded: this rank's shard (and, on rank 0, the shared state) into ``dirname``."""
        if self._sharded():
            return save_persistables(executor, dirname, main_program)
        next_api: Any = super()  # the class after this mixin in Fleet's MRO (its parameter-server API)
        return next_api.save_persistables(executor, dirname, main_program, mode)

    def load_persistables(self, executor: Any, dirname: str, main_program: Any = None) -> None:
        """Collective: every persistable of this rank's program from ``dirname`` (what the ranks saved)."""
        from refimpl.core.errors import PreconditionNotMet
        if not getattr(self, "_is_collective", False):
            raise PreconditionNotMet("fleet.load_persistables is for collective jobs; a parameter-server job "
                                     "loads with fleet.load_model / init_server(dirname)")
        load_persistables(executor, dirname, main_program)
