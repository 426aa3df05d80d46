"""Pipeline parallelism beyond the scheduler passes.

``partition``: cut a training program into per-rank, per-chunk stage programs
with send/recv, and those into job programs. ``runner``: build every rank's
Plan and train on in-process or MPI ranks. ``simulator``: time the job lists
of all ranks under a cost model, find deadlocks, measure bubbles and held
activations (no Paddle counterpart; see its docstring). ``Action``, one step
of a schedule (``F3``, ``I3.1`` ...), is the scheduler passes' own
(``refimpl.distributed.passes.pipeline_scheduler_pass.action``).
``hybrid``: the pipe / model / data groups of tensor x pipeline x data
parallelism (``HybridLayout``) and the startup broadcasts of a stage.
"""
from .hybrid import HybridLayout, broadcast_stage_params
from .simulator import (Action, CostModel, ScheduleDeadlock, ScheduleError, Simulation,
                        TimedJob, check_job_lists, parse_job, peak_in_flight, simulate,
                        stage_map_for, stage_owner, virtual_stage)

__all__ = ["HybridLayout", "broadcast_stage_params",
           "Action", "CostModel", "ScheduleDeadlock", "ScheduleError", "Simulation", "TimedJob",
           "check_job_lists", "parse_job", "peak_in_flight", "simulate", "stage_map_for", "stage_owner",
           "virtual_stage"]
