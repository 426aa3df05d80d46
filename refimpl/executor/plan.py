"""Job and Plan: a schedule as data.

Mirrors Paddle's ``core.Job`` / ``core.Plan`` (``paddle/fluid/framework/new_executor/interpreter/plan.h``).
A Job is one unit of work on one rank: a job *type* naming the partial
program to run (``"forward"``, ``"backward_b1"``, ``"optimizer"``...), the
micro-batch it works on, and the variables it must not garbage-collect
because a later job reads them (``skip_gc_vars``). A Plan is the ordered job
list of one rank plus the program of every job type. Pipeline scheduler
passes produce Plans; the plan executor runs them.
"""
from __future__ import annotations

from typing import Iterable, List, Mapping, TYPE_CHECKING, Tuple

from refimpl.core.errors import InvalidArgument, NotFound

if TYPE_CHECKING:
    from refimpl.framework.program import Program


class Job:
    __slots__ = ("_type", "_micro_batch_id", "_skip_gc_vars")

    def __init__(self, type: str, micro_batch_id: int = 0) -> None:
        if not isinstance(type, str) or not type:
            raise InvalidArgument(f"Job type must be a non-empty string, got {type!r}")
        self._type = type
        self._micro_batch_id = int(micro_batch_id)
        self._skip_gc_vars = []

    def type(self) -> str:
        return self._type

    def micro_batch_id(self) -> int:
        return self._micro_batch_id

    def set_micro_batch_id(self, micro_batch_id: int) -> None:
        if int(micro_batch_id) < 0:
            raise InvalidArgument(f"job {self._type!r}: micro_batch_id must be >= 0, got {micro_batch_id}")
        self._micro_batch_id = int(micro_batch_id)

    def skip_gc_vars(self) -> List[str]:
        return list(self._skip_gc_vars)

    def set_skip_gc_vars(self, names: Iterable[str]) -> None:
        self._skip_gc_vars = list(names)

    def as_tuple(self) -> Tuple[str, int]:
        return (self._type, self._micro_batch_id)

    def __eq__(self, other):
        return isinstance(other, Job) and self.as_tuple() == other.as_tuple()

    def __hash__(self):
        return hash(self.as_tuple())

    def __repr__(self):
        return f"Job({self._type!r}, {self._micro_batch_id})"


class Plan:
    def __init__(self, job_list: Iterable[Job], type_to_program: Mapping[str, Program]) -> None:
        self._jobs = list(job_list)
        self._programs = dict(type_to_program)
        for job in self._jobs:
            if job.type() not in self._programs:
                raise NotFound(f"Plan: job type {job.type()!r} has no program "
                               f"(known types: {sorted(self._programs)})")

    def job_list(self) -> List[Job]:
        return list(self._jobs)

    def job_types(self) -> List[str]:
        return list(self._programs)

    def program(self, job_type: str) -> Program:
        if job_type not in self._programs:
            raise NotFound(f"Plan has no program for job type {job_type!r}")
        return self._programs[job_type]

    def micro_batch_num(self) -> int:
        ids = [j.micro_batch_id() for j in self._jobs]
        return max(ids) + 1 if ids else 0

    def __repr__(self):
        return f"Plan({len(self._jobs)} jobs, types={self.job_types()})"
