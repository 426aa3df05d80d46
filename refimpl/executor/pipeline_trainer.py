"""PipelineTrainer: what ``Executor.run`` does with a program Paddle's legacy pipeline split into sections.

Mirrors Paddle's ``paddle/fluid/framework/pipeline_trainer.cc`` as Paddle 2.6.2's
``Executor.run`` reaches it (``python/paddle/base/executor.py``: a program whose
``_pipeline_opt`` holds ``"startup_program"`` runs that program instead; one holding
``"section_program"`` runs this rank's section with a ``SectionWorker``). The legacy
``PipelineOptimizer`` (``refimpl/incubate/optimizer/pipeline``) leaves those dicts on the
main and startup programs it splits; fleet's ``ShardingOptimizer`` with
``pp_degree > 1`` does so through it. Paddle keeps the trainer and its worker in
``paddle/fluid/framework`` with the executor; so does refimpl (``executor/``).

The section program runs on this rank's scope: persistables (parameters,
accumulators, ``@GRAD@MERGED`` buffers) there, one kid scope per micro-batch
for the rest, the fed full batch split into ``num_microbatches`` parts along
dim 0 (``SectionWorker.train``), under ``schedule_mode`` (``"1F1B"`` or
``"F-then-B"``). Differences: Paddle 2.6.2 reads the micro-batches from the
program's DataLoader and returns the fetches of the last micro-batch through
its ``fetch`` var; refimpl takes a feed dict, as ``Executor.run`` does
elsewhere, and returns each fetched var stacked over the micro-batches
(``None`` for a name this stage's section does not hold). Paddle 3.3.1
dropped this branch from ``Executor.run`` (its sections no longer run from
``exe.run``); refimpl keeps 2.6.2's.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, TYPE_CHECKING, Tuple

from refimpl.core.errors import InvalidArgument, PreconditionNotMet

from .feed_fetch import check_feed
from .section_worker import FTHENB, ONE_F_ONE_B, SectionWorker

if TYPE_CHECKING:
    from refimpl.core.scope import Scope
    from refimpl.executor.executor import Executor
    from refimpl.executor.trace import Trace
    from refimpl.framework.program import Program

#: Paddle's ``schedule_mode`` strings -> the SectionWorker's modes
SCHEDULE_MODES = {"F-then-B": FTHENB, "1F1B": ONE_F_ONE_B}
_REQUIRED = ("section_program", "pipeline_stage", "num_pipeline_stages", "num_microbatches", "schedule_mode")


def _worker_config(pipeline_opt: Mapping[str, Any]) -> Tuple[Program, int, int, int, int]:
    missing = [k for k in _REQUIRED if k not in pipeline_opt]
    if missing:
        raise InvalidArgument(f"program._pipeline_opt lacks {missing}: not a pipeline Paddle's "
                              "PipelineOptimizer wrote")
    mode = pipeline_opt["schedule_mode"]
    if mode not in SCHEDULE_MODES:
        raise InvalidArgument(f"program._pipeline_opt['schedule_mode'] must be one of {sorted(SCHEDULE_MODES)}, "
                              f"got {mode!r}")
    return (pipeline_opt["section_program"], int(pipeline_opt["pipeline_stage"]),
            int(pipeline_opt["num_pipeline_stages"]), int(pipeline_opt["num_microbatches"]), SCHEDULE_MODES[mode])


class PipelineTrainer:
    """This rank's run of a legacy pipeline's section program, one SectionWorker per fetch list.

    ``Executor.run`` keeps one per program whose ``_pipeline_opt`` holds a ``section_program``.
    """

    def __init__(self, pipeline_opt: Mapping[str, Any]) -> None:
        self.pipeline_opt = pipeline_opt
        self._workers: Dict[Tuple[int, Tuple[str, ...]], SectionWorker] = {}
        self._last: Optional[SectionWorker] = None

    def run(self, exe: Executor, main: Program, feed: Optional[Dict[str, Any]], fetch_list: Optional[Sequence[Any]],
            scope: Scope, trace: Optional[Trace] = None) -> List[Any]:
        """One mini-batch of this rank's section. ``feed`` is checked against the whole program ``main`` (every
        name one of its vars, dtypes and shapes as ``Executor.run`` checks them); this stage takes its own."""
        section, stage, stages, micro, mode = _worker_config(self.pipeline_opt)
        feed = check_feed(main, feed)
        names = [f if isinstance(f, str) else f.name for f in (fetch_list or [])]
        block = section.global_block()
        here = tuple(n for n in names if block._find_var_recursive(n) is not None)
        key = (id(section), here)
        worker = self._workers.get(key)
        if worker is None or worker.program is not section:
            worker = self._workers[key] = SectionWorker(section, stage, stages, micro, mode, exe.place, list(here))
        self._last = worker
        feed = {n: v for n, v in feed.items() if block._find_var_recursive(n) is not None}
        got = dict(zip(here, worker.train(scope, feed, trace)))
        return [got[n] if n in got else None for n in names]

    def memory_stats(self) -> Dict[str, Any]:
        """This rank's bytes in its last run (``Executor.memory_stats`` keys)."""
        if self._last is None:
            raise PreconditionNotMet("memory_stats: the pipelined program has not run on this rank yet")
        return self._last.memory_stats()
