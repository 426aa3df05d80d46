"""Pictures of runtime data (no Paddle counterpart).

``schedule``: ASCII grid, Gantt PNG and Chrome trace of a simulated pipeline
schedule (see ``refimpl.distributed.pipeline.simulator``).
``memory``: memory timeline of a run (live bytes per op, GC frees) from an
event Trace, as text or PNG, and what the bytes hold (parameters, gradients, ...).
``graph``: a program block as Graphviz dot text, ops coloured by op role
(PNG where Graphviz is installed).
"""
from .schedule import (ascii_grid, chrome_trace, gantt_png, grid_is_exact, grid_step,
                       job_label, summary, write_chrome_trace)
from .memory import (MemoryTimeline, category_peaks, format_categories, format_timeline, memory_png,
                     memory_timeline)
from .graph import dot_available, program_graph, program_to_dot, render_dot, role_name

__all__ = ["ascii_grid", "chrome_trace", "gantt_png", "grid_is_exact", "grid_step",
           "job_label", "summary", "write_chrome_trace",
           "MemoryTimeline", "category_peaks", "format_categories", "format_timeline", "memory_png",
           "memory_timeline",
           "dot_available", "program_graph", "program_to_dot", "render_dot", "role_name"]
