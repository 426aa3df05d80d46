"""Pictures of runtime data (no Paddle counterpart).

``schedule``: ASCII grid, Gantt PNG and Chrome trace of a simulated pipeline
schedule (see ``refimpl.distributed.pipeline.simulator``).
"""
from .schedule import (ascii_grid, chrome_trace, gantt_png, grid_is_exact, grid_step,
                       job_label, summary, write_chrome_trace)

__all__ = ["ascii_grid", "chrome_trace", "gantt_png", "grid_is_exact", "grid_step",
           "job_label", "summary", "write_chrome_trace"]
