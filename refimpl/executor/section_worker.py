"""SectionWorker: the legacy pipeline worker of one stage.

Mirrors Paddle's ``paddle/fluid/framework/section_worker.cc``: the stage program's ops are sorted by
``op_role`` into forward-and-LR ops (run for micro-batch 0), forward ops
(later micro-batches), backward ops and optimizer ops; any other role is an
error. Schedule mode 0 is F-then-B (every forward, then every backward, then
the update); mode 1 is 1F1B (``stages - stage - 1`` warm-up forwards, then
one forward and one backward alternately, then the remaining backwards,
then the update). The update runs in the last micro-batch's scope. Garbage
collection uses one plan for the whole program; under 1F1B the variables
sent by backward ``send_v2`` ops are kept (skip vars) and freed two backward
steps later, the rest after the update. Unlike Paddle, whose CPU worker
never collects, collection follows ``FLAGS_eager_delete_tensor_gb`` on
every place.
"""
from typing import Any, List, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.core.place import Place
from refimpl.core.scope import Scope
from refimpl.executor.backend import default_place, to_device
from refimpl.executor.garbage_collector import Memory, gc_threshold_bytes
from refimpl.executor.plan_executor import fetch_stacked, scope_bytes, split_feed
from refimpl.executor.prepared import PreparedBlock, prepare_flags
from refimpl.executor.trace import Trace
from refimpl.framework.op_role import OpRole, is_forward
from refimpl.framework.program import Program

FTHENB, ONE_F_ONE_B = 0, 1
_BWD = (OpRole.Backward, OpRole.Backward | OpRole.Loss)


def classify(program: Program) -> Tuple[List[int], List[int], List[int], List[int]]:
    """Op indices: (forward_and_lr, forward, backward, optimizer) as the worker sorts them."""
    fwd_lr, fwd, bwd, opt = [], [], [], []
    for i, op in enumerate(program.global_block().ops):
        role = op.role()
        if is_forward(role) or role == OpRole.LRSched:
            fwd_lr.append(i)
            if role != OpRole.LRSched:
                fwd.append(i)
        elif role in _BWD:
            bwd.append(i)
        elif role == OpRole.Optimize:
            opt.append(i)
        else:
            raise PreconditionNotMet(f"The op {op.type} is None of LRSched, Forward, Backward or Optimize.")
    return fwd_lr, fwd, bwd, opt


class SectionWorker:
    def __init__(self, program: Program, pipeline_stage: int, num_pipeline_stages: int, num_microbatches: int,
                 schedule_mode: int = FTHENB, place: Optional[Place] = None,
                 fetch_list: Optional[Sequence[Any]] = None) -> None:
        if schedule_mode not in (FTHENB, ONE_F_ONE_B):
            raise InvalidArgument(f"SectionWorker: schedule_mode must be 0 (F-then-B) or 1 (1F1B), "
                                  f"got {schedule_mode!r}")
        self.program, self.place = program, place or default_place()
        self.stage, self.num_stages, self.num_microbatches = pipeline_stage, num_pipeline_stages, num_microbatches
        self.schedule_mode = schedule_mode
        self.forward_and_lr_ops, self.forward_ops, self.backward_ops, self.optimizer_ops = classify(program)
        self.backward_send_vars = []
        self.fetch_names = [f if isinstance(f, str) else f.name for f in (fetch_list or [])]
        if schedule_mode == ONE_F_ONE_B:
            for op in program.global_block().ops:
                if op.role() == OpRole.Backward and op.type in ("send_v2", "partial_send"):
                    if pipeline_stage == 0:
                        raise PreconditionNotMet(
                            "The first pipeline stage must do not have a backward send var, please check var "
                            f"{op.input_arg_names[0]}")
                    self.backward_send_vars.append(op.input_arg_names[0])
        self._blocks = None
        self.trace: Optional[Trace] = None
        self.rank = pipeline_stage

    def _prepare(self, scope):
        # prepared again when the scope, the program or the settings that shape a prepared block change
        # (as PlanExecutor's cache keys: the program's version, the GC threshold, prepare_flags)
        key = (self.program._version, gc_threshold_bytes(), prepare_flags())
        if self._blocks is None or self._blocks[0] is not scope or self._blocks[3] != key:
            micro = [scope.new_scope() for _ in range(self.num_microbatches)]
            skip = self.backward_send_vars + self.fetch_names
            memory = self.memory = Memory()  # one account for all micro-batches
            blocks = [PreparedBlock(self.program, 0, m, scope, self.place.backend, skip, key[1],
                                    memory=memory) for m in micro]
            self._blocks = (scope, micro, blocks, key)
        return self._blocks[:3]

    def memory_stats(self) -> dict:
        """This stage's bytes in its last mini-batch (``Executor.memory_stats`` keys)."""
        if self._blocks is None:
            raise PreconditionNotMet("memory_stats: the section program has not run yet")
        return self.memory.stats()

    def train(self, scope: Scope, feed: Optional[dict] = None, trace: Optional[Trace] = None) -> list:
        """One mini-batch: split ``feed`` into micro-batches, run the schedule, return the fetches.

        Each fetched variable comes back stacked over the micro-batches.
        """
        _, micro, blocks = self._prepare(scope)
        for m, part in enumerate(split_feed(feed, self.num_microbatches)):
            for name, arr in part.items():
                micro[m].var(name).get_tensor()._array = to_device(arr, self.place.backend)
        self.trace, self._b = trace, blocks
        self.memory.reset(*scope_bytes(scope, micro, self.memory.tracked))  # what this run starts with
        (self._run_fthenb if self.schedule_mode == FTHENB else self._run_1f1b)()
        for b in blocks:
            b.flush()
        return [fetch_stacked(n, micro) for n in self.fetch_names]

    def _forward(self, m):
        self._b[m].run_steps(self.forward_and_lr_ops if m == 0 else self.forward_ops, self.trace, self.rank,
                             f"forward#{m}")

    def _backward(self, m):
        self._b[m].run_steps(self.backward_ops, self.trace, self.rank, f"backward#{m}")

    def _update(self):
        last = self.num_microbatches - 1
        self._b[last].run_steps(self.optimizer_ops, self.trace, self.rank, "optimizer#0")

    def _run_fthenb(self):
        for m in range(self.num_microbatches):
            self._forward(m)
        for m in range(self.num_microbatches):
            self._backward(m)
        self._update()

    def _run_1f1b(self):
        startup = self.num_stages - self.stage - 1
        if not self.num_microbatches > startup:
            raise InvalidArgument(f"To use pipeline with 1F1B scheduler, please make sure number of microbatches "
                                  f"({self.num_microbatches}) is than startup steps ({startup}).")
        fw = bw = 0
        while fw < startup:
            self._forward(fw)
            fw += 1
        while fw < self.num_microbatches:
            self._forward(fw)
            if bw >= 2:
                self._b[bw - 2].free(self.backward_send_vars)
            self._backward(bw)
            fw, bw = fw + 1, bw + 1
        reserve = bw - 2
        while bw < self.num_microbatches:
            self._backward(bw)
            bw += 1
        self._update()
        for m in range(max(reserve, 0), self.num_microbatches):
            self._b[m].free(self.backward_send_vars)
