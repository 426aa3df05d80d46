"""``Executor.train_from_dataset`` / ``infer_from_dataset``: run a program over every batch of a data set.

Mirrors Paddle's ``Executor._run_from_dataset`` with its ``MultiTrainer`` and
``HogwildWorker`` (``paddle/fluid/framework/hogwild_worker.cc``): one worker
thread per reader of the data set, each running the program on its reader's
batches in a scope of its own under ``scope``, all updating the same
persistables (lock-free, "hogwild"); worker 0 prints the fetched variables
every ``print_period`` batches as Paddle's ``PrintFetchVars`` does
(``time: [...], batch: [k], loss[1]:[0.25]``), after one
``device worker program id:`` line per run. Paddle's infer mode runs the
same ops (only a parameter server's push differs), so the two methods
differ only in name here. Both return None.

The data set is duck-typed (the executor does not import
``refimpl.distributed``): ``_prepare_to_run()``, ``_use_var_names()`` (the
variables each batch feeds), ``_reader_batches(thread)`` (one iterable of
feeds ``{name: ndarray}`` per reader; ``thread`` is the argument given here,
0 for the data set's own ``thread_num``) and ``_finish_to_run()``; see
``refimpl/distributed/fleet/dataset/dataset.py``. One worker runs per
reader. Differences from Paddle: ``debug`` prints nothing; ``fetch_handler`` is
:class:`Unimplemented`; an error in any worker stops the run and is raised
here once every worker has stopped. Afterwards ``executor.memory_stats()``
gives worker 0's last batch.
"""
from __future__ import annotations

import threading
import time
from typing import Any, List, Optional, Sequence

import numpy as np

from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented
from refimpl.core.scope import Scope, global_scope
from refimpl.framework.program import Program, default_main_program

from .backend import to_host
from .executor import PreparedProgram
from .feed_fetch import check_feed, fetch_names
from .garbage_collector import gc_threshold_bytes

__all__ = ["run_from_dataset", "format_fetch"]

_DATASET_METHODS = ("_prepare_to_run", "_use_var_names", "_reader_batches", "_finish_to_run")


def run_from_dataset(executor: Any, program: Any, dataset: Any, scope: Optional[Scope], thread: int,
                     fetch_list: Optional[Sequence[Any]], fetch_info: Optional[Sequence[str]],
                     print_period: int, fetch_handler: Any, api: str) -> None:
    """Run ``program`` once per batch of ``dataset`` with ``executor``'s place; see the module docstring."""
    program = _main_program(program, api)
    if dataset is None:
        raise PreconditionNotMet(f"Executor.{api}: dataset is need and should be initialized")
    missing = [m for m in _DATASET_METHODS if not callable(getattr(dataset, m, None))]
    if missing:
        raise InvalidArgument(f"Executor.{api}: dataset must be a paddle.distributed.InMemoryDataset or "
                              f"QueueDataset, got {type(dataset).__name__} (lacks {missing})")
    if fetch_handler is not None:
        raise Unimplemented(f"Executor.{api}: fetch_handler is not implemented by refimpl; use fetch_list "
                            f"with fetch_info and print_period")
    if not isinstance(thread, int) or isinstance(thread, bool) or thread < 0:
        raise InvalidArgument(f"Executor.{api}: thread must be an int >= 0, got {thread!r}")
    if not isinstance(print_period, int) or isinstance(print_period, bool) or print_period <= 0:
        raise InvalidArgument(f"Executor.{api}: print_period must be a positive int, got {print_period!r}")
    names = fetch_names(program, list(fetch_list or []))
    info = list(fetch_info or [])
    if len(info) != len(names):
        raise InvalidArgument(f"Executor.{api}: fetch_info needs one label per fetch_list item, got "
                              f"{len(info)} labels for {len(names)} variables")
    scope = scope if scope is not None else global_scope()

    dataset._prepare_to_run()
    feeds = tuple(dataset._use_var_names())
    readers = dataset._reader_batches(thread)
    backend = executor.place.backend
    workers = [PreparedProgram(program, scope, feeds, names, backend, gc_threshold_bytes()) for _ in readers]
    print(f"device worker program id: {id(program)}", flush=True)
    errors: List[BaseException] = []
    stop = threading.Event()

    def work(index: int) -> None:
        try:
            for batch_id, feed in enumerate(readers[index], 1):
                if stop.is_set():
                    return
                values = workers[index].run(check_feed(program, feed))
                if index == 0 and names and batch_id % print_period == 0:
                    print(format_fetch(batch_id, info, [to_host(v) for v in values]), flush=True)
        except BaseException as exc:  # raised in the caller's thread below
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=work, args=(i,), name=f"{api}-worker-{i}") for i in range(1, len(readers))]
    for t in threads:
        t.start()
    work(0)
    for t in threads:
        t.join()
    # memory_stats() reports worker 0's last batch, as Executor.run records its run (this module is the
    # body of two Executor methods, so it sets the executor's record directly)
    executor._last = workers[0] if workers else executor._last
    dataset._finish_to_run()
    if errors:
        raise errors[0]
    return None


def _main_program(program: Any, api: str) -> Program:
    if program is None:
        return default_main_program()
    inner = getattr(program, "program", None)  # CompiledProgram (static, above the executor: duck-typed)
    if isinstance(inner, Program):
        return inner
    if not isinstance(program, Program):
        raise InvalidArgument(f"Executor.{api} expects a Program or CompiledProgram, got {type(program).__name__}")
    return program


def format_fetch(batch_id: int, info: Sequence[str], values: Sequence[np.ndarray]) -> str:
    """One line of Paddle's fetch printing: ``time: [...], batch: [k], label[numel]:[v v ...]``."""
    parts = [f"time: [{time.strftime('%Y-%m-%d %H:%M:%S')}]", f"batch: [{batch_id}]"]
    for label, value in zip(info, values):
        flat = np.asarray(value).ravel()
        parts.append(f"{label}[{flat.size}]:[{' '.join(_cpp_number(v) for v in flat)}]")
    return ", ".join(parts)


def _cpp_number(v: Any) -> str:
    """A number as C++'s ``operator<<`` prints it by default (6 significant digits, ``%g``)."""
    if isinstance(v, (np.floating, float)):
        return f"{float(v):g}"
    if isinstance(v, (np.bool_, bool)):
        return "1" if v else "0"
    return str(v)
