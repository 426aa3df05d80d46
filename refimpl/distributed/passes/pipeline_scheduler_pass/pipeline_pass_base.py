"""PipelinePassBase: what every pipeline scheduler pass shares.

Mirrors ``paddle.distributed.passes.pipeline_scheduler_pass.pipeline_pass_base``.
A scheduler pass does two things for one pipeline stage:

1. ``create_job_list()`` -- the order in which this stage runs its jobs
   (``Job(type, micro_batch_id)``), ending with the optimizer job;
2. ``_partial_programs(program)`` -- one sub-program per job type.

``apply()`` puts both into a :class:`~refimpl.executor.plan.Plan` and stores it
in the pass context under ``"plan"``.

Each schedule is written as a plain function returning a list of
:class:`~.action.Action` values (the style of PyTorch's pipelining
schedules); the pass turns actions into Jobs. Differences from Paddle:

* Paddle has separate "PIR" and "old IR" apply paths; refimpl has one program
  representation, so ``FLAGS_enable_pir_api`` (read when the pass is built,
  as in Paddle) only selects which job list 1F1B and VPP produce;
* the per-job-type program split is a hook (see ``_partial_programs``), and
  so is a rewrite of each job program before the skip-GC vars are set
  (the attr ``"job_program_hook"``);
* refusals are typed: each is an instance of the builtin class Paddle raised
  (AssertionError, NotImplementedError, KeyError, ValueError) *and* of
  :class:`~refimpl.core.errors.EnforceNotMet`; ``str()`` of the error is
  Paddle's message verbatim (some of Paddle's assertions have none, so an
  explanation is attached as an exception note where Python supports it).
"""
from __future__ import annotations

from typing import Any, Iterable, List, Optional, TYPE_CHECKING

from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound, Unimplemented
from refimpl.executor.plan import Job, Plan
from refimpl.flags import flag

from ..pass_base import PassBase
from .action import Action

if TYPE_CHECKING:
    from refimpl.executor.plan import Job

# ---------------------------------------------------------------- errors


class _PaddleMessage:
    """Mixin: str() is Paddle's message as Paddle printed it (no kind prefix)."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def _with_note(exc, note):
    if note and hasattr(exc, "add_note"):
        exc.add_note(note)
    return exc


class ScheduleAssertionError(_PaddleMessage, InvalidArgument, AssertionError):
    """Paddle asserted on the configuration (e.g. too few micro-batches)."""


class ScheduleUnimplemented(_PaddleMessage, Unimplemented):
    """Paddle has no job list for this setting (NotImplementedError)."""


class ScheduleKeyError(NotFound):
    """A job name the schedule does not have (KeyError, printed like one)."""

    def __str__(self):
        return repr(self.args[0]) if self.args else ""


class ScheduleValueError(_PaddleMessage, InvalidArgument):
    """The ZBVPP scheduler could not place a job (ValueError), e.g. memory."""


def schedule_assert(condition: Any, message: str = "", note: Optional[str] = None) -> None:
    """Paddle's ``assert cond, message`` as a typed refimpl error."""
    if not condition:
        raise _with_note(ScheduleAssertionError(message), note)


# ---------------------------------------------------------------- actions


def optimizer_step() -> Action:
    """The last step of every schedule: Paddle's ``Job("optimizer", 0)``."""
    return Action("optimizer", 0)


def actions_to_jobs(actions: Iterable[Action]) -> List[Job]:
    """Paddle's job list for a schedule's actions."""
    return [a.to_job() for a in actions]


# ---------------------------------------------------------------- the pass


class PipelinePassBase(PassBase):
    RECV_FORWARD = "recv_forward"
    SEND_BACKWARD = "send_backward"
    FORWARD = "forward"
    BACKWARD = "backward"
    OPT = "optimizer"

    def __init__(self):
        super().__init__()
        self._in_pir_mode = bool(flag("FLAGS_enable_pir_api"))

    def _check_self(self):
        return True

    def _check_conflict(self, other_pass):
        return True

    def _require(self, *names):
        """The values of attrs the schedule cannot do without."""
        missing = [n for n in names if self.get_attr(n) is None]
        if missing:
            raise InvalidArgument(f"{self.name}: attr(s) {missing} must be set (new_pass(name, attrs) "
                                  f"or set_attr) before the job list can be created")
        return [self.get_attr(n) for n in names]

    # -- job list ---------------------------------------------------------
    def _schedule(self):
        """This stage's actions, optimizer last. Each subclass implements it."""
        raise NotImplementedError(f"{type(self).__name__} must implement _schedule()")

    def create_job_list(self) -> List[Job]:
        """This stage's job list: a list of :class:`~refimpl.executor.plan.Job`."""
        return actions_to_jobs(self._schedule())

    def _create_job_list(self):
        """Paddle's name for :meth:`create_job_list`."""
        return self.create_job_list()

    def required_job_types(self) -> List[str]:
        """The job types of this stage's job list, in order of first use."""
        return list(dict.fromkeys(job.type() for job in self.create_job_list()))

    # -- programs ---------------------------------------------------------
    def _partial_programs(self, program, job_types=None):
        """Split ``program`` into ``(job_types, sub_programs)``, one per job type.

        ``program`` is this rank's stage program (see
        ``refimpl.distributed.pipeline.partition``); for schedules with several
        chunks per stage, set the attr ``"chunk_programs"`` to the rank's
        chunk programs. The attr ``"partial_programs"``, a callable
        ``fn(pass_obj, program) -> (job_types, sub_programs)``, replaces the split.
        ``job_types`` saves building the job list again when the caller has it.
        """
        split = self.get_attr("partial_programs")
        if split is not None:
            return split(self, program)
        from refimpl.distributed.pipeline.partition import job_programs
        chunks = self.get_attr("chunk_programs") or [program]
        types = self.required_job_types() if job_types is None else list(job_types)
        progs = job_programs(chunks, types)
        return types, [progs[t] for t in types]

    def _apply_single_impl(self, main_program, startup_program, context):
        """Build this stage's Plan into ``context`` (attr ``"plan"``).

        The attr ``"job_program_hook"``, a callable ``fn(job_type, program) ->
        program``, may rewrite each job program after the split and before its
        skip-GC vars are computed (the pipeline runner adds the data-parallel
        gradient sync and the every-k-steps update to ``optimizer`` this way).
        """
        jobs = self.create_job_list()
        job_types, sub_programs = self._partial_programs(
            main_program, list(dict.fromkeys(job.type() for job in jobs)))
        hook = self.get_attr("job_program_hook")
        if hook is not None:
            sub_programs = [hook(t, prog) for t, prog in zip(job_types, sub_programs)]
        from refimpl.distributed.passes.pass_utils import set_skip_gc_vars
        type_to_program = set_skip_gc_vars(self.get_attr("num_micro_batches"),
                                           job_types, sub_programs, jobs)
        context.set_attr("plan", Plan(jobs, type_to_program))


__all__ = [
    "PipelinePassBase", "Action", "optimizer_step", "actions_to_jobs",
    "schedule_assert", "ScheduleAssertionError", "ScheduleUnimplemented",
    "ScheduleKeyError", "ScheduleValueError", "EnforceNotMet",
]
