"""The parameter-server methods of ``Fleet`` (a mixin of ``refimpl.distributed.fleet.Fleet``).

Mirrors the PS half of ``paddle/distributed/fleet/fleet.py`` of Paddle 3.3.1
(``init_server``, ``run_server``, ``init_worker``, ``stop_worker``,
``save_persistables``, ``save_inference_model``, ``load_model``, ``shrink``),
which Paddle forwards to its runtime handle (``TheOnePSRuntime``); here they
forward to this rank's :class:`~refimpl.distributed.ps.runtime.PSRuntime`,
made on first use from the job ``minimize`` split. As in Paddle, in
collective or non-distributed mode they warn and do nothing. Differences:
``run_server`` returns the number of updates applied; the save / load
methods gather from / scatter to the servers through the calling worker and
use one ``persistables.npz`` (``mode`` is accepted and ignored); ``shrink``
drops nothing (dense tables only) and returns 0.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional, Sequence, TYPE_CHECKING

import numpy as np

from refimpl.core.errors import PreconditionNotMet
from refimpl.distributed.fleet.base.compat_errors import PreconditionAssertion

if TYPE_CHECKING:
    from refimpl.core.scope import Scope
    from refimpl.executor.executor import Executor
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Variable

logger = logging.getLogger("refimpl.distributed.fleet")


class ParameterServerAPI:
    """The PS methods; the class using it provides ``_rm()``, ``_is_collective``, ``_ps_job``, ``_ps_runtime``."""

    def _ps(self, name, role=None):
        """This rank's PS runtime for ``fleet.<name>``; None (after a warning) where Paddle's does nothing."""
        rm = self._rm()
        if rm._is_non_distributed():
            logger.warning("%s() function doesn't work when use non_distributed fleet.", name)
            return None
        if self._is_collective:
            logger.warning("You should not call '%s' method for collective mode.", name)
            return None
        if (role == "server" and not rm._is_server()) or (role == "worker" and not rm._is_worker()):
            raise PreconditionAssertion(f"fleet.{name}() is for a {role}; this rank is not one")
        if self._ps_runtime is None:
            if self._ps_job is None:
                raise PreconditionNotMet(f"fleet.{name}(): call fleet.distributed_optimizer(opt).minimize(loss) "
                                         f"first, on every rank (it splits the program for the servers)")
            from refimpl.distributed.ps import PSRuntime
            self._ps_runtime = PSRuntime(self._ps_job, rm)
        return self._ps_runtime

    def init_server(self, *args: Any, **kwargs: Any) -> None:
        """Build this server's tables from the startup program, or from a model saved in ``dirname``."""
        rt = self._ps("init_server", "server")
        if rt is not None:
            rt.init_server(args[0] if args else kwargs.get("dirname"))

    def run_server(self) -> Optional[int]:
        """Serve the workers until every one has called ``stop_worker``; return the updates applied."""
        rt = self._ps("run_server", "server")
        return rt.run_server() if rt is not None else None

    def init_worker(self, scopes: Optional[Sequence[Scope]] = None) -> None:
        """Connect this worker to the servers and pull the initial parameters into the (global) scope."""
        rt = self._ps("init_worker", "worker")
        if rt is not None:
            from refimpl.core.scope import global_scope
            scope = scopes[0] if isinstance(scopes, (list, tuple)) else scopes
            rt.init_worker(scope if scope is not None else global_scope())

    def stop_worker(self) -> None:
        """Tell every server that this worker is done."""
        rt = self._ps("stop_worker", "worker")
        if rt is not None:
            rt.require_client("stop_worker").stop()

    def _gathered(self, name, main_program):
        """The servers' tables, full size, plus the worker's other persistables; None outside PS mode."""
        rt = self._ps(name, "worker")
        if rt is None:
            return None
        values = rt.require_client(name).gather_tables()
        from refimpl.framework.program import default_main_program
        for v in (main_program or default_main_program()).list_vars():
            held = rt.scope.find_var(v.name) if v.persistable else None
            if v.name not in values and held is not None and held.is_initialized():
                values[v.name] = np.array(held.get_tensor())
        return values

    def save_persistables(self, executor: Optional[Executor], dirname: str,
                          main_program: Optional[Program] = None, mode: int = 0) -> Optional[str]:
        """Save every persistable (parameters and optimizer state gathered from the servers) to
        ``dirname/persistables.npz``; return its path."""
        values = self._gathered("save_persistables", main_program)
        if values is not None:
            from refimpl.distributed.ps import save_npz
            return save_npz(dirname, values)
        return None

    def save_inference_model(self, executor: Optional[Executor], dirname: str,
                             feeded_var_names: Sequence[str], target_vars: Sequence[Variable],
                             main_program: Optional[Program] = None, export_for_deployment: bool = True,
                             mode: int = 0) -> None:
        """The servers' parameters pulled into this worker, then ``static.save_inference_model`` to
        ``dirname/model``."""
        rt = self._ps("save_inference_model", "worker")
        if rt is None:
            return None
        from refimpl.framework.program import default_main_program
        from refimpl.static.io import save_inference_model
        program = main_program or default_main_program()
        rt.refresh(rt.scope)
        feeds = [program.global_block().var(n) if isinstance(n, str) else n for n in feeded_var_names]
        return save_inference_model(os.path.join(dirname, "model"), feeds, list(target_vars), executor,
                                    program=program, scope=rt.scope)

    def load_model(self, path: str, mode: int = 0) -> None:
        """Send a model saved by ``save_persistables`` to the servers and pull its parameters here."""
        rt = self._ps("load_model", "worker")
        if rt is not None:
            from refimpl.distributed.ps import load_npz
            rt.require_client("load_model").load_tables(load_npz(path))
            rt.refresh(rt.scope)

    def shrink(self, threshold: Optional[int] = None) -> Optional[int]:
        """Paddle drops rarely seen sparse features; refimpl's tables are dense, so 0 rows are dropped."""
        rt = self._ps("shrink", "worker")
        return rt.require_client("shrink").shrink() if rt is not None else None
