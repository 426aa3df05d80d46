"""``paddle.distributed.io``: saving and loading the persistables of a (distributed) static program.

Mirrors ``paddle/distributed/io.py`` of Paddle 3.3.1 for collective jobs:
``save_persistables`` / ``load_persistables`` write and read every variable
``is_persistable`` keeps (``static.save_vars`` / ``load_vars``), a pipeline
program through its ``section_program``. Differences: Paddle's branches for
parameter-server programs with remote lookup tables (``main_program.
_is_distributed``) are not here (a PS job saves with ``fleet.save_persistables``
/ ``init_server(dirname)``), nor is ``load_inference_model_distributed``. Under
ZeRO sharding each rank loads its own shard with ``load_persistables``; the
sharded save is ``fleet.save_persistables`` (see
``fleet/meta_optimizers/sharding/persistables.py``; with ``mp_degree > 1`` the
values that differ per mp rank are under ``dirname/mp_rank_{k:02d}/``, read
back when the program carries its mp layout, ``persistables.MP_LAYOUT_ATTR``).
"""
from __future__ import annotations

from typing import Any, Optional

from refimpl.distributed.fleet.meta_optimizers.sharding.persistables import is_persistable, load_persistables


def save_persistables(executor: Any, dirname: str, main_program: Any = None, filename: Optional[str] = None) -> None:
    """Every persistable of ``main_program`` (default: the default main program) into ``dirname``
    (one file per variable, or all in ``filename``)."""
    from refimpl.static.io_vars import save_vars
    from refimpl.framework.program import default_main_program
    program = main_program if main_program is not None else default_main_program()
    pipeline_opt = getattr(program, "_pipeline_opt", None)
    if pipeline_opt:
        program = pipeline_opt["section_program"]
    save_vars(executor, dirname, main_program=program, predicate=is_persistable, filename=filename)


__all__ = ["save_persistables", "load_persistables", "is_persistable"]
