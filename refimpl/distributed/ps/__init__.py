"""Parameter-server training: program split, servers, workers, runtime.

Mirrors ``paddle.distributed.ps`` (``the_one_ps``) and the PS passes of
Paddle 3.3.1, on refimpl's communicators: ``plan`` (which server holds which
rows of which parameter), ``transpile`` (worker and server programs),
``server`` (tables and the request loop), ``client`` (a worker's pushes and
pulls), ``protocol`` (the messages), ``runtime`` (what ``fleet.init_server``
& co. call; ``run_ps_in_process`` for thread-rank jobs).
"""
from .plan import MIN_BLOCK_SIZE, Block, ShardPlan, mode_of
from .runtime import PSRuntime, load_npz, run_ps_in_process, save_npz, thread_role_maker
from .server import ParameterServer, WorkerFailed
from .transpile import PSJob, transpile

__all__ = ["MIN_BLOCK_SIZE", "Block", "ShardPlan", "mode_of", "PSRuntime", "load_npz", "run_ps_in_process",
           "save_npz", "thread_role_maker", "ParameterServer", "WorkerFailed", "PSJob", "transpile"]
