"""One step of a pipeline schedule: an immutable (kind, micro-batch, chunk) triple.

Mirrors the job vocabulary of Paddle's pipeline scheduler passes
(``python/paddle/distributed/passes/pipeline_scheduler_pass/*.py``), where a
job is ``core.Job(type, micro_batch_id)`` and its *type* is a kind, optionally
followed by a chunk number: ``forward``, ``backward_b1``, ``recv_forward0``.
Paddle spells those strings inline in each schedule; refimpl writes every
schedule as a list of :class:`Action` values and turns them into Paddle's
strings only where jobs are made (:meth:`Action.to_job`), so the job lists
stay exactly Paddle's. The schedule functions, the scheduler passes, the
simulator, the viz module and ``refimpl schedule`` all use this one type.

``chunk`` is ``None`` for schedules with one chunk per stage, whose job types
have no suffix (``forward``), and a number for interleaved ones, whose job
types always have one (``forward0``); :attr:`Action.model_chunk` is the chunk
with ``None`` read as 0.

Text notation (``str(action)``, parsed back by :meth:`Action.parse`)::

    <kind letter><micro-batch>[.<chunk>]

    F  forward         B  backward (the full one)
    I  backward_b      (input-gradient half of a split backward)
    W  backward_w      (weight-gradient half)
    RECV_F  recv_forward    SEND_B  send_backward    O  optimizer

so ``F3`` is the forward of micro-batch 3, ``I3.1`` the input-gradient
backward of micro-batch 3 on chunk 1, ``O0`` the optimizer step. The
letters are those of PyTorch's ``torch.distributed.pipelining`` actions
(``F``, ``B``, ``I``, ``W``, ``RECV_F``, ``SEND_B``); ``O`` is refimpl's.
The ASCII grid of :mod:`refimpl.viz.schedule` draws ``I`` as ``B``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from refimpl.core.errors import InvalidArgument
from refimpl.executor.plan import Job

KINDS = ("forward", "backward", "backward_b", "backward_w", "recv_forward", "send_backward", "optimizer")
MARKERS = ("recv_forward", "send_backward")   # communication jobs: they take no compute time
LETTERS = {"forward": "F", "backward": "B", "backward_b": "I", "backward_w": "W",
           "recv_forward": "RECV_F", "send_backward": "SEND_B", "optimizer": "O"}
_KIND_OF_LETTER = {letter: kind for kind, letter in LETTERS.items()}
_NUMBER = r"(0|[1-9][0-9]*)"
_TEXT = re.compile(rf"({'|'.join(sorted(_KIND_OF_LETTER, key=len, reverse=True))}){_NUMBER}(?:\.{_NUMBER})?")
JOB_TYPE_HELP = f"a job type is a kind ({', '.join(KINDS)}), optionally followed by a chunk number"


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, slots=True)
class Action:
    """One job of one stage: ``kind`` of :data:`KINDS`, ``micro_batch`` >= 0, ``chunk`` None or >= 0."""

    kind: str
    micro_batch: int
    chunk: Optional[int] = None

    def __post_init__(self):
        if self.kind not in LETTERS:
            raise InvalidArgument(f"unknown pipeline job kind {self.kind!r}; kinds: {', '.join(KINDS)}")
        if not _is_count(self.micro_batch):
            raise InvalidArgument(f"{self.kind}: micro_batch must be an int >= 0, got {self.micro_batch!r}")
        if self.chunk is not None and not _is_count(self.chunk):
            raise InvalidArgument(f"{self.kind}: chunk must be None or an int >= 0, got {self.chunk!r}")

    # -- derived names -----------------------------------------------------
    @property
    def job_type(self) -> str:
        """Paddle's job type: ``forward``, ``backward_b1`` ..."""
        return self.kind if self.chunk is None else f"{self.kind}{self.chunk}"

    @property
    def model_chunk(self) -> int:
        """The chunk this job works on (0 for one-chunk schedules)."""
        return 0 if self.chunk is None else self.chunk

    @property
    def key(self) -> Tuple[str, int, int]:
        """``(kind, model_chunk, micro_batch)``: the work, whatever the spelling."""
        return (self.kind, self.model_chunk, self.micro_batch)

    def to_job(self) -> Job:
        """The :class:`~refimpl.executor.plan.Job` Paddle's pass makes for this step."""
        return Job(self.job_type, self.micro_batch)

    # -- text ----------------------------------------------------------------
    def __str__(self):
        chunk = "" if self.chunk is None else f".{self.chunk}"
        return f"{LETTERS[self.kind]}{self.micro_batch}{chunk}"

    @classmethod
    def parse(cls, text: str) -> "Action":
        """The inverse of ``str()``: ``"I3.1"`` -> ``Action("backward_b", 3, 1)``."""
        m = _TEXT.fullmatch(text) if isinstance(text, str) else None
        if m is None:
            raise InvalidArgument(f"not a pipeline action: {text!r} (want <letter><micro-batch>[.<chunk>], "
                                  f"letters {', '.join(_KIND_OF_LETTER)}; e.g. F3, I3.1)")
        letter, micro_batch, chunk = m.groups()
        return cls(_KIND_OF_LETTER[letter], int(micro_batch), None if chunk is None else int(chunk))

    @classmethod
    def from_job_type(cls, job_type: str, micro_batch: int) -> "Action":
        """``("backward_b1", 3)`` -> ``Action("backward_b", 3, 1)``."""
        kind, chunk = parse_job_type(job_type)
        return cls(kind, int(micro_batch), chunk)

    @classmethod
    def from_job(cls, job: Any) -> Action:
        """A :class:`~refimpl.executor.plan.Job`, a ``(type, micro_batch_id)`` pair or an Action."""
        if isinstance(job, cls):
            return job
        return cls.from_job_type(*job_pair(job))


def job_pair(job: Any) -> Tuple[str, int]:
    """``(type, micro_batch_id)`` of a Job or of a pair (as recorded in ``joblists.json``)."""
    if hasattr(job, "type") and hasattr(job, "micro_batch_id"):
        return job.type(), job.micro_batch_id()
    job_type, micro_batch = job
    return job_type, micro_batch


def parse_job_type(job_type: str) -> Tuple[str, Optional[int]]:
    """``"backward_b1"`` -> ``("backward_b", 1)``; ``"forward"`` -> ``("forward", None)``."""
    kind = job_type.rstrip("0123456789") if isinstance(job_type, str) else None
    digits = job_type[len(kind):] if kind is not None else ""
    if kind not in LETTERS or digits.startswith("0") and digits != "0":
        raise InvalidArgument(f"unknown pipeline job type {job_type!r}; {JOB_TYPE_HELP}")
    return kind, int(digits) if digits else None


__all__ = ["Action", "KINDS", "MARKERS", "LETTERS", "JOB_TYPE_HELP", "job_pair", "parse_job_type"]
